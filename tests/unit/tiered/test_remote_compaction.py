"""Compacted topics in the remote tier (issue 18 point 3) over real logs, the local cleaner, the durable
metadata store and the local-directory backend: clean before upload, the remote compaction's result
(latest record per key, offsets kept, every CRC holding, tombstones until their horizon), the swap
seen by readers, and a crash at each step of a run leaving the old or the new view, which a restart
and a re-run settle (orphans deleted)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tests.helpers.tiered import Env, tiered_config
from tierlog.config import LogConfig
from tierlog.records import SimpleRecord, build_batch
from tierlog.records.header import iter_headers
from tierlog.records.reader import decode_batch
from tierlog.storage.cleaner.checkpoint import CleanerCheckpoint
from tierlog.storage.cleaner.cleaner import Cleaner
from tierlog.storage.cleaner.manager import clean_log
from tierlog.storage.cleaner.offset_map import OffsetMap
from tierlog.storage.log import UnifiedLog
from tierlog.tiered.api import RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState
from tierlog.tiered.backends.local import LocalDirectoryRemoteStorageManager
from tierlog.tiered.context import is_tierable
from tierlog.tiered.remote_compaction import group_sources, remote_compaction_due
from tierlog.tiered.remote_log_manager import RemoteLogManager

S = RemoteLogSegmentState
T0 = 1_700_000_000_000
KEYS = 12


class SimulatedCrash(BaseException):
    """Ends a run where a SIGKILL would: no cleanup code runs (it catches Exception only)."""


def compact_config(**overrides: object) -> LogConfig:
    props: dict[str, object] = {"cleanup.policy": "compact", "segment.bytes": 1024, "delete.retention.ms": 60_000,
                                "min.cleanable.dirty.ratio": 0.5}
    props.update(overrides)
    return tiered_config(**props)


def local_rsm(env: Env) -> LocalDirectoryRemoteStorageManager:
    rsm = LocalDirectoryRemoteStorageManager()
    rsm.configure({"dir": str(env.root / "remote"), "fsync": "false"})
    return rsm


#: The model: key → (offset, value) of its latest record, over the whole log, per log directory.
MODEL: dict[Path, dict[bytes, tuple[int, bytes | None]]] = {}


def put_round(ulog: UnifiedLog, version: int, ts: int, keys: range = range(KEYS),
              tombstones: tuple[int, ...] = ()) -> None:
    model = MODEL.setdefault(ulog.dir, {})
    for k in keys:
        value = None if k in tombstones else b"v%d-" % version + b"x" * 60
        key = b"key-%02d" % k
        offset = ulog.append_as_leader(build_batch([SimpleRecord(key, value, timestamp=ts + k)])).first_offset
        model[key] = (offset, value)


def clean_and_checkpoint(ulog: UnifiedLog, now_ms: int) -> None:
    """One cleaning by the local cleaner, checkpointed as its manager does (the copy task reads it)."""
    result = clean_log(ulog, Cleaner(OffsetMap(10_000), io_buffer_bytes=4096), None, now_ms)
    ulog.roll()
    CleanerCheckpoint(ulog.dir.parent).write({(ulog.topic, ulog.partition): result.end_offset})


def remote_view(rlm: RemoteLogManager) -> list[tuple[int, int, S]]:
    return sorted((m.start_offset, m.end_offset, m.state) for m in rlm.rlmm.list_remote_log_segments(_tip(rlm)))


def _tip(rlm: RemoteLogManager):  # type: ignore[no-untyped-def]
    [state] = list(rlm._partitions.values())
    return state.tip


def finished(rlm: RemoteLogManager) -> list[RemoteLogSegmentMetadata]:
    return sorted((m for m in rlm.rlmm.list_remote_log_segments(_tip(rlm)) if m.state is S.COPY_SEGMENT_FINISHED),
                  key=lambda m: m.start_offset)


def read_remote(rlm: RemoteLogManager, upto: int, start: int = 0) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record a consumer reading the remote tier from offset 0 gets, through the broker's remote
    fetch path (offset, key, value); every batch's CRC checked."""
    out: list[tuple[int, bytes | None, bytes | None]] = []
    offset = start
    while offset <= upto:
        info = rlm.fetch("t", 0, offset, 1 << 20)
        assert info is not None, f"no remote segment for offset {offset}"
        if not info.records:
            break
        last = offset - 1
        for h in iter_headers(info.records):
            h.ensure_valid()
            last = h.last_offset
            if not h.is_control:
                out.extend((r.offset, r.key, r.value) for r in decode_batch(h) if r.offset >= offset)
        offset = last + 1
    return out


def setup_two_rounds(env: Env) -> tuple[UnifiedLog, RemoteLogManager, int]:
    """Two rounds of every key (one tombstone in round 2), each cleaned locally and then tiered.
    Returns the log, its remote log manager and the remote end."""
    ulog = env.open_log("t-0", compact_config())
    rlm = env.rlm(local_rsm(env))
    put_round(ulog, 1, T0)
    clean_and_checkpoint(ulog, T0)
    rlm.sync_partitions()
    assert rlm.copy_partition("t", 0) > 0
    put_round(ulog, 2, T0 + 1000, tombstones=(3,))
    clean_and_checkpoint(ulog, T0 + 1000)
    assert rlm.copy_partition("t", 0) > 0
    return ulog, rlm, ulog.remote_end_offset


def expected_records(ulog: UnifiedLog, remote_end: int) -> list[tuple[int, bytes, bytes | None]]:
    """What the remote tier holds after compaction: each key's latest record of the whole log, when
    that record is in the remote range (a later local record supersedes every remote one)."""
    return sorted((o, k, v) for k, (o, v) in MODEL[ulog.dir].items() if o <= remote_end)


def expected_after(ulog: UnifiedLog, remote_end: int) -> dict[bytes, bytes | None]:
    return {k: v for _, k, v in expected_records(ulog, remote_end)}


def as_table(records: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes, bytes | None]:
    out: dict[bytes, bytes | None] = {}
    for _, key, value in records:
        assert key is not None
        out[key] = value
    return out


# -- decisions ------------------------------------------------------------------------------------------


def test_compacted_topics_are_tierable_internal_topics_are_not(env: Env) -> None:
    for policy in ("compact", "compact,delete"):
        ulog = env.open_log(f"c{len(policy)}-0", compact_config(**{"cleanup.policy": policy}))
        assert is_tierable(ulog, True)
    assert not is_tierable(env.open_log("__consumer_offsets-0", compact_config()), True)


def test_due_by_dirty_ratio_and_grouping_by_size() -> None:
    from tierlog.ids import random_uuid
    from tierlog.tiered.api import RemoteLogSegmentId, TopicIdPartition

    tip = TopicIdPartition(b"\x01" * 16, "t", 0)

    def seg(start: int, size: int, replaces: bool) -> RemoteLogSegmentMetadata:
        rid = RemoteLogSegmentId(tip, random_uuid())
        return RemoteLogSegmentMetadata(RemoteLogSegmentId(tip, random_uuid()), start, start + 9, 0, 1, 0, size,
                                        state=S.COPY_SEGMENT_FINISHED, replaces=(rid,) if replaces else ())
    clean, dirty = seg(0, 300, True), seg(10, 100, False)
    assert not remote_compaction_due([clean, dirty], 0.5)
    assert remote_compaction_due([clean, dirty, seg(20, 300, False)], 0.5)
    assert not remote_compaction_due([clean], 0.0)  # nothing dirty
    groups = group_sources([seg(0, 400, False), seg(10, 400, False), seg(20, 400, False), seg(30, 100, False)], 1000)
    assert [[m.start_offset for m in g] for g in groups] == [[0, 10], [20, 30]]


# -- clean before upload --------------------------------------------------------------------------------


def test_a_compacted_segment_is_copied_only_once_cleaned(env: Env) -> None:
    ulog = env.open_log("t-0", compact_config())
    rlm = env.rlm(local_rsm(env))
    put_round(ulog, 1, T0)
    ulog.roll()
    rlm.sync_partitions()
    assert rlm.copy_partition("t", 0) == 0  # never cleaned: nothing copied
    clean_and_checkpoint(ulog, T0)
    assert rlm.copy_partition("t", 0) > 0
    assert ulog.remote_end_offset == ulog.segments.base_offsets[-1] - 1


def test_the_local_cleaner_leaves_tiered_segments_as_uploaded(env: Env) -> None:
    ulog, _, remote_end = setup_two_rounds(env)
    tiered = {b: ulog.segments.get(b).log_path.read_bytes() for b in ulog.segments.base_offsets if b <= remote_end}
    put_round(ulog, 3, T0 + 2000)
    clean_and_checkpoint(ulog, T0 + 2000)
    for base, data in tiered.items():
        assert ulog.segments.get(base).log_path.read_bytes() == data


# -- the compaction and its swap -------------------------------------------------------------------------


def test_remote_compaction_keeps_the_latest_record_of_each_key_with_its_offset(env: Env) -> None:
    ulog, rlm, remote_end = setup_two_rounds(env)
    before = read_remote(rlm, remote_end)
    old_ids = {m.segment_id for m in finished(rlm)}
    result = rlm.compact_partition("t", 0)
    assert result is not None and result.segments_written >= 1, result
    after = read_remote(rlm, remote_end)
    # Exactly the latest record of each key (the tombstone too: its horizon is a minute away),
    # at its original offset, with its value; before, the remote tier held older versions too.
    assert after == expected_records(ulog, remote_end)
    assert len(before) > len(after) and set(after) <= set(before)
    # One generation: the new segments cover the remote range exactly, the old ones are going.
    new = finished(rlm)
    assert not old_ids & {m.segment_id for m in new}
    assert new[0].start_offset == 0 and new[-1].end_offset == remote_end
    assert all(a.end_offset + 1 == b.start_offset for a, b in itertools.pairwise(new))
    going = [m for m in rlm.rlmm.list_remote_log_segments(_tip(rlm)) if m.state is S.DELETE_SEGMENT_STARTED]
    assert {m.segment_id for m in going} == old_ids
    # Each output records the smallest timestamp of the records it kept (readers prune by it).
    # (None for one that kept no record: an empty batch holds its last offset.)
    for md in new:
        with rlm.rsm.fetch_log_segment(md, 0) as stream:
            data = stream.read()
        stamps = [r.timestamp for h in iter_headers(data) if not h.is_control for r in decode_batch(h)]
        assert md.min_timestamp_ms == (min(stamps) if stamps else None), md
    assert any(md.min_timestamp_ms is not None for md in new)
    # The next expiration pass deletes the old generation's objects.
    rlm.expire_all()
    assert {m.segment_id for m in rlm.rlmm.list_remote_log_segments(_tip(rlm))} == {m.segment_id for m in new}
    files = {p.name for p in (env.root / "remote").rglob("*") if p.is_file()}
    assert not any(sid.id_str in name for sid in old_ids for name in files)
    # Not due again until enough new dirty data arrives.
    assert rlm.compact_partition("t", 0) is None


def test_tombstones_go_after_delete_retention_ms(env: Env) -> None:
    ulog, rlm, remote_end = setup_two_rounds(env)
    assert rlm.compact_partition("t", 0) is not None  # keeps the tombstone: its horizon is ahead
    assert b"key-03" in {k for _, k, _ in read_remote(rlm, remote_end)}
    assert rlm.compact_partition("t", 0) is None  # not due: nothing dirty, no horizon passed
    env.clock.advance(3_600_000)  # past every tombstone's horizon: due again by itself
    result = rlm.compact_partition("t", 0)
    assert result is not None and result.segments_written >= 1
    expected = {k: v for k, v in expected_after(ulog, remote_end).items() if v is not None}
    assert as_table(read_remote(rlm, remote_end)) == expected
    assert b"key-03" in expected_after(ulog, remote_end)  # the tombstone was in the remote range


def test_local_keys_supersede_remote_records(env: Env) -> None:
    ulog, rlm, remote_end = setup_two_rounds(env)
    remote_keys = {k for _, k, _ in expected_records(ulog, remote_end)}
    put_round(ulog, 3, T0 + 5000, keys=range(0, 4))  # newer values of four keys, still local
    rlm.compact_partition("t", 0, force=True)
    keys = {k for _, k, _ in read_remote(rlm, remote_end)}
    assert keys == remote_keys - {b"key-%02d" % k for k in range(4)}
    assert read_remote(rlm, remote_end) == expected_records(ulog, remote_end)


@pytest.mark.parametrize("step", ["started", "uploaded", "swapped"])
def test_a_crash_at_each_step_leaves_one_view_and_a_rerun_completes(env: Env, step: str) -> None:
    ulog, rlm, remote_end = setup_two_rounds(env)
    before = read_remote(rlm, remote_end)
    old_ids = {m.segment_id for m in finished(rlm)}

    def crash(reached: str) -> None:
        if reached == step:
            raise SimulatedCrash(step)

    rlm.compactor.crash_hook = crash
    with pytest.raises(SimulatedCrash):
        rlm.compactor.compact(next(iter(rlm._partitions.values())), ulog, env.clock.wall_ms())
    # Whatever the step, a reader sees one whole generation.
    # Whatever the step, a reader sees each offset once, from one generation: nothing invented, every
    # latest record there, the same table; after the first swap part of the range is compacted.
    seen = read_remote(rlm, remote_end)
    offsets = [o for o, _, _ in seen]
    assert offsets == sorted(set(offsets))
    assert set(expected_records(ulog, remote_end)) <= set(seen) <= set(before)
    assert as_table(seen) == as_table(before)
    if step == "swapped":
        assert len(seen) < len(before)
    else:
        assert seen == before
    # Restart: the store as the crash left it, a new manager (the sweep, the expiration pass).
    rlm.rlmm.close()
    rlm2 = env.rlm(local_rsm(env))
    rlm2.sync_partitions()
    rlm2.copy_partition("t", 0)  # its sweep deletes an upload left COPY_SEGMENT_STARTED
    rlm2.expire_all()  # deletes segments left DELETE_SEGMENT_STARTED
    states = {m.state for m in rlm2.rlmm.list_remote_log_segments(_tip(rlm2))}
    assert states == {S.COPY_SEGMENT_FINISHED}
    rlm2.compact_partition("t", 0, force=True)
    rlm2.expire_all()
    after = read_remote(rlm2, remote_end)
    assert after == expected_records(ulog, remote_end)
    live = {m.segment_id.id_str for m in rlm2.rlmm.list_remote_log_segments(_tip(rlm2))}
    assert not {sid.id_str for sid in old_ids} & live
    # No orphaned objects: every file in the remote dir belongs to a live segment.
    for path in (env.root / "remote").rglob("*"):
        if path.is_file():
            assert any(sid in str(path) for sid in live), f"orphan {path}"


def test_the_swap_is_refused_when_retention_took_a_source_meanwhile(env: Env) -> None:
    ulog, rlm, remote_end = setup_two_rounds(env)
    before = read_remote(rlm, remote_end)
    first = finished(rlm)[0]

    def retention_meanwhile(reached: str) -> None:
        if reached == "uploaded":
            rlm.rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
                first.segment_id, 0, S.DELETE_SEGMENT_STARTED, 1, first.custom_metadata))

    rlm.compactor.crash_hook = retention_meanwhile
    result = rlm.compactor.compact(next(iter(rlm._partitions.values())), ulog, env.clock.wall_ms())
    assert result.abandoned is not None and result.segments_written == 0
    # The upload is gone, the rest of the old generation serves on.
    assert not [m for m in rlm.rlmm.list_remote_log_segments(_tip(rlm)) if m.state is S.COPY_SEGMENT_STARTED]
    assert read_remote(rlm, remote_end, first.end_offset + 1) == \
        [r for r in before if r[0] > first.end_offset]


def test_the_sweep_passes_over_a_running_jobs_uploads(env: Env) -> None:
    ulog, rlm, remote_end = setup_two_rounds(env)
    state = next(iter(rlm._partitions.values()))

    def copy_run_meanwhile(reached: str) -> None:
        if reached == "started":
            rlm.copier.copy(state)  # its sweep of dangling uploads runs now

    rlm.compactor.crash_hook = copy_run_meanwhile
    result = rlm.compactor.compact(state, ulog, env.clock.wall_ms())
    assert result.abandoned is None and result.segments_written >= 1
    assert as_table(read_remote(rlm, remote_end)) == expected_after(ulog, remote_end)


def test_the_copy_task_runs_remote_compaction_when_due(env: Env) -> None:
    ulog, rlm, remote_end = setup_two_rounds(env)
    state = next(iter(rlm._partitions.values()))
    rlm._copy_task(state)
    assert rlm.compactor.last_result is not None
    assert all(m.replaces for m in finished(rlm))
    assert as_table(read_remote(rlm, remote_end)) == expected_after(ulog, remote_end)



def test_a_restart_after_remote_compaction_keeps_the_partition_online(env: Env) -> None:
    """The restart's comparison of the local log with the remote tier at the remote end (restore) must
    not take a compacted remote tier for different data: the local log still holds the uncompacted
    copies until local retention deletes them."""
    ulog, rlm, remote_end = setup_two_rounds(env)
    put_round(ulog, 3, T0 + 5000, keys=range(0, KEYS, 2))  # the remote end's key is superseded locally
    assert rlm.compact_partition("t", 0, force=True) is not None
    rlm.rlmm.close()
    rlm2 = env.rlm(local_rsm(env))
    rlm2.sync_partitions()
    rlm2.copy_partition("t", 0)
    assert ulog.offline_reason is None
    assert read_remote(rlm2, remote_end) == expected_records(ulog, remote_end)


def test_no_run_is_due_once_the_tombstones_are_gone(env: Env) -> None:
    """A batch keeps its delete-horizon bit after its tombstone was dropped: that alone must not make
    every later copy run compact the remote tier again."""
    ulog, rlm, _ = setup_two_rounds(env)
    # One batch holding a tombstone and a live record: after the tombstone goes, the batch stays
    # (with its horizon bit).
    ulog.append_as_leader(build_batch([SimpleRecord(b"gone", None, timestamp=T0 + 3000),
                                       SimpleRecord(b"kept", b"v", timestamp=T0 + 3001)]))
    put_round(ulog, 4, T0 + 4000, keys=range(KEYS, KEYS + 30))  # fills the segment, so it is tiered
    clean_and_checkpoint(ulog, T0 + 4000)
    assert rlm.copy_partition("t", 0) > 0
    assert rlm.compact_partition("t", 0, force=True) is not None
    env.clock.advance(3_600_000)
    assert rlm.compact_partition("t", 0) is not None  # the tombstone's horizon passed: due
    keys = {k for _, k, _ in read_remote(rlm, ulog.remote_end_offset)}
    assert b"kept" in keys and b"gone" not in keys
    env.clock.advance(3_600_000)
    assert rlm.compact_partition("t", 0) is None


def _disjoint(rlm: RemoteLogManager) -> bool:
    ranges = [(m.start_offset, m.end_offset) for m in finished(rlm)]
    return all(a[1] < b[0] for a, b in itertools.pairwise(ranges))


def test_a_segment_copied_while_the_cleaner_rewrites_it_stays_as_uploaded(env: Env) -> None:
    """The cleaner read a group, the copy task uploaded part of it meanwhile: the swap is abandoned,
    else the merged segment would be copied again over offsets the remote tier holds."""
    ulog = env.open_log("t-0", compact_config())
    rlm = env.rlm(local_rsm(env))
    rlm.sync_partitions()
    put_round(ulog, 1, T0)
    clean_and_checkpoint(ulog, T0)
    put_round(ulog, 2, T0 + 1000)
    ulog.roll()
    copied: list[int] = []

    def copy_meanwhile(step: str) -> None:
        if step == "cleaned-written" and not copied:
            copied.append(rlm.copy_partition("t", 0))

    result = clean_log(ulog, Cleaner(OffsetMap(10_000), io_buffer_bytes=4096, swap_hook=copy_meanwhile), None, T0)
    assert copied and copied[0] > 0
    assert result.aborted
    CleanerCheckpoint(ulog.dir.parent).write({(ulog.topic, ulog.partition): result.end_offset})
    clean_and_checkpoint(ulog, T0 + 2000)  # cleans what is above the remote end
    rlm.copy_partition("t", 0)
    assert _disjoint(rlm), [(m.start_offset, m.end_offset) for m in finished(rlm)]
    assert rlm.compact_partition("t", 0, force=True) is not None
    assert read_remote(rlm, ulog.remote_end_offset) == expected_records(ulog, ulog.remote_end_offset)


def test_the_cleaner_leaves_a_segment_being_copied_alone(env: Env) -> None:
    ulog = env.open_log("t-0", compact_config())
    rlm = env.rlm(local_rsm(env))
    rlm.sync_partitions()
    put_round(ulog, 1, T0)
    put_round(ulog, 2, T0 + 1000)
    ulog.roll()
    bases = ulog.segments.base_offsets
    assert ulog.begin_copy(bases[0], bases[1])
    before = ulog.segments.get(bases[0]).log_path.read_bytes()
    clean_log(ulog, Cleaner(OffsetMap(10_000), io_buffer_bytes=4096), None, T0)
    assert ulog.segments.get(bases[0]).log_path.read_bytes() == before
    ulog.end_copy()
    assert not ulog.begin_copy(bases[0], bases[0] + 10**6)  # not the segment it listed


def test_transactions_in_the_remote_tier(env: Env) -> None:
    """Committed transactional records are compacted like any; an aborted transaction's records never
    come back, and its ABORT marker and the emptied transactions' markers go once their horizon passed
    (the producer's last batch stays: idempotence survives)."""
    from tierlog.records.control import ControlRecordType, EndTransactionMarker, build_end_txn_marker_batch
    from tierlog.storage.producer_state import AppendOrigin

    ulog = env.open_log("t-0", compact_config())
    rlm = env.rlm(local_rsm(env))
    rlm.sync_partitions()
    model = MODEL.setdefault(ulog.dir, {})

    def txn(pid: int, key: bytes, value: bytes, commit: bool, ts: int) -> None:
        offset = ulog.append_as_leader(build_batch([SimpleRecord(key, value, timestamp=ts)], producer_id=pid,
                                                   producer_epoch=0, base_sequence=0, is_transactional=True)).first_offset
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        ulog.append_as_leader(build_end_txn_marker_batch(EndTransactionMarker(kind, 0), producer_id=pid,
                                                         producer_epoch=0, timestamp_ms=ts), origin=AppendOrigin.COORDINATOR)
        if commit:
            model[key] = (offset, value)

    txn(100, b"key-00", b"committed-old", True, T0)
    txn(101, b"key-01", b"aborted", False, T0 + 1)
    put_round(ulog, 1, T0 + 10)
    txn(102, b"key-02", b"committed-new", True, T0 + 20)
    put_round(ulog, 2, T0 + 30, keys=range(3, KEYS))
    clean_and_checkpoint(ulog, T0 + 40)
    assert rlm.copy_partition("t", 0) > 0
    end = ulog.remote_end_offset
    env.clock.advance(3_600_000)
    assert rlm.compact_partition("t", 0, force=True) is not None
    seen = read_remote(rlm, end)
    assert seen == expected_records(ulog, end)
    assert (b"key-01", b"aborted") not in {(k, v) for _, k, v in seen}
    assert as_table(seen)[b"key-02"] == b"committed-new"


def _local_records_above(ulog: UnifiedLog, offset: int) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for base in ulog.segments.base_offsets:
        seg = ulog.segments.get(base)
        for h in iter_headers(seg.log.read(0, seg.size_bytes)):
            if not h.is_control:
                out.extend((r.offset, r.key, r.value) for r in decode_batch(h) if r.offset > offset)
    return out


def test_a_tombstone_is_never_dropped_locally_while_the_remote_tier_holds_the_key(env: Env) -> None:
    """The local cleaner of a tiered log keeps tombstones past their horizon: the key's older records
    are in the remote tier, which it does not rewrite, so dropping the tombstone would bring them back.
    Remote compaction drops the tombstone once it is tiered, together with the older records."""
    ulog = env.open_log("t-0", compact_config())
    rlm = env.rlm(local_rsm(env))
    rlm.sync_partitions()
    put_round(ulog, 1, T0)
    clean_and_checkpoint(ulog, T0)
    assert rlm.copy_partition("t", 0) > 0
    remote_end = ulog.remote_end_offset
    put_round(ulog, 2, T0 + 1000, keys=range(0, 1), tombstones=(0,))  # key-00 deleted, locally
    put_round(ulog, 3, T0 + 2000, keys=range(KEYS, KEYS + 12))
    clean_and_checkpoint(ulog, env.clock.wall_ms())  # the tombstone's horizon: a minute from now
    env.clock.advance(3_600_000)
    clean_and_checkpoint(ulog, env.clock.wall_ms())  # past it
    rlm.compact_partition("t", 0, force=True)
    table = as_table(read_remote(rlm, remote_end) + _local_records_above(ulog, remote_end))
    assert table.get(b"key-00") is None, "a deleted key came back"
    # Tiered, the tombstone goes with the next remote compaction, and with it every older record.
    clean_and_checkpoint(ulog, env.clock.wall_ms())
    rlm.copy_partition("t", 0)
    env.clock.advance(3_600_000)
    rlm.compact_partition("t", 0, force=True)
    end = ulog.remote_end_offset
    assert end > remote_end
    seen = read_remote(rlm, end)
    assert b"key-00" not in {k for _, k, _ in seen}
