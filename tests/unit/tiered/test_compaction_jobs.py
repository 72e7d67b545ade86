"""Remote compaction by a job outside the broker (``tierlog spark compact``, issue 18): the job's
per-partition task (plain Python: the same function a Spark executor runs) and the broker's side of
the request files (:mod:`tierlog.tiered.compaction_jobs`), over real logs, the durable metadata store
and the local-directory backend. The swap is the broker's; a refused one, a dead job's intent and a
commit without its intent leave no object behind."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import pytest

from tests.helpers.tiered import Env
from tests.unit.tiered.test_remote_compaction import (
    T0,
    as_table,
    clean_and_checkpoint,
    finished,
    local_rsm,
    put_round,
    read_remote,
    setup_two_rounds,
)
from tierlog.pipeline.catalog import PartitionLog
from tierlog.pipeline.compact import (
    CompactionSettings,
    PartitionWork,
    compact_partition,
    plan,
    planned_metadata,
)
from tierlog.pipeline.reader import RemoteSpec
from tierlog.storage.log import UnifiedLog
from tierlog.tiered.api import RemoteLogSegmentState
from tierlog.tiered.compaction_jobs import (
    CompactionRequests,
    abandon,
    lease_refresh_s,
    read_result,
    write_commit,
    write_intent,
)
from tierlog.tiered.remote_log_manager import RemoteLogManager

S = RemoteLogSegmentState
SETTINGS = CompactionSettings(map_bytes=1 << 20, io_buffer_bytes=4096, broker_id=1)


def _spec(env: Env) -> RemoteSpec:
    return RemoteSpec("tierlog.tiered.backends.local.LocalDirectoryRemoteStorageManager",
                      (("dir", str(env.root / "remote")), ("fsync", "false")),
                      str(env.root / "data" / "remote-log-metadata"))


def _plan(env: Env, rlm: RemoteLogManager, ulog: UnifiedLog) -> PartitionWork:
    plog = PartitionLog("t", 0, None, remote_segments=finished(rlm), remote_start=0)
    [work] = plan({("t", 0): plog}, lambda _topic: ulog.config, SETTINGS, env.clock.wall_ms(), force=True)
    return work


def _requests(env: Env, rlm: RemoteLogManager) -> CompactionRequests:
    return CompactionRequests(rlm._ctx, rlm.deleter, env.root / "data" / "remote-log-metadata" / "compaction-requests")


def _files_of(env: Env, ids: list[str]) -> list[Path]:
    return [p for p in (env.root / "remote").rglob("*") if p.is_file() and any(i in p.name for i in ids)]


def test_the_job_compacts_and_the_broker_swaps_it_in(env: Env) -> None:
    ulog, rlm, remote_end = setup_two_rounds(env)
    before = read_remote(rlm, remote_end)
    old = {m.segment_id for m in finished(rlm)}
    requests = _requests(env, rlm)
    work = _plan(env, rlm, ulog)
    write_intent(requests.directory, work.job, planned_metadata(work))
    row = compact_partition(work, _spec(env))
    assert row["error"] is None and row["segments_written"] >= 1, row
    assert row["records_kept"] < row["records_read"]
    # Uploaded, not yet swapped: readers still see the old segments.
    assert {m.segment_id for m in finished(rlm)} == old
    write_commit(requests.directory, work.job, row["pairs"])
    requests.poll()
    answer = read_result(requests.directory, work.job)
    assert answer is not None and [a["result"] for a in answer] == ["swapped"] * row["segments_written"], answer
    now = finished(rlm)
    assert all(m.replaces for m in now) and not old & {m.segment_id for m in now}
    after = read_remote(rlm, remote_end)
    keys = [k for _, k, _ in after]
    assert len(keys) == len(set(keys)), "a key twice in the compacted remote tier"
    assert as_table(after) == as_table(before)
    original = {o: (k, v) for o, k, v in before}
    assert all(original[o] == (k, v) for o, k, v in after), "an offset moved or changed"
    assert not list(requests.directory.glob(f"{work.job}.*")), "the request files stay behind"


def test_a_swap_the_broker_refuses_leaves_no_upload(env: Env) -> None:
    ulog, rlm, _ = setup_two_rounds(env)
    requests = _requests(env, rlm)
    work = _plan(env, rlm, ulog)
    write_intent(requests.directory, work.job, planned_metadata(work))
    row = compact_partition(work, _spec(env))
    ids = [sid.id_str for sid in work.segment_ids]
    assert _files_of(env, ids), "the job uploaded nothing"
    # Meanwhile the broker's own remote compaction replaced the same segments.
    result = rlm.compact_partition("t", 0, force=True)
    assert result is not None and result.segments_written >= 1
    write_commit(requests.directory, work.job, row["pairs"])
    requests.poll()
    answer = read_result(requests.directory, work.job)
    assert answer is not None and all(str(a["result"]).startswith("refused") for a in answer), answer
    assert not _files_of(env, ids), "a refused upload was left in the remote tier"
    assert all(m.segment_id not in work.segment_ids for m in finished(rlm))


def test_a_dead_jobs_intent_expires_and_its_uploads_go(env: Env) -> None:
    ulog, rlm, _ = setup_two_rounds(env)
    requests = _requests(env, rlm)
    work = _plan(env, rlm, ulog)
    write_intent(requests.directory, work.job, planned_metadata(work))
    compact_partition(work, _spec(env))
    ids = [sid.id_str for sid in work.segment_ids]
    old = finished(rlm)
    requests.poll()
    assert _files_of(env, ids), "a live job's uploads were deleted"
    abandon(requests.directory, work.job)  # as an intent untouched for the lease looks
    requests.poll()
    assert not _files_of(env, ids)
    assert read_result(requests.directory, work.job) == [{"result": "expired"}]
    assert finished(rlm) == old
    assert requests.applied.intents_expired == 1


def test_a_commit_without_its_intent_is_refused(env: Env) -> None:
    ulog, rlm, _ = setup_two_rounds(env)
    requests = _requests(env, rlm)
    work = _plan(env, rlm, ulog)
    row = compact_partition(work, _spec(env))
    ids = [sid.id_str for sid in work.segment_ids]
    old = finished(rlm)
    requests.directory.mkdir(parents=True, exist_ok=True)
    write_commit(requests.directory, work.job, row["pairs"])
    requests.poll()
    answer = read_result(requests.directory, work.job)
    assert answer is not None and all(str(a["result"]).startswith("refused") for a in answer), answer
    assert finished(rlm) == old and not _files_of(env, ids)


def test_a_commit_applied_again_after_a_crash_skips_what_the_metadata_knows(env: Env) -> None:
    ulog, rlm, remote_end = setup_two_rounds(env)
    put_round(ulog, 3, T0 + 2000)
    clean_and_checkpoint(ulog, T0 + 2000)
    assert rlm.copy_partition("t", 0) > 0
    requests = _requests(env, rlm)
    work = _plan(env, rlm, ulog)
    write_intent(requests.directory, work.job, planned_metadata(work))
    row = compact_partition(work, _spec(env))
    # The broker died after the first segment's COPY_SEGMENT_STARTED: the entry is in the metadata.
    md, _ = row["pairs"][0]
    rlm.rlmm.add_remote_log_segment_metadata(md)
    write_commit(requests.directory, work.job, row["pairs"])
    requests.poll()
    answer = read_result(requests.directory, work.job)
    assert answer is not None and answer[0]["result"] == "lost: COPY_SEGMENT_STARTED", answer
    # The copy run's sweep of dangling uploads deletes it; the old segments still serve every offset.
    rlm.copy_partition("t", 0)
    assert all(m.segment_id != md.segment_id for m in rlm.rlmm.list_remote_log_segments(md.topic_id_partition)
               if m.state is not S.DELETE_SEGMENT_FINISHED)
    assert read_remote(rlm, remote_end), "the remote tier serves nothing"


def test_remote_compaction_enable_false_leaves_the_remote_tier_to_the_job(env: Env) -> None:
    from tests.unit.tiered.test_remote_compaction import compact_config, local_rsm

    ulog = env.open_log("t-0", compact_config())
    rlm = env.rlm(local_rsm(env), remote_compaction_enable=False)
    for round_ in range(3):
        put_round(ulog, round_, T0 + 1000 * round_)
        clean_and_checkpoint(ulog, T0 + 1000 * round_)
        rlm.sync_partitions()
        assert rlm.copy_partition("t", 0) > 0
    assert rlm.compact_partition("t", 0) is None  # due (all dirty), but not the broker's to do
    assert not any(m.replaces for m in finished(rlm))
    forced = rlm.compact_partition("t", 0, force=True)  # asked for explicitly, it still runs
    assert forced is not None and forced.segments_written >= 1


def test_damaged_remote_data_backs_off_with_one_clear_error_and_replaces_nothing(
        env: Env, caplog: pytest.LogCaptureFixture) -> None:
    """A damaged batch in a remote segment: an ERROR naming it, the failure counted (status, status
    file, metrics read them), nothing replaced or deleted, the partition served as before; the
    next passes within the backoff do not read it again, a pass after the backoff does."""
    from tierlog.tiered.status import offline_status

    _, rlm, remote_end = setup_two_rounds(env)
    old = finished(rlm)
    served = read_remote(rlm, old[0].end_offset)
    damaged = sorted((env.root / "remote").rglob("*.log"))[-1]
    data = bytearray(damaged.read_bytes())
    data[70] ^= 0xFF
    damaged.write_bytes(bytes(data))
    [state] = list(rlm._partitions.values())
    with caplog.at_level("ERROR", logger="tierlog.tiered.remote_compaction"):
        assert rlm.compact_partition("t", 0) is None  # due: every remote byte is dirty
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "damaged remote data, nothing replaced" in errors[0] and "next attempt in" in errors[0]
    assert state.compaction_errors == 1 and state.compaction_retry_at_ms is not None
    assert finished(rlm) == old and read_remote(rlm, old[0].end_offset) == served
    caplog.clear()
    for _ in range(3):  # the copy task's next passes, within the backoff
        assert rlm.compact_partition("t", 0) is None
    assert not caplog.records and state.compaction_errors == 1
    [status] = rlm.status()
    assert (status.compaction_errors, status.compaction_runs) == (1, 0)
    [persisted] = offline_status([env.root / "data"])
    assert persisted.compaction_errors == 1 and persisted.compaction_retry_at_ms == state.compaction_retry_at_ms
    env.clock.advance(state.compaction_retry_at_ms - env.clock.wall_ms())
    assert rlm.compact_partition("t", 0) is None
    assert state.compaction_errors == 2  # tried again after the backoff, backing off longer
    damaged.write_bytes(bytes(data[:70]) + bytes([data[70] ^ 0xFF]) + bytes(data[71:]))  # repaired
    env.clock.advance(state.compaction_retry_at_ms - env.clock.wall_ms())
    result = rlm.compact_partition("t", 0)
    assert result is not None and result.segments_written >= 1
    assert (state.compaction_runs, state.compaction_retry_at_ms) == (1, None)
    assert state.compaction_bytes_read > 0 and state.compaction_bytes_written > 0
    assert state.compaction_last_run_ms == env.clock.wall_ms()
    [persisted] = offline_status([env.root / "data"])
    assert persisted.compaction_runs == 1 and persisted.compaction_bytes_written == state.compaction_bytes_written
    assert read_remote(rlm, remote_end)


def test_the_remote_tombstone_horizon_survives_a_restart(env: Env) -> None:
    """A tombstone remote compaction kept (delete.retention.ms not passed) goes at its horizon after a
    restart too: the horizon is in the status file, not only in memory."""
    _, rlm, remote_end = setup_two_rounds(env)  # round 2 tombstones key 3
    assert rlm.compact_partition("t", 0) is not None
    [state] = list(rlm._partitions.values())
    horizon = state.remote_delete_horizon_ms
    assert horizon is not None and horizon > env.clock.wall_ms()
    assert b"key-03" in {k for _, k, _ in read_remote(rlm, remote_end)}
    rlm.close()
    restarted = env.rlm(local_rsm(env))
    restarted.sync_partitions()
    [state] = list(restarted._partitions.values())
    assert state.remote_delete_horizon_ms == horizon
    assert restarted.compact_partition("t", 0) is None  # clean, and the horizon has not passed
    env.clock.advance(horizon - env.clock.wall_ms())
    result = restarted.compact_partition("t", 0)  # due by the horizon alone
    assert result is not None and result.segments_written >= 1
    assert b"key-03" not in {k for _, k, _ in read_remote(restarted, remote_end)}
    assert state.remote_delete_horizon_ms is None


def test_tier_status_prints_the_remote_compaction_line(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.unit.tiered.test_tier_cmd import run

    _, rlm, _ = setup_two_rounds(env)
    result = rlm.compact_partition("t", 0)
    assert result is not None
    assert run(["tier", "status", "--data-dir", str(env.root / "data")]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("remote compaction t-0:")]
    assert lines == [f"remote compaction t-0: 1 runs, last at "
                     f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(env.clock.wall_ms() / 1000))}, "
                     f"{result.bytes_read} bytes read, {result.bytes_written} written, 0 failed"], lines


def test_the_lease_is_the_brokers_setting_and_the_job_touches_well_within_it(env: Env) -> None:
    """remote.log.compaction.job.lease.ms: an intent untouched for less than it stays (its uploads
    with it), one untouched for longer expires; the job touches every tenth of it, at most every 10 s."""
    ulog, rlm, _ = setup_two_rounds(env)
    ctx = dataclasses.replace(rlm._ctx, config=dataclasses.replace(rlm._ctx.config, compaction_job_lease_ms=5_000))
    requests = CompactionRequests(ctx, rlm.deleter, _requests(env, rlm).directory)
    work = _plan(env, rlm, ulog)
    intent = write_intent(requests.directory, work.job, planned_metadata(work))
    compact_partition(work, _spec(env))
    ids = [sid.id_str for sid in work.segment_ids]
    now_s = env.clock.wall_ms() / 1000
    os.utime(intent, (now_s - 4.5, now_s - 4.5))
    requests.poll()
    assert intent.exists() and _files_of(env, ids), "expired before the lease ran out"
    os.utime(intent, (now_s - 5.5, now_s - 5.5))
    requests.poll()
    assert not intent.exists() and not _files_of(env, ids)
    assert read_result(requests.directory, work.job) == [{"result": "expired"}]
    assert lease_refresh_s(5_000) == 0.5 and lease_refresh_s(120_000) == 10.0 and lease_refresh_s(10**9) == 10.0
    assert SETTINGS.lease_ms == 120_000  # the key's default when no config gives one
