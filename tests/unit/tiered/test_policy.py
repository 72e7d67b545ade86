"""The remote log manager's pure decisions: candidate segments, retry backoff, remote retention."""

from __future__ import annotations

from tierlog.ids import random_uuid
from tierlog.tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tierlog.tiered.policy import (
    DeleteRetryPolicy,
    RemoteDeletionReason,
    RemoteRetentionPolicy,
    candidate_segments,
    next_delete_attempt_ms,
    remote_deletable_segments,
    retry_delay_ms,
)

TIP = TopicIdPartition(b"\x05" * 16, "t", 0)
R = RemoteDeletionReason


def test_active_segment_is_never_copied() -> None:
    # Kafka's testCandidateLogSegmentsSkipsActiveSegment: segments 5, 10, 15 (active), LSO 20.
    assert candidate_segments([5, 10, 15], 20, -1, 0) == [(5, 10), (10, 15)]


def test_segments_past_the_last_stable_offset_wait() -> None:
    # testCandidateLogSegmentsSkipsSegmentsAfterLastStableOffset: 5, 10, 15, 20 (active), LSO 15.
    assert candidate_segments([5, 10, 15, 20], 15, -1, 0) == [(5, 10), (10, 15)]
    assert candidate_segments([5, 10, 15, 20], 14, -1, 0) == [(5, 10)]
    assert candidate_segments([5, 10, 15, 20], 0, -1, 0) == []


def test_copy_resumes_after_the_highest_copied_offset() -> None:
    assert candidate_segments([0, 10, 20, 30], 40, 9, 0) == [(10, 20), (20, 30)]
    assert candidate_segments([0, 10, 20, 30], 40, 29, 0) == []
    # the log start offset inside a segment: that segment still goes whole
    assert candidate_segments([0, 10, 20, 30], 40, -1, 15) == [(10, 20), (20, 30)]


def test_retry_backoff_doubles_up_to_the_cap() -> None:
    assert retry_delay_ms(0, 30_000, 300_000) == 30_000
    assert [retry_delay_ms(n, 1000, 5000) for n in range(1, 6)] == [1000, 2000, 4000, 5000, 5000]
    assert retry_delay_ms(100, 1000, 5000) == 5000
    assert retry_delay_ms(3, 10_000, 1000) == 10_000  # never below the interval


def seg(start: int, end: int, ts: int, size: int = 100) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(TIP, random_uuid()), start, end, ts, 1, 0, size,
                                    ((0, start),), RemoteLogSegmentState.COPY_SEGMENT_FINISHED)


SEGS = [seg(0, 9, 1000), seg(10, 19, 2000), seg(20, 29, 3000), seg(30, 39, 4000)]


def reasons(plan: list[tuple[RemoteLogSegmentMetadata, RemoteDeletionReason]]) -> list[tuple[int, R]]:
    return [(m.start_offset, r) for m, r in plan]


def test_time_retention_uses_kafkas_remote_rule() -> None:
    policy = RemoteRetentionPolicy(retention_ms=1000)
    assert reasons(remote_deletable_segments(SEGS, policy, 3000, 0)) == [(0, R.TIME), (10, R.TIME)]


def test_size_retention_counts_local_only_bytes() -> None:
    policy = RemoteRetentionPolicy(retention_bytes=250)
    assert reasons(remote_deletable_segments(SEGS, policy, 0, 0)) == [(0, R.SIZE)]
    assert reasons(remote_deletable_segments(SEGS, policy, 0, 100)) == [(0, R.SIZE), (10, R.SIZE)]


def test_timestamp_floor_and_log_start_offset() -> None:
    assert reasons(remote_deletable_segments(SEGS, RemoteRetentionPolicy(min_timestamp_ms=2500), 0, 0)) == [
        (0, R.TIMESTAMP_FLOOR), (10, R.TIMESTAMP_FLOOR)]
    assert reasons(remote_deletable_segments(SEGS, RemoteRetentionPolicy(log_start_offset=25), 0, 0)) == [
        (0, R.LOG_START_OFFSET), (10, R.LOG_START_OFFSET)]
    compact = RemoteRetentionPolicy(retention_ms=0, log_start_offset=10, delete_enabled=False)
    assert reasons(remote_deletable_segments(SEGS, compact, 10**9, 0)) == [(0, R.LOG_START_OFFSET)]


def test_walk_stops_at_the_first_segment_kept() -> None:
    out_of_order = [seg(0, 9, 1000), seg(10, 19, 9000), seg(20, 29, 1000)]
    assert reasons(remote_deletable_segments(out_of_order, RemoteRetentionPolicy(retention_ms=1000), 5000, 0)) == [
        (0, R.TIME)]


def test_failed_delete_retries_back_off_to_a_cap_and_end_after_max_attempts() -> None:
    policy = DeleteRetryPolicy(max_attempts=6, initial_delay_ms=1000, max_delay_ms=5000)
    now = 1_000_000
    assert [next_delete_attempt_ms(n, now, policy) for n in range(1, 7)] == [
        now + 1000, now + 2000, now + 4000, now + 5000, now + 5000, None]
    assert next_delete_attempt_ms(9, now, policy) is None
    assert next_delete_attempt_ms(1, now, DeleteRetryPolicy(max_attempts=1)) is None  # the first was the only one
