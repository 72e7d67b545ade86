"""What the tiered layer may change on a partition's log, as the log's own methods (a mixin of
:class:`~tierlog.storage.log.UnifiedLog`): the remote end it marks after each finished copy,
whether it tiers the log at all, a rebuilt producer snapshot it installs, and taking the partition
offline and back. Each change happens under the log's lock, so the tiered layer never writes the
log's fields or files itself.

Why these are the only ones: local retention of a tiered log deletes only segments at or below the
remote end (``highest_offset_in_remote_storage``), so that offset only grows and only after the
remote metadata says COPY_SEGMENT_FINISHED; the producer state lists its snapshot files, so a file
moved in without a refresh would be invisible to it.
"""

from __future__ import annotations

import bisect
import shutil
import threading
from pathlib import Path

from tierlog.storage.producer_snapshot import snapshot_path
from tierlog.storage.producer_state import ProducerStateManager
from tierlog.storage.segments import LogSegments


class LogTieringMixin:
    """State the remote log manager sets on a log. The attributes are initialised by UnifiedLog."""

    dir: Path
    lock: threading.RLock
    producer_state: ProducerStateManager
    segments: LogSegments
    #: Highest offset the remote tier holds (COPY_SEGMENT_FINISHED); -1: nothing.
    highest_offset_in_remote_storage: int
    #: Set while the remote log manager tiers this log: retention then applies the local.retention.*
    #: policy, which never deletes a segment that is not in the remote tier.
    remote_log_enabled: bool
    #: The last offset of the segment the copy task is uploading (-1: none): the log cleaner neither
    #: rewrites it nor swaps it out meanwhile (a compacted tiered log, issue 18).
    copying_up_to: int
    #: Why the partition is offline (e.g. its local log and its remote copy disagree), or None.
    #: An offline log neither appends nor serves reads nor deletes anything: KAFKA_STORAGE_ERROR.
    offline_reason: str | None

    # -- remote offsets -------------------------------------------------------------------------

    @property
    def remote_end_offset(self) -> int:
        """The highest offset the remote tier holds for this log (-1: nothing)."""
        return self.highest_offset_in_remote_storage

    def mark_remote_end(self, offset: int) -> int:
        """The remote tier holds everything up to ``offset``: the remote end only grows. Returns it."""
        with self.lock:
            if offset > self.highest_offset_in_remote_storage:
                self.highest_offset_in_remote_storage = offset
            return self.highest_offset_in_remote_storage

    @property
    def cleaner_floor(self) -> int:
        """The log cleaner rewrites only segments whose base offset is above this: segments in the
        remote tier, or being copied there, stay as uploaded (-1 when the log is not tiered)."""
        with self.lock:
            if not self.remote_log_enabled:
                return -1
            return max(self.highest_offset_in_remote_storage, self.copying_up_to)

    def begin_copy(self, base_offset: int, next_base_offset: int) -> bool:
        """The copy task is about to upload the segment [base, next base): False when the segments
        changed since it listed them (the cleaner swapped that one), else it is marked until
        :meth:`end_copy` so the cleaner leaves it alone."""
        with self.lock:
            bases = self.segments.base_offsets
            i = bisect.bisect_left(bases, base_offset)
            if i + 1 >= len(bases) or bases[i] != base_offset or bases[i + 1] != next_base_offset:
                return False
            self.copying_up_to = next_base_offset - 1
            return True

    def end_copy(self) -> None:
        with self.lock:
            self.copying_up_to = -1

    # -- tiering state --------------------------------------------------------------------------

    def enable_tiering(self, remote_end_offset: int = -1) -> None:
        """The remote log manager tiers this log from now on, the remote tier holding up to
        ``remote_end_offset``."""
        with self.lock:
            self.mark_remote_end(remote_end_offset)
            self.remote_log_enabled = True

    def disable_tiering(self) -> None:
        with self.lock:
            self.remote_log_enabled = False

    # -- producer snapshots ---------------------------------------------------------------------

    def install_producer_snapshot(self, built: Path, offset: int) -> Path:
        """Move a producer snapshot written elsewhere (rebuilt for a segment's end, seed 001) in as
        ``<offset>.snapshot`` and have the producer state list it; under the lock, so the producer
        state never lists a half-written file. Returns the installed path."""
        target = snapshot_path(self.dir, offset)
        with self.lock:
            shutil.move(str(built), str(target))
            self.producer_state.refresh_snapshots()
        return target

    # -- offline / online -----------------------------------------------------------------------

    def take_offline(self, reason: str) -> None:
        with self.lock:
            self.offline_reason = reason

    def bring_online(self) -> None:
        with self.lock:
            self.offline_reason = None
