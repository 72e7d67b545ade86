"""Remote compaction: the log cleaner's rules applied to a compacted topic's remote tier (issue 18;
docs/architecture.md, "Compacted topics in the remote tier").

Segments of a compacted topic are cleaned locally before they are copied (the copy task stops at the
cleaner checkpoint), so each upload is compact in itself; this job compacts *across* uploads. It runs
in the broker, after a partition's copy run, when the remote tier's dirty bytes (segments not yet
written by a remote compaction) reach ``min.cleanable.dirty.ratio`` of its bytes.

One run:

1. **Map.** Every key of the FINISHED remote segments, oldest first, then of the local log above the
   remote end up to the last stable offset, goes into the cleaner's key → offset map (bounded by
   ``log.cleaner.dedupe.buffer.size``; when the remote keys do not all fit, only the segments whose
   keys fit are compacted). Aborted transactions' records are skipped, as the local cleaner does.
2. **Rewrite.** The mapped segments are read again, oldest first, and every batch goes through the
   local cleaner's :func:`~tierlog.storage.cleaner.batches.filter_batch` (latest record per key,
   tombstones until ``delete.retention.ms`` after their first cleaning, aborted data and spent
   markers removed, offsets, producer fields and each producer's last batch kept) into a new segment
   with its indexes, cut at a source boundary before it would exceed ``segment.bytes``. A new segment
   covers exactly the offset range of the sources it replaces; one left with no record at all keeps
   an empty batch at its last offset (as Kafka's cleaner keeps emptied batches), so no segment is
   ever empty.
3. **Swap, per new segment.** COPY_SEGMENT_STARTED under a fresh id naming the segments it replaces,
   upload (with the last source's producer snapshot and leader-epoch checkpoint), COPY_SEGMENT_FINISHED.
   That one metadata entry also moves every replaced segment to DELETE_SEGMENT_STARTED, and the store
   refuses it unless all of them are still FINISHED (remote retention may have deleted one meanwhile:
   then the upload is deleted and the run ends). Readers therefore see the old segments or the new
   one, never both or neither. The replaced segments' objects are deleted by the next expiration
   pass, so a read that resolved them just before the swap still finds them.

Crashes: an upload left COPY_SEGMENT_STARTED is deleted by the next copy run's sweep of dangling
uploads (uploads of a job still running in this process are registered in
``TieringContext.compaction_uploads`` and passed over); segments left DELETE_SEGMENT_STARTED are
deleted by the expiration pass. A re-run starts from the metadata as it is.
"""

from __future__ import annotations

import itertools
import logging
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tierlog.clock import monotonic_s
from tierlog.config.log_config import LogConfig
from tierlog.records.builder import build_batch
from tierlog.records.header import BatchHeader
from tierlog.storage.cleaner.batches import (
    CorruptDirtyBatchError,
    FilterContext,
    LastRecord,
    batch_keys,
    delete_horizon_of,
    filter_batch,
    read_batches,
)
from tierlog.storage.cleaner.fast_path import map_batch
from tierlog.storage.cleaner.offset_map import ENTRY_BYTES, OffsetMap
from tierlog.storage.cleaner.txn_tracker import TxnTracker
from tierlog.storage.file_records import FileRecords
from tierlog.storage.log import UnifiedLog, segment_settings
from tierlog.storage.segment import LogSegment
from tierlog.storage.txn_index import ABORTED_TXN_SIZE, AbortedTxn
from tierlog.tiered.api import (
    IndexType,
    InvalidStateTransitionError,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
)
from tierlog.tiered.context import PartitionState, TieringContext
from tierlog.tiered.policy import retry_delay_ms
from tierlog.tiered.segment_deleter import SegmentDeleter

log = logging.getLogger(__name__)

S = RemoteLogSegmentState
#: The steps a test may stop a run at (``crash_hook``): after the upload's COPY_SEGMENT_STARTED, after
#: the upload, after the swap.
CRASH_STEPS = ("started", "uploaded", "swapped")
_LOAD_FACTOR = 0.9


def remote_compaction_due(segments: list[RemoteLogSegmentMetadata], min_cleanable_ratio: float) -> bool:
    """Whether the remote tier is dirty enough to compact: the FINISHED segments not written by a
    remote compaction are at least ``min_cleanable_ratio`` of the FINISHED bytes (Kafka's dirty
    ratio, with "cleaned" meaning compacted across uploads)."""
    finished = [m for m in segments if m.state is S.COPY_SEGMENT_FINISHED]
    dirty = sum(m.segment_size_in_bytes for m in finished if not m.replaces)
    total = sum(m.segment_size_in_bytes for m in finished)
    return dirty > 0 and total > 0 and dirty / total >= min_cleanable_ratio


def group_sources(sources: list[RemoteLogSegmentMetadata], segment_bytes: int) -> list[list[RemoteLogSegmentMetadata]]:
    """Contiguous runs of sources whose sizes together stay within ``segment.bytes`` (a new segment is
    never larger than its sources), each at least one source, and within the offset index's 32-bit
    relative offsets."""
    groups: list[list[RemoteLogSegmentMetadata]] = []
    current: list[RemoteLogSegmentMetadata] = []
    size = 0
    for md in sources:
        if current and (size + md.segment_size_in_bytes > segment_bytes
                        or md.end_offset - current[0].start_offset > 2**31 - 1):
            groups.append(current)
            current, size = [], 0
        current.append(md)
        size += md.segment_size_in_bytes
    if current:
        groups.append(current)
    return groups


def new_offset_map(map_bytes: int) -> OffsetMap:
    """The cleaner's key → offset map within ``log.cleaner.dedupe.buffer.size``."""
    slots = max(1, int(map_bytes // ENTRY_BYTES * _LOAD_FACTOR))
    return OffsetMap(slots, max(2, map_bytes // ENTRY_BYTES))


def aborted_txns(rsm: RemoteStorageManager, sources: list[RemoteLogSegmentMetadata]) -> list[AbortedTxn]:
    """The aborted transactions of the sources' transaction indexes, by first offset."""
    out: list[AbortedTxn] = []
    for md in sources:
        try:
            with rsm.fetch_index(md, IndexType.TRANSACTION) as stream:
                data = stream.read()
        except RemoteResourceNotFoundError:
            continue
        out.extend(AbortedTxn.from_bytes(data, i) for i in range(0, len(data) - ABORTED_TXN_SIZE + 1,
                                                                   ABORTED_TXN_SIZE))
    return sorted(out, key=lambda t: t.first_offset)


def source_batches(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata, scratch: Path, io_buffer_bytes: int,
                   result: RemoteCompactionResult) -> Iterator[BatchHeader]:
    """The segment's batches, CRC-checked, from a scratch copy (deleted after)."""
    path = scratch / f"source-{md.segment_id.id_str}.log"
    with rsm.fetch_log_segment(md, 0) as stream, open(path, "wb") as out:
        shutil.copyfileobj(stream, out, 1 << 20)
    records = FileRecords(path)
    try:
        result.bytes_read += records.size_bytes
        yield from read_batches(records, io_buffer_bytes)
    finally:
        records.close()
        path.unlink(missing_ok=True)


#: A source's batches (:func:`source_batches` with the run's settings bound).
Batches = Callable[[RemoteLogSegmentMetadata], Iterator[BatchHeader]]


def map_sources(m: OffsetMap, sources: list[RemoteLogSegmentMetadata], aborted: list[AbortedTxn],
                batches: Batches) -> int:
    """Map the sources' keys, whole segments only; returns how many sources were mapped."""
    txn = TxnTracker(aborted)
    for i, md in enumerate(sources):
        before = len(m)
        for h in batches(md):
            if h.is_control:
                txn.on_control_batch_read(h)
                continue
            if txn.on_batch_read(h):
                continue
            fitted, _ = map_batch(m, h)
            if not fitted:
                log.info("remote compaction: the offset map is full (%d keys, %d before segment %d); "
                         "compacting the %d segments before it", len(m), before, md.start_offset, i)
                return i
    return len(sources)


def write_replacement(group: list[RemoteLogSegmentMetadata], batches: Batches, fctx: FilterContext,
                      config: LogConfig, created_ms: int, out_dir: Path, result: RemoteCompactionResult) -> LogSegment:
    """The new segment replacing ``group`` (open, flushed, in ``out_dir``; the caller closes it): every
    batch through the cleaner's filter; one left with no record keeps an empty batch at the range's
    last offset. Lowers ``result.next_delete_horizon_ms`` to the horizon of a tombstone or marker kept."""
    last = group[-1]
    settings = segment_settings(config, group[0].segment_id.topic_id_partition.topic)
    seg = LogSegment(out_dir, group[0].start_offset, settings, created_ms=created_ms, create=True)
    try:
        fctx.kept_aborted = []
        for md in group:
            for h in batches(md):
                out = filter_batch(h, fctx)
                if out is not None:
                    kept = BatchHeader(out, 0)
                    seg.append(out, [kept])
                    horizon = delete_horizon_of(kept)
                    # A batch keeps its horizon bit after its tombstones went: only one still holding a
                    # tombstone or a marker makes a later run due.
                    if horizon is not None and (kept.is_control or any(
                            not has_value for _, _, has_value in batch_keys(kept))):
                        known = result.next_delete_horizon_ms
                        result.next_delete_horizon_ms = horizon if known is None else min(known, horizon)
        if seg.size_bytes == 0:
            empty = build_batch([], base_offset=last.end_offset, last_offset_delta=0,
                                max_timestamp=max(m.max_timestamp_ms for m in group))
            seg.append(empty, [BatchHeader(empty, 0)])
        for aborted in fctx.kept_aborted:
            seg.txn_index.append(aborted)
        seg.on_become_inactive()
        seg.flush()
    except BaseException:
        seg.close()
        raise
    return seg


@contextmanager
def replacement_segment(group: list[RemoteLogSegmentMetadata], batches: Batches, fctx: FilterContext,
                        config: LogConfig, created_ms: int, scratch: Path, result: RemoteCompactionResult
                        ) -> Iterator[tuple[LogSegment, Path]]:
    """:func:`write_replacement` into a directory of its own under ``scratch``: the segment and that
    directory, the segment closed and the directory removed on exit."""
    out_dir = scratch / f"out-{group[0].start_offset}"
    out_dir.mkdir()
    try:
        seg = write_replacement(group, batches, fctx, config, created_ms, out_dir, result)
        try:
            yield seg, out_dir
        finally:
            seg.close()
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def replacement(rsm: RemoteStorageManager, segment_id: RemoteLogSegmentId, group: list[RemoteLogSegmentMetadata],
                seg: LogSegment, out_dir: Path, broker_id: int, now_ms: int
                ) -> tuple[RemoteLogSegmentMetadata, LogSegmentData]:
    """The COPY_SEGMENT_STARTED metadata of ``seg`` replacing ``group``, and its files for the plugin
    (the producer snapshot and leader-epoch checkpoint are the last source's)."""
    first, last = group[0], group[-1]
    snapshot = out_dir / f"{last.end_offset + 1:020d}.snapshot"
    with rsm.fetch_index(last, IndexType.PRODUCER_SNAPSHOT) as stream:
        snapshot.write_bytes(stream.read())
    with rsm.fetch_index(last, IndexType.LEADER_EPOCH) as stream:
        leader_epochs = stream.read()
    epochs: dict[int, int] = {}
    for md in group:
        for epoch, start in md.segment_leader_epochs:
            epochs.setdefault(epoch, start)
    txn_path = seg.txn_index.path
    data = LogSegmentData(
        log_segment=seg.log_path, offset_index=seg.offset_index_path, time_index=seg.time_index_path,
        transaction_index=txn_path if txn_path.exists() and txn_path.stat().st_size else None,
        producer_snapshot_index=snapshot, leader_epoch_index=leader_epochs)
    largest = seg.largest_timestamp
    md = RemoteLogSegmentMetadata(
        segment_id=segment_id, start_offset=first.start_offset, end_offset=last.end_offset,
        max_timestamp_ms=largest if largest >= 0 else max(m.max_timestamp_ms for m in group),
        broker_id=broker_id, event_timestamp_ms=now_ms, segment_size_in_bytes=seg.size_bytes,
        segment_leader_epochs=tuple(sorted(epochs.items(), key=lambda e: e[1])),
        max_timestamp_from_records=True, replaces=tuple(m.segment_id for m in group),
        # Readers prune by it (the manifest carries it): the smallest timestamp of what was kept.
        min_timestamp_ms=seg.log.min_record_timestamp())
    return md, data


@dataclass
class RemoteCompactionResult:
    sources: int = 0
    segments_written: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    abandoned: str | None = None
    #: The earliest delete horizon of the tombstones and markers kept, or None.
    next_delete_horizon_ms: int | None = None


class RemoteCompactor:
    def __init__(self, ctx: TieringContext, deleter: SegmentDeleter, work_dir: Path,
                 crash_hook: Callable[[str], None] | None = None) -> None:
        self.ctx = ctx
        self.deleter = deleter
        self.work_dir = work_dir
        self.crash_hook = crash_hook
        #: Runs that failed, and the last run's figures, for status and tests.
        self.errors = 0
        self.last_result: RemoteCompactionResult | None = None
        shutil.rmtree(work_dir, ignore_errors=True)  # scratch files of a run a crash ended

    def _hook(self, step: str) -> None:
        if self.crash_hook is not None:
            self.crash_hook(step)

    def maybe_compact(self, state: PartitionState, *, force: bool = False) -> RemoteCompactionResult | None:
        """Compact the partition's remote tier if it is a compacted topic dirty enough (``force``: at
        any ratio). Never raises."""
        ctx = self.ctx
        ulog = ctx.logs.get_log(*state.tp)
        if (not ctx.config.compaction_enable or not (ctx.config.remote_compaction_enable or force) or ulog is None or not ulog.config.compact or ulog.deleted
                or ulog.offline_reason is not None or state.released or ctx.closed()):
            return None
        now = ctx.now_ms()
        if not force and state.compaction_retry_at_ms is not None and now < state.compaction_retry_at_ms:
            return None  # backing off after a failed run
        segments = list(ctx.rlmm.list_remote_log_segments(state.tip))
        finished = any(m.state is S.COPY_SEGMENT_FINISHED for m in segments)
        horizon = state.remote_delete_horizon_ms
        # Due by the dirty ratio, or once a kept tombstone's horizon has passed (Kafka's cleaner also
        # picks a log for its expired tombstones), or when asked.
        expired = horizon is not None and now >= horizon
        if not ((force or expired) and finished) and not remote_compaction_due(
                segments, ulog.config.min_cleanable_dirty_ratio):
            return None
        try:
            result = self.compact(state, ulog, now)
        except Exception as e:
            self.errors += 1
            state.compaction_errors += 1
            state.compaction_failures += 1
            delay = retry_delay_ms(state.compaction_failures, ctx.config.task_interval_ms, ctx.config.retry_max_delay_ms)
            state.compaction_retry_at_ms = now + delay
            if isinstance(e, CorruptDirtyBatchError):
                # Damaged remote data: nothing is replaced or deleted because of it, the partition
                # keeps serving; retried with backoff (the object may be re-read fine), not every pass.
                log.error("remote compaction of %s-%d stopped on damaged remote data, nothing replaced: %s; "
                          "next attempt in %d ms (failure %d)", *state.tp, e, delay, state.compaction_failures)
            else:
                log.error("remote compaction of %s-%d failed: %s: %s; next attempt in %d ms (failure %d)", *state.tp,
                          type(e).__name__, e, delay, state.compaction_failures,
                          exc_info=not isinstance(e, RemoteStorageError | OSError))
            ctx.record_error(state, f"remote compaction: {type(e).__name__}: {e}")
            return None
        self.last_result = result
        state.compaction_runs += 1
        state.compaction_bytes_read += result.bytes_read
        state.compaction_bytes_written += result.bytes_written
        state.compaction_last_run_ms = ctx.now_ms()
        state.compaction_failures = 0
        state.compaction_retry_at_ms = None
        if result.abandoned is None:
            state.remote_delete_horizon_ms = result.next_delete_horizon_ms
        ctx.write_status()
        return result

    # -- one run ----------------------------------------------------------------------------------

    def compact(self, state: PartitionState, ulog: UnifiedLog, now_ms: int) -> RemoteCompactionResult:
        ctx = self.ctx
        started = monotonic_s(ctx.clock)
        log_start = ctx.rlmm.log_start_offset(state.tip) or 0
        sources = sorted((m for m in ctx.rlmm.list_remote_log_segments(state.tip)
                          if m.state is S.COPY_SEGMENT_FINISHED and m.start_offset >= log_start),
                         key=lambda m: m.start_offset)
        result = RemoteCompactionResult()
        if not sources:
            return result
        overlap = next(((a, b) for a, b in itertools.pairwise(sources) if b.start_offset <= a.end_offset),
                       None)
        if overlap is not None:
            # Never expected (readers assume it never happens): compacting would only spread it.
            a, b = overlap
            raise RemoteStorageError(f"remote segments {a.segment_id} [{a.start_offset}, {a.end_offset}] and "
                                     f"{b.segment_id} [{b.start_offset}, {b.end_offset}] overlap; not compacting")
        scratch = self.work_dir / f"{state.tp[0]}-{state.tp[1]}"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        try:
            offset_map = new_offset_map(ctx.config.compaction_map_bytes)
            aborted = aborted_txns(ctx.rsm, sources)
            mapped = map_sources(offset_map, sources, aborted, self._batches(scratch, result))
            if mapped == len(sources):
                self._map_local(offset_map, ulog)
            sources = sources[:mapped]
            result.sources = len(sources)
            with ulog.lock:
                last_records = {pid: LastRecord(e.last_data_offset if e.last_data_offset >= 0 else None,
                                                e.producer_epoch)
                                for pid, e in ulog.producer_state.producers.items()}
                config = ulog.config
            fctx = FilterContext(offset_map, TxnTracker(aborted), now_ms, config.delete_retention_ms, last_records)
            log.info("remote compaction of %s-%d: %d segments [%d, %d], %d keys mapped", *state.tp, len(sources),
                     sources[0].start_offset if sources else -1, sources[-1].end_offset if sources else -1,
                     len(offset_map))
            for group in group_sources(sources, config.segment_bytes):
                if ctx.closed() or state.released:
                    result.abandoned = "the broker is stopping"
                    break
                if not self._replace(state, ulog, group, fctx, scratch, result):
                    break
            result.records_read, result.records_kept = fctx.records_read, fctx.records_kept
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        log.info("remote compaction of %s-%d done: %d segments replaced by %d, %d of %d records kept, %d bytes "
                 "read, %d written, %.3f s%s", *state.tp, result.sources, result.segments_written,
                 result.records_kept, result.records_read, result.bytes_read, result.bytes_written,
                 monotonic_s(ctx.clock) - started, f" (stopped: {result.abandoned})" if result.abandoned else "")
        return result

    # -- the map ----------------------------------------------------------------------------------

    def _map_local(self, m: OffsetMap, ulog: UnifiedLog) -> None:
        """Add the keys of the local log above the remote end (up to the last stable offset): a remote
        record whose key has a later record there is superseded too. Stops quietly when the map is full
        or a segment changes under it (the local cleaner swapped it): what is mapped is still right."""
        with ulog.lock:
            start = ulog.remote_end_offset + 1
            end = ulog.last_stable_offset
            bases = ulog.segments.base_offsets
            segments = [ulog.segments.get(b) for i, b in enumerate(bases)
                        if (bases[i + 1] if i + 1 < len(bases) else end) > start and b < end]
        txn = TxnTracker(ulog.collect_aborted_transactions(start, end))
        try:
            for seg in segments:
                for h in read_batches(seg.log, self.ctx.config.compaction_io_buffer_bytes):
                    if h.last_offset < start:
                        continue
                    if h.base_offset >= end:
                        return
                    if h.is_control:
                        txn.on_control_batch_read(h)
                    elif not txn.on_batch_read(h) and not map_batch(m, h)[0]:
                        return
        except (OSError, ValueError) as e:
            log.info("remote compaction of %s-%d maps the local log up to where it changed: %s",
                     ulog.topic, ulog.partition, e)

    def _batches(self, scratch: Path, result: RemoteCompactionResult) -> Batches:
        def batches(md: RemoteLogSegmentMetadata) -> Iterator[BatchHeader]:
            return source_batches(self.ctx.rsm, md, scratch, self.ctx.config.compaction_io_buffer_bytes, result)

        return batches

    # -- one replacement --------------------------------------------------------------------------

    def _replace(self, state: PartitionState, ulog: UnifiedLog, group: list[RemoteLogSegmentMetadata],
                 fctx: FilterContext, scratch: Path, result: RemoteCompactionResult) -> bool:
        """Write, upload and swap in the segment replacing ``group``; False when the swap was refused."""
        with replacement_segment(group, self._batches(scratch, result), fctx, ulog.config, self.ctx.now_ms(),
                                 scratch, result) as (seg, out_dir):
            return self._upload_and_swap(state, group, seg, out_dir, result)

    def _upload_and_swap(self, state: PartitionState, group: list[RemoteLogSegmentMetadata], seg: LogSegment,
                         out_dir: Path, result: RemoteCompactionResult) -> bool:
        ctx = self.ctx
        first, last = group[0], group[-1]
        md, data = replacement(ctx.rsm, RemoteLogSegmentId.generate(state.tip), group, seg, out_dir,
                               ctx.config.broker_id, ctx.now_ms())
        # Registered before the record exists: a copy run's sweep never sees it unregistered while
        # this job runs.
        ctx.compaction_uploads.add(md.segment_id)
        custom: bytes | None = None
        try:
            ctx.rlmm.add_remote_log_segment_metadata(md)
            self._hook("started")
            try:
                custom = ctx.rsm.copy_log_segment_data(md, data)
                self._hook("uploaded")
                limit = ctx.config.custom_metadata_max_bytes
                if custom is not None and len(custom) > limit:
                    raise RemoteStorageError(f"custom metadata of {len(custom)} bytes exceeds "
                                             f"remote.log.metadata.custom.metadata.max.bytes={limit}")
                # The swap: refused (InvalidStateTransitionError) unless every source is still FINISHED.
                ctx.rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
                    md.segment_id, ctx.now_ms(), S.COPY_SEGMENT_FINISHED, ctx.config.broker_id, custom))
            except Exception as e:
                # Only Exception: a test's simulated crash (a BaseException) leaves the upload as a
                # killed process would, for the sweep to find.
                oversize = custom is not None and len(custom) > ctx.config.custom_metadata_max_bytes
                self.deleter.delete(md, best_effort=True, rejected_custom_metadata=custom if oversize else None)
                if not isinstance(e, InvalidStateTransitionError):
                    raise
                result.abandoned = str(e)
                log.info("remote compaction of %s-%d: segments [%d, %d] not replaced: %s", *state.tp,
                         first.start_offset, last.end_offset, e)
                return False
        finally:
            ctx.compaction_uploads.discard(md.segment_id)
        self._hook("swapped")
        result.segments_written += 1
        result.bytes_written += md.segment_size_in_bytes
        log.info("remote compaction of %s-%d: segment %s [%d, %d] (%d bytes) replaced %d segments (%d bytes)",
                 *state.tp, md.segment_id.id_str, md.start_offset, md.end_offset, md.segment_size_in_bytes,
                 len(group), sum(m.segment_size_in_bytes for m in group))
        return True

