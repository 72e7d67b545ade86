"""Retention: time, size, log start offset and the timestamp floor (seed 004)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.storage import OpenLog, batch
from tierlog.config import LogConfig
from tierlog.storage.retention import DeletionReason, RetentionPolicy, SegmentInfo, deletable_segments
from tierlog.testing import ManualClock, ManualScheduler


def seg(base: int, upper: int, ts: int, size: int = 100, last: bool = False) -> SegmentInfo:
    return SegmentInfo(base, upper, size, ts, last)


SEGS = [seg(0, 10, 1000), seg(10, 20, 2000), seg(20, 30, 1500), seg(30, 40, 3000), seg(40, 45, 4000, last=True)]


def reasons(policy: RetentionPolicy, now_ms: int = 10_000, segs: list[SegmentInfo] = SEGS) -> list[tuple[int, str]]:
    return [(d.segment.base_offset, d.reason.value) for d in deletable_segments(segs, policy, now_ms)]


def test_floor_alone_stops_at_the_first_segment_that_does_not_qualify() -> None:
    # Segment 20 has an older largest timestamp than segment 10, but 10 does not qualify for
    # floor 1800, so deletion stops there: no hole is punched at segment 20.
    assert reasons(RetentionPolicy(min_timestamp_ms=1800)) == [(0, "timestamp_floor")]
    assert reasons(RetentionPolicy(min_timestamp_ms=2001)) == [
        (0, "timestamp_floor"), (10, "timestamp_floor"), (20, "timestamp_floor")]
    assert reasons(RetentionPolicy(min_timestamp_ms=0)) == []  # 0 = off


def test_time_alone() -> None:
    assert reasons(RetentionPolicy(retention_ms=8500), now_ms=10_000) == [(0, "time")]
    assert reasons(RetentionPolicy(retention_ms=-1), now_ms=10**12) == []


def test_size_alone() -> None:
    # 500 bytes total, limit 250: delete while the excess covers a whole segment (100, 100, then 50 left).
    assert reasons(RetentionPolicy(retention_bytes=250)) == [(0, "size"), (10, "size")]


def test_log_start_offset_alone_even_without_delete_policy() -> None:
    assert reasons(RetentionPolicy(log_start_offset=25, delete_enabled=False)) == [(0, "log_start_offset"), (10, "log_start_offset")]


def test_combined_policies_and_high_watermark() -> None:
    policy = RetentionPolicy(retention_ms=8500, min_timestamp_ms=1800, retention_bytes=50, log_start_offset=5)
    # Segment 20 is below the floor as well as over the size: the floor is reported first.
    assert reasons(policy) == [(0, "timestamp_floor"), (10, "size"), (20, "timestamp_floor"), (30, "size")]
    capped = RetentionPolicy(retention_bytes=0, high_watermark=25)
    assert reasons(capped) == [(0, "size"), (10, "size")]


def test_tiering_blocks_local_deletion_until_uploaded() -> None:
    assert reasons(RetentionPolicy(retention_bytes=0, highest_offset_in_remote=19)) == [(0, "size"), (10, "size")]


def fill(log: object, n: int, ts0: int, step: int = 1) -> None:
    from tierlog.storage.log import UnifiedLog

    assert isinstance(log, UnifiedLog)
    for i in range(n):
        log.append_as_leader(batch(1, value_size=200, ts=ts0 + i * step))


def test_floor_on_a_real_log_and_dynamic_change(open_log: OpenLog, clock: ManualClock, tmp_path: Path) -> None:
    sched = ManualScheduler(clock)
    log = open_log(LogConfig(segment_bytes=1000, file_delete_delay_ms=1000, retention_ms=-1), scheduler=sched)
    fill(log, 20, ts0=1000, step=100)  # 4 batches of ~270 bytes per segment
    bases = log.segments.base_offsets
    assert len(bases) >= 4
    assert log.delete_old_segments() == []  # the floor is off by default
    log.update_config(LogConfig(segment_bytes=1000, file_delete_delay_ms=1000, retention_ms=-1, retention_min_timestamp_ms=1000 + 100 * bases[2]))
    plan = log.delete_old_segments()
    assert [d.segment.base_offset for d in plan] == bases[:2]
    assert {d.reason for d in plan} == {DeletionReason.TIMESTAMP_FLOOR}
    assert log.log_start_offset == bases[2]
    # Asynchronous deletion: renamed now, removed after file.delete.delay.ms.
    d = tmp_path / "t-0"
    assert (d / f"{bases[0]:020d}.log.deleted").exists()
    clock.advance(1000)
    assert not (d / f"{bases[0]:020d}.log.deleted").exists()
    assert not list(d.glob("*.deleted"))


def test_log_append_time_topic_uses_the_append_time(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log(LogConfig(segment_bytes=1000, message_timestamp_type="LogAppendTime", file_delete_delay_ms=0))
    fill(log, 8, ts0=1)  # CreateTime 1.. would all be below any floor; LogAppendTime is the clock
    clock.advance(10_000)
    fill(log, 8, ts0=1)
    floor = clock.wall_ms() - 5_000
    log.update_config(LogConfig(segment_bytes=1000, message_timestamp_type="LogAppendTime",
                                file_delete_delay_ms=0, retention_min_timestamp_ms=floor))
    plan = log.delete_old_segments()
    assert plan and all(d.segment.largest_timestamp_ms < floor for d in plan)
    assert log.log_start_offset <= 8


def test_everything_qualifies_rolls_first(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log(LogConfig(segment_bytes=100_000, retention_ms=1000, file_delete_delay_ms=0))
    fill(log, 5, ts0=clock.wall_ms())
    assert log.num_segments == 1
    clock.advance(5000)
    plan = log.delete_old_segments()
    assert len(plan) == 1 and plan[0].reason == DeletionReason.TIME
    assert log.num_segments == 1 and log.active_segment.base_offset == 5
    assert log.log_start_offset == 5
    assert log.append_as_leader(batch(1)).first_offset == 5


def test_delete_records_then_retention(open_log: OpenLog) -> None:
    log = open_log(LogConfig(segment_bytes=1000, file_delete_delay_ms=0, retention_ms=-1))
    fill(log, 20, ts0=1000)
    bases = log.segments.base_offsets
    log.maybe_increment_log_start_offset(bases[2] + 1, "delete records")
    assert log.log_start_offset == bases[2] + 1
    plan = log.delete_old_segments()
    assert [d.segment.base_offset for d in plan] == bases[:2]
    assert {d.reason for d in plan} == {DeletionReason.LOG_START_OFFSET}
    assert log.log_start_offset == bases[2] + 1  # never moves backwards


def test_crash_between_rename_and_removal(open_log: OpenLog, clock: ManualClock, tmp_path: Path) -> None:
    sched = ManualScheduler(clock)
    cfg = LogConfig(segment_bytes=1000, file_delete_delay_ms=60_000, retention_bytes=1500, retention_ms=-1)
    log = open_log(cfg, scheduler=sched)
    fill(log, 20, ts0=1000)
    plan = log.delete_old_segments()
    assert plan
    start = log.log_start_offset
    d = tmp_path / "t-0"
    assert list(d.glob("*.deleted"))
    # The process dies before the delayed removal: on restart nothing deleted is readable and
    # the leftovers are gone.
    log2 = open_log(cfg, clean=False, log_start_offset=start)
    assert not list(d.glob("*.deleted"))
    assert log2.log_start_offset == start
    assert log2.segments.base_offsets[0] == start


def test_dry_run_lists_without_deleting(open_log: OpenLog) -> None:
    log = open_log(LogConfig(segment_bytes=1000))
    fill(log, 20, ts0=1000)
    n = log.num_segments
    plan = log.retention_plan(10**13, RetentionPolicy(retention_ms=1, high_watermark=log.high_watermark))
    assert len(plan) == n  # everything qualifies, including the active segment
    assert log.num_segments == n and log.log_start_offset == 0


def test_retention_counters_in_log_manager(tmp_path: Path) -> None:
    from tierlog.storage.log_manager import LogManager

    clock = ManualClock()
    mgr = LogManager([tmp_path], lambda t: LogConfig(segment_bytes=1000, retention_bytes=1000, file_delete_delay_ms=0, retention_ms=-1),
                     clock=clock)
    mgr.startup_logs()
    log = mgr.get_or_create_log("t", 0)
    fill(log, 20, ts0=1000)
    assert mgr.cleanup_logs() > 0
    assert mgr.deletions["size"] > 0


@pytest.mark.parametrize("key", ["log.retention.min.timestamp", "retention.min.timestamp"])
def test_floor_config_key_and_alias(key: str) -> None:
    assert LogConfig.from_props({key: "1234"}).retention_min_timestamp_ms == 1234
