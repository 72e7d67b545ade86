"""Tiered storage through the broker, end to end with a real client: produce, let the remote log
manager copy the closed segments to the embedded local-directory tier, let local retention delete
the local copies, and consume from offset 0 — the consumer cannot tell which tier served it.

``tierlog serve`` without ``--config`` enables ``remote.log.storage.system.enable`` (the embedded
default), so only the topic opts in.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    OffsetSpec,
)

from tests.helpers.broker import BrokerProcess

FAST_TIERING = {"remote.log.manager.task.interval.ms": "200", "log.retention.check.interval.ms": "200",
                "log.segment.delete.delay.ms": "0"}
COUNT = 6000


@pytest.fixture
def tier_broker(tmp_path: Path) -> BrokerProcess:
    b = BrokerProcess(tmp_path / "data", FAST_TIERING).start()
    yield b  # type: ignore[misc]
    if b.alive():
        b.stop()


def _wait(what: str, check: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def _local_base_offsets(data: Path, topic: str) -> list[int]:
    return sorted(int(p.stem) for p in (data / f"{topic}-0").glob("*.log"))


def _remote_objects(data: Path) -> list[Path]:
    # os.walk, not rglob: the broker deletes objects and their directories while this lists them, and
    # rglob raises FileNotFoundError for a directory gone mid-walk where os.walk skips it.
    remote = data.parent / f"{data.name}-remote"
    return [Path(root) / name for root, _dirs, names in os.walk(remote) for name in names]


def _produce(bootstrap: str, topic: str, start: int, count: int, base_ts: int) -> list[bytes]:
    values = [f"{n:08d}:".encode() + random.Random(n).randbytes(60) for n in range(start, start + count)]
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "batch.num.messages": 50, "compression.type": "lz4"})
    for i, v in enumerate(values):
        producer.produce(topic, value=v, key=str(start + i).encode(), partition=0, timestamp=base_ts + start + i)
    assert producer.flush(60) == 0
    return values


def _consume(bootstrap: str, topic: str, offset: int, count: int) -> list[tuple[int, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{random.random()}",
                         "enable.auto.commit": False, "fetch.max.bytes": 1048576, "message.max.bytes": 1048576,
                         "max.partition.fetch.bytes": 16384})
    consumer.assign([TopicPartition(topic, 0, offset)])
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


def _low_watermark(admin: AdminClient, topic: str, spec: OffsetSpec) -> int:
    tp = TopicPartition(topic, 0)
    return int(admin.list_offsets({tp: spec}, request_timeout=30)[tp].result(30).offset)


def test_produce_tier_drop_local_and_consume_from_zero(tier_broker: BrokerProcess, topic_name: str) -> None:
    broker, topic, data = tier_broker, topic_name, tier_broker.data_dir
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1, config={
        "segment.bytes": "16384", "retention.ms": "-1", "remote.storage.enable": "true",
        "local.retention.bytes": "1"})])[topic].result(30)
    base_ts = int(time.time() * 1000) - 3_600_000
    values = _produce(broker.bootstrap, topic, 0, COUNT, base_ts)

    # Every closed segment reaches the remote tier, and local retention then deletes all but the
    # active segment: the local log starts well above 0.
    _wait("local segments to be tiered and deleted", lambda: _local_base_offsets(data, topic)[0] > COUNT // 2)
    assert _remote_objects(data), "nothing was uploaded to the local remote tier"
    assert _low_watermark(admin, topic, OffsetSpec.earliest()) == 0
    assert _low_watermark(admin, topic, OffsetSpec.latest()) == COUNT

    got = _consume(broker.bootstrap, topic, 0, COUNT)
    assert [o for o, _ in got] == list(range(COUNT))
    assert [v for _, v in got] == values

    # Offsets by time resolve inside the remote tier too.
    tp = TopicPartition(topic, 0)
    by_time = admin.list_offsets({tp: OffsetSpec.for_timestamp(base_ts + 1234)}, request_timeout=30)
    assert by_time[tp].result(30).offset == 1234

    # After a restart the remote metadata is back: reads from 0 still work, and tiering continues.
    broker.restart()
    more = _produce(broker.bootstrap, topic, COUNT, 2000, base_ts)
    got = _consume(broker.bootstrap, topic, 0, COUNT + 2000)
    assert [v for _, v in got] == values + more
    _wait("the new segments to be tiered too", lambda: _local_base_offsets(data, topic)[0] > COUNT)

    # DeleteRecords into the remote range moves the log start offset across both tiers.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    result = admin.delete_records([TopicPartition(topic, 0, 1000)], request_timeout=30)
    assert next(iter(result.values())).result(30).low_watermark == 1000
    assert _low_watermark(admin, topic, OffsetSpec.earliest()) == 1000
    got = _consume(broker.bootstrap, topic, 1000, 10)
    assert [o for o, _ in got[:10]] == list(range(1000, 1010))


def test_total_retention_and_topic_deletion_remove_remote_objects(tier_broker: BrokerProcess, topic_name: str) -> None:
    broker, topic, data = tier_broker, topic_name, tier_broker.data_dir
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1, config={
        "segment.bytes": "16384", "retention.ms": "-1", "remote.storage.enable": "true",
        "local.retention.bytes": "1"})])[topic].result(30)
    now = int(time.time() * 1000)
    _produce(broker.bootstrap, topic, 0, 3000, now - 10 * 86_400_000)  # ten days old
    _wait("segments to be tiered", lambda: _local_base_offsets(data, topic)[0] > 1500)
    uploaded = len(_remote_objects(data))
    assert uploaded > 0

    # Total retention of one day: the remote segments expire, and the earliest offset moves up.
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "86400000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    _wait("remote segments to expire", lambda: _low_watermark(admin, topic, OffsetSpec.earliest()) > 1500)
    # The log start offset moves first, the segments' objects go one by one after it.
    _wait("remote objects to go", lambda: len(_remote_objects(data)) < uploaded)

    admin.delete_topics([topic])[topic].result(30)
    _wait("the deleted topic's remote objects to go",
          lambda: not [p for p in _remote_objects(data) if topic in str(p)])


def test_tiering_off_when_the_topic_does_not_opt_in(tier_broker: BrokerProcess, topic_name: str) -> None:
    broker, topic, data = tier_broker, topic_name, tier_broker.data_dir
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1, config={
        "segment.bytes": "16384", "retention.ms": "-1", "local.retention.bytes": "1"})])[topic].result(30)
    _produce(broker.bootstrap, topic, 0, 2000, int(time.time() * 1000))
    time.sleep(1.5)  # several task intervals
    assert _local_base_offsets(data, topic)[0] == 0, "local retention deleted segments of a topic that is not tiered"
    assert not [p for p in _remote_objects(data) if topic in str(p)]


def test_restoring_an_older_metadata_backup_keeps_newer_topics_data(tier_broker: BrokerProcess, topic_name: str,
                                                                     tmp_path: Path) -> None:
    """A topic created after the metadata backup is not in the restored metadata: its local log is
    kept aside as a stray directory and its remote segments stay (nothing deleted), while a topic
    deleted live still loses both."""
    import subprocess
    import sys

    broker, topic, data = tier_broker, topic_name, tier_broker.data_dir
    tierlog = [sys.executable, "-m", "tierlog.cli.main"]
    backups = tmp_path / "backups"
    done = subprocess.run([*tierlog, "metadata", "snapshot", "--data-dir", str(data), "--output-dir", str(backups)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    [backup] = backups.glob("*.checkpoint")

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1, config={
        "segment.bytes": "16384", "retention.ms": "-1", "remote.storage.enable": "true",
        "local.retention.bytes": "1"})])[topic].result(30)
    values = _produce(broker.bootstrap, topic, 0, 2000, int(time.time() * 1000))
    _wait("segments to be tiered", lambda: _local_base_offsets(data, topic)[0] > 1000)
    broker.stop()  # copies may still be running until then
    remote_before = sorted(p for p in _remote_objects(data) if topic in str(p))
    assert remote_before
    local_before = _local_base_offsets(data, topic)
    done = subprocess.run([*tierlog, "metadata", "restore", str(backup), "--data-dir", str(data)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    log_mark = len(broker.log_path.read_text())
    broker.start()
    assert topic not in AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=30).topics
    [stray] = data.glob(f"{topic}-0.*-stray")
    assert sorted(int(p.stem) for p in stray.glob("*.log")) == local_before
    assert not (data / f"{topic}-0").exists()
    time.sleep(1.0)  # several remote task intervals: nothing may delete the remote segments meanwhile
    assert sorted(p for p in _remote_objects(data) if topic in str(p)) == remote_before
    said = broker.log_path.read_text()[log_mark:]
    assert f"stray log topic={topic} partition=0" in said and f"keeping the remote segments of {topic}-0" in said

    # Kept, not served, and still there after another restart; the name can be used again.
    broker.restart()
    assert list(data.glob(f"{topic}-0.*-stray")) == [stray]
    assert "stray log directory kept" in broker.log_path.read_text()[log_mark:]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    assert _low_watermark(admin, topic, OffsetSpec.latest()) == 0  # a new, empty log
    assert len(values) == 2000


# -- seed 002: an upload whose custom metadata is over the limit, and a delete that keeps failing ----


def _tier(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tierlog.cli.main", "tier", *args], capture_output=True, text=True,
                          timeout=60)


def test_seed002_delete_that_keeps_failing_is_given_up_shown_by_tier_status_and_retried_by_hand(
        tmp_path: Path) -> None:
    """The bucketed test plugin (seed 002's own example) returns 200 bytes of custom metadata for
    topic "over", which the broker refuses (limit 128): the upload is to be deleted, but the
    plugin's deletes fail, so the broker retries with backoff, gives up, and says so; topic "under"
    goes on tiering. ``tier retry-delete`` then deletes it with the broker stopped."""
    remote, control, deletes_log = tmp_path / "remote", tmp_path / "control.json", tmp_path / "deletes.log"
    control.write_text(json.dumps({"delete_failures": -1}))
    plugin = {
        "remote.log.storage.manager.class.name": "tierlog.testing.remote.BucketedRemoteStorageManager",
        "rsm.config.dir": str(remote), "rsm.config.buckets.pad.topics": "over",
        "rsm.config.buckets.custom.metadata.bytes": "200", "rsm.config.buckets.control.file": str(control),
        "rsm.config.buckets.log.file": str(deletes_log),
    }
    overrides = {**FAST_TIERING, **plugin, "remote.log.manager.delete.retry.max.attempts": "3",
                 "remote.log.manager.delete.retry.backoff.max.ms": "1000"}
    broker = BrokerProcess(tmp_path / "data", overrides).start()
    data = broker.data_dir
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        config = {"segment.bytes": "16384", "retention.ms": "-1", "remote.storage.enable": "true"}
        futures = admin.create_topics([NewTopic(t, num_partitions=1, replication_factor=1, config=config)
                                       for t in ("over", "under")])
        for f in futures.values():
            f.result(30)
        base_ts = int(time.time() * 1000)
        _produce(broker.bootstrap, "over", 0, 1000, base_ts)
        _produce(broker.bootstrap, "under", 0, 1000, base_ts)

        def given_up() -> bool:
            return "remote delete given up" in broker.log_path.read_text()

        _wait("the broker to give up the delete", given_up)
        lines = [line.split()[:3] for line in deletes_log.read_text().splitlines()]
        [segment_id] = {sid for sid, _, _ in lines}
        # Three attempts (the one at the limit check and two retries), each handed the 200 bytes.
        assert [outcome for _, _, outcome in lines] == ["fail"] * 3
        [custom] = {bytes.fromhex(c) for _, c, _ in lines}
        assert len(custom) == 200 and custom.startswith(b"bucket=")
        error_line = next(line for line in broker.log_path.read_text().splitlines() if "remote delete given up" in line)
        assert f"segment_id={segment_id} topic=over partition=0 start_offset=0" in error_line and " ERROR " in error_line

        _produce(broker.bootstrap, "under", 1000, 1000, base_ts)  # "under" goes on tiering meanwhile
        status = _tier("status", "--data-dir", str(data))
        assert status.returncode == 0, status.stderr
        out = status.stdout.splitlines()
        rows = {line.split()[0]: line.split() for line in out[1:] if line.startswith(("over-0", "under-0"))}
        assert rows["over-0"][1] == "stopped" and rows["under-0"][1] == "active" and int(rows["under-0"][6]) > 0
        at = out.index("remote deletes given up: 1 segments left in the remote tier (tierlog tier retry-delete / "
                       "forget-delete SEGMENT-ID, broker stopped)")
        assert out[at + 2].split()[:4] == [segment_id, "over-0", out[at + 2].split()[2], "3"]
        assert any(p.is_file() for p in remote.rglob("over-0-*/*"))

        # Not while the broker runs: it holds the data directory.
        refused = _tier("retry-delete", "--data-dir", str(data), "--", segment_id)
        assert refused.returncode == 1 and "in use by another process" in refused.stderr
    finally:
        assert broker.stop() == 0

    control.write_text(json.dumps({"delete_failures": 0}))  # the store works again
    args = [f"--override={k}={v}" for k, v in plugin.items()]
    done = _tier("retry-delete", *args, "--data-dir", str(data), "--", segment_id)
    assert done.returncode == 0, done.stderr
    assert f"custom metadata: {custom.hex()}" in done.stdout
    assert deletes_log.read_text().splitlines()[-1].split()[:3] == [segment_id, custom.hex(), "ok"]
    assert not [p for p in remote.rglob("over-0-*/*") if p.is_file()]
    status = _tier("status", "--data-dir", str(data))
    assert status.returncode == 0 and "given up" not in status.stdout
