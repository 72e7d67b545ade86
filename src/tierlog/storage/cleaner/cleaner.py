"""Cleaning one log (Kafka's Cleaner.doClean): build the key → offset map over the dirty range, then
rewrite the log from its start up to where the map ends, group by group, each group swapped in under
the log's lock (the only moment appends and fetches wait)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tierlog.clock import SYSTEM_CLOCK, Clock, monotonic_s
from tierlog.records.header import BatchHeader
from tierlog.storage import files
from tierlog.storage.cleaner.batches import (
    FilterContext,
    LastRecord,
    batch_keys,
    delete_horizon_of,
    filter_batch,
    read_batches,
)
from tierlog.storage.cleaner.decisions import SegmentView, group_segments
from tierlog.storage.cleaner.fast_path import BatchTable, Drops, FilterWalk, MapWalk, map_batch
from tierlog.storage.cleaner.offset_map import AnyOffsetMap, DictOffsetMap, OffsetMap, key_digest
from tierlog.storage.cleaner.swap import SwapHook, sync_dir
from tierlog.storage.cleaner.txn_tracker import TxnTracker
from tierlog.storage.log import UnifiedLog, segment_settings
from tierlog.storage.segment import LogSegment

log = logging.getLogger(__name__)


@dataclass
class CleanResult:
    """What one cleaning did (Kafka's CleanerStats)."""

    first_dirty_offset: int
    end_offset: int
    bytes_read: int = 0
    bytes_written: int = 0
    map_bytes_read: int = 0
    map_records: int = 0
    records_read: int = 0
    records_written: int = 0
    groups: int = 0
    elapsed_s: float = 0.0
    #: The earliest delete horizon left in the cleaned log (tombstones to drop later), or None.
    next_delete_horizon_ms: int | None = None
    aborted: bool = False
    messages: list[str] = field(default_factory=list)


class Throttle:
    """``log.cleaner.io.max.bytes.per.second`` over the cleaner's reads and writes: waits (on the
    stop event, so shutdown is not delayed) whenever the bytes so far are ahead of the rate."""

    def __init__(self, bytes_per_second: float, wait: Callable[[float], object], now_s: Callable[[], float]) -> None:
        self.rate = bytes_per_second
        self._wait = wait
        self._now_s = now_s
        self._start = now_s()
        self._bytes = 0

    def add(self, n: int) -> None:
        if self.rate >= 1e300:
            return
        self._bytes += n
        ahead_s = self._bytes / self.rate - (self._now_s() - self._start)
        if ahead_s > 0.01:
            self._wait(ahead_s)


def segment_views(ulog: UnifiedLog) -> list[SegmentView]:
    """The decisions' view of a log, without opening segments nobody touched: sizes and index sizes
    from a stat, timestamps only of segments the caller asks about (see :func:`timestamps_needed`)."""
    with ulog.lock:
        bases = ulog.segments.base_offsets
        end = ulog.log_end_offset
        materialized = {b: ulog.segments.get(b) for b in bases if ulog.segments.is_materialized(b)}
    views = []
    for i, base in enumerate(bases):
        upper = bases[i + 1] if i + 1 < len(bases) else end
        seg = materialized.get(base)
        try:
            size = seg.size_bytes if seg is not None else files.log_file(ulog.dir, base).stat().st_size
            oi = files.index_file(ulog.dir, base).stat().st_size if i + 1 < len(bases) else 0
            ti = files.time_index_file(ulog.dir, base).stat().st_size if i + 1 < len(bases) else 0
        except FileNotFoundError:
            size, oi, ti = 0, 0, 0
        views.append(SegmentView(base, upper, size, -1, None, oi, ti))
    return views


def with_timestamps(ulog: UnifiedLog, views: list[SegmentView], start: int, end: int, *,
                    min_compaction_lag_ms: int = 0, now_ms: int = 0) -> list[SegmentView]:
    """``views`` with the largest and first timestamps filled in, in offset order from the first
    segment overlapping [start, end), for what the compaction lags need: only the first dirty segment
    without a min lag, else up to the first segment too young to clean (nothing after it can be
    cleaned). The rest stay unread: a lazily loaded segment (seed 003) is not opened, and none has its
    indexes checked -- the largest timestamp checks the one time index entry it reads against the
    batch that entry names, and the first timestamp is read from the first batch itself."""
    out = []
    filling = True
    for v in views[:-1]:
        if filling and v.end_offset > start and v.base_offset < end:
            with ulog.lock:
                seg = ulog.segments.get(v.base_offset) if v.base_offset in ulog.segments.base_offsets else None
            if seg is not None:
                v = SegmentView(v.base_offset, v.end_offset, v.size_bytes, seg.largest_timestamp,
                                seg.first_batch_timestamp, v.offset_index_bytes, v.time_index_bytes)
                filling = min_compaction_lag_ms > 0 and v.largest_timestamp_ms <= now_ms - min_compaction_lag_ms
        out.append(v)
    out.extend(views[-1:])
    return out


class Cleaner:
    def __init__(self, offset_map: AnyOffsetMap, *, io_buffer_bytes: int = 524288, clock: Clock = SYSTEM_CLOCK,
                 throttle: Throttle | None = None, swap_hook: SwapHook | None = None,
                 progress: Callable[[str], None] | None = None) -> None:
        self.offset_map = offset_map
        self.io_buffer_bytes = io_buffer_bytes
        self.clock = clock
        self.throttle = throttle
        self.swap_hook = swap_hook
        self.progress = progress
        #: Set to stop a cleaning between groups (shutdown, the log deleted).
        self.stop_requested: Callable[[], bool] = lambda: False
        #: Whether a progress line is due now (the manager rate-limits them); asked once a batch.
        self.progress_due: Callable[[], bool] = lambda: True
        #: The last map pass's batches (fast_path.BatchTable), for the rewrite to drop the superseded
        #: ones unread: at most one I/O buffer's worth of rows (a row a batch).
        self.batch_table_rows = max(1024, io_buffer_bytes // BatchTable.ROW_BYTES)
        self.batch_table = BatchTable(0)

    def _progress_now(self) -> bool:
        return self.progress is not None and self.progress_due()

    def _say(self, line: str) -> None:
        if self.progress is not None:
            self.progress(line)

    def _read(self, n: int) -> None:
        if self.throttle is not None:
            self.throttle.add(n)

    def _hook(self, step: str) -> None:
        if self.swap_hook is not None:
            self.swap_hook(step)

    # -- the map ----------------------------------------------------------------------------------

    def build_offset_map(self, ulog: UnifiedLog, start: int, end: int, result: CleanResult) -> int:
        """Put every key of the non-aborted data batches in [start, end) into the map; stop before the
        first batch that would not fit. Returns the offset the map covers up to (exclusive)."""
        m = self.offset_map
        m.clear()
        self.batch_table = BatchTable(self.batch_table_rows)
        txn = TxnTracker(ulog.collect_aborted_transactions(start, end))
        with ulog.lock:
            bases = [b for b in ulog.segments.base_offsets if b < end]
        covered = start
        for i, base in enumerate(bases):
            upper = bases[i + 1] if i + 1 < len(bases) else end
            if upper <= start:
                continue
            seg = self._segment(ulog, base)
            # Plain batches go through the compiled walk a chunk at a time; the rest come out here.
            walk = MapWalk(m, start, end, self.batch_table) if isinstance(m, OffsetMap) else None

            def on_read(n: int, walk: MapWalk | None = walk) -> None:
                result.map_bytes_read += n
                self._read(n)
                if self._progress_now():  # once a chunk: the walk yields no batch to report at
                    at = max(covered, walk.covered) if walk is not None else covered  # noqa: B023 - the latest, on purpose
                    self._say(f"cleaning {ulog.topic}-{ulog.partition}: offset map at offset {at} of "
                              f"[{start}, {end}), {len(m)} keys, {result.map_bytes_read} bytes read")

            for h in read_batches(seg.log, self.io_buffer_bytes, on_read, walk):
                if walk is not None:
                    covered = max(covered, walk.covered)
                    result.map_records += walk.keyed
                    walk.keyed = 0
                if h.last_offset < start:
                    continue
                if h.base_offset >= end:
                    return covered
                if h.is_control:
                    txn.on_control_batch_read(h)
                    covered = h.next_offset
                    continue
                if txn.on_batch_read(h):
                    covered = h.next_offset
                    continue
                if isinstance(m, DictOffsetMap):
                    fitted, keyed_count = _map_batch_reference(m, h)
                else:
                    fitted, keyed_count = map_batch(m, h)
                if not fitted:
                    log.info("the cleaner's offset map is full (%d keys) at offset %d of %s-%d; cleaning up to there",
                             len(m), h.base_offset, ulog.topic, ulog.partition)
                    return covered
                result.map_records += keyed_count
                covered = h.next_offset
            if walk is not None:
                covered = max(covered, walk.covered)
                result.map_records += walk.keyed
        return end  # every batch below ``end`` is in the map

    @staticmethod
    def _segment(ulog: UnifiedLog, base: int) -> LogSegment:
        with ulog.lock:
            return ulog.segments.get(base)

    # -- the cleaning -----------------------------------------------------------------------------

    def clean(self, ulog: UnifiedLog, first_dirty: int, first_uncleanable: int, views: list[SegmentView],
              now_ms: int) -> CleanResult:
        started = monotonic_s(self.clock)
        result = CleanResult(first_dirty, first_dirty)
        end = self.build_offset_map(ulog, first_dirty, first_uncleanable, result)
        # Nothing dirty (only tombstones past their horizon to drop): the clean part is rewritten.
        end = max(end, first_dirty)
        result.end_offset = end
        with ulog.lock:
            last_records = {pid: LastRecord(e.last_data_offset if e.last_data_offset >= 0 else None, e.producer_epoch)
                            for pid, e in ulog.producer_state.producers.items()}
            log_start = ulog.log_start_offset
            config = ulog.config
            # A tiered log's segments already in the remote tier stay as they were uploaded: the remote
            # tier is compacted by its own job (tiered/remote_compaction.py), and a local rewrite across
            # the remote end would let the copy task meet segments it half holds.
            tiered_end = ulog.cleaner_floor
            tiered = ulog.remote_log_enabled
        drops = self.batch_table.drops([r.last_data_offset for r in last_records.values()
                                        if r.last_data_offset is not None])
        self.batch_table = BatchTable(0)
        txn = TxnTracker(ulog.collect_aborted_transactions(log_start, end))
        ctx = FilterContext(self.offset_map, txn, now_ms, config.delete_retention_ms, last_records,
                            keep_deletes=tiered)
        to_clean = [v for v in views[:-1] if tiered_end < v.base_offset < end]
        groups = group_segments(to_clean, config.segment_bytes, config.segment_index_bytes)
        horizon: int | None = None
        for n, group in enumerate(groups):
            if self.stop_requested():
                result.aborted = True
                break
            done, group_horizon = self._clean_group(ulog, group, ctx, result, drops)
            if not done:
                result.aborted = True
                break
            if group_horizon is not None:
                horizon = group_horizon if horizon is None else min(horizon, group_horizon)
            result.groups += 1
            if len(groups) > 1 and self._progress_now():
                self._say(f"cleaning {ulog.topic}-{ulog.partition}: group {n + 1} of {len(groups)} done, "
                          f"{result.bytes_read} bytes read, {result.bytes_written} written")
        result.records_read, result.records_written = ctx.records_read, ctx.records_kept
        result.next_delete_horizon_ms = horizon
        result.elapsed_s = monotonic_s(self.clock) - started
        return result

    def _clean_group(self, ulog: UnifiedLog, group: list[int], ctx: FilterContext, result: CleanResult,
                     drops: Drops) -> tuple[bool, int | None]:
        sources = [self._segment(ulog, b) for b in group]
        base = group[0]
        for stale in _paths(ulog.dir, base, files.CLEANED_SUFFIX) + _paths(ulog.dir, base, files.SWAP_SUFFIX):
            stale.unlink(missing_ok=True)
        cleaned = LogSegment(ulog.dir, base, segment_settings(ulog.config, ulog.topic),
                             created_ms=self.clock.wall_ms(), create=True, file_suffix=files.CLEANED_SUFFIX)
        horizon: int | None = None
        ctx.kept_aborted = []
        def emit(out: bytes, kept: list[BatchHeader]) -> None:
            nonlocal horizon
            cleaned.append(out, kept)
            result.bytes_written += len(out)
            self._read(len(out))
            if self._progress_now():
                self._say(f"cleaning {ulog.topic}-{ulog.partition}: segment group at {base} up to offset "
                          f"{kept[-1].last_offset}, {result.bytes_read} bytes read, {result.bytes_written} written")
            for h in kept:
                kept_horizon = delete_horizon_of(h)
                # A horizon already passed has had its tombstones and markers dropped by this pass
                # (what is left of the batch is live): it must not make the log due again.
                if kept_horizon is not None and kept_horizon > ctx.now_ms:
                    horizon = kept_horizon if horizon is None else min(horizon, kept_horizon)

        # Plain batches are rewritten by the compiled walk a chunk at a time; the rest come out here.
        walk = FilterWalk(ctx, emit, drops) if isinstance(ctx.offset_map, OffsetMap) else None
        try:
            for seg in sources:
                for h in read_batches(seg.log, self.io_buffer_bytes, self._count_read(result), walk):
                    out = filter_batch(h, ctx)
                    if out is not None:
                        emit(out, [BatchHeader(out, 0)])
            if walk is not None:  # runs skipped unread count as read (processed), as Kafka's bytes read
                result.bytes_read += walk.bytes_skipped
            for txn in ctx.kept_aborted:
                cleaned.txn_index.append(txn)
            cleaned.on_become_inactive()
            cleaned.flush()
            last_mtime = os.stat(sources[-1].log.path).st_mtime
            os.utime(cleaned.log.path, (last_mtime, last_mtime))
        except BaseException:
            cleaned.delete_files()
            raise
        self._hook("cleaned-written")
        return self._swap(ulog, sources, cleaned), horizon

    def _count_read(self, result: CleanResult) -> Callable[[int], None]:
        def on_read(n: int) -> None:
            result.bytes_read += n
            self._read(n)
        return on_read

    def _swap(self, ulog: UnifiedLog, sources: list[LogSegment], cleaned: LogSegment) -> bool:
        """Replace ``sources`` by ``cleaned`` under the log's lock, in Kafka's crash-safe order; False
        (and the cleaned files gone) when the log changed meanwhile (deleted, truncated, retention)."""
        with ulog.lock:
            current = ulog.segments.base_offsets
            active = current[-1] if current else None
            # A segment the copy task uploaded (or began to) meanwhile stays as uploaded (issue 18).
            floor = ulog.cleaner_floor
            unchanged = (not ulog.deleted and ulog.offline_reason is None and all(
                s.base_offset in current and s.base_offset != active and ulog.segments.get(s.base_offset) is s
                and s.base_offset > floor for s in sources))
            if not unchanged:
                log.info("cleaning of %s-%d abandoned: its segments changed meanwhile", ulog.topic, ulog.partition)
                cleaned.delete_files()
                return False
            cleaned.change_file_suffixes(files.CLEANED_SUFFIX, files.SWAP_SUFFIX)
            sync_dir(ulog.dir)
            self._hook("swap-renamed")
            for s in sources:
                ulog.segments.remove(s.base_offset)
            ulog.segments.add(cleaned)
            for s in sources:
                s.change_file_suffixes("", files.DELETED_SUFFIX)
            self._hook("old-renamed")
            # No directory fsync for this last rename (Kafka's replaceSegments has none either): the
            # one above is the barrier that matters (the .swap is durable before any old segment is
            # renamed). If a crash loses this rename, recovery finds the .swap and completes it, to
            # the same log; the next fsync of the directory makes it durable.
            cleaned.change_file_suffixes(files.SWAP_SUFFIX, "")
            cleaned.checked = True
        self._hook("done")
        delay = ulog.config.file_delete_delay_ms

        def delete_now() -> None:
            for s in sources:
                s.delete_files()

        if ulog.scheduler is not None and delay > 0:
            ulog.scheduler.schedule(f"delete-cleaned-{ulog.topic}-{ulog.partition}", delete_now, delay)
        else:
            delete_now()
        return True


def _map_batch_reference(m: DictOffsetMap, h: BatchHeader) -> tuple[bool, int]:
    """The Python reference of ``fast_path.map_batch``."""
    keyed = [(offset, key_digest(key)) for offset, key, _ in batch_keys(h) if key is not None]
    if len(m) and not m.fits_digests([d for _, d in keyed]):
        return False, 0
    for offset, digest in keyed:
        m.put_digest(digest, offset)
    return True, len(keyed)


def _paths(directory: Path, base: int, suffix: str) -> list[Path]:
    return [p.with_name(p.name + suffix) for p in (
        files.log_file(directory, base), files.index_file(directory, base), files.time_index_file(directory, base),
        files.txn_index_file(directory, base))]
