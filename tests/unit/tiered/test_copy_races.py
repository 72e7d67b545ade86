"""A copy in flight against everything else that touches the remote tier, as the remote-tier fault
scenarios (tests/reliability/remote_faults.py) met it: a topic deleted mid-copy, the expiration
pass, and the broker's shared scheduler while the store is slow."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.tiered import T0, Env, batch, fill, tiered_config
from tierlog.config import BrokerConfig, LogConfig
from tierlog.scheduler import ThreadScheduler
from tierlog.server.remote_tier import create_remote_log_manager
from tierlog.storage.log_manager import LogManager, LogManagerSettings
from tierlog.testing.remote import InMemoryRemoteStorageManager
from tierlog.tiered.api import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteStorageError,
    TopicIdPartition,
)
from tierlog.tiered.remote_log_manager import RemoteLogManager

TIP = TopicIdPartition(b"\x01" * 16, "t", 0)


class GatedRemoteStorageManager(InMemoryRemoteStorageManager):
    """Every copy (of ``gated_topic``, when set) stops at a gate before it writes, until the test
    opens it. Class-level events, so a broker config can load it by dotted path."""

    in_copy = threading.Event()
    gate = threading.Event()
    gated_topic: str | None = None

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData) -> bytes | None:
        # The bytes are taken first, as an upload streaming from open files holds them: deleting
        # the local segment meanwhile does not stop it.
        parts = {kind: path.read_bytes() for kind, path in (
            ("log", segment_data.log_segment), (IndexType.OFFSET.name, segment_data.offset_index),
            (IndexType.TIMESTAMP.name, segment_data.time_index),
            (IndexType.PRODUCER_SNAPSHOT.name, segment_data.producer_snapshot_index))}
        if self.gated_topic in (None, metadata.topic_id_partition.topic):
            type(self).in_copy.set()
            assert type(self).gate.wait(10), "the test never opened the gate"
        for kind, data in parts.items():
            self.objects[(metadata.segment_id, kind)] = data
        return None


@pytest.fixture(autouse=True)
def _fresh_gate() -> Iterator[None]:
    GatedRemoteStorageManager.in_copy = threading.Event()
    GatedRemoteStorageManager.gate = threading.Event()
    GatedRemoteStorageManager.gated_topic = None
    yield
    GatedRemoteStorageManager.gate.set()  # never leave a copy thread waiting


def _copy_in_flight(env: Env, rsm: GatedRemoteStorageManager, rlm: RemoteLogManager) -> threading.Thread:
    copier = threading.Thread(target=rlm.copy_partition, args=("t", 0))
    copier.start()
    assert rsm.in_copy.wait(10)
    return copier


@pytest.mark.parametrize("released_first", [False, True], ids=["tiered", "released-by-the-sync"])
def test_topic_deleted_while_a_copy_is_in_flight_leaves_no_orphan_objects(env: Env, released_first: bool) -> None:
    ulog = env.open_log()
    fill(ulog, 20)
    rsm = GatedRemoteStorageManager()
    rlm = env.rlm(rsm)
    rlm.sync_partitions()
    copier = _copy_in_flight(env, rsm, rlm)
    if released_first:
        # The log sync removed the deleted topic's log, and the remote log manager's periodic sync
        # noticed before the deletion of the remote data began.
        del env.logs.logs[("t", 0)]
        ulog.delete()
        rlm.sync_partitions()
    # While the copy is uploading the deletion refuses (the caller retries) rather than delete
    # what it lists now and miss what the copy writes next.
    with pytest.raises(RemoteStorageError, match="in flight"):
        rlm.delete_partition_data("t", 0, TIP.topic_id)
    rsm.gate.set()
    copier.join(10)
    assert not copier.is_alive()
    assert rlm.delete_partition_data("t", 0, TIP.topic_id) >= 1
    assert list(rlm.rlmm.list_remote_log_segments(TIP)) == []
    assert rsm.objects == {}, "objects of the copy in flight outlived the partition's remote data"


def test_the_expiration_pass_does_not_wait_for_another_partitions_copy(env: Env) -> None:
    busy = env.open_log("busy-0", topic_id=b"\x02" * 16)
    fill(busy, 20)
    expired = env.open_log("t-0", config=tiered_config(**{"retention.ms": 0}))
    fill(expired, 20)
    rsm = GatedRemoteStorageManager()
    rlm = env.rlm(rsm)
    rsm.gated_topic = "busy"
    rlm.sync_partitions()
    assert rlm.copy_partition("t", 0) > 0  # not gated: copies everything at once
    copier = threading.Thread(target=rlm.copy_partition, args=("busy", 0))
    copier.start()
    assert rsm.in_copy.wait(10)
    passes: list[int] = []
    expirer = threading.Thread(target=lambda: passes.append(rlm.expire_all(wait=False)))
    expirer.start()
    expirer.join(3)
    finished = not expirer.is_alive()
    rsm.gate.set()
    copier.join(10)
    expirer.join(10)
    assert finished, "the periodic expiration pass waited for the copy of another partition"
    assert passes[0] > 0 and list(rlm.rlmm.list_remote_log_segments(TIP)) == []


def test_a_hung_copy_never_holds_the_brokers_shared_scheduler(tmp_path: Path) -> None:
    data = tmp_path / "data"
    config = BrokerConfig({"log.dirs": str(data), "remote.log.storage.system.enable": "true",
                           "remote.log.manager.task.interval.ms": "50",
                           "remote.log.storage.manager.class.name":
                               "tests.unit.tiered.test_copy_races.GatedRemoteStorageManager"})
    topic_config = LogConfig.from_props({"segment.bytes": 2048, "remote.storage.enable": True, "retention.ms": -1})
    shared = ThreadScheduler(threads=1)  # the broker's pool, down to one thread
    manager = LogManager([data], lambda topic: topic_config, LogManagerSettings(), scheduler=shared)
    manager.startup_logs()
    ulog = manager.get_or_create_log("t", 0, topic_id=b"\x01" * 16)
    for i in range(20):
        ulog.append_as_leader(batch(3, ts=T0 + i * 1000, seed=i))
    rlm = create_remote_log_manager(config, manager, scheduler=shared, own_workers=True)
    assert rlm is not None
    try:
        rlm.start()
        assert GatedRemoteStorageManager.in_copy.wait(10), "no copy started"
        ran = threading.Event()
        shared.schedule("other-work", ran.set, 0)
        assert ran.wait(3), "the broker's scheduler is stuck behind a copy waiting on the remote store"
    finally:
        GatedRemoteStorageManager.gate.set()
        rlm.close()
        shared.shutdown()
        manager.shutdown()


class EveryThirdCopyFails(InMemoryRemoteStorageManager):
    """A store that works, with an intermittent error on every third upload."""

    def __init__(self) -> None:
        super().__init__()
        self.copies = 0

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData) -> bytes | None:
        self.copies += 1
        if self.copies % 3 == 0:
            raise RemoteStorageError("injected: intermittent error")
        return super().copy_log_segment_data(metadata, segment_data)


def test_intermittent_errors_that_let_copies_through_do_not_grow_the_backoff(env: Env) -> None:
    ulog = env.open_log()
    fill(ulog, 80)
    assert len(ulog.segments) > 10
    rlm = env.rlm(EveryThirdCopyFails(), scheduler=True, task_interval_ms=1000, retry_max_delay_ms=60_000)
    rlm.start()
    env.clock.advance(1)  # run 1: two segments copied, the third fails
    assert rlm.status()[0].segments_copied == 2 and rlm.status()[0].consecutive_failures == 1
    for run in range(2, 6):  # each next run one interval later, as long as each one makes progress
        env.clock.advance(1000)
        [status] = rlm.status()
        assert status.segments_copied == 2 * run, f"run {run} did not come one interval after the last"
        assert status.consecutive_failures == 1
