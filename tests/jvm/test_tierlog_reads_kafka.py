"""tierlog reads Kafka's files: partitions written by Apache Kafka 4.3.1 (every codec, idempotent
producers), stopped uncleanly (SIGKILL) and cleanly, are served by ``tierlog serve`` record for record;
``tierlog dump-log`` agrees with ``kafka-dump-log`` on them; Kafka's producer snapshots deduplicate a
retried batch in tierlog.

Kafka's whole data dir is refused, naming why: its metadata log holds record types tierlog's metadata
image does not know (see docs/compatibility.md), so the test transplants partition directories into a
tierlog data dir whose metadata has the same topics (keeping tierlog's own partition.metadata, which
carries tierlog's topic id).
"""

from __future__ import annotations

import logging
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker import BrokerProcess
from tests.jvm.dumps import assert_same_values, kafka_dump, parse_dump, tierlog_dump
from tests.jvm.kafka import KafkaBroker
from tierlog.config.log_config import LogConfig
from tierlog.storage.loader import LoadOptions, load_log

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
RECORDS = {"none": 9000, "gzip": 1500, "snappy": 1500, "lz4": 1500, "zstd": 1500}
Row = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes]]]


def _topic(codec: str) -> str:
    return f"from-kafka-{codec}"


def _row(m: Message) -> Row:
    return (m.offset(), m.timestamp()[1], m.key(), m.value(), [(k, bytes(v)) for k, v in m.headers() or []])


def _produce(bootstrap: str) -> dict[str, list[Row]]:
    """Every codec through idempotent producers; returns what Kafka acknowledged, per topic."""
    acked: dict[str, list[Row]] = {}
    base_ms = int(time.time() * 1000) - 60_000
    for codec in CODECS:
        rows: list[Row] = []
        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "compression.type": codec,
                      "linger.ms": 5, "batch.num.messages": 200})

        sent_headers: dict[int, list[tuple[str, bytes]]] = {}

        def on_delivery(err: object, m: Message, rows: list[Row] = rows,
                        sent_headers: dict[int, list[tuple[str, bytes]]] = sent_headers) -> None:
            assert err is None, err
            rows.append((m.offset(), m.timestamp()[1], m.key(), m.value(), sent_headers[m.offset()]))

        for i in range(RECORDS[codec]):
            value = None if i % 97 == 5 else random.Random(i).randbytes(80 + i % 150).hex().encode()
            key = None if i % 89 == 3 else f"key-{i}".encode()
            headers = [("n", str(i).encode()), ("codec", codec.encode())] if i % 3 else []
            # One partition, one idempotent producer: the record sent i-th lands at offset i.
            sent_headers[i] = headers
            p.produce(_topic(codec), key=key, value=value, headers=headers, timestamp=base_ms + i,
                      on_delivery=on_delivery)
            if i % 1000 == 0:
                p.poll(0)
        assert p.flush(60) == 0
        acked[_topic(codec)] = sorted(rows)
    return acked


@pytest.fixture(scope="module")
def kafka_copies(kafka_jars: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, list[Row]], dict[str, Path]]]:
    """Kafka's data dir copied after a SIGKILL and, after a restart, after a clean shutdown."""
    home = tmp_path_factory.mktemp("kafka-writer")
    kafka = KafkaBroker(home)
    kafka.start()
    try:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        topics = [NewTopic(_topic(c), 1, 1, config={"segment.bytes": "1048576", "retention.ms": "-1"}) for c in CODECS]
        for f in admin.create_topics(topics).values():
            f.result(60)
        acked = _produce(kafka.bootstrap)
        kafka.kill()
        unclean = home / "copy-unclean"
        shutil.copytree(kafka.data_dir, unclean)
        kafka.start()
        assert kafka.stop() in (0, 143), kafka.log_tail()  # 143: the JVM's exit status after SIGTERM
        assert (kafka.data_dir / ".kafka_cleanshutdown").exists(), kafka.log_tail()
        clean = home / "copy-clean"
        shutil.copytree(kafka.data_dir, clean)
    finally:
        kafka.kill()
    yield acked, {"unclean": unclean, "clean": clean}


def _tierlog_with_topics(data: Path, kafka_dir: Path) -> BrokerProcess:
    """A tierlog data dir with the same topics, whose partition dirs then get Kafka's files."""
    broker = BrokerProcess(data).start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(_topic(c), 1, 1, config={"retention.ms": "-1"}) for c in CODECS]).values():
        f.result(30)
    assert broker.stop() == 0, broker.stderr_tail()
    for codec in CODECS:
        ours, theirs = data / f"{_topic(codec)}-0", kafka_dir / f"{_topic(codec)}-0"
        for f in ours.iterdir():
            if f.name != "partition.metadata":
                f.unlink()
        for f in theirs.iterdir():
            if f.name != "partition.metadata":
                shutil.copy2(f, ours / f.name)
    return broker


def _consume_all(bootstrap: str, topic: str, count: int) -> list[Row]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{topic}", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        rows: list[Row] = []
        deadline = time.monotonic() + 60
        while len(rows) < count and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            assert m.error() is None, m.error()
            rows.append(_row(m))
        return rows
    finally:
        c.close()


def test_whole_kafka_data_dir_is_refused_naming_why(kafka_copies: tuple[dict[str, list[Row]], dict[str, Path]],
                                                    tmp_path: Path) -> None:
    data = tmp_path / "whole"
    shutil.copytree(kafka_copies[1]["clean"], data)
    proc = subprocess.run([sys.executable, "-m", "tierlog.cli.main", "serve", "--override",
                           "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={data}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "metadata" in proc.stderr and "cannot start" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("stop", ["unclean", "clean"])
def test_tierlog_serves_every_record_kafka_wrote(kafka_copies: tuple[dict[str, list[Row]], dict[str, Path]],
                                                 tmp_path: Path, stop: str) -> None:
    acked, copies = kafka_copies
    broker = _tierlog_with_topics(tmp_path / "data", copies[stop]).start()
    try:
        for topic, rows in acked.items():
            served = _consume_all(broker.bootstrap, topic, len(rows))
            assert len(served) == len(rows), f"{topic}: tierlog served {len(served)} of {len(rows)} records"
            assert served == rows, f"{topic}: first difference at {next(i for i, (a, b) in enumerate(zip(served, rows, strict=True)) if a != b)}"
    finally:
        assert broker.stop() == 0, broker.stderr_tail()


def test_dump_log_agrees_with_kafka_dump_log_on_kafkas_files(kafka_copies: tuple[dict[str, list[Row]], dict[str, Path]]) -> None:
    clean = kafka_copies[1]["clean"]
    for codec in CODECS:
        directory = clean / f"{_topic(codec)}-0"
        files = sorted(p for p in directory.iterdir() if p.suffix in (".log", ".index", ".timeindex", ".snapshot"))
        if codec == "none":
            assert len([f for f in files if f.suffix == ".log"]) >= 2, files
        kafka = parse_dump(kafka_dump(files, "--deep-iteration", "--print-data-log"))
        tierlog = parse_dump(tierlog_dump(files, "--deep-iteration", "--print-data-log"))
        assert assert_same_values(kafka, tierlog, ignore=frozenset({"timestamp"})) >= RECORDS[codec]


def _last_batch(log_file: Path) -> bytes:
    data = log_file.read_bytes()
    pos, last = 0, b""
    while pos + 12 <= len(data):
        size = 12 + int.from_bytes(data[pos + 8:pos + 12], "big")
        last = data[pos:pos + size]
        pos += size
    return last


def test_kafkas_producer_snapshot_deduplicates_a_retried_batch(
        kafka_copies: tuple[dict[str, list[Row]], dict[str, Path]], tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / f"{_topic('zstd')}-0"
    shutil.copytree(kafka_copies[1]["clean"] / f"{_topic('zstd')}-0", directory)
    end = len(kafka_copies[0][_topic("zstd")])
    assert (directory / f"{end:020d}.snapshot").exists(), sorted(p.name for p in directory.iterdir())
    retried = _last_batch(sorted(directory.glob("*.log"))[-1])
    with caplog.at_level(logging.INFO, logger="tierlog.storage"):
        log = load_log(directory, LogConfig(), LoadOptions(had_clean_shutdown=True, recovery_point=end))
    try:
        assert f"{end:020d}.snapshot" in caplog.text, "tierlog did not load Kafka's producer snapshot"
        assert log.log_end_offset == end
        info = log.append_as_leader(retried)
        assert info.duplicate, "the retried batch was appended again"
        assert info.last_offset == end - 1
        assert log.log_end_offset == end
    finally:
        log.close()
