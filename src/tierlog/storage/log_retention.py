"""Retention applied to a partition's log (a mixin of :class:`~tierlog.storage.log.UnifiedLog`):
what a pass would delete (the decision itself is :func:`tierlog.storage.retention.deletable_segments`,
a pure function), the pass that deletes it and advances the log start offset, and the deletion of
segments (renamed ``.deleted`` now, removed after ``file.delete.delay.ms``). Everything runs under
the log's lock; the attributes are the log's own, initialised by UnifiedLog.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from tierlog.clock import Clock
from tierlog.config.log_config import LogConfig
from tierlog.scheduler import Scheduler
from tierlog.storage import files
from tierlog.storage.leader_epoch import LeaderEpochFileCache
from tierlog.storage.producer_state import ProducerStateManager
from tierlog.storage.refusal import refuses_partition
from tierlog.storage.retention import Deletion, RetentionPolicy, SegmentInfo, deletable_segments
from tierlog.storage.segment import LogSegment
from tierlog.storage.segments import LogSegments

log = logging.getLogger("tierlog.storage.log")


class LogRetentionMixin:
    dir: Path
    topic: str
    partition: int
    config: LogConfig
    segments: LogSegments
    lock: threading.RLock
    clock: Clock
    scheduler: Scheduler | None
    log_start_offset: int
    _log_end_offset: int
    producer_state: ProducerStateManager
    leader_epoch_cache: LeaderEpochFileCache
    highest_offset_in_remote_storage: int
    remote_log_enabled: bool
    offline_reason: str | None

    if TYPE_CHECKING:  # UnifiedLog's, used here
        @property
        def high_watermark(self) -> int: ...
        @property
        def size_bytes(self) -> int: ...
        def roll(self, expected_next_offset: int | None = None) -> LogSegment: ...
        def _ensure_checked(self, segment: LogSegment) -> None: ...
        def refuse(self, reason: str) -> None: ...

    def delete_segments_async(self, segments: list[LogSegment]) -> list[Path]:
        """Remove segments from the log, rename their files to ``.deleted`` now and delete them after
        ``file.delete.delay.ms`` (LocalLog#deleteSegmentFiles). Returns the renamed paths."""
        renamed: list[Path] = []
        with self.lock:
            for seg in segments:
                self.segments.remove(seg.base_offset)
                seg.change_file_suffixes("", files.DELETED_SUFFIX)
                renamed.extend(p for p in seg.all_paths() if p.exists())
                snap = self.producer_state.remove_and_mark_snapshot_for_deletion(seg.base_offset)
                if snap is not None:
                    renamed.append(snap)
        delay = self.config.file_delete_delay_ms

        def delete_now() -> None:
            for seg in segments:
                seg.delete_files()
            for p in renamed:
                p.unlink(missing_ok=True)

        if self.scheduler is not None and delay > 0:
            self.scheduler.schedule(f"delete-segments-{self.topic}-{self.partition}", delete_now, delay)
        else:
            delete_now()
        return renamed

    # -- retention ------------------------------------------------------------------------------------

    def segment_infos(self) -> Iterator[SegmentInfo]:
        """Oldest first, lazily: retention usually stops after a few segments."""
        bases = self.segments.base_offsets
        for i, base in enumerate(bases):
            seg = self.segments.get(base)
            self._ensure_checked(seg)
            upper = bases[i + 1] if i + 1 < len(bases) else self._log_end_offset
            yield SegmentInfo(base, upper, seg.size_bytes, seg.largest_timestamp, i == len(bases) - 1)

    def retention_policy(self, *, local: bool = False) -> RetentionPolicy:
        return RetentionPolicy.from_config(
            self.config, log_start_offset=self.log_start_offset, high_watermark=self.high_watermark, local=local,
            highest_offset_in_remote=self.highest_offset_in_remote_storage if local else None,
        )

    @refuses_partition
    def retention_plan(self, now_ms: int, policy: RetentionPolicy | None = None) -> list[Deletion]:
        """What retention would delete now (the dry run uses this directly)."""
        with self.lock:
            if self.offline_reason is not None:
                return []  # its data is in question: nothing goes until the operator decides
            policy = policy if policy is not None else self.retention_policy(local=self.remote_log_enabled)
            total = self.size_bytes if policy.retention_bytes >= 0 else None
            return deletable_segments(self.segment_infos(), policy, now_ms, total)

    @refuses_partition
    def delete_old_segments(self, now_ms: int | None = None, policy: RetentionPolicy | None = None) -> list[Deletion]:
        """One retention pass: delete the planned segments and advance the log start offset."""
        now_ms = self.clock.wall_ms() if now_ms is None else now_ms
        with self.lock:
            plan = self.retention_plan(now_ms, policy)
            if not plan:
                return []
            if len(plan) == len(self.segments):
                # Every segment goes, the active one included: roll first so appends continue at the
                # right offset in a fresh segment (UnifiedLog#deleteSegments).
                self.roll()
            doomed = [self.segments.get(d.segment.base_offset) for d in plan]
            next_base = self.segments.next_base_offset(doomed[-1].base_offset)
            assert next_base is not None
            if next_base > self.log_start_offset:
                self.log_start_offset = next_base
                self.leader_epoch_cache.truncate_from_start(next_base)
                self.producer_state.on_log_start_offset_incremented(next_base)
            for d in plan:
                log.info("segment deleted topic=%s partition=%d base_offset=%d reason=%s largest_timestamp=%d "
                         "size_bytes=%d log_start_offset=%d", self.topic, self.partition, d.segment.base_offset,
                         d.reason.value, d.segment.largest_timestamp_ms, d.segment.size_bytes,
                         self.log_start_offset)
            self.delete_segments_async(doomed)
            return plan
