"""Losing a disk (issue 20): a tiered partition whose local directory -- or whole log dir -- is gone
comes back from the remote tier through a real broker: the log resumes at the remote end + 1, every
tiered offset is served once with the bytes it had, a retried batch of an idempotent producer keeps
its original offset, and nothing is appended at an offset the remote tier holds. With the remote tier
in a local directory and on S3 (moto's server on loopback), and after a SIGKILL while the restore
waits on the remote tier."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from tests.helpers.broker import BrokerProcess
from tests.helpers.raw_client import RawClient
from tierlog.protocol import ApiKey
from tierlog.records import SimpleRecord, build_batch

FAST = {"remote.log.manager.task.interval.ms": "200", "log.retention.check.interval.ms": "200",
        "log.segment.delete.delay.ms": "0"}
COUNT = 3000
TOPIC_CONFIG = {"segment.bytes": "16384", "retention.ms": "-1", "remote.storage.enable": "true"}


def wait(what: str, check: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def tier_status(broker: BrokerProcess, topic: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "tierlog.cli.main", "tier", "status", "--json",
                          "--data-dir", str(broker.data_dir)], capture_output=True, text=True, check=True,
                         env={**os.environ}).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    return next((r for r in rows if r["topic"] == topic and r["partition"] == 0), {})


def offsets(bootstrap: str, topic: str) -> tuple[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(topic, 0)
    return tuple(int(admin.list_offsets({tp: spec}, request_timeout=30)[tp].result(30).offset)  # type: ignore[return-value]
                 for spec in (OffsetSpec.earliest(), OffsetSpec.latest()))


def consume(bootstrap: str, topic: str, count: int) -> list[tuple[int, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{random.random()}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < count and time.monotonic() < deadline:
            for m in consumer.consume(500, 1.0):
                err = m.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, err
                    continue
                got.append((m.offset(), m.value()))
    finally:
        consumer.close()
    return got


class IdempotentWriter:
    """An idempotent producer speaking the protocol itself, so a test can send a batch again exactly
    as a client that missed the acknowledgement would."""

    def __init__(self, port: int) -> None:
        with RawClient(port) as c:
            init = c.call(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                                       "producer_id": -1, "producer_epoch": -1})
        assert init.error_code == 0, init
        self.producer_id, self.epoch = int(init.producer_id), int(init.producer_epoch)
        self.sequence = 0
        self.sent: list[tuple[bytes, int]] = []  # (batch, offset the broker gave it)

    def batch(self, values: list[bytes]) -> bytes:
        now = int(time.time() * 1000)
        data = build_batch([SimpleRecord(None, v, timestamp=now) for v in values], producer_id=self.producer_id,
                           producer_epoch=self.epoch, base_sequence=self.sequence)
        self.sequence += len(values)
        return data

    def send(self, port: int, topic: str, data: bytes) -> tuple[int, int]:
        """(error code, base offset)."""
        with RawClient(port) as c:
            body = c.call(ApiKey.PRODUCE, 9, {"acks": -1, "timeout": 10000, "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": data}]}]})
        p = body.responses[0].partition_responses[0]
        return int(p.error_code), int(p.base_offset)


def fill(broker: BrokerProcess, topic: str) -> tuple[list[bytes], IdempotentWriter]:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=TOPIC_CONFIG)])[topic].result(30)
    values = [f"{n:08d}:".encode() + random.Random(n).randbytes(40) for n in range(COUNT)]
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "batch.num.messages": 50})
    for v in values:
        producer.produce(topic, value=v, partition=0)
    assert producer.flush(60) == 0
    writer = IdempotentWriter(broker.port)
    for i in range(20):
        data = writer.batch([b"raw-%d-%d" % (i, j) for j in range(10)])
        code, offset = writer.send(broker.port, topic, data)
        assert code == 0
        writer.sent.append((data, offset))
        values += [b"raw-%d-%d" % (i, j) for j in range(10)]
    # Roll past the writer's batches so its last one is in a tiered segment.
    errors: list[object] = []
    producer2 = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.num.messages": 50})
    for n in range(600):
        v = b"tail-%06d" % n + bytes(40)
        producer2.produce(topic, value=v, partition=0, on_delivery=lambda e, _m: errors.append(e) if e else None)
        values.append(v)
    assert producer2.flush(60) == 0
    assert not errors, errors[:3]
    last_raw = writer.sent[-1][1] + 9
    wait("the writer's batches to be tiered", lambda: tier_status(broker, topic).get("highest_tiered_offset", -1) >= last_raw)
    return values, writer


def check_restored(broker: BrokerProcess, topic: str, values: list[bytes], writer: IdempotentWriter) -> None:
    remote_end = tier_status(broker, topic)["highest_tiered_offset"]
    assert remote_end >= writer.sent[-1][1] + 9
    assert offsets(broker.bootstrap, topic) == (0, remote_end + 1), broker.stderr_tail()
    assert "restored from the remote tier" in broker.log_path.read_text()
    got = consume(broker.bootstrap, topic, remote_end + 1)
    assert [o for o, _ in got] == list(range(remote_end + 1))
    assert [v for _, v in got] == values[:remote_end + 1]
    # The writer's last batch again: the producer is known from the remote snapshot.
    data, original = writer.sent[-1]
    code, offset = writer.send(broker.port, topic, data)
    assert (code, offset) == (0, original)
    # Its next batch goes after the remote end, not onto an offset the remote tier holds.
    code, offset = writer.send(broker.port, topic, writer.batch([b"after-restore"]))
    assert (code, offset) == (0, remote_end + 1)
    got = consume(broker.bootstrap, topic, remote_end + 2)
    assert [o for o, _ in got] == list(range(remote_end + 2))
    assert got[-1][1] == b"after-restore"


@pytest.fixture
def tier_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", FAST).start()
    yield b
    if b.alive():
        b.stop()


def test_a_wiped_partition_directory_is_restored(tier_broker: BrokerProcess, topic_name: str) -> None:
    broker, topic = tier_broker, topic_name
    values, writer = fill(broker, topic)
    assert broker.stop() == 0
    shutil.rmtree(broker.data_dir / f"{topic}-0")
    broker.start()
    check_restored(broker, topic, values, writer)


def test_with_remote_storage_switched_off_a_wiped_partition_stays_offline(tier_broker: BrokerProcess,
                                                                           topic_name: str) -> None:
    """remote.log.storage.system.enable=false after the partition was tiered: no restore can run, so
    the wiped partition answers KAFKA_STORAGE_ERROR (an ERROR names both ranges) instead of starting
    again at offset 0; switched back on, the next start restores it."""
    broker, topic = tier_broker, topic_name
    values, writer = fill(broker, topic)
    remote_end = tier_status(broker, topic)["highest_tiered_offset"]
    assert broker.stop() == 0
    shutil.rmtree(broker.data_dir / f"{topic}-0")
    broker.overrides["remote.log.storage.system.enable"] = "false"
    broker.start()
    code, _ = writer.send(broker.port, topic, writer.batch([b"while-off"]))
    assert code == 56, broker.stderr_tail()  # KAFKA_STORAGE_ERROR
    text = broker.log_path.read_text()
    assert f"partition offline: {topic}-0: the remote tier holds offsets [0, {remote_end}]" in text, broker.stderr_tail()
    assert "remote.log.storage.system.enable=false" in text
    assert broker.stop() == 0
    assert not (broker.data_dir / f"{topic}-0").exists() or not any(
        p.suffix == ".log" and p.stat().st_size > 0 for p in (broker.data_dir / f"{topic}-0").iterdir())
    del broker.overrides["remote.log.storage.system.enable"]
    writer.sequence -= 1  # the refused batch was not written
    broker.start()
    check_restored(broker, topic, values, writer)


def test_a_lost_log_dir_is_restored(tmp_path: Path, topic_name: str) -> None:
    """Two log dirs; the one holding the partition is lost whole (the first keeps the metadata)."""
    first, second = tmp_path / "data", tmp_path / "second"
    broker = BrokerProcess(first, {**FAST, "log.dirs": f"{first},{second}"}).start()
    try:
        topic = topic_name
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        # A first topic takes the first dir, so the test's topic lands in the second.
        admin.create_topics([NewTopic(f"{topic}-first", 1, 1)])[f"{topic}-first"].result(30)
        values, writer = fill(broker, topic)
        assert (second / f"{topic}-0").is_dir(), sorted(p.name for p in second.iterdir())
        assert broker.stop() == 0
        shutil.rmtree(second)
        broker.start()
        check_restored(broker, topic, values, writer)
    finally:
        if broker.alive():
            broker.stop()


def test_an_unreachable_remote_tier_keeps_the_partition_offline_then_a_sigkill(tmp_path: Path, topic_name: str) -> None:
    """Every remote read fails while the partition is to be restored (the fault-injecting plugin): the
    broker serves, but that partition answers KAFKA_STORAGE_ERROR instead of handing out offsets the
    remote tier holds; the broker is SIGKILLed while the restore is retried, and the next start, with
    the remote tier back, restores it."""
    control = tmp_path / "faults.json"
    overrides = {**FAST,
                 "remote.log.storage.manager.class.name": "tierlog.testing.remote.FaultInjectingRemoteStorageManager",
                 "rsm.config.dir": str(tmp_path / "remote"), "rsm.config.faults.control.file": str(control),
                 "rsm.config.faults.log.file": str(tmp_path / "faults.log")}
    broker = BrokerProcess(tmp_path / "data", overrides).start()
    try:
        topic = topic_name
        values, writer = fill(broker, topic)
        assert broker.stop() == 0
        shutil.rmtree(broker.data_dir / f"{topic}-0")
        control.write_text(json.dumps({"enabled": True, "rates": {"fetch": {"error": 1.0}}}))
        broker.start()
        code, _ = writer.send(broker.port, topic, writer.batch([b"while-offline"]))
        assert code == 56  # KAFKA_STORAGE_ERROR
        wait("the restore to be retried", lambda: broker.log_path.read_text().count("fetch") >= 1
             and (tmp_path / "faults.log").read_text().count("fetch error") >= 3)
        broker.kill()
        control.write_text(json.dumps({"enabled": False}))
        writer.sequence -= 1  # the refused batch was not written
        broker.start()
        check_restored(broker, topic, values, writer)
    finally:
        if broker.alive():
            broker.stop()


def test_restored_from_s3(tmp_path: Path, topic_name: str) -> None:
    from tests.helpers.s3_server import JournaledS3Server

    server = JournaledS3Server(tmp_path / "s3.journal").start()
    env_saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"})
    try:
        server.create_bucket("restore")
        broker = BrokerProcess(tmp_path / "data", {
            **FAST, "remote.log.storage.manager.class.name": "tierlog.tiered.backends.s3.S3RemoteStorageManager",
            "rsm.config.s3.bucket": "restore", "rsm.config.s3.endpoint": server.endpoint,
            "rsm.config.s3.region": "us-east-1"}).start()
        try:
            values, writer = fill(broker, topic_name)
            assert broker.stop() == 0
            shutil.rmtree(broker.data_dir / f"{topic_name}-0")
            broker.start()
            check_restored(broker, topic_name, values, writer)
        finally:
            if broker.alive():
                broker.stop()
    finally:
        server.stop()
        for k, v in env_saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def tierlog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tierlog.cli.main", *args], capture_output=True, text=True,
                          timeout=60)


def test_tier_restore_moves_a_partition_to_another_disk_from_the_remote_tier(tmp_path: Path, topic_name: str) -> None:
    first, second = tmp_path / "data", tmp_path / "second"
    broker = BrokerProcess(first, {**FAST, "log.dirs": f"{first},{second}"}).start()
    try:
        topic = topic_name
        values, writer = fill(broker, topic)
        local = next(d for d in (first, second) if (d / f"{topic}-0").is_dir())
        other = second if local == first else first
        dirs = f"log.dirs={first},{second}"
        refused = tierlog("tier", "restore", f"{topic}-0", "--override", dirs)
        assert refused.returncode == 1 and "lock" in refused.stderr.lower(), refused.stderr  # the broker runs
        assert broker.stop() == 0
        done = tierlog("tier", "restore", f"{topic}-0", "--override", dirs, "--log-dir", str(other))
        assert done.returncode == 0, done.stderr
        assert "is kept as" in done.stdout
        assert [p.name.endswith("-stray") for p in local.iterdir() if p.name.startswith(topic)] == [True]
        broker.start()
        check_restored(broker, topic, values, writer)
        assert (other / f"{topic}-0" / "partition.metadata").exists()
    finally:
        if broker.alive():
            broker.stop()
