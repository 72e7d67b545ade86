"""Rebuilding a partition's leader-epoch cache from its log when ``leader-epoch-checkpoint`` is
damaged or disagrees with the log.

Every batch header carries the partition leader epoch it was written under, and epochs never go
down along a log, so the cache (each epoch and the offset it began at) can be read back from the
batches. Epochs change rarely, so the first batch of a segment is read only where a bisection over
the segments needs it, and only the segments in which the epoch changes are scanned header by
header: a log of many segments under one epoch costs a few header reads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from tierlog.errors import CorruptRecordError
from tierlog.records.header import BatchHeader
from tierlog.storage.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    CorruptCheckpointError,
    LeaderEpochCheckpointFile,
)
from tierlog.storage.leader_epoch import LeaderEpochFileCache
from tierlog.storage.segment import LogSegment
from tierlog.storage.segments import LogSegments

log = logging.getLogger(__name__)


def open_leader_epoch_cache(directory: Path, partition_text: str) -> tuple[LeaderEpochFileCache, bool]:
    """The partition's cache from its checkpoint, and whether the file was unreadable. An unreadable
    file is reported and replaced by an empty one; the caller rebuilds the cache from the log."""
    path = directory / LEADER_EPOCH_CHECKPOINT
    try:
        return LeaderEpochFileCache(LeaderEpochCheckpointFile(path)), False
    except CorruptCheckpointError as e:
        log.error("leader epoch checkpoint unreadable %s: %s; rebuilding it from the batches of the log",
                  partition_text, e)
        LeaderEpochCheckpointFile(path).write([])
        return LeaderEpochFileCache(LeaderEpochCheckpointFile(path)), True


def _first_header(segment: LogSegment) -> BatchHeader | None:
    try:
        return next(segment.log.iter_headers_from(0), None)
    except (CorruptRecordError, OSError):
        return None


def last_header(segment: LogSegment) -> BatchHeader | None:
    """The last whole batch header of a segment, from its last offset index entry on."""
    _, position = segment.offset_index.last_entry()
    last: BatchHeader | None = None
    try:
        for h in segment.log.iter_headers_from(position):
            last = h
    except CorruptRecordError:
        pass
    return last


def cache_disagrees(cache: LeaderEpochFileCache, segments: LogSegments, log_start_offset: int,
                    log_end_offset: int) -> str | None:
    """Why the cache cannot describe the log, judged from what loading read anyway (the active
    segment's last batch): empty for a log with epochs, not covering the log start, or a latest
    epoch other than the last batch's. None when it may well be right."""
    if log_end_offset <= log_start_offset:
        return None
    active = segments.last
    last = None if active is None or active.size_bytes == 0 else last_header(active)
    if last is None or last.partition_leader_epoch < 0:
        return None
    entries = cache.entries()
    if not entries:
        return "it is empty but the log's batches carry leader epochs"
    if entries[0].start_offset > log_start_offset:
        return (f"its first epoch starts at offset {entries[0].start_offset}, after the log start offset "
                f"{log_start_offset}")
    if entries[-1].epoch != last.partition_leader_epoch:
        return (f"its latest epoch is {entries[-1].epoch} but the last batch (offset {last.base_offset}) was "
                f"written in epoch {last.partition_leader_epoch}")
    return None


def rebuild_leader_epochs(cache: LeaderEpochFileCache, segments: LogSegments) -> int:
    """Replace the cache's entries with the epochs read from the batches; returns how many
    segments were scanned in full."""
    cache.clear_and_flush()
    bases = segments.base_offsets
    if not bases:
        return 0
    first_epochs: dict[int, int | None] = {}

    def first_epoch(i: int) -> int | None:
        if i not in first_epochs:
            h = _first_header(segments.get(bases[i]))
            first_epochs[i] = None if h is None else h.partition_leader_epoch
        return first_epochs[i]

    scanned = 0

    def assign(h: BatchHeader) -> None:
        latest = cache.latest_epoch
        if h.partition_leader_epoch >= 0 and (latest is None or h.partition_leader_epoch > latest):
            cache.assign(h.partition_leader_epoch, h.base_offset)

    def scan(i: int) -> None:
        nonlocal scanned
        scanned += 1
        try:
            for h in segments.get(bases[i]).log.iter_headers_from(0):
                assign(h)
        except CorruptRecordError:
            pass  # damaged data ends what can be read of this segment

    def changed(lo: int, hi: int) -> None:
        scan(lo)
        h = _first_header(segments.get(bases[hi]))
        if h is not None:
            assign(h)

    def visit(lo: int, hi: int, on_change: Callable[[int, int], None]) -> None:
        """Segments lo..hi (left to right, so epochs are assigned in order): if their first batches
        share an epoch (epochs never go down) nothing changes from lo's first batch to hi's; otherwise
        bisect down to the neighbours between which it does."""
        a, b = first_epoch(lo), first_epoch(hi)
        if a is not None and a == b:
            return
        if hi - lo <= 1:
            on_change(lo, hi)
            return
        mid = (lo + hi) // 2
        visit(lo, mid, on_change)
        visit(mid, hi, on_change)

    first = _first_header(segments.get(bases[0]))
    if first is not None:
        assign(first)
    visit(0, len(bases) - 1, changed)
    scan(len(bases) - 1)
    return scanned


__all__ = ["cache_disagrees", "last_header", "open_leader_epoch_cache", "rebuild_leader_epochs"]
