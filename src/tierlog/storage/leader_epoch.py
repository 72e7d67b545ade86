"""The leader-epoch cache of a partition: which leader epoch began at which offset
(KAFKA-FACTS §2.15, Kafka's ``LeaderEpochFileCache``).

Entries are kept strictly increasing in both epoch and start offset. Every change is written to the
partition's ``leader-epoch-checkpoint``: assignments synchronously, so the file never misses an
entry; truncations optionally through a scheduler, because they run under the log lock (retention,
follower truncation) where an fsync would stall produce. A stale file after a crash is harmless:
loading truncates the cache again to the log's start and end.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from tierlog.scheduler import Scheduler

log = logging.getLogger(__name__)

#: OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH / UNDEFINED_EPOCH_OFFSET.
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@dataclass(frozen=True, order=True)
class EpochEntry:
    epoch: int
    start_offset: int


class LeaderEpochCheckpoint(Protocol):
    """Where the cache persists its entries; :class:`tierlog.storage.checkpoints.LeaderEpochCheckpointFile`
    is the real one."""

    def read(self) -> list[EpochEntry]: ...

    def write(self, entries: Iterable[EpochEntry], sync: bool = True) -> None: ...

    def write_if_dir_exists(self, entries: Iterable[EpochEntry]) -> bool: ...


class InMemoryLeaderEpochCheckpoint:
    """A checkpoint that keeps entries in memory: for a cache derived for one purpose (e.g. the
    epochs of a segment being uploaded to the remote tier) that must not touch the partition's file."""

    def __init__(self, entries: Iterable[EpochEntry] = ()) -> None:
        self._entries = list(entries)

    def read(self) -> list[EpochEntry]:
        return list(self._entries)

    def write(self, entries: Iterable[EpochEntry], sync: bool = True) -> None:
        self._entries = list(entries)

    def write_if_dir_exists(self, entries: Iterable[EpochEntry]) -> bool:
        self.write(entries)
        return True


def _truncate_from_start(epochs: list[EpochEntry], start_offset: int) -> list[EpochEntry]:
    """Drop leading entries starting at or before ``start_offset`` and re-add the last of them as
    starting at ``start_offset`` (its epoch still covers that offset). Returns the removed ones."""
    n = 0
    while n < len(epochs) and epochs[n].start_offset <= start_offset:
        n += 1
    removed = epochs[:n]
    if removed:
        del epochs[:n]
        epochs.insert(0, EpochEntry(removed[-1].epoch, start_offset))
    return removed


def _truncate_from_end(epochs: list[EpochEntry], end_offset: int) -> list[EpochEntry]:
    """Drop trailing entries starting at or after ``end_offset`` (a negative offset does nothing)."""
    if end_offset < 0 or not epochs or epochs[-1].start_offset < end_offset:
        return []
    n = len(epochs)
    while n > 0 and epochs[n - 1].start_offset >= end_offset:
        n -= 1
    removed = epochs[n:]
    del epochs[n:]
    return removed


class LeaderEpochFileCache:
    """Thread-safe cache of :class:`EpochEntry` backed by a checkpoint.

    ``scheduler``: if given, checkpoint writes after truncations run as one-shot tasks on it (as
    Kafka's ``truncateFrom*AsyncFlush``); otherwise they are written before the call returns.
    """

    def __init__(
        self, checkpoint: LeaderEpochCheckpoint, scheduler: Scheduler | None = None, name: str = ""
    ) -> None:
        self._checkpoint = checkpoint
        self._scheduler = scheduler
        self._name = name
        self._lock = threading.RLock()
        # Sorted by epoch and, by construction, by start offset too.
        self._epochs: list[EpochEntry] = []
        for entry in checkpoint.read():
            # The file may be stale or hand-edited: re-applying the assignment rules restores order.
            self._assign(entry)

    @property
    def checkpoint(self) -> LeaderEpochCheckpoint:
        return self._checkpoint

    # -- assignment ----------------------------------------------------------------------------

    def _update_needed(self, entry: EpochEntry) -> bool:
        if not self._epochs:
            return True
        latest = self._epochs[-1]
        return entry.epoch != latest.epoch or entry.start_offset < latest.start_offset

    def _assign(self, entry: EpochEntry) -> bool:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise ValueError(f"received invalid partition leader epoch entry {entry}")
        if not self._update_needed(entry):
            return False
        # Remove from the tail every entry that would break monotonicity with the new one.
        n = len(self._epochs)
        while n > 0 and (
            self._epochs[n - 1].epoch >= entry.epoch or self._epochs[n - 1].start_offset >= entry.start_offset
        ):
            n -= 1
        removed = self._epochs[n:]
        del self._epochs[n:]
        if len(removed) > 1 or (removed and removed[0].start_offset != entry.start_offset):
            # Only a non-trivial removal is surprising: the same start offset means no data was written.
            log.warning("%snew epoch entry %s caused truncation of conflicting entries %s", self._prefix(), entry, removed)
        self._epochs.append(entry)
        return True

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` begins at ``start_offset``. A no-op if ``epoch`` is already the latest
        and ``start_offset`` is not below its start; otherwise removes conflicting tail entries
        (epoch ≥ ``epoch`` or start ≥ ``start_offset``), appends, and writes the checkpoint."""
        with self._lock:
            if self._assign(EpochEntry(epoch, start_offset)):
                self._write(sync=True)

    def assign_all(self, entries: Iterable[EpochEntry]) -> None:
        with self._lock:
            entries = list(entries)
            for entry in entries:
                self._assign(entry)
            if entries:
                self._write(sync=True)

    # -- queries -------------------------------------------------------------------------------

    @property
    def non_empty(self) -> bool:
        with self._lock:
            return bool(self._epochs)

    @property
    def latest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._epochs[-1] if self._epochs else None

    @property
    def latest_epoch(self) -> int | None:
        # Read by every append, without this lock (~0.2 µs): the slice is one step under the GIL, so
        # it holds the list's last entry as it was at one moment, or nothing, never a torn read --
        # all the lock gave a reader, as the entry may change the moment it is released. (The
        # append holds its log's lock, which every writer of a log's cache holds too.)
        last = self._epochs[-1:]
        return last[0].epoch if last else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._epochs[0] if self._epochs else None

    def _index_of_epoch_above(self, epoch: int) -> int:
        return bisect.bisect_right([e.epoch for e in self._epochs], epoch)

    def previous_epoch(self, epoch: int | None = None) -> int | None:
        """The greatest epoch below ``epoch`` (default: below the latest one)."""
        with self._lock:
            if epoch is None:
                return self._epochs[-2].epoch if len(self._epochs) >= 2 else None
            i = bisect.bisect_left([e.epoch for e in self._epochs], epoch)
            return self._epochs[i - 1].epoch if i > 0 else None

    def previous_entry(self, epoch: int) -> EpochEntry | None:
        with self._lock:
            i = bisect.bisect_left([e.epoch for e in self._epochs], epoch)
            return self._epochs[i - 1] if i > 0 else None

    def next_epoch(self, epoch: int) -> int | None:
        """The smallest epoch above ``epoch``."""
        with self._lock:
            i = self._index_of_epoch_above(epoch)
            return self._epochs[i].epoch if i < len(self._epochs) else None

    def epoch_entry(self, epoch: int) -> EpochEntry | None:
        with self._lock:
            for entry in self._epochs:
                if entry.epoch == epoch:
                    return entry
            return None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: ``(epoch, end offset)`` for ``requested_epoch``.

        * undefined epoch, or no epoch ≥ the requested one is known → ``(-1, -1)``;
        * the latest epoch → ``(epoch, log_end_offset)``;
        * otherwise the end offset is the start of the first epoch above the requested one, paired
          with the greatest known epoch ≤ the requested one, or with the requested epoch itself when
          it is below every known epoch (the follower then truncates to the leader's earliest data).
        """
        with self._lock:
            if requested_epoch == UNDEFINED_EPOCH:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if self._epochs and self._epochs[-1].epoch == requested_epoch:
                return requested_epoch, log_end_offset
            i = self._index_of_epoch_above(requested_epoch)
            if i >= len(self._epochs):
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            higher = self._epochs[i]
            if i == 0:
                return requested_epoch, higher.start_offset
            return self._epochs[i - 1].epoch, higher.start_offset

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch the record at ``offset`` belongs to: the last entry starting at or before it."""
        with self._lock:
            i = bisect.bisect_right([e.start_offset for e in self._epochs], offset)
            return self._epochs[i - 1].epoch if i > 0 else None

    def entries(self) -> list[EpochEntry]:
        with self._lock:
            return list(self._epochs)

    def epoch_with_offsets(self) -> dict[int, int]:
        with self._lock:
            return {e.epoch: e.start_offset for e in self._epochs}

    def epoch_entries_in_range(self, start_offset: int, end_offset: int) -> list[EpochEntry]:
        """The entries covering offsets [``start_offset``, ``end_offset``): the cache truncated from the
        start (skipped if ``start_offset`` < 0) and from the end, without changing the cache. Used to
        describe a segment uploaded to the remote tier."""
        with self._lock:
            copy = list(self._epochs)
        if start_offset >= 0:
            _truncate_from_start(copy, start_offset)
        _truncate_from_end(copy, end_offset)
        return copy

    # -- truncation ----------------------------------------------------------------------------

    def truncate_from_end(self, end_offset: int) -> None:
        """Remove entries starting at or after ``end_offset`` (the log was truncated to it)."""
        with self._lock:
            removed = _truncate_from_end(self._epochs, end_offset)
            if removed:
                log.debug("%scleared %s after truncating to end offset %d", self._prefix(), removed, end_offset)
                self._write_after_truncation()

    def truncate_from_start(self, start_offset: int) -> None:
        """Remove entries that start at or before ``start_offset`` except that the last of them is kept
        with its start moved to ``start_offset`` (the log start moved there)."""
        with self._lock:
            before = list(self._epochs)
            removed = _truncate_from_start(self._epochs, start_offset)
            # Re-adding the same entry (start already there) changes nothing: skip the fsync.
            if removed and self._epochs != before:
                log.debug("%scleared %s after truncating to start offset %d", self._prefix(), removed, start_offset)
                self._write_after_truncation()

    def clear_and_flush(self) -> None:
        with self._lock:
            self._epochs.clear()
            self._write(sync=True)

    def clear(self) -> None:
        with self._lock:
            self._epochs.clear()

    def with_checkpoint(self, checkpoint: LeaderEpochCheckpoint) -> LeaderEpochFileCache:
        """A new cache with the same entries, backed by ``checkpoint`` (not written until it changes)."""
        with self._lock:
            clone = LeaderEpochFileCache(InMemoryLeaderEpochCheckpoint(self._epochs), self._scheduler, self._name)
        clone._checkpoint = checkpoint
        return clone

    # -- persistence ---------------------------------------------------------------------------

    def _write(self, sync: bool) -> None:
        self._checkpoint.write(list(self._epochs), sync)

    def _write_after_truncation(self) -> None:
        if self._scheduler is None:
            self._checkpoint.write_if_dir_exists(list(self._epochs))
            return
        # The task reads the entries when it runs, under the lock, so a later synchronous assign is
        # never overwritten by an older snapshot of the cache.
        self._scheduler.schedule(f"leader-epoch-cache-flush-{self._name}", self._flush_current, 0)

    def _flush_current(self) -> None:
        with self._lock:
            self._checkpoint.write_if_dir_exists(list(self._epochs))

    def _prefix(self) -> str:
        return f"[LeaderEpochCache {self._name}] " if self._name else ""

    def __repr__(self) -> str:
        return f"LeaderEpochFileCache({self._name!r}, {self._epochs})"
