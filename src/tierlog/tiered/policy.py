"""Pure decisions of the remote log manager: what to copy, when to retry, what remote retention
deletes. No clock, no files: the caller passes ``now_ms`` and plain numbers."""

from __future__ import annotations

import enum
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from tierlog.config.log_config import LogConfig
from tierlog.tiered.api import RemoteLogSegmentMetadata


def candidate_segments(base_offsets: Sequence[int], last_stable_offset: int, highest_copied_offset: int,
                       log_start_offset: int) -> list[tuple[int, int]]:
    """(base offset, next base offset) of each segment to copy now, oldest first (Kafka's
    ``candidateLogSegments``, KAFKA-FACTS §5.6): from the segment holding
    max(copied + 1, log start), every segment whose *next* segment starts at or below the last stable
    offset, so the active segment is never copied and a copied segment holds only committed,
    decided data."""
    if last_stable_offset <= 0 or highest_copied_offset >= last_stable_offset:
        return []
    from_offset = max(highest_copied_offset + 1, log_start_offset)
    out: list[tuple[int, int]] = []
    for base, next_base in itertools.pairwise(base_offsets):
        if next_base <= from_offset:
            continue  # wholly below what is already copied (or below the log start)
        if next_base > last_stable_offset:
            break
        out.append((base, next_base))
    return out


def retry_delay_ms(consecutive_failures: int, interval_ms: int, max_delay_ms: int) -> int:
    """Delay before the next copy attempt: the task interval after a success, doubling per
    consecutive failure up to ``max_delay_ms`` (never below the interval), so a store that is down is
    not hammered and one that comes back is used again within ``max_delay_ms``."""
    if consecutive_failures <= 0:
        return interval_ms
    cap = max(interval_ms, max_delay_ms)
    return min(cap, interval_ms << min(consecutive_failures - 1, 30))


@dataclass(frozen=True)
class DeleteRetryPolicy:
    """How a failed remote segment delete is retried (every DELETE_SEGMENT_STARTED record the
    expiration pass finds): ``max_attempts`` attempts in all, the first included, the waits between
    them starting at ``initial_delay_ms`` and doubling up to ``max_delay_ms``."""

    max_attempts: int = 10
    initial_delay_ms: int = 30000
    max_delay_ms: int = 3600000


def next_delete_attempt_ms(failed_attempts: int, now_ms: int, policy: DeleteRetryPolicy) -> int | None:
    """When to try a remote delete again after its ``failed_attempts``-th failed attempt, made at
    ``now_ms``; None once the attempts are used up (the broker gives up and reports the leftover)."""
    if failed_attempts >= policy.max_attempts:
        return None
    return now_ms + retry_delay_ms(failed_attempts, policy.initial_delay_ms, policy.max_delay_ms)


class RemoteDeletionReason(enum.Enum):
    LOG_START_OFFSET = "log_start_offset"
    TIMESTAMP_FLOOR = "timestamp_floor"
    TIME = "time"
    SIZE = "size"


@dataclass(frozen=True)
class RemoteRetentionPolicy:
    """Total retention (retention.*, the timestamp floor of seed 004, and the log start offset) as it
    applies to the remote tier."""

    retention_ms: int = -1
    retention_bytes: int = -1
    min_timestamp_ms: int = 0
    log_start_offset: int = 0
    delete_enabled: bool = True

    @classmethod
    def from_config(cls, config: LogConfig, log_start_offset: int) -> RemoteRetentionPolicy:
        return cls(retention_ms=config.retention_ms, retention_bytes=config.retention_bytes,
                   min_timestamp_ms=config.retention_min_timestamp_ms, log_start_offset=log_start_offset,
                   delete_enabled=config.delete_enabled)


def remote_deletable_segments(
    segments: Sequence[RemoteLogSegmentMetadata],
    policy: RemoteRetentionPolicy,
    now_ms: int,
    local_only_size_bytes: int,
) -> list[tuple[RemoteLogSegmentMetadata, RemoteDeletionReason]]:
    """The leading COPY_SEGMENT_FINISHED segments (``segments`` sorted by start offset) that total
    retention deletes, with the first rule each breaches; the walk stops at the first segment that
    breaches none, as local retention does, so the remote tier never gets a hole.

    Size counts the whole log (KAFKA-FACTS §5.8): the remote segments plus the local bytes not yet
    tiered (``local_only_size_bytes``). Time is Kafka's remote rule: max timestamp ≤ now − retention.ms.
    """
    excess = 0
    if policy.retention_bytes >= 0:
        excess = local_only_size_bytes + sum(s.segment_size_in_bytes for s in segments) - policy.retention_bytes
    out: list[tuple[RemoteLogSegmentMetadata, RemoteDeletionReason]] = []
    for seg in segments:
        reason: RemoteDeletionReason | None = None
        if seg.end_offset < policy.log_start_offset:
            reason = RemoteDeletionReason.LOG_START_OFFSET
        elif not policy.delete_enabled:
            reason = None
        elif policy.min_timestamp_ms > 0 and seg.max_timestamp_ms < policy.min_timestamp_ms:
            reason = RemoteDeletionReason.TIMESTAMP_FLOOR
        elif policy.retention_ms >= 0 and seg.max_timestamp_ms <= now_ms - policy.retention_ms:
            reason = RemoteDeletionReason.TIME
        elif policy.retention_bytes >= 0 and excess - seg.segment_size_in_bytes >= 0:
            reason = RemoteDeletionReason.SIZE
        if reason is None:
            break
        excess -= seg.segment_size_in_bytes
        out.append((seg, reason))
    return out
