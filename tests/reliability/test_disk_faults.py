"""Disk faults injected under a real broker process (``eio-fsync``, ``enospc-write``, ``slow-fsync``),
by lazyfs (FUSE) and by the LD_PRELOAD page-cache shim (machines without /dev/fuse): the broker
stops with a non-zero exit and a message naming the cause when every log dir is offline or the
metadata log cannot be written, and the next start on the repaired disk recovers; a slow disk slows durable producers instead of piling up what waits for an fsync."""

from __future__ import annotations

import subprocess
import threading
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.helpers.broker import BrokerProcess
from tests.helpers.waits import produce_when_queued
from tests.reliability.harness import RawClient, create_topic, read_partition
from tests.reliability.lazyfs import command, mount
from tests.reliability.pageshim import PageShim
from tests.reliability.power_loss import HARNESSES, harness_unavailable
from tierlog.errors import ErrorCode
from tierlog.protocol import ApiKey

pytestmark = pytest.mark.integration


@dataclass
class FaultyDisk:
    """Where the broker's faulty dir goes (``root``), the broker's extra environment, and the
    harness's fault commands (lazyfs's, which the shim answers the same way)."""

    harness: str
    root: Path
    env: dict[str, str] | None
    command: Callable[[str], str]


@pytest.fixture(params=HARNESSES)
def disk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FaultyDisk]:
    harness: str = request.param
    why_not = harness_unavailable(harness)
    if why_not is not None:
        pytest.skip(f"the {harness} harness cannot run: {why_not}")
    print(f"harness {harness}")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if harness == "shim":
        shim = PageShim(tmp_path, mnt)
        yield FaultyDisk(harness, shim.root, shim.env(), shim.command)
        return
    backing = tmp_path / "backing"
    backing.mkdir()
    fs = mount(backing, mnt)
    try:
        yield FaultyDisk(harness, mnt, None, lambda cmd: command(fs, cmd))
    finally:
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=False)
        fs.kill()
        fs.wait(30)


def _broker(data_dir: Path, log_path: Path, overrides: dict[str, str], disk: FaultyDisk) -> BrokerProcess:
    broker = BrokerProcess(data_dir, overrides, env=disk.env)
    broker.log_path = log_path  # off the faulty disk: its faults must not silence the broker's log
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
        disk: FaultyDisk, tmp_path: Path) -> None:
    mnt = disk.root
    broker = _broker(mnt / "data", tmp_path / "broker.log", {"log.durable.acks": "all"}, disk)
    try:
        create_topic(broker.port, "t", 1)
        assert _produce_one(broker.bootstrap) is None, broker.stderr_tail()
        assert disk.command("eio-fsync") == "ok"
        # The durable produce's fdatasync fails: not acknowledged, the dir offline, the broker stops.
        assert _produce_one(broker.bootstrap) is not None
        code = _exit_code(broker)
        log = broker.stderr_tail(200)
        assert code != 0, log
        assert "every log dir is offline" in log and "EIO" in log, log
    finally:
        broker.kill()
    assert disk.command("clear") == "ok"
    restarted = _broker(mnt / "data", tmp_path / "restarted.log", {"log.durable.acks": "all"}, disk)
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
        disk: FaultyDisk, tmp_path: Path) -> None:
    mnt = disk.root
    # The metadata log lives in the first log dir (on the faulty disk); the second on the plain disk.
    dirs = f"{mnt / 'd0'},{tmp_path / 'd1'}"
    broker = _broker(mnt / "d0", tmp_path / "broker.log", {"log.dirs": dirs}, disk)
    try:
        create_topic(broker.port, "before", 1)
        assert disk.command("enospc-write") == "ok"
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
    assert disk.command("clear") == "ok"
    restarted = _broker(mnt / "d0", tmp_path / "restarted.log", {"log.dirs": dirs}, disk)
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


def _metrics(url: str) -> dict[str, float]:
    out: dict[str, float] = {}
    with urllib.request.urlopen(url, timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith("tierlog_group_commit") or line.startswith("tierlog_log_dir_offline"):
                name = line.split("{", 1)[0].split(" ", 1)[0].removesuffix("_total")
                out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def test_a_slow_disk_slows_durable_producers_and_bounds_what_waits_for_an_fsync(
        disk: FaultyDisk, tmp_path: Path) -> None:
    """Every fsync 150 ms slower: 4 librdkafka producers (acks=all) wait for room under
    log.dir.unflushed.max.bytes=64 KiB instead of piling bytes up; every record is delivered once."""
    mnt = disk.root
    bound, batch_bytes = 64 << 10, 32 << 10
    broker = _broker(mnt / "data", tmp_path / "broker.log", {
        "log.durable.acks": "all", "log.dir.unflushed.max.bytes": str(bound),
        "metrics.listener": "http://127.0.0.1:0", "message.max.bytes": str(1 << 20)}, disk)
    try:
        url = next(line.strip().rsplit(" ", 1)[1] for line in broker.stdout_lines
                   if line.startswith("tierlog metrics on "))
        create_topic(broker.port, "t", 4)
        assert disk.command("slow-fsync 150") == "ok"
        per_producer, value = 1500, b"v" * 1000
        delivered: list[int] = []
        failed: list[str] = []
        producers = [Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": True,
                               "linger.ms": 5, "batch.size": batch_bytes, "log_level": 0}) for _ in range(4)]

        def run(i: int) -> None:
            p = producers[i]
            for n in range(per_producer):
                produce_when_queued(p, "t", value=value + str(i * per_producer + n).encode(), partition=i,
                                    on_delivery=lambda err, m: failed.append(err.name()) if err is not None
                                    else delivered.append(m.offset()))
                p.poll(0)
            p.flush(300)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        figures = _metrics(url)
        about = f"{figures}; broker log:\n{broker.stderr_tail()}"
        assert not failed and len(delivered) == 4 * per_producer, about
        # Producers waited for room, and what waited for an fsync stayed near the bound: past it by
        # at most the requests let in at once (each of 4 connections up to its in-flight batches).
        assert figures["tierlog_group_commit_room_waits"] > 0, about
        assert figures["tierlog_group_commit_pending_bytes_peak"] <= bound + 4 * 5 * batch_bytes + batch_bytes, about
        assert disk.command("clear") == "ok"
        # Nothing lost or doubled: each partition holds exactly its producer's records.
        with RawClient(broker.port) as c:
            for p in range(4):
                read = read_partition(c, "t", p)
                values = [v for _, v in read.records]
                assert len(values) == per_producer and len(set(values)) == per_producer, (p, len(values))
        assert broker.stop() == 0
    finally:
        broker.kill()
