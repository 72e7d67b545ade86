"""Which segments retention deletes: time, size, log start offset and the timestamp floor (seed 004).

:func:`deletable_segments` is a pure function of the segments' sizes and timestamps, the policy and
``now_ms``; the log applies its answer and the dry run prints it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from tierlog.config.log_config import LogConfig


class DeletionReason(enum.Enum):
    LOG_START_OFFSET = "log_start_offset"
    TIMESTAMP_FLOOR = "timestamp_floor"
    TIME = "time"
    SIZE = "size"


@dataclass(frozen=True)
class SegmentInfo:
    base_offset: int
    #: The next segment's base offset, or the log end offset for the last segment.
    upper_bound_offset: int
    size_bytes: int
    largest_timestamp_ms: int
    is_last: bool

    @property
    def is_empty(self) -> bool:
        return self.size_bytes == 0


@dataclass(frozen=True)
class RetentionPolicy:
    retention_ms: int = -1
    retention_bytes: int = -1
    #: Seed 004: delete leading segments whose largest timestamp is below this; 0 = off.
    min_timestamp_ms: int = 0
    log_start_offset: int = 0
    high_watermark: int = 2**63 - 1
    delete_enabled: bool = True
    #: With tiering: a segment is deletable locally only once it is in the remote tier, i.e. its
    #: last offset ≤ this (None = no tiering constraint).
    highest_offset_in_remote: int | None = None

    @classmethod
    def from_config(cls, config: LogConfig, *, log_start_offset: int, high_watermark: int,
                    local: bool = False, highest_offset_in_remote: int | None = None) -> RetentionPolicy:
        """The policy of a topic; ``local`` uses the local.retention.* values (tiered topics)."""
        return cls(
            retention_ms=config.effective_local_retention_ms if local else config.retention_ms,
            retention_bytes=config.effective_local_retention_bytes if local else config.retention_bytes,
            min_timestamp_ms=config.retention_min_timestamp_ms,
            log_start_offset=log_start_offset,
            high_watermark=high_watermark,
            # A tiered compacted log's local copies of segments in the remote tier go by the
            # local.retention.* values like any tiered log's (issue 18): the remote tier keeps them.
            delete_enabled=config.delete_enabled or local,
            highest_offset_in_remote=highest_offset_in_remote,
        )


@dataclass(frozen=True)
class Deletion:
    segment: SegmentInfo
    reason: DeletionReason


def reason_for(segment: SegmentInfo, policy: RetentionPolicy, now_ms: int, size_excess_bytes: int) -> DeletionReason | None:
    """The first rule a segment breaches, or None. ``size_excess_bytes`` is how far the log is still
    over retention.bytes before this segment is deleted."""
    if segment.upper_bound_offset <= policy.log_start_offset:
        return DeletionReason.LOG_START_OFFSET
    if not policy.delete_enabled:
        return None
    if policy.min_timestamp_ms > 0 and segment.largest_timestamp_ms < policy.min_timestamp_ms:
        return DeletionReason.TIMESTAMP_FLOOR
    if policy.retention_ms >= 0 and now_ms - segment.largest_timestamp_ms > policy.retention_ms:
        return DeletionReason.TIME
    if policy.retention_bytes >= 0 and size_excess_bytes - segment.size_bytes >= 0:
        return DeletionReason.SIZE
    return None


def deletable_segments(
    segments: Iterable[SegmentInfo], policy: RetentionPolicy, now_ms: int, total_size_bytes: int | None = None
) -> list[Deletion]:
    """Oldest first; stop at the first segment that does not qualify, so out-of-order timestamps
    never punch a hole in the log. Nothing at or beyond the high watermark is deleted, nor an empty
    last segment, nor (with tiering) a segment not yet in the remote tier."""
    segs = iter(segments)
    size_excess = 0
    if policy.retention_bytes >= 0:
        if total_size_bytes is None:
            materialized = list(segs)
            total_size_bytes = sum(s.size_bytes for s in materialized)
            segs = iter(materialized)
        size_excess = total_size_bytes - policy.retention_bytes
    out: list[Deletion] = []
    for seg in segs:
        if policy.high_watermark < seg.upper_bound_offset:
            break
        if seg.is_last and seg.is_empty:
            break
        if (policy.highest_offset_in_remote is not None
                and seg.upper_bound_offset - 1 > policy.highest_offset_in_remote
                and policy.log_start_offset < seg.upper_bound_offset):
            break
        reason = reason_for(seg, policy, now_ms, size_excess)
        if reason is None:
            break
        size_excess -= seg.size_bytes
        out.append(Deletion(seg, reason))
    return out
