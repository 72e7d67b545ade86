"""Pure decisions about metadata snapshots: when to take one (seed 000, KIP-876) and which old
snapshots and log segments retention removes (KafkaMetadataLog#cleanSnapshots).

Every time and duration here is in milliseconds and says so in its name: Kafka once compared a
nanosecond reading with a millisecond limit and took a snapshot every 3.6 ms (KAFKA-14531).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass


class SnapshotReason(enum.Enum):
    """Why a snapshot was taken; the metrics count snapshots per reason."""

    METADATA_VERSION_CHANGED = "metadata_version_changed"
    MAX_BYTES = "max_bytes"
    MAX_INTERVAL = "max_interval"
    #: An operator or a caller asked for one (``tierlog metadata snapshot``).
    REQUESTED = "requested"


def should_snapshot(
    bytes_since_last_snapshot: int,
    oldest_unsnapshotted_append_time_ms: int | None,
    now_ms: int,
    metadata_version_changed: bool,
    max_bytes: int,
    max_interval_ms: int,
) -> SnapshotReason | None:
    """Whether the records not in the latest snapshot call for a new one, and why.

    * Nothing new (no bytes since the latest snapshot) never calls for one, whatever the clock says.
    * A metadata.version change calls for one at once (KIP-778; the seed keeps it, current Kafka
      dropped it in 3.5).
    * ``max_bytes`` (``metadata.log.max.record.bytes.between.snapshots``): the bytes appended since
      the latest snapshot reached it.
    * ``max_interval_ms`` (``metadata.log.max.snapshot.interval.ms``, 0 = off): seed 000's rule, the
      KIP's wording rather than current Kafka's "time since the last snapshot": a record not in the
      latest snapshot was appended at least the interval ago.

    The caller resets both counters whenever any snapshot is taken, whatever its reason.
    """
    if bytes_since_last_snapshot <= 0:
        return None
    if metadata_version_changed:
        return SnapshotReason.METADATA_VERSION_CHANGED
    if bytes_since_last_snapshot >= max_bytes:
        return SnapshotReason.MAX_BYTES
    if (
        max_interval_ms > 0
        and oldest_unsnapshotted_append_time_ms is not None
        and now_ms - oldest_unsnapshotted_append_time_ms >= max_interval_ms
    ):
        return SnapshotReason.MAX_INTERVAL
    return None


@dataclass(frozen=True)
class SnapshotSummary:
    """What retention needs to know of one snapshot."""

    end_offset: int
    size_bytes: int
    #: The header's LastContainedLogTimestamp.
    last_contained_timestamp_ms: int


@dataclass(frozen=True)
class SegmentSummary:
    base_offset: int
    #: The next segment's base offset, or the log end offset for the last segment.
    upper_bound_offset: int
    size_bytes: int


@dataclass(frozen=True)
class RetentionPlan:
    #: Snapshots to delete, oldest first (always every snapshot below ``new_log_start_offset``).
    delete_snapshots: tuple[SnapshotSummary, ...]
    #: The offset of the oldest kept snapshot, which becomes the log start offset; None = keep all.
    new_log_start_offset: int | None


def _log_size_from(segments: Sequence[SegmentSummary], start_offset: int) -> int:
    """The log's size once every segment wholly below ``start_offset`` is deleted."""
    return sum(s.size_bytes for s in segments if s.upper_bound_offset > start_offset)


def plan_snapshot_retention(
    snapshots: Sequence[SnapshotSummary],
    segments: Sequence[SegmentSummary],
    now_ms: int,
    max_retention_bytes: int,
    max_retention_ms: int,
) -> RetentionPlan:
    """Which snapshots ``metadata.max.retention.bytes``/``.ms`` delete (``snapshots`` oldest first).

    Kafka's walk (KAFKA-FACTS §6.5): first by size — while the log plus all snapshots exceed the
    limit, drop the oldest snapshot and everything before the next one — then by time — while the
    oldest snapshot's last contained record is older than the limit, drop it. The newest snapshot is
    always kept, so both limits are soft. A negative limit disables its rule.
    """
    kept = 0  # index of the oldest kept snapshot
    last = len(snapshots) - 1
    if max_retention_bytes >= 0 and last > 0:
        snapshot_bytes = sum(s.size_bytes for s in snapshots)
        log_bytes = _log_size_from(segments, -1)
        while kept < last and log_bytes + snapshot_bytes > max_retention_bytes:
            snapshot_bytes -= snapshots[kept].size_bytes
            kept += 1
            log_bytes = _log_size_from(segments, snapshots[kept].end_offset)
    if max_retention_ms >= 0:
        while kept < last and now_ms - snapshots[kept].last_contained_timestamp_ms > max_retention_ms:
            kept += 1
    if kept == 0:
        return RetentionPlan((), None)
    return RetentionPlan(tuple(snapshots[:kept]), snapshots[kept].end_offset)
