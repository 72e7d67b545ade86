"""The remote log manager end to end over real logs: copy, seed 002, failures and backoff, restart,
remote reads, retention across tiers."""

from __future__ import annotations

import itertools
import logging
from pathlib import Path

import pytest

from tests.helpers.tiered import T0, Env, fill, tiered_config
from tierlog.errors import OffsetOutOfRangeError
from tierlog.storage.checkpoints import LeaderEpochCheckpointFile
from tierlog.testing.remote import FailurePlan, FlakyRemoteStorageManager, InMemoryRemoteStorageManager
from tierlog.tiered.api import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteStorageManager,
    TopicIdPartition,
)
from tierlog.tiered.backends.local import LocalDirectoryRemoteStorageManager
from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager
from tierlog.tiered.remote_log_manager import RemoteLogManager
from tierlog.tiered.status import read_status_file

S = RemoteLogSegmentState
TIP = TopicIdPartition(b"\x01" * 16, "t", 0)


def segments(rlm: RemoteLogManager, tip: TopicIdPartition = TIP) -> list[RemoteLogSegmentMetadata]:
    return list(rlm.rlmm.list_remote_log_segments(tip))


def local_dir_rsm(env: Env) -> LocalDirectoryRemoteStorageManager:
    rsm = LocalDirectoryRemoteStorageManager()
    rsm.configure({"dir": str(env.root / "remote"), "fsync": "false"})
    return rsm


class RecordingRLMM(FileRemoteLogMetadataManager):
    """The durable store, remembering every update it accepted."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.updates: list[RemoteLogSegmentMetadataUpdate] = []

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        super().update_remote_log_segment_metadata(update)
        self.updates.append(update)


def test_copy_uploads_every_closed_segment_with_its_files(env: Env) -> None:
    ulog = env.open_log()
    fill(ulog, 30)
    rsm = InMemoryRemoteStorageManager()
    rlm = env.rlm(rsm)
    rlm.sync_partitions()
    bases = ulog.segments.base_offsets
    assert len(bases) >= 4
    assert rlm.copy_partition("t", 0) == len(bases) - 1
    remote = segments(rlm)
    assert [(m.start_offset, m.end_offset, m.state) for m in remote] == [
        (b, n - 1, S.COPY_SEGMENT_FINISHED) for b, n in itertools.pairwise(bases)]
    assert ulog.highest_offset_in_remote_storage == bases[-1] - 1
    for m in remote:
        seg = ulog.segments.get(m.start_offset)
        assert m.segment_size_in_bytes == seg.size_bytes
        assert m.max_timestamp_ms == seg.largest_timestamp
        assert m.segment_leader_epochs == ((0, m.start_offset),)
        assert rsm.objects[(m.segment_id, "log")] == seg.log_path.read_bytes()
        assert rsm.objects[(m.segment_id, "OFFSET")] == seg.offset_index_path.read_bytes()
        assert rsm.objects[(m.segment_id, "TIMESTAMP")] == seg.time_index_path.read_bytes()
        snap = ulog.producer_state.snapshot_file_for(m.end_offset + 1)
        assert snap is not None and rsm.objects[(m.segment_id, "PRODUCER_SNAPSHOT")] == snap.read_bytes()
        assert LeaderEpochCheckpointFile.decode(rsm.objects[(m.segment_id, "LEADER_EPOCH")]) == \
            ulog.leader_epoch_cache.entries()
    assert rlm.copy_partition("t", 0) == 0  # nothing new


def test_tiering_needs_both_switches_and_skips_internal_topics(env: Env) -> None:
    plain = env.open_log("plain-0", tiered_config(**{"remote.storage.enable": False}))
    internal = env.open_log("__consumer_offsets-0")
    tiered = env.open_log("t-0")
    for ulog in (plain, internal, tiered):
        fill(ulog, 20)
    rsm = InMemoryRemoteStorageManager()
    rlm = env.rlm(rsm)
    assert rlm.copy_all() > 0
    assert {sid.topic_id_partition.topic for sid in rsm.segment_ids()} == {"t"}
    assert tiered.remote_log_enabled and not plain.remote_log_enabled
    off = env.rlm(InMemoryRemoteStorageManager(), env.rlmm(), system_enable=False)
    assert off.copy_all() == 0


def test_copy_stops_at_the_last_stable_offset(env: Env) -> None:
    from tierlog.records import SimpleRecord, build_batch

    ulog = env.open_log()
    fill(ulog, 12)
    # an open transaction pins the last stable offset inside the segments that follow
    txn_start = ulog.log_end_offset
    ulog.append_as_leader(build_batch([SimpleRecord(b"k", b"v" * 100, timestamp=T0)], producer_id=77,
                                      producer_epoch=0, base_sequence=0, is_transactional=True))
    fill(ulog, 12, start_ts=T0 + 20_000)
    assert ulog.last_stable_offset == txn_start
    rlm = env.rlm(InMemoryRemoteStorageManager())
    rlm.copy_all()
    assert all(m.end_offset < txn_start for m in segments(rlm))
    assert max(m.end_offset for m in segments(rlm)) + 1 == max(b for b in ulog.segments.base_offsets if b <= txn_start)


# -- seed 002 ---------------------------------------------------------------------------------------


def test_seed002_oversized_custom_metadata_stops_only_that_partition(
        env: Env, caplog: pytest.LogCaptureFixture) -> None:
    over = env.open_log("over-0", topic_id=b"\x0a" * 16)
    under = env.open_log("under-0", topic_id=b"\x0b" * 16)
    fill(over, 20)
    fill(under, 20)
    rsm = InMemoryRemoteStorageManager(
        custom_metadata=lambda md: b"x" * 256 if md.topic_id_partition.topic == "over" else b"y" * 128)
    rlmm = RecordingRLMM(env.root / "data" / "remote-log-metadata")
    rlm = env.rlm(rsm, rlmm, scheduler=True)
    caplog.set_level(logging.ERROR, logger="tierlog.tiered")
    rlm.start()
    env.clock.advance(1)
    over_tip = TopicIdPartition(b"\x0a" * 16, "over", 0)
    under_tip = TopicIdPartition(b"\x0b" * 16, "under", 0)

    # The over-limit partition: its uploaded data is gone, it has no FINISHED segment, and its
    # metadata saw exactly DELETE_SEGMENT_STARTED then DELETE_SEGMENT_FINISHED (Kafka's test).
    assert not [sid for sid in rsm.segment_ids() if sid.topic_id_partition == over_tip]
    assert segments(rlm, over_tip) == []
    over_updates = [u.state for u in rlmm.updates if u.segment_id.topic_id_partition == over_tip]
    assert over_updates == [S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED]
    assert all(u.custom_metadata is None for u in rlmm.updates if u.segment_id.topic_id_partition == over_tip)
    assert over.highest_offset_in_remote_storage == -1
    # The other partition copied everything, custom metadata of exactly the limit included.
    done = segments(rlm, under_tip)
    assert len(done) == len(under.segments) - 1
    assert all(m.state is S.COPY_SEGMENT_FINISHED and m.custom_metadata == b"y" * 128 for m in done)

    status = {(s.topic, s.partition): s for s in rlm.status()}
    assert status[("over", 0)].copy_task == "stopped"
    assert "256 bytes" in (status[("over", 0)].last_error or "")
    assert status[("under", 0)].copy_task == "active" and status[("under", 0)].last_error is None
    assert any("exceeds" in r.getMessage() for r in caplog.records)
    persisted = read_status_file(env.root / "data" / "remote-log-metadata" / "tier-status")
    assert persisted is not None
    assert persisted["partitions"]["over-0"]["copy_task"] == "stopped"  # type: ignore[index]

    # Later segments: the other partition goes on copying, this one stays stopped.
    copies_before = [c for c in rsm.calls if c[0] == "copy" and c[1].topic_id_partition == over_tip]
    fill(over, 20, start_ts=T0 + 40_000)
    fill(under, 20, start_ts=T0 + 40_000)
    env.clock.advance(5000)
    assert len(segments(rlm, under_tip)) == len(under.segments) - 1
    assert [c for c in rsm.calls if c[0] == "copy" and c[1].topic_id_partition == over_tip] == copies_before
    assert segments(rlm, over_tip) == []
    # ...until the operator restarts it (here with a plugin that behaves)
    rsm.custom_metadata = None
    assert rlm.restart_copy("over", 0)
    env.clock.advance(1)
    assert len(segments(rlm, over_tip)) == len(over.segments) - 1


# -- failures -----------------------------------------------------------------------------------------


def test_failed_copy_is_cleaned_up_and_retried_with_backoff(env: Env) -> None:
    ulog = env.open_log(config=tiered_config(**{"local.retention.bytes": 1}))
    fill(ulog, 20)
    inner = InMemoryRemoteStorageManager()
    flaky = FlakyRemoteStorageManager(inner, FailurePlan(fail_copies=3))
    rlm = env.rlm(flaky, scheduler=True, task_interval_ms=1000, retry_max_delay_ms=8000)
    rlm.start()
    bases_before = ulog.segments.base_offsets

    def attempt_times() -> int:
        return len(flaky.plan.failures)

    env.clock.advance(1)  # attempt 1 fails mid-upload
    assert attempt_times() == 1 and inner.objects == {} and segments(rlm) == []
    assert ulog.delete_old_segments() == []  # nothing is in the remote tier: nothing goes locally
    assert ulog.segments.base_offsets == bases_before
    env.clock.advance(999)
    assert attempt_times() == 1
    env.clock.advance(1)  # attempt 2, one interval later
    assert attempt_times() == 2
    env.clock.advance(1999)
    assert attempt_times() == 2
    env.clock.advance(1)  # attempt 3 after twice the interval
    assert attempt_times() == 3
    assert rlm.status()[0].consecutive_failures == 3
    env.clock.advance(4000)  # then four times: succeeds
    done = segments(rlm)
    assert len(done) == len(bases_before) - 1 and all(m.state is S.COPY_SEGMENT_FINISHED for m in done)
    assert inner.segment_ids() == {m.segment_id for m in done}  # no orphan of the failed attempts
    assert rlm.status()[0].consecutive_failures == 0
    ulog.delete_old_segments()
    assert ulog.segments.base_offsets == bases_before[-1:]


def test_dangling_upload_of_a_crashed_run_is_deleted(env: Env) -> None:
    ulog = env.open_log()
    fill(ulog, 20)
    rsm = local_dir_rsm(env)
    rlm = env.rlm(rsm)
    rlm.sync_partitions()

    class Crash(Exception):
        pass

    def crash(*_: object) -> None:
        raise Crash

    real_update = rlm.rlmm.update_remote_log_segment_metadata
    rlm.rlmm.update_remote_log_segment_metadata = crash  # type: ignore[method-assign]
    with pytest.raises(Crash):
        rlm.copier.copy_segment(rlm._partitions[("t", 0)], ulog, 0, ulog.segments.base_offsets[1])
    rlm.rlmm.update_remote_log_segment_metadata = real_update  # type: ignore[method-assign]
    assert [m.state for m in segments(rlm)] == [S.COPY_SEGMENT_STARTED]
    assert rsm.list_files()
    rlm.copy_partition("t", 0)
    done = segments(rlm)
    assert all(m.state is S.COPY_SEGMENT_FINISHED for m in done)
    assert len(rsm.list_files()) == 5 * len(done)  # the dangling fileset is gone


def test_restart_resumes_from_durable_metadata(env: Env) -> None:
    ulog = env.open_log()
    fill(ulog, 20)
    rlm = env.rlm(local_dir_rsm(env))
    first = rlm.copy_all()
    assert first > 0
    rlm.close()
    ulog.close()
    del env.logs.logs[("t", 0)]
    reopened = env.open_log()
    assert reopened.highest_offset_in_remote_storage == -1
    fill(reopened, 20, start_ts=T0 + 30_000)
    rsm = InMemoryRemoteStorageManager()
    rlm2 = env.rlm(rsm)
    rlm2.sync_partitions()
    assert reopened.highest_offset_in_remote_storage == segments(rlm2)[-1].end_offset
    second = rlm2.copy_all()
    assert second == len(reopened.segments) - 1 - first
    ranges = [(m.start_offset, m.end_offset) for m in segments(rlm2)]
    assert ranges == [(b, n - 1) for b, n in itertools.pairwise(reopened.segments.base_offsets)]
    assert len(rsm.segment_ids()) == second  # the first run's segments were not uploaded again


# -- reads --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["memory", "local"])
def test_remote_reads_return_exactly_what_the_local_log_returned(env: Env, backend: str) -> None:
    ulog = env.open_log(config=tiered_config(**{"local.retention.bytes": 1, "index.interval.bytes": 300}))
    fill(ulog, 40, per_batch=2)
    leo = ulog.log_end_offset
    cases = [(o, mb, one) for o in range(leo) for mb in (0, 1, 70, 400, 1500, 10**6) for one in (True, False)]
    expected = {c: ulog.read(c[0], c[1], min_one_message=c[2]).read_bytes() for c in cases}
    rsm: RemoteStorageManager = InMemoryRemoteStorageManager() if backend == "memory" else local_dir_rsm(env)
    rlm = env.rlm(rsm, index_cache_bytes=64)  # a tiny cache: evictions on the way must not matter
    rlm.copy_all()
    ulog.delete_old_segments()
    local_start = ulog.log_start_offset
    assert local_start == ulog.segments.base_offsets[0] > 0
    with pytest.raises(OffsetOutOfRangeError):
        ulog.read(0, 100)
    for (offset, max_bytes, one), data in expected.items():
        if offset < local_start:
            assert rlm.read("t", 0, offset, max_bytes, min_one_message=one) == data, (offset, max_bytes, one)
    assert rlm.read("t", 0, local_start, 100) is None  # not remote: the caller reads locally
    assert rlm.earliest_offset("t", 0) == 0
    assert rlm.remote_log_start_offset("t", 0) == 0
    assert len(rlm.index_cache) <= 2


def test_read_committed_gets_aborted_transactions_from_the_remote_txn_index(env: Env) -> None:
    from tierlog.records import SimpleRecord, build_batch
    from tierlog.records.control import EndTransactionMarker, build_end_txn_marker_batch
    from tierlog.storage.producer_state import CONTROL_TYPE_ABORT, AppendOrigin

    ulog = env.open_log(config=tiered_config(**{"local.retention.bytes": 1}))
    fill(ulog, 3)
    first = ulog.log_end_offset
    ulog.append_as_leader(build_batch([SimpleRecord(b"k", b"v" * 50, timestamp=T0)], producer_id=9,
                                      producer_epoch=0, base_sequence=0, is_transactional=True))
    ulog.append_as_leader(build_end_txn_marker_batch(EndTransactionMarker(CONTROL_TYPE_ABORT, 0), producer_id=9,
                                                     producer_epoch=0, timestamp_ms=T0),
                          origin=AppendOrigin.COORDINATOR)
    fill(ulog, 20, start_ts=T0 + 5000)
    rlm = env.rlm(InMemoryRemoteStorageManager())
    rlm.copy_all()
    ulog.delete_old_segments()
    info = rlm.fetch("t", 0, first, 10**6, read_committed=True)
    assert info is not None and info.aborted_transactions is not None
    assert [(t.producer_id, t.first_offset) for t in info.aborted_transactions] == [(9, first)]


# -- retention across tiers ---------------------------------------------------------------------------


def test_local_retention_deletes_only_what_is_remote(env: Env) -> None:
    ulog = env.open_log(config=tiered_config(**{"local.retention.bytes": 1}))
    fill(ulog, 30)
    bases = ulog.segments.base_offsets
    rlm = env.rlm(InMemoryRemoteStorageManager())
    rlm.sync_partitions()
    assert ulog.delete_old_segments() == []
    ulog.highest_offset_in_remote_storage = bases[2] - 1  # as if two segments were copied
    assert [d.segment.base_offset for d in ulog.delete_old_segments()] == bases[:2]
    rlm.copy_all()
    ulog.delete_old_segments()
    assert ulog.segments.base_offsets == bases[-1:]


def test_total_retention_by_time_deletes_remote_segments_and_metadata(env: Env) -> None:
    ulog = env.open_log(config=tiered_config(**{"retention.ms": 20_000}))
    fill(ulog, 30)
    rsm = InMemoryRemoteStorageManager()
    rlm = env.rlm(rsm)
    rlm.copy_all()
    before = segments(rlm)
    now = T0 + 35_000
    plan = rlm.expire_partition("t", 0, now_ms=now)
    gone = [m for m, _ in plan]
    assert gone and all(m.max_timestamp_ms <= now - 20_000 for m in gone)
    assert all(m.max_timestamp_ms > now - 20_000 for m in before[len(gone):])
    assert segments(rlm) == before[len(gone):]
    assert rsm.segment_ids() == {m.segment_id for m in before[len(gone):]}
    new_start = gone[-1].end_offset + 1
    assert rlm.rlmm.log_start_offset(TIP) == new_start == ulog.log_start_offset
    assert rlm.remote_log_start_offset("t", 0) == new_start
    assert rlm.read("t", 0, 0, 100) is None
    # the local copies of the deleted range go with the next local pass, nothing is copied again
    ulog.delete_old_segments(now)
    assert ulog.segments.base_offsets[0] == new_start
    assert rlm.copy_all() == 0


def test_total_retention_by_size_floor_and_delete_records(env: Env) -> None:
    ulog = env.open_log()
    fill(ulog, 30)
    rsm = InMemoryRemoteStorageManager()
    rlm = env.rlm(rsm)
    rlm.copy_all()
    before = segments(rlm)
    ulog.update_config(tiered_config(**{"retention.bytes": ulog.size_bytes - before[0].segment_size_in_bytes}))
    assert [m.segment_id for m, _ in rlm.expire_partition("t", 0)] == [before[0].segment_id]
    ulog.update_config(tiered_config(**{"log.retention.min.timestamp": before[1].max_timestamp_ms + 1}))
    assert [m.segment_id for m, _ in rlm.expire_partition("t", 0)] == [before[1].segment_id]
    ulog.update_config(tiered_config())
    rlm.delete_records("t", 0, before[3].start_offset + 1)
    assert rlm.read("t", 0, before[3].start_offset, 100) is None
    assert [m.segment_id for m, _ in rlm.expire_partition("t", 0)] == [before[2].segment_id]
    assert rsm.segment_ids() == {m.segment_id for m in before[3:]}
    assert rlm.earliest_offset("t", 0) == before[3].start_offset + 1


def test_interrupted_remote_delete_is_retried_no_orphans(env: Env) -> None:
    ulog = env.open_log(config=tiered_config(**{"retention.ms": 0}))
    fill(ulog, 20)
    inner = InMemoryRemoteStorageManager()
    flaky = FlakyRemoteStorageManager(inner, FailurePlan())
    rlm = env.rlm(flaky)
    rlm.copy_all()
    flaky.plan.fail_deletes = 1
    assert rlm.expire_partition("t", 0) == []
    assert rlm.status()[0].last_error is not None
    assert next(m.state for m in segments(rlm)) is S.DELETE_SEGMENT_STARTED
    rlm.expire_partition("t", 0)  # retried with backoff: not before one task interval went by
    assert next(m.state for m in segments(rlm)) is S.DELETE_SEGMENT_STARTED and inner.objects != {}
    env.clock.advance(1000)
    rlm.expire_partition("t", 0)
    assert segments(rlm) == [] and inner.objects == {}


def test_status_reports_offsets_bytes_and_lag(env: Env) -> None:
    ulog = env.open_log()
    fill(ulog, 30)
    rlm = env.rlm(InMemoryRemoteStorageManager())
    rlm.sync_partitions()
    [before] = rlm.status()
    assert before.highest_tiered_offset == -1 and before.copy_lag_segments == len(ulog.segments) - 1
    assert before.copy_lag_bytes == sum(ulog.segments.get(b).size_bytes for b in ulog.segments.base_offsets[:-1])
    rlm.copy_all()
    [after] = rlm.status()
    assert after.highest_tiered_offset == ulog.segments.base_offsets[-1] - 1
    assert after.copy_lag_segments == 0 and after.copy_lag_bytes == 0
    assert after.remote_bytes == before.copy_lag_bytes and after.local_bytes == ulog.size_bytes
    assert after.remote_segments == len(ulog.segments) - 1 and after.copy_task == "active"


def test_deleting_a_topic_deletes_its_remote_data(env: Env) -> None:
    ulog = env.open_log()
    fill(ulog, 20)
    rsm = local_dir_rsm(env)
    rlm = env.rlm(rsm)
    assert rlm.copy_all() > 0
    count = len(segments(rlm))
    assert rlm.delete_partition_data("t", 0) == count
    assert segments(rlm) == [] and rsm.list_files() == []
    assert not ulog.remote_log_enabled
    assert rlm.delete_partition_data("t", 0) == 0


def test_a_damaged_segment_is_not_uploaded_and_stays_local(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    """A bit flipped on disk in a closed segment: the copy stops before it (an upload would become
    the only copy once local retention ran), says why, and goes on once the segment is gone."""
    config = tiered_config(**{"local.retention.bytes": 1})
    ulog = env.open_log(config=config)
    fill(ulog, 30)
    bases = ulog.segments.base_offsets
    damaged = ulog.segments.get(bases[2])
    ulog.close()  # the appends left their batches known good: damage them behind the broker's back
    data = bytearray(damaged.log_path.read_bytes())
    data[len(data) // 2] ^= 0x40
    damaged.log_path.write_bytes(bytes(data))
    ulog = env.open_log(config=config)
    rsm = InMemoryRemoteStorageManager()
    rlm = env.rlm(rsm)
    rlm.sync_partitions()
    with caplog.at_level(logging.ERROR):
        assert rlm.copy_partition("t", 0) == 2
    assert [m.start_offset for m in segments(rlm)] == bases[:2]
    assert ulog.highest_offset_in_remote_storage == bases[2] - 1
    [status] = rlm.status()
    assert status.last_error is not None and f"segment [{bases[2]}, {bases[3] - 1}]" in status.last_error
    assert "damaged data" in status.last_error and "not copied to the remote tier" in status.last_error
    assert any("damaged segment topic=t partition=0" in r.getMessage() for r in caplog.records)
    # Local retention keeps the damaged segment and everything after it.
    ulog.delete_old_segments()
    assert ulog.segments.base_offsets == bases[2:]
    assert rlm.copy_partition("t", 0) == 0  # retried: still refused, without uploading anything
    assert rsm.segment_ids() == {m.segment_id for m in segments(rlm)}
    # The operator gives up the damaged offsets (delete-records past the segment): copying resumes.
    ulog.maybe_increment_log_start_offset(bases[3], "delete records")
    ulog.delete_old_segments()
    assert rlm.copy_partition("t", 0) == len(bases) - 4
    assert [m.start_offset for m in segments(rlm)] == bases[:2] + bases[3:-1]


def test_segments_checked_at_upload_are_not_read_twice_when_known_good(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches appended by this process were checked then: the upload check reads nothing again.
    After a restart nothing is known good, and the check reads the whole file once."""
    import tierlog.storage.segment as segment_module

    ulog = env.open_log()
    fill(ulog, 30)
    seg = ulog.segments.get(ulog.segments.base_offsets[0])
    assert seg.verified.verified_bytes == seg.size_bytes
    reads: list[int] = []
    real_pread = segment_module.os.pread

    def counting_pread(fd: int, size: int, position: int) -> bytes:
        reads.append(size)
        return real_pread(fd, size, position)

    monkeypatch.setattr(segment_module.os, "pread", counting_pread)
    assert ulog.check_all_batches(seg) is None
    assert reads == []
    ulog.close()
    ulog = env.open_log()
    seg = ulog.segments.get(ulog.segments.base_offsets[0])
    assert seg.verified.verified_bytes == 0
    assert ulog.check_all_batches(seg) is None
    assert sum(reads) >= seg.size_bytes and seg.verified.verified_bytes == seg.size_bytes
