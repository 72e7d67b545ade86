"""Compacted topics in the remote tier through ``tierlog serve`` (issue 18 point 3), on the embedded
local-directory tier and on S3 (moto's server on loopback): confluent-kafka produces keyed updates and
tombstones to a ``compact`` / ``compact,delete`` topic with ``remote.storage.enable=true``; the broker
cleans, tiers the cleaned segments, drops the local copies and compacts the remote tier; a consumer
reading from offset 0 (served from the remote tier) gets exactly the latest value of each key once,
tombstones gone after ``delete.retention.ms``, offsets kept. A broker SIGKILLed at each step of a remote
compaction restarts on a consistent remote log, the next run completes it, and no object is left
that the metadata does not name."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker import BrokerProcess
from tests.helpers.waits import produce_when_queued, wait_until
from tierlog.tiered.api import RemoteLogSegmentState
from tierlog.tiered.manifest import is_manifest_object
from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager

S = RemoteLogSegmentState
FAST = {"remote.log.manager.task.interval.ms": "300", "log.retention.check.interval.ms": "300",
        "log.segment.delete.delay.ms": "0", "log.cleaner.backoff.ms": "200"}
KEYS = 150
UPDATES = 3000
FILLER = 300
BUCKET = "compacted"
CRASH_ENV = "TIERLOG_TEST_REMOTE_COMPACTION_CRASH_AT"
ARMED_BY_ENV = "TIERLOG_TEST_REMOTE_COMPACTION_CRASH_ARMED_BY"
LATE_BATCH = 200


@pytest.fixture(params=["local", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    if request.param == "local":
        yield {}
        return
    pytest.importorskip("moto", reason="moto[server] is not importable: the S3 case needs it")
    from tests.helpers.s3_server import JournaledS3Server

    server = JournaledS3Server(tmp_path / "s3.journal").start()
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"})
    try:
        server.create_bucket(BUCKET)
        yield {"remote.log.storage.manager.class.name": "tierlog.tiered.backends.s3.S3RemoteStorageManager",
               "rsm.config.s3.bucket": BUCKET, "rsm.config.s3.endpoint": server.endpoint,
               "rsm.config.s3.region": "us-east-1"}
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _wait(broker: BrokerProcess, what: str, check: Callable[[], bool], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        if not broker.alive():
            raise AssertionError(f"the broker died waiting for {what}; stderr tail:\n{broker.stderr_tail()}")
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}; stderr tail:\n{broker.stderr_tail(80)}")


def _create(broker: BrokerProcess, topic: str, policy: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1, config={
        "cleanup.policy": policy, "remote.storage.enable": "true", "segment.bytes": "16384",
        "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "1000", "local.retention.ms": "1000",
        "retention.ms": "-1"})])[topic].result(30)


def _produce(broker: BrokerProcess, topic: str, model: dict[bytes, bytes | None]) -> None:
    """Keyed updates with 10% tombstones, then distinct filler keys so every update sits in a closed
    (cleanable, tierable) segment rather than the active one."""
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "batch.size": 4096})
    rng = random.Random(1803)
    keys = [b"key-%03d" % rng.randrange(KEYS) for _ in range(UPDATES)] + [b"filler-%04d" % i for i in range(FILLER)]
    for i, key in enumerate(keys):
        value = None if key.startswith(b"key") and rng.random() < 0.1 else b"value-%d-" % i + b"x" * 40
        produce_when_queued(producer, topic, key=key, value=value, on_delivery=on_delivery)
        model[key] = value
    assert producer.flush(60) == 0
    assert not errors, errors[:5]


def _roll_until_killed(broker: BrokerProcess, topic: str, model: dict[bytes, bytes | None],
                       timeout_s: float = 120.0) -> set[bytes]:
    """With the crash armed, keep adding a segment's worth of fresh keys (a roll, an upload, a dirtier
    remote tier) until a remote compaction reaches the step and the broker kills itself. Every key
    tried goes into the model; returns the keys the broker acknowledged."""
    acked: set[bytes] = set()

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is None:
            acked.add(msg.key())

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": 4096,
                         "message.timeout.ms": 5000})
    deadline = time.monotonic() + timeout_s
    n = 0
    while broker.alive() and time.monotonic() < deadline:
        for _ in range(LATE_BATCH):
            key, value = b"late-%05d" % n, b"late-value-%d-" % n + b"x" * 40
            model[key] = value
            produce_when_queued(producer, topic, key=key, value=value, on_delivery=on_delivery)
            n += 1
        producer.flush(10)
        wait_until(lambda: not broker.alive(), 3, 0.2)
    producer.purge()
    producer.flush(5)
    return acked


def _segments(broker: BrokerProcess) -> list[tuple[int, int, S, bool, str]]:
    store = FileRemoteLogMetadataManager(broker.data_dir / "remote-log-metadata", read_only=True)
    try:
        return sorted((m.start_offset, m.end_offset, m.state, bool(m.replaces), m.segment_id.id_str)
                      for tip in store.partitions() for m in store.list_remote_log_segments(tip))
    finally:
        store.close()


def _compacted_and_settled(broker: BrokerProcess, topic: str, last_key_offset: int) -> bool:
    """The remote tier holds every update and filler key up to the last model key, all of it written by
    remote compaction, nothing in flight; the local copies of the tiered segments are gone."""
    segs = _segments(broker)
    if not segs or any(state is not S.COPY_SEGMENT_FINISHED for _, _, state, _, _ in segs):
        return False
    local = sorted(int(p.stem) for p in (broker.data_dir / f"{topic}-0").glob("*.log"))
    return (max(end for _, end, _, _, _ in segs) >= last_key_offset and all(r for _, _, _, r, _ in segs)
            and bool(local) and local[0] > 0)


def _read_all(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[int, bytes, bytes | None]] = []
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(msg.error())
            out.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    raise AssertionError("the consumer did not reach the end of the topic")


def _last_model_key_offset(records: list[tuple[int, bytes, bytes | None]]) -> int:
    return max(o for o, k, _ in records if k.startswith(b"key"))


def _check_table(broker: BrokerProcess, topic: str, model: dict[bytes, bytes | None]) -> None:
    records = _read_all(broker.bootstrap, topic)
    keys = [k for _, k, _ in records]
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(set(offsets)), "an offset twice or out of order"
    assert len(keys) == len(set(keys)), "a key more than once: the remote tier is not compacted"
    live = {k: v for k, v in model.items() if v is not None}
    # Exactly the latest value of every live key; tombstoned keys gone (delete.retention.ms passed).
    assert {k: v for _, k, v in records} == live
    assert records[0][0] > 0 or records[0][1] in live  # offsets are the original ones (checked below)
    assert len(records) < UPDATES


def _objects_named_by_metadata(broker: BrokerProcess, backend: dict[str, str]) -> None:
    """Every object belongs to a segment the metadata names (read before and after the listing: a run
    may start or finish a segment meanwhile)."""
    live = {sid for *_, sid in _segments(broker)}
    if backend:
        import boto3

        s3 = boto3.client("s3", endpoint_url=backend["rsm.config.s3.endpoint"], region_name="us-east-1")
        names = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
                 for o in page.get("Contents", [])]
    else:
        remote = broker.data_dir.parent / f"{broker.data_dir.name}-remote"
        names = [str(p) for p in remote.rglob("*") if p.is_file()]
    live |= {sid for *_, sid in _segments(broker)}
    # The partition's manifest (tiered/manifest.py) is the partition's, not a segment's.
    orphans = [n for n in names if not is_manifest_object(n) and not any(sid in n for sid in live)]
    assert names and not orphans, orphans[:5]


@pytest.mark.integration
@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_consumer_reads_the_compacted_remote_tier_from_zero(tmp_path: Path, backend: dict[str, str],
                                                            policy: str, topic_name: str) -> None:
    broker = BrokerProcess(tmp_path / "data", {**FAST, **backend}).start()
    try:
        _create(broker, topic_name, policy)
        model: dict[bytes, bytes | None] = {}
        _produce(broker, topic_name, model)
        first = _read_all(broker.bootstrap, topic_name)
        last_key = _last_model_key_offset(first)
        _wait(broker, "the remote tier compacted and the local copies dropped",
              lambda: _compacted_and_settled(broker, topic_name, last_key))
        # delete.retention.ms is 1 s: a tombstone tiered before its horizon goes with a later remote
        # compaction, which the filler's uploads trigger; wait until the consumer's view settles.
        _wait(broker, "tombstones gone from the remote tier", lambda: all(
            v is not None for _, _, v in _read_all(broker.bootstrap, topic_name)), timeout_s=90)
        _check_table(broker, topic_name, model)
        # Offsets are the original ones: each record read now was at that offset at first.
        original = {o: (k, v) for o, k, v in first}
        assert all(original[o] == (k, v) for o, k, v in _read_all(broker.bootstrap, topic_name))
        _objects_named_by_metadata(broker, backend)
        assert "remote compaction of" in broker.stderr_tail(2000)
    finally:
        if broker.alive():
            assert broker.stop() == 0, broker.stderr_tail()


@pytest.mark.integration
@pytest.mark.parametrize("step", ["started", "uploaded", "swapped"])
def test_sigkill_during_remote_compaction_then_a_restart_completes_it(tmp_path: Path, step: str,
                                                                      topic_name: str) -> None:
    # Armed only once the model's records are acknowledged: on a fast machine a remote compaction may
    # reach the step while they are still being produced.
    armed_by = tmp_path / "arm-crash"
    broker = BrokerProcess(tmp_path / "data", FAST, env={CRASH_ENV: step, ARMED_BY_ENV: str(armed_by)}).start()
    try:
        _create(broker, topic_name, "compact")
        model: dict[bytes, bytes | None] = {}
        _produce(broker, topic_name, model)
        armed_by.touch()
        late_acked = _roll_until_killed(broker, topic_name, model)
        assert not broker.alive(), f"no remote compaction reached {step}:\n{broker.stderr_tail()}"
        assert broker.proc is not None and broker.proc.returncode == -9
        assert f"SIGKILL at {step}" in broker.stderr_tail(200)
        states = {state for _, _, state, _, _ in _segments(broker)}
        assert S.COPY_SEGMENT_FINISHED in states
        broker.env = None
        broker.start()
        first = _read_all(broker.bootstrap, topic_name)  # the restarted broker serves a whole log
        assert len({o for o, _, _ in first}) == len(first)
        first_keys = {k for _, k, _ in first}
        assert late_acked <= first_keys, (f"acknowledged keys lost: {sorted(late_acked - first_keys)[:5]}\n"
                                          f"{broker.stderr_tail()}")
        for key in [k for k in model if k.startswith(b"late-") and k not in first_keys]:
            del model[key]  # tried, never acknowledged, not written before the kill
        assert {k: v for _, k, v in first} == {k: v for k, v in model.items() if k in {k for _, k, _ in first}}
        last_key = _last_model_key_offset(first)
        _wait(broker, "the re-run's remote compaction", lambda: _compacted_and_settled(broker, topic_name, last_key))
        _wait(broker, "tombstones gone from the remote tier", lambda: all(
            v is not None for _, _, v in _read_all(broker.bootstrap, topic_name)), timeout_s=90)
        _check_table(broker, topic_name, model)
        _objects_named_by_metadata(broker, {})
    finally:
        if broker.alive():
            assert broker.stop() == 0, broker.stderr_tail()
