"""The pure snapshot decision (seed 000 / KIP-876) and snapshot retention planning."""

from __future__ import annotations

from tierlog.metadata.policy import (
    SegmentSummary,
    SnapshotReason,
    SnapshotSummary,
    plan_snapshot_retention,
    should_snapshot,
)

HOUR_MS = 3_600_000
MAX_BYTES = 20 * 1024 * 1024
NOW = 1_700_000_000_000


def decide(bytes_since: int, oldest: int | None, now: int = NOW, mv: bool = False,
           max_bytes: int = MAX_BYTES, interval_ms: int = HOUR_MS) -> SnapshotReason | None:
    return should_snapshot(bytes_since, oldest, now, mv, max_bytes, interval_ms)


def test_time_trigger_fires_once_an_unsnapshotted_record_is_older_than_the_interval() -> None:
    appended = NOW - HOUR_MS
    assert decide(100, appended + 1) is None
    assert decide(100, appended) is SnapshotReason.MAX_INTERVAL
    assert decide(100, appended - 10_000) is SnapshotReason.MAX_INTERVAL


def test_time_trigger_never_fires_when_everything_is_in_a_snapshot() -> None:
    assert decide(0, None, now=NOW + 100 * HOUR_MS) is None
    # Nothing new means no snapshot, whatever else the caller passes.
    assert decide(0, NOW - 100 * HOUR_MS) is None
    assert decide(0, None, mv=True) is None
    assert decide(0, None, max_bytes=0) is None


def test_zero_interval_disables_the_time_trigger() -> None:
    assert decide(100, NOW - 1000 * HOUR_MS, interval_ms=0) is None


def test_milliseconds_not_nanoseconds() -> None:
    # KAFKA-14531: comparing a ns reading with the ms limit fired a snapshot every 3.6 ms.
    assert decide(100, NOW - 4) is None
    assert decide(100, NOW - 3_600) is None
    assert decide(100, NOW - HOUR_MS + 1) is None


def test_byte_trigger() -> None:
    assert decide(MAX_BYTES - 1, NOW) is None
    assert decide(MAX_BYTES, NOW) is SnapshotReason.MAX_BYTES
    assert decide(MAX_BYTES * 3, NOW) is SnapshotReason.MAX_BYTES


def test_metadata_version_change_trigger_wins() -> None:
    assert decide(10, NOW, mv=True) is SnapshotReason.METADATA_VERSION_CHANGED
    assert decide(MAX_BYTES, NOW - 2 * HOUR_MS, mv=True) is SnapshotReason.METADATA_VERSION_CHANGED


def test_bytes_win_over_time() -> None:
    assert decide(MAX_BYTES, NOW - 2 * HOUR_MS) is SnapshotReason.MAX_BYTES


def test_clock_going_backwards_does_not_trigger() -> None:
    assert decide(10, NOW + HOUR_MS) is None


# ------------------------------------------------------------------------------------------ retention


def snaps(*items: tuple[int, int, int]) -> list[SnapshotSummary]:
    return [SnapshotSummary(end, size, ts) for end, size, ts in items]


def test_retention_keeps_the_newest_snapshot_even_over_the_limits() -> None:
    only = snaps((100, 10_000, 0))
    plan = plan_snapshot_retention(only, [SegmentSummary(0, 100, 10_000)], NOW, 1, 1)
    assert plan.delete_snapshots == () and plan.new_log_start_offset is None
    two = snaps((100, 10_000, 0), (200, 10_000, 0))
    plan = plan_snapshot_retention(two, [SegmentSummary(0, 200, 10_000)], NOW, 1, 1)
    assert [s.end_offset for s in plan.delete_snapshots] == [100]
    assert plan.new_log_start_offset == 200


def test_retention_by_size_walks_oldest_first() -> None:
    # 6 snapshots of 100 bytes, one 100-byte segment per 100 offsets (Kafka's testDeleteSnapshots shape).
    s = snaps(*((100 * i, 100, NOW) for i in range(1, 7)))
    segments = [SegmentSummary(100 * i, 100 * (i + 1), 100) for i in range(0, 6)]
    plan = plan_snapshot_retention(s, segments, NOW, 1024, -1)
    # total 600 (log) + 600 (snapshots) = 1200 > 1024; dropping the first leaves 500 + 500.
    assert [x.end_offset for x in plan.delete_snapshots] == [100]
    assert plan.new_log_start_offset == 200
    plan = plan_snapshot_retention(s, segments, NOW, 0, -1)
    assert plan.new_log_start_offset == 600 and len(plan.delete_snapshots) == 5


def test_retention_by_time() -> None:
    s = snaps((100, 1, NOW - 10_000), (200, 1, NOW - 5_000), (300, 1, NOW - 10))
    plan = plan_snapshot_retention(s, [], NOW, -1, 6_000)
    assert [x.end_offset for x in plan.delete_snapshots] == [100]
    plan = plan_snapshot_retention(s, [], NOW, -1, 1)
    assert [x.end_offset for x in plan.delete_snapshots] == [100, 200]
    plan = plan_snapshot_retention(s, [], NOW, -1, -1)
    assert plan.delete_snapshots == ()


def test_retention_within_limits_deletes_nothing() -> None:
    s = snaps((100, 10, NOW), (200, 10, NOW))
    assert plan_snapshot_retention(s, [SegmentSummary(0, 200, 10)], NOW, 1000, 1000).new_log_start_offset is None
