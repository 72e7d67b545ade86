"""When to write a snapshot of the metadata image, writing it, and the snapshot metrics.

The generator keeps the two counters of seed 000 — bytes appended since the latest snapshot and the
append time of the oldest record not in it — and asks the pure :func:`should_snapshot` after each
commit and on a periodic check. Capturing an image for a snapshot resets both counters whatever the
reason (KIP-876); the image is immutable, so the file is written without holding up commands.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from tierlog.clock import Clock
from tierlog.config.settings import setting
from tierlog.metadata.image import MetadataImage
from tierlog.metadata.metadata_log import LoadResult, MetadataLog
from tierlog.metadata.policy import RetentionPlan, SnapshotReason, should_snapshot
from tierlog.metadata.snapshot import SnapshotFile

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SnapshotSettings:
    max_record_bytes_between_snapshots: int = setting("metadata.log.max.record.bytes.between.snapshots")
    #: 0 disables time-based snapshots.
    max_snapshot_interval_ms: int = setting("metadata.log.max.snapshot.interval.ms")
    max_retention_bytes: int = setting("metadata.max.retention.bytes")
    max_retention_ms: int = setting("metadata.max.retention.ms")


@dataclass
class SnapshotMetrics:
    """Plain counters for the metrics endpoint (Kafka's latest-snapshot-generated-bytes/-age-ms and
    a count per reason)."""

    latest_snapshot_size_bytes: int = 0
    latest_snapshot_end_offset: int = -1
    #: Wall-clock ms when the latest snapshot was written (its file's mtime after a restart); -1 if none.
    latest_snapshot_generated_ms: int = -1
    snapshots_generated: dict[SnapshotReason, int] = field(
        default_factory=lambda: {reason: 0 for reason in SnapshotReason}
    )
    snapshot_failures: int = 0
    last_snapshot_write_duration_ms: float = 0.0
    bytes_since_last_snapshot: int = 0
    #: Append time of the oldest record not in the latest snapshot (seed 000's interval runs from it).
    oldest_unsnapshotted_append_time_ms: int | None = None
    #: Why each snapshot this process wrote was taken, by its end offset (the web console shows it).
    reason_by_end_offset: dict[int, SnapshotReason] = field(default_factory=dict)

    def latest_snapshot_age_ms(self, now_ms: int) -> int:
        return -1 if self.latest_snapshot_generated_ms < 0 else max(0, now_ms - self.latest_snapshot_generated_ms)


@dataclass(frozen=True)
class PendingSnapshot:
    image: MetadataImage
    reason: SnapshotReason
    #: The counters the capture reset, restored if the write fails so the trigger fires again.
    bytes_since: int
    oldest_append_time_ms: int | None
    metadata_version_changed: bool


class SnapshotGenerator:
    def __init__(self, mlog: MetadataLog, clock: Clock, load: LoadResult) -> None:
        self._log = mlog
        self._clock = clock
        self._state = threading.Lock()
        #: Serializes snapshot writes and retention, which both change the set of snapshot files.
        self.write_lock = threading.Lock()
        self.bytes_since_last_snapshot = load.tail_bytes
        self.oldest_unsnapshotted_append_time_ms = load.oldest_tail_append_time_ms
        self.metadata_version_changed = load.metadata_version_changed
        self.metrics = SnapshotMetrics(bytes_since_last_snapshot=load.tail_bytes,
                                       oldest_unsnapshotted_append_time_ms=load.oldest_tail_append_time_ms)
        latest = mlog.latest_snapshot()
        if latest is not None:
            self.metrics.latest_snapshot_size_bytes = latest.size_bytes
            self.metrics.latest_snapshot_end_offset = latest.snapshot_id.end_offset
            self.metrics.latest_snapshot_generated_ms = int(latest.path.stat().st_mtime * 1000)

    # -- counters -----------------------------------------------------------------------------------

    def on_commit(self, size_bytes: int, append_time_ms: int, metadata_version_changed: bool) -> None:
        with self._state:
            self.bytes_since_last_snapshot += size_bytes
            if self.oldest_unsnapshotted_append_time_ms is None or append_time_ms < self.oldest_unsnapshotted_append_time_ms:
                self.oldest_unsnapshotted_append_time_ms = append_time_ms
            self.metadata_version_changed = self.metadata_version_changed or metadata_version_changed
            self.metrics.bytes_since_last_snapshot = self.bytes_since_last_snapshot
            self.metrics.oldest_unsnapshotted_append_time_ms = self.oldest_unsnapshotted_append_time_ms

    def check(self, now_ms: int, settings: SnapshotSettings) -> SnapshotReason | None:
        with self._state:
            return should_snapshot(
                self.bytes_since_last_snapshot, self.oldest_unsnapshotted_append_time_ms, now_ms,
                self.metadata_version_changed, settings.max_record_bytes_between_snapshots,
                settings.max_snapshot_interval_ms,
            )

    @property
    def has_unsnapshotted_records(self) -> bool:
        return self.bytes_since_last_snapshot > 0

    def capture(self, image: MetadataImage, reason: SnapshotReason) -> PendingSnapshot:
        """Take ``image`` (which must hold every committed record) for a snapshot: both counters and
        the version flag start over from here."""
        with self._state:
            pending = PendingSnapshot(image, reason, self.bytes_since_last_snapshot,
                                      self.oldest_unsnapshotted_append_time_ms, self.metadata_version_changed)
            self.bytes_since_last_snapshot = 0
            self.oldest_unsnapshotted_append_time_ms = None
            self.metadata_version_changed = False
            self.metrics.bytes_since_last_snapshot = 0
            self.metrics.oldest_unsnapshotted_append_time_ms = None
            return pending

    def _restore(self, pending: PendingSnapshot) -> None:
        with self._state:
            self.bytes_since_last_snapshot += pending.bytes_since
            oldest = pending.oldest_append_time_ms
            if oldest is not None and (self.oldest_unsnapshotted_append_time_ms is None
                                       or oldest < self.oldest_unsnapshotted_append_time_ms):
                self.oldest_unsnapshotted_append_time_ms = oldest
            self.metadata_version_changed = self.metadata_version_changed or pending.metadata_version_changed
            self.metrics.bytes_since_last_snapshot = self.bytes_since_last_snapshot
            self.metrics.oldest_unsnapshotted_append_time_ms = self.oldest_unsnapshotted_append_time_ms

    # -- writing ------------------------------------------------------------------------------------

    def emit(self, pending: PendingSnapshot, settings: SnapshotSettings) -> SnapshotFile | None:
        """Write the captured image, then apply retention. A failure is logged and counted, and the
        counters come back so the next check retries."""
        with self.write_lock:
            started_ns = self._clock.monotonic_ns()
            try:
                snap = self._log.create_snapshot(pending.image, self._clock.wall_ms())
            except Exception:
                log.exception("writing the metadata snapshot at offset %d failed",
                              pending.image.provenance.end_offset)
                self.metrics.snapshot_failures += 1
                self._restore(pending)
                return None
            m = self.metrics
            m.last_snapshot_write_duration_ms = (self._clock.monotonic_ns() - started_ns) / 1e6
            m.latest_snapshot_size_bytes = snap.size_bytes
            m.latest_snapshot_end_offset = snap.snapshot_id.end_offset
            m.latest_snapshot_generated_ms = self._clock.wall_ms()
            m.snapshots_generated[pending.reason] += 1
            m.reason_by_end_offset[snap.snapshot_id.end_offset] = pending.reason
            if len(m.reason_by_end_offset) > 1000:  # a long-running broker: keep the recent ones
                del m.reason_by_end_offset[min(m.reason_by_end_offset)]
            log.info("metadata snapshot written file=%s end_offset=%d size_bytes=%d reason=%s duration_ms=%.1f",
                     snap.path.name, snap.snapshot_id.end_offset, snap.size_bytes, pending.reason.value,
                     m.last_snapshot_write_duration_ms)
            self._clean_locked(settings)
            return snap

    def clean(self, settings: SnapshotSettings) -> RetentionPlan:
        with self.write_lock:
            return self._clean_locked(settings)

    def _clean_locked(self, settings: SnapshotSettings) -> RetentionPlan:
        try:
            return self._log.clean(self._clock.wall_ms(), settings.max_retention_bytes, settings.max_retention_ms)
        except Exception:
            log.exception("metadata snapshot retention failed")
            return RetentionPlan((), None)
