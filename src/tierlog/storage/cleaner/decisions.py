"""The cleaner's decisions as pure functions of plain values and ``now_ms`` (Kafka's
LogCleanerManager.cleanableOffsets, maxCompactionDelay, grabFilthiestCompactedLog and
Cleaner.groupSegmentsBySize)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class SegmentView:
    """What the decisions need of one segment."""

    base_offset: int
    #: The next segment's base offset, or the log end offset for the last one.
    end_offset: int
    size_bytes: int
    #: The largest record timestamp (or the file's mtime when no record has one).
    largest_timestamp_ms: int
    #: The first batch's timestamp, or None when unknown (the largest timestamp stands in).
    first_batch_timestamp_ms: int | None = None
    offset_index_bytes: int = 0
    time_index_bytes: int = 0


@dataclass(frozen=True)
class CleanableRange:
    first_dirty_offset: int
    first_uncleanable_offset: int
    #: Why the checkpoint was not used as it is, or None.
    reset_reason: str | None = None


def first_dirty_offset(checkpoint: int | None, log_start_offset: int, log_end_offset: int) -> tuple[int, str | None]:
    """Where cleaning resumes: the checkpoint, unless it is missing or outside the log."""
    if checkpoint is None:
        return log_start_offset, None
    if checkpoint < log_start_offset:
        return log_start_offset, f"checkpoint {checkpoint} is below the log start offset {log_start_offset}"
    if checkpoint > log_end_offset:
        return log_start_offset, f"checkpoint {checkpoint} is past the log end offset {log_end_offset}"
    return checkpoint, None


def cleanable_range(segments: Sequence[SegmentView], *, checkpoint: int | None, log_start_offset: int,
                    log_end_offset: int, last_stable_offset: int, min_compaction_lag_ms: int,
                    now_ms: int) -> CleanableRange:
    """[first dirty, first uncleanable): never the active segment (the last one), never at or past the
    last stable offset, never a segment whose newest record is younger than ``min.compaction.lag.ms``."""
    dirty, reason = first_dirty_offset(checkpoint, log_start_offset, log_end_offset)
    active_base = segments[-1].base_offset if segments else log_end_offset
    bound = min(last_stable_offset, active_base)
    if min_compaction_lag_ms > 0:
        for s in segments[:-1]:
            if s.end_offset <= dirty:
                continue
            if s.largest_timestamp_ms > now_ms - min_compaction_lag_ms:
                bound = min(bound, s.base_offset)
                break
    return CleanableRange(dirty, max(bound, dirty) if bound < dirty else bound, reason)


def bytes_in(segments: Sequence[SegmentView], start: int, end: int) -> int:
    """Bytes of the segments that hold offsets in [start, end) (whole segments, as Kafka counts)."""
    return sum(s.size_bytes for s in segments if s.base_offset < end and s.end_offset > start and start < end)


@dataclass(frozen=True)
class DirtyStats:
    clean_bytes: int
    dirty_bytes: int

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def dirty_stats(segments: Sequence[SegmentView], rng: CleanableRange, log_start_offset: int) -> DirtyStats:
    """Kafka's LogToClean: clean bytes below the first dirty offset, cleanable bytes up to the first
    uncleanable offset; the ratio is cleanable / (clean + cleanable)."""
    clean = sum(s.size_bytes for s in segments if s.end_offset <= rng.first_dirty_offset
                and s.end_offset > log_start_offset)
    dirty = sum(s.size_bytes for s in segments
                if s.base_offset >= rng.first_dirty_offset and s.end_offset <= rng.first_uncleanable_offset
                and s.base_offset < rng.first_uncleanable_offset)
    return DirtyStats(clean, dirty)


def max_compaction_delay_ms(segments: Sequence[SegmentView], rng: CleanableRange, max_compaction_lag_ms: int,
                            now_ms: int) -> int:
    """How long past ``max.compaction.lag.ms`` the oldest dirty record is (0 when not): a positive
    delay forces the log to be cleaned whatever its ratio."""
    if max_compaction_lag_ms <= 0:
        return 0
    for s in segments[:-1]:
        if s.end_offset <= rng.first_dirty_offset:
            continue
        if s.base_offset >= rng.first_uncleanable_offset:
            break
        ts = s.first_batch_timestamp_ms if s.first_batch_timestamp_ms is not None and s.first_batch_timestamp_ms >= 0 \
            else s.largest_timestamp_ms
        if ts < 0:
            return 0
        return max(0, now_ms - ts - max_compaction_lag_ms)
    return 0


@dataclass(frozen=True)
class Candidate:
    """A compacted log as the selection sees it."""

    name: str
    stats: DirtyStats
    min_cleanable_ratio: float
    compaction_delay_ms: int = 0
    #: The earliest delete horizon of a batch in the log (tombstones to drop), or None.
    delete_horizon_ms: int | None = None

    @property
    def needs_cleaning_now(self) -> bool:
        return self.compaction_delay_ms > 0 and self.stats.dirty_bytes > 0


def select_filthiest(candidates: Sequence[Candidate], now_ms: int) -> Candidate | None:
    """The log to clean next: among the logs forced by ``max.compaction.lag.ms`` or dirtier than their
    ``min.cleanable.dirty.ratio``, the one with the highest ratio; if none, a log whose tombstones'
    delete horizon has passed (so they are dropped without new writes)."""
    eligible = [c for c in candidates if c.needs_cleaning_now
                or (c.stats.dirty_bytes > 0 and c.stats.ratio >= c.min_cleanable_ratio)]
    if eligible:
        return max(eligible, key=lambda c: (c.stats.ratio, c.compaction_delay_ms))
    expired = [c for c in candidates if c.delete_horizon_ms is not None and c.delete_horizon_ms <= now_ms]
    return min(expired, key=lambda c: c.delete_horizon_ms or 0) if expired else None


def group_segments(segments: Sequence[SegmentView], max_size_bytes: int, max_index_bytes: int) -> list[list[int]]:
    """Consecutive segments grouped so each group, cleaned, fits one segment: summed sizes within
    ``segment.bytes``, summed index sizes within ``segment.index.bytes`` and offsets within an int
    of the first base (Cleaner.groupSegmentsBySize). Returns base offsets per group."""
    groups: list[list[int]] = []
    i = 0
    while i < len(segments):
        first = segments[i]
        group = [first.base_offset]
        size, oi, ti = first.size_bytes, first.offset_index_bytes, first.time_index_bytes
        i += 1
        while i < len(segments):
            s = segments[i]
            if (size + s.size_bytes > max_size_bytes or oi + s.offset_index_bytes > max_index_bytes
                    or ti + s.time_index_bytes > max_index_bytes or s.end_offset - 1 - first.base_offset > INT32_MAX):
                break
            group.append(s.base_offset)
            size += s.size_bytes
            oi += s.offset_index_bytes
            ti += s.time_index_bytes
            i += 1
        groups.append(group)
    return groups


def tombstone_retained(delete_horizon_ms: int | None, now_ms: int) -> bool:
    """A tombstone (or a marker with no data left) stays until the delete horizon its batch was given
    at its first cleaning has passed; a batch never cleaned has none yet."""
    return delete_horizon_ms is None or now_ms < delete_horizon_ms


def offset_map_slots(dedupe_buffer_bytes: int, threads: int, load_factor: float, entry_bytes: int = 24) -> int:
    """How many keys one thread's map holds: the dedupe buffer split among the threads, 24 bytes per
    entry (16-byte digest + 8-byte offset), filled to the load factor (Kafka's SkimpyOffsetMap)."""
    per_thread = dedupe_buffer_bytes // max(1, threads)
    return max(1, int(per_thread // entry_bytes * load_factor))
