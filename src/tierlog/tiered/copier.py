"""The copy task of one tiered partition: closed segments to the remote tier, crash-safe.

Copy protocol for one segment (what makes a crash or a store outage safe):

1. COPY_SEGMENT_STARTED is recorded durably under a fresh segment id;
2. the plugin uploads the segment, its indexes, the producer snapshot (rebuilt first if missing,
   seed 001, :mod:`tierlog.tiered.copy_snapshot`) and the leader-epoch checkpoint;
3. on failure the upload is deleted (DELETE_SEGMENT_STARTED, plugin delete, DELETE_SEGMENT_FINISHED);
   if even that fails, the record stays in DELETE_SEGMENT_STARTED and the expiration pass retries it;
4. custom metadata over the limit (seed 002): delete as in 3, never FINISHED, stop the copy task; the
   oversize custom metadata goes with DELETE_SEGMENT_STARTED (as ``rejected_custom_metadata``, never
   the segment's custom metadata) so every retry of the delete hands it to the plugin;
5. otherwise COPY_SEGMENT_FINISHED with the custom metadata, and only then the log's remote end
   moves (:meth:`UnifiedLog.mark_remote_end`), which is what lets local retention delete the local
   copy.

A COPY_SEGMENT_STARTED record that is not being copied (a crash between 1 and 5) is a dangling upload
and is deleted at the start of the partition's next copy run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from tierlog.clock import monotonic_s
from tierlog.errors import CorruptRecordError, TierlogError
from tierlog.storage.checkpoints import LeaderEpochCheckpointFile
from tierlog.storage.cleaner.checkpoint import CleanerCheckpoint
from tierlog.storage.log import UnifiedLog
from tierlog.tiered.api import (
    CustomMetadataSizeLimitExceededError,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteStorageError,
)
from tierlog.tiered.context import PartitionState, TieringContext, highest_finished_offset
from tierlog.tiered.copy_snapshot import producer_snapshot
from tierlog.tiered.policy import candidate_segments
from tierlog.tiered.segment_deleter import SegmentDeleter

log = logging.getLogger(__name__)

S = RemoteLogSegmentState
#: A copy run working through a backlog logs its progress at most this often.
PROGRESS_INTERVAL_S = 10.0

#: Compares the local log with its remote copy before the first copy run (restore); False when the
#: partition went offline.
BoundaryCheck = Callable[[PartitionState, UnifiedLog], bool]


def cleaned_up_to(ulog: UnifiedLog) -> int:
    """The offset the cleaner has cleaned the log up to (its ``cleaner-offset-checkpoint`` entry), 0
    when it never has."""
    return CleanerCheckpoint(ulog.dir.parent).read().get((ulog.topic, ulog.partition), 0)


class SegmentCopier:
    def __init__(self, ctx: TieringContext, deleter: SegmentDeleter, check_boundary: BoundaryCheck) -> None:
        self.ctx = ctx
        self.deleter = deleter
        self.check_boundary = check_boundary

    def copy(self, state: PartitionState) -> int:
        """One run of the partition's copy task; returns the segments copied. Never raises: errors
        are logged and kept in the partition's status."""
        ctx = self.ctx
        if state.copy_stopped or state.released:
            return 0
        ulog = ctx.logs.get_log(*state.tp)
        if ulog is None or ulog.deleted or ulog.offline_reason is not None:
            return 0
        if state.boundary_unchecked and not self.check_boundary(state, ulog):
            return 0
        copied = 0
        topic, partition = state.tp
        base = -1  # the segment being copied, for the failure line (-1: before any segment)
        with state.lock:
            try:
                self._delete_dangling_uploads(state)
                with ulog.lock:
                    remote_end = ulog.mark_remote_end(highest_finished_offset(ctx.rlmm, state.tip))
                    start = max(ulog.log_start_offset, ctx.rlmm.log_start_offset(state.tip) or 0)
                    bases = ulog.segments.base_offsets
                    lso = ulog.last_stable_offset
                    compact = ulog.config.compact
                if compact:
                    # Clean before upload (issue 18): a compacted log's segment is copied once the
                    # cleaner has cleaned it, i.e. it ends at or below the cleaner checkpoint.
                    lso = min(lso, cleaned_up_to(ulog))
                backlog = candidate_segments(bases, lso, remote_end, start)
                progress_at = monotonic_s(ctx.clock) + PROGRESS_INTERVAL_S
                for base, next_base in backlog:
                    if state.copy_stopped or state.released or ctx.closed():
                        break
                    if not ulog.begin_copy(base, next_base):
                        break  # the cleaner swapped it meanwhile: the next run lists the segments again
                    try:
                        self.copy_segment(state, ulog, base, next_base)
                    finally:
                        ulog.end_copy()
                    copied += 1
                    state.segments_copied += 1
                    if monotonic_s(ctx.clock) >= progress_at and copied < len(backlog):
                        progress_at = monotonic_s(ctx.clock) + PROGRESS_INTERVAL_S
                        log.info("remote copy progress topic=%s partition=%d copied_segments=%d "
                                 "remaining_segments=%d", topic, partition, copied, len(backlog) - copied)
                if state.consecutive_failures:
                    log.info("copying %s-%d to the remote tier works again", *state.tp)
                    state.consecutive_failures = 0
                    ctx.write_status()
            except CustomMetadataSizeLimitExceededError as e:
                state.copy_stopped = True
                state.copy_errors += 1
                log.error("remote copy failed topic=%s partition=%d base_offset=%d task=stopped error=%s", topic,
                          partition, base, e)
                ctx.record_error(state, str(e))
            except Exception as e:
                # Anything else too: a copy task that died on an unexpected error would stop tiering
                # the partition silently; this way it is retried and shows in the status. The backoff
                # is for a store that is down: a run that copied segments before it failed met an
                # intermittent error, and doubling the wait after each such run would let the
                # backlog (and the local disk) grow while the store works.
                state.consecutive_failures = 1 if copied else state.consecutive_failures + 1
                state.copy_errors += 1
                expected = isinstance(e, RemoteStorageError | TierlogError | OSError)
                log.error("remote copy failed topic=%s partition=%d base_offset=%d attempt=%d error=%s", topic,
                          partition, base, state.consecutive_failures, e, exc_info=not expected)
                ctx.record_error(state, f"{type(e).__name__}: {e}")
        return copied

    def _delete_dangling_uploads(self, state: PartitionState) -> None:
        """Uploads left COPY_SEGMENT_STARTED by a run that died. A remote compaction's uploads (they
        name the segments they replace) are passed over while this process runs that compaction (the
        job registers them in ``ctx.compaction_uploads``); once it died they are deleted like any."""
        for md in self.ctx.rlmm.list_remote_log_segments(state.tip):
            if md.state is S.COPY_SEGMENT_STARTED:
                if md.segment_id in self.ctx.compaction_uploads:
                    continue
                what = "remote compaction's upload" if md.replaces else "upload"
                log.warning("deleting the unfinished %s %s [%d, %d] left by an earlier run",
                            what, md.segment_id, md.start_offset, md.end_offset)
                self.deleter.delete(md, best_effort=False)

    def _producer_snapshot(self, state: PartitionState, ulog: UnifiedLog, base: int, next_base: int) -> Path:
        return producer_snapshot(state, ulog, base, next_base, self.ctx.config.producer_id_expiration_ms)

    def copy_segment(self, state: PartitionState, ulog: UnifiedLog, base: int, next_base: int) -> None:
        ctx = self.ctx
        seg = ulog.segments.get(base)
        # A damaged batch uploaded would become the only copy once local retention runs: the
        # segment (and so every later one) stays local, where the operator can still repair it.
        problem = ulog.check_all_batches(seg)
        if problem is not None:
            raise CorruptRecordError(
                f"segment [{base}, {next_base - 1}] ({seg.log_path}) has damaged data at byte {problem.position}, "
                f"offset {problem.offset}: {problem.reason}; it is not copied to the remote tier, nor is any later "
                "segment, and their local copies are kept (docs/operations.md, 'A corrupt segment')")
        snapshot = self._producer_snapshot(state, ulog, base, next_base)
        cache = ulog.leader_epoch_cache
        epochs = tuple((e.epoch, e.start_offset) for e in cache.epoch_entries_in_range(base, next_base))
        md = RemoteLogSegmentMetadata(
            segment_id=RemoteLogSegmentId.generate(state.tip), start_offset=base, end_offset=next_base - 1,
            max_timestamp_ms=seg.largest_timestamp, broker_id=ctx.config.broker_id, event_timestamp_ms=ctx.now_ms(),
            segment_size_in_bytes=seg.size_bytes, segment_leader_epochs=epochs,
            # The segment's largest timestamp comes from its records (seed 004), whatever its headers say.
            max_timestamp_from_records=True,
            # Its smallest lets readers skip it for an upper timestamp bound (the manifest carries it).
            min_timestamp_ms=seg.log.min_record_timestamp(),
        )
        txn_path = seg.txn_index.path
        data = LogSegmentData(
            log_segment=seg.log_path, offset_index=seg.offset_index_path, time_index=seg.time_index_path,
            transaction_index=txn_path if txn_path.exists() else None, producer_snapshot_index=snapshot,
            leader_epoch_index=LeaderEpochCheckpointFile.encode(cache.epoch_entries_in_range(-1, next_base)),
        )
        ctx.rlmm.add_remote_log_segment_metadata(md)
        started = monotonic_s(ctx.clock)
        log.info("remote copy started topic=%s partition=%d base_offset=%d end_offset=%d size_bytes=%d "
                 "segment_id=%s", state.tp[0], state.tp[1], base, md.end_offset, md.segment_size_in_bytes,
                 md.segment_id.id_str)
        try:
            custom = ctx.rsm.copy_log_segment_data(md, data)
        except Exception as e:
            self.deleter.delete(md, best_effort=True)
            if isinstance(e, RemoteStorageError):
                raise
            raise RemoteStorageError(f"copying segment {base} failed: {type(e).__name__}: {e}") from e
        limit = ctx.config.custom_metadata_max_bytes
        if custom is not None and len(custom) > limit:
            # Seed 002: the plugin gets its custom metadata back for the delete (it may say where
            # the data went), and for every retry of it: it is kept with DELETE_SEGMENT_STARTED
            # only, never as the segment's custom metadata, and the segment never becomes FINISHED.
            log.error("custom metadata of %d bytes for segment %d of %s-%d exceeds "
                      "remote.log.metadata.custom.metadata.max.bytes=%d; deleting the uploaded data",
                      len(custom), base, state.tp[0], state.tp[1], limit)
            self.deleter.delete(md, best_effort=True, rejected_custom_metadata=custom)
            raise CustomMetadataSizeLimitExceededError(
                f"custom metadata of {len(custom)} bytes for segment [{base}, {next_base - 1}] exceeds the "
                f"limit of {limit} bytes (remote.log.metadata.custom.metadata.max.bytes)")
        ctx.rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            md.segment_id, ctx.now_ms(), S.COPY_SEGMENT_FINISHED, ctx.config.broker_id, custom))
        ulog.mark_remote_end(md.end_offset)
        state.bytes_copied += md.segment_size_in_bytes
        log.info("remote copy finished topic=%s partition=%d base_offset=%d end_offset=%d size_bytes=%d "
                 "segment_id=%s seconds=%.3f", state.tp[0], state.tp[1], base, md.end_offset,
                 md.segment_size_in_bytes, md.segment_id.id_str, monotonic_s(ctx.clock) - started)
