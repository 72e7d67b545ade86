"""Spark's own Kafka source as the peer of ``format("tierlog")`` (issue 24 point 4): the same offsets
of a topic whose older segments are only in the remote tier, read through the broker with
``format("kafka")`` (spark-sql-kafka, build/spark-kafka-jars) and at rest with ``format("tierlog")``,
give identical DataFrames -- same schema, same rows, record timestamps and headers (``includeHeaders``:
several, repeated keys, a null value) included; and a range given by timestamps, whose records' timestamps
are out of order, starts and ends at the same offsets (the broker's ListOffsets against the time index
at rest, starting in the remote tier)."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker import BrokerProcess
from tests.jvm.kafka import SPARK_KAFKA_JARS

pytest.importorskip("pyspark", reason="the Spark peer test needs pyspark (pip install -e '.[dev]')")

TOPIC = "spark-peer"
COUNT = 4000


@pytest.fixture(scope="module")
def tiered_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("tierlog") / "data", {
        "remote.log.manager.task.interval.ms": "200", "log.retention.check.interval.ms": "200",
        "log.segment.delete.delay.ms": "0"}).start()
    yield b
    if b.alive():
        assert b.stop() == 0, b.stderr_tail()


def local_bases(data: Path) -> list[int]:
    return sorted(int(p.stem) for p in (data / f"{TOPIC}-0").glob("*.log"))


def test_format_kafka_and_format_tierlog_return_the_same_rows(tiered_broker: BrokerProcess) -> None:
    if not list(SPARK_KAFKA_JARS.glob("spark-sql-kafka*.jar")):
        pytest.skip(f"Spark's Kafka source jars are missing from {SPARK_KAFKA_JARS} (scripts/_env.sh fetches them)")
    broker, data = tiered_broker, tiered_broker.data_dir
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1, config={
        "segment.bytes": "16384", "retention.ms": "-1", "remote.storage.enable": "true",
        "local.retention.bytes": "1"})])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.num.messages": 50,
                         "compression.type": "zstd"})
    base_ts = int(time.time() * 1000) - 3_600_000
    for i in range(COUNT):
        producer.produce(TOPIC, key=None if i % 7 == 0 else b"k%d" % (i % 13), value=b"v%06d" % i + bytes(i % 50),
                         partition=0, timestamp=timestamp_of(base_ts, i), headers=headers_of(i))
    assert producer.flush(60) == 0
    deadline = time.monotonic() + 60
    while local_bases(data)[0] < COUNT // 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert local_bases(data)[0] >= COUNT // 2, "the older half of the topic never moved to the remote tier only"

    # From a quarter (remote tier) to the last record by timestamp: the first record at or after each
    # timestamp is one whose timestamp jumped ahead, 250 offsets earlier.
    ts_from, ts_to = base_ts + COUNT // 4, base_ts + COUNT - 1
    first = min(i for i in range(COUNT) if timestamp_of(base_ts, i) >= ts_from)
    end = min(i for i in range(COUNT) if timestamp_of(base_ts, i) >= ts_to)
    assert first < COUNT // 4 < COUNT // 2 <= local_bases(data)[0] and end < COUNT - 1
    out = subprocess.run([sys.executable, str(Path(__file__).parent / "spark_peer_job.py"), broker.bootstrap,
                          str(data), TOPIC, str(SPARK_KAFKA_JARS), str(COUNT), str(ts_from), str(ts_to)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["schema_kafka"] == got["schema_tierlog"], got
    assert got["by_offsets"] == {"kafka_rows": COUNT, "tierlog_rows": COUNT, "only_kafka": 0, "only_tierlog": 0,
                                 "first_offset": 0, "last_offset": COUNT - 1}, got
    assert got["by_timestamps"] == {"kafka_rows": end - first, "tierlog_rows": end - first, "only_kafka": 0,
                                    "only_tierlog": 0, "first_offset": first, "last_offset": end - 1}, got
    # The comparison saw what it is meant to compare: headers (with null values) and timestamps.
    assert got["with_headers"] == sum(1 for i in range(COUNT) if headers_of(i)), got
    assert got["null_header_values"] == sum(1 for i in range(COUNT) if i % 11 == 0), got
    assert got["first"][0]["offset"] == 0, got


def timestamp_of(base_ts: int, i: int) -> int:
    """Increasing, except every 100th record (from the 50th) jumps 250 ms ahead of its neighbours."""
    return base_ts + i + (250 if i % 100 == 50 else 0)


def headers_of(i: int) -> list[tuple[str, bytes | None]] | None:
    """Several headers with a repeated key on every 5th record, a null value on every 11th, none otherwise."""
    headers: list[tuple[str, bytes | None]] = []
    if i % 5 == 0:
        headers += [("idx", b"%d" % i), ("dup", b"a"), ("dup", b"b" * (i % 9))]
    if i % 11 == 0:
        headers.append(("nullv", None))
    return headers or None


def test_a_streaming_query_switches_sources_on_one_checkpoint(tiered_broker: BrokerProcess, tmp_path: Path) -> None:
    """Both sources keep offsets in Spark's Kafka format ({"topic": {"0": n}}): a query that ran on
    format("kafka") goes on with format("tierlog") from where it stopped -- no record twice, none lost."""
    if not list(SPARK_KAFKA_JARS.glob("spark-sql-kafka*.jar")):
        pytest.skip(f"Spark's Kafka source jars are missing from {SPARK_KAFKA_JARS} (scripts/_env.sh fetches them)")
    broker, data = tiered_broker, tiered_broker.data_dir
    topic = "spark-switch"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"segment.bytes": "16384"})])[topic].result(30)

    def produce(first: int, count: int) -> None:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.num.messages": 50})
        for i in range(first, first + count):
            producer.produce(topic, value=b"v%06d" % i, partition=0)
        assert producer.flush(60) == 0

    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"

    # Both phases in one process (one Spark session, each phase a new query on the checkpoint): it
    # says "ready tierlog" once the kafka phase is done, and goes on when told.
    produce(0, 1500)
    log = tmp_path / "switch.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, str(Path(__file__).parent / "spark_switch_job.py"), "kafka,tierlog",
                                 broker.bootstrap, str(data), topic, str(SPARK_KAFKA_JARS), str(checkpoint), str(out)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1)
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for text in proc.stdout:
            lines.put(text)
        lines.put(None)
    threading.Thread(target=pump, daemon=True).start()
    try:
        while (line := lines.get(timeout=600)) != "ready tierlog\n":
            assert line is not None, f"the kafka phase failed:\n{log.read_text(errors='replace')[-4000:]}"
        produce(1500, 1000)
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.close()
        assert proc.wait(600) == 0, f"the tierlog phase failed:\n{log.read_text(errors='replace')[-4000:]}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    import pyarrow.parquet as pq

    rows = pq.read_table(out).to_pydict()
    assert sorted(rows["offset"]) == list(range(2500))
    assert sorted(rows["value"]) == [f"v{i:06d}" for i in range(2500)]
