"""Disk faults injected under a real broker process by lazyfs (``eio-fsync``, ``enospc-write``): the
broker stops with a non-zero exit and a message naming the cause when every log dir is offline or
the metadata log cannot be written, and the next start on the repaired disk recovers."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.helpers.broker import BrokerProcess
from tests.reliability.harness import RawClient, create_topic
from tests.reliability.lazyfs import command, mount
from tests.reliability.power_loss import fuse_available
from tierlog.errors import ErrorCode
from tierlog.protocol import ApiKey

pytestmark = pytest.mark.integration

UNAVAILABLE = fuse_available()


@pytest.fixture
def lazyfs(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    if UNAVAILABLE is not None:
        pytest.skip(f"lazyfs cannot run: {UNAVAILABLE}")
    backing, mnt = tmp_path / "backing", tmp_path / "mnt"
    backing.mkdir()
    mnt.mkdir()
    fs = mount(backing, mnt)
    try:
        yield fs, mnt
    finally:
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=False)
        fs.kill()
        fs.wait(30)


def _broker(data_dir: Path, log_path: Path, overrides: dict[str, str]) -> BrokerProcess:
    broker = BrokerProcess(data_dir, overrides)
    broker.log_path = log_path  # off lazyfs: its faults must not silence the broker's log
    return broker.start()


def _exit_code(broker: BrokerProcess, timeout_s: float = 60.0) -> int:
    assert broker.proc is not None
    try:
        return broker.proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        broker.kill()
        raise AssertionError(f"the broker did not stop; stderr tail:\n{broker.stderr_tail()}") from None


def _produce_one(bootstrap: str) -> str | None:
    """The delivery error of one acks=all record (None: delivered)."""
    errors: list[str | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 15000,
                         "retries": 0, "log_level": 0})
    producer.produce("t", b"v", partition=0,
                     on_delivery=lambda err, _m: errors.append(None if err is None else err.name()))
    producer.flush(30)
    return errors[0] if errors else "not delivered"


def test_eio_on_fsync_of_the_only_log_dir_stops_the_broker_with_a_non_zero_exit(
        lazyfs: tuple[subprocess.Popen[str], Path], tmp_path: Path) -> None:
    fs, mnt = lazyfs
    broker = _broker(mnt / "data", tmp_path / "broker.log", {"log.durable.acks": "all"})
    try:
        create_topic(broker.port, "t", 1)
        assert _produce_one(broker.bootstrap) is None, broker.stderr_tail()
        assert command(fs, "eio-fsync") == "ok"
        # The durable produce's fdatasync fails: not acknowledged, the dir offline, the broker stops.
        assert _produce_one(broker.bootstrap) is not None
        code = _exit_code(broker)
        log = broker.stderr_tail(200)
        assert code != 0, log
        assert "every log dir is offline" in log and "EIO" in log, log
    finally:
        broker.kill()
    assert command(fs, "clear") == "ok"
    restarted = _broker(mnt / "data", tmp_path / "restarted.log", {"log.durable.acks": "all"})
    try:
        # Recovery decides what is on disk: the acknowledged record is there, and it serves again.
        assert _produce_one(restarted.bootstrap) is None, restarted.stderr_tail()
        with RawClient(restarted.port) as c:
            body = c.call(ApiKey.LIST_OFFSETS, 1, {"replica_id": -1, "topics": [
                {"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
        assert body.topics[0].partitions[0].offset >= 2
        assert restarted.stop() == 0
    finally:
        restarted.kill()


def test_enospc_on_the_metadata_log_stops_the_broker_with_a_clear_message(
        lazyfs: tuple[subprocess.Popen[str], Path], tmp_path: Path) -> None:
    fs, mnt = lazyfs
    # The metadata log lives in the first log dir (on lazyfs); the second dir is on the plain disk.
    dirs = f"{mnt / 'd0'},{tmp_path / 'd1'}"
    broker = _broker(mnt / "d0", tmp_path / "broker.log", {"log.dirs": dirs})
    try:
        create_topic(broker.port, "before", 1)
        assert command(fs, "enospc-write") == "ok"
        try:
            with RawClient(broker.port) as c:
                body = c.call(ApiKey.CREATE_TOPICS, 7, {"topics": [
                    {"name": "after", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
                    "timeout": 30000, "validate_only": False})
            assert body.topics[0].error_code != ErrorCode.NONE, body
        except (ConnectionError, OSError):
            pass  # the broker stopped before it answered
        code = _exit_code(broker)
        log = broker.stderr_tail(200)
        assert code != 0, log
        assert "metadata log append" in log and ("No space left" in log or "ENOSPC" in log), log
    finally:
        broker.kill()
    assert command(fs, "clear") == "ok"
    restarted = _broker(mnt / "d0", tmp_path / "restarted.log", {"log.dirs": dirs})
    try:
        # Nothing half-written: the log recovers to its last whole batch; the acknowledged topic is there.
        with RawClient(restarted.port) as c:
            body = c.call(ApiKey.METADATA, 9, {"topics": None, "allow_auto_topic_creation": False,
                                               "include_cluster_authorized_operations": False,
                                               "include_topic_authorized_operations": False})
        names = {t.name for t in body.topics if t.error_code == 0}
        assert "before" in names, restarted.stderr_tail()
        create_topic(restarted.port, "again", 1)
        assert restarted.stop() == 0
    finally:
        restarted.kill()
