"""The remote log manager: copies closed segments of tiered topics to the remote tier, applies
total retention to the remote tier, serves reads below the local log start offset, and reports
per-partition status (Kafka's RemoteLogManager, KAFKA-FACTS §5.6–5.9).

This module is the façade: it adopts and releases partitions, schedules their tasks and owns their
state; the work is done by its parts, which never import one another:

- :mod:`~tierlog.tiered.copier` -- the crash-safe copy protocol (with seed 001's producer snapshot,
  :mod:`~tierlog.tiered.copy_snapshot`, and seed 002's custom-metadata limit);
- :mod:`~tierlog.tiered.expiration` -- remote retention, and retrying failed deletes
  (:mod:`~tierlog.tiered.segment_deleter`, shared by all that delete);
- :mod:`~tierlog.tiered.remote_reader` -- fetches, ListOffsets by time, the remote log start offset;
- :mod:`~tierlog.tiered.partition_deletion` -- a deleted topic's remote data;
- :mod:`~tierlog.tiered.status` -- the status reported and the status file;
- :mod:`~tierlog.tiered.restore` -- reconciling a local log with its remote copy on adoption;
- :mod:`~tierlog.tiered.remote_compaction` -- compacting a compacted topic's remote tier, after each
  copy run of its partition (issue 18).

Per partition there is a copy task, re-armed after every run: after the task interval when the run
went well, after an exponentially growing delay when runs keep failing without copying anything (a
store that is down is not hammered; one with intermittent errors is not left to fall behind).
Seed 002 stops a partition's copy task for good (until restart or :meth:`RemoteLogManager.restart_copy`)
while every other partition goes on. One expiration pass over all partitions runs every interval; it
passes over a partition whose copy run is in flight (next interval), so one slow upload does not hold
up the others. In a broker both run on the manager's own threads, so a remote store that is slow or
hung never holds the broker's shared scheduler (retention, flushes, the metadata log).

The manager changes a log only through the log's own methods (``storage.log_tiering``): the remote
end after a finished copy, tiering on or off, a rebuilt producer snapshot, offline and online.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from tierlog.clock import SYSTEM_CLOCK, Clock
from tierlog.errors import TierlogError
from tierlog.ids import TopicPartition, uuid_to_base64
from tierlog.scheduler import Scheduler, TaskHandle
from tierlog.storage.log import UnifiedLog
from tierlog.tiered.api import (
    ZERO_TOPIC_ID,
    RemoteLogMetadataManager,
    RemoteLogSegmentMetadata,
    RemoteStorageError,
    RemoteStorageManager,
    TopicIdPartition,
)
from tierlog.tiered.compaction_jobs import CompactionRequests
from tierlog.tiered.context import (
    LogSource,
    PartitionState,
    RemoteLogManagerConfig,
    TieringContext,
    highest_finished_offset,
    is_tierable,
)
from tierlog.tiered.copier import SegmentCopier
from tierlog.tiered.expiration import Expired, RemoteExpiration
from tierlog.tiered.index_cache import RemoteIndexCache
from tierlog.tiered.partition_deletion import PartitionDeletion
from tierlog.tiered.policy import retry_delay_ms
from tierlog.tiered.remote_compaction import RemoteCompactionResult, RemoteCompactor
from tierlog.tiered.remote_reader import RemoteFetchInfo, RemoteReader
from tierlog.tiered.restore import (
    PartitionConflictError,
    PartitionRestorer,
    RestoreAction,
    take_untiered_offline,
)
from tierlog.tiered.segment_deleter import FailedRemoteDelete, SegmentDeleter
from tierlog.tiered.status import (
    PartitionTierStatus,
    compaction_fields,
    partition_status,
    read_status_file,
    write_status_file,
)

log = logging.getLogger(__name__)

__all__ = ["LogSource", "RemoteFetchInfo", "RemoteLogManager", "RemoteLogManagerConfig", "is_tierable"]


class RemoteLogManager:
    def __init__(
        self,
        config: RemoteLogManagerConfig,
        logs: LogSource,
        rsm: RemoteStorageManager,
        rlmm: RemoteLogMetadataManager,
        *,
        index_cache_dir: Path,
        clock: Clock = SYSTEM_CLOCK,
        scheduler: Scheduler | None = None,
        status_path: Path | None = None,
        workers: Scheduler | None = None,
        compaction_crash_hook: Callable[[str], None] | None = None,
        compaction_requests_dir: Path | None = None,
    ) -> None:
        """``scheduler`` runs the cheap periodic sync; ``workers`` (default: ``scheduler``) the copy
        tasks and the expiration pass, which wait on the remote store. The manager shuts
        ``workers`` down on close when they are not ``scheduler``."""
        self.config = config
        self.logs = logs
        self.rsm = rsm
        self.rlmm = rlmm
        self.clock = clock
        self.scheduler = scheduler
        self.workers = workers if workers is not None else scheduler
        self.status_path = status_path
        #: What the previous process persisted per partition (read once): the remote tombstone horizon
        #: a restarted broker keeps (issue 18), so kept tombstones go when due, not only at the next
        #: run the dirty ratio starts.
        persisted = read_status_file(status_path) if status_path is not None else None
        partitions = (persisted or {}).get("partitions")
        self._persisted_partitions: dict[str, object] = partitions if isinstance(partitions, dict) else {}
        self.index_cache = RemoteIndexCache(index_cache_dir, config.index_cache_bytes, rsm)
        self._partitions: dict[TopicPartition, PartitionState] = {}
        #: One lock per partition's remote segments, kept apart from the partition's state: a state is
        #: dropped when the partition stops being tiered, while its copy run may still be uploading.
        self._segment_locks: dict[TopicIdPartition, threading.Lock] = {}
        self._lock = threading.RLock()
        self._tasks: list[TaskHandle] = []
        #: Partitions whose local log and remote copy disagree, with why: offline, never re-adopted.
        self._conflicts: dict[TopicPartition, str] = {}
        #: Untiered logs already compared with their remote segments (see _check_untiered).
        self._untiered_checked: set[TopicPartition] = set()
        self._closed = False
        #: The plugin's reading of its own custom metadata, for status (optional hook).
        self._uploaded_size: Callable[[bytes], int | None] | None = getattr(rsm, "uploaded_size_bytes", None)
        ctx = self._ctx = TieringContext(config, logs, rsm, rlmm, clock, self.index_cache, write_status=self._write_status,
                             closed=lambda: self._closed, partition=self._partitions.get, tip_for=self._tip_for,
                             segments_lock=self._segments_lock)
        self.deleter = SegmentDeleter(ctx)
        self.copier = SegmentCopier(ctx, self.deleter, self._check_boundary)
        self.reader = RemoteReader(ctx)
        self.compactor = RemoteCompactor(ctx, self.deleter, Path(index_cache_dir) / "remote-compaction",
                                         compaction_crash_hook)
        #: Swaps asked for by remote compaction jobs outside the broker (``tierlog spark compact``).
        self.compaction_requests = (None if compaction_requests_dir is None
                                    else CompactionRequests(ctx, self.deleter, compaction_requests_dir))
        self.expiration = RemoteExpiration(ctx, self.deleter, self.reader.segment_max_timestamp)
        self.partition_deletion = PartitionDeletion(
            ctx, self.deleter, lambda topic, partition: self._release((topic, partition), logs.get_log(topic, partition)))
        self._restorer = PartitionRestorer(rsm, rlmm, lambda md, offset, n: self.reader.read_segment(md, offset, n, True),
                                           self.reader.segment_max_timestamp)

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Adopt the tiered logs and start the periodic passes. Call before the log manager's
        retention starts, so tiered logs never see the total-retention policy locally."""
        self.sync_partitions()
        interval = self.config.task_interval_ms
        if self.scheduler is not None:
            self._tasks.append(self.scheduler.schedule("remote-log-manager-sync", self.sync_partitions,
                                                       interval, interval))
        if self.workers is not None:
            self._tasks.append(self.workers.schedule("remote-log-manager-expiration", self._expire_pass,
                                                     interval, interval))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for task in self._tasks:
                task.cancel()
            self._tasks.clear()
            for state in self._partitions.values():
                if state.copy_handle is not None:
                    state.copy_handle.cancel()
        if self.workers is not None and self.workers is not self.scheduler:
            # Waits for the copy runs in flight: they stop after their current segment.
            self.workers.shutdown()
        self._write_status()
        self.index_cache.close()
        self.rlmm.close()
        self.rsm.close()

    def sync_partitions(self) -> None:
        """Start a copy task for every newly tierable log, stop those of logs gone or no longer tiered."""
        if self._closed:
            return
        logs = self.logs.all_logs()
        changed = False
        with self._lock:
            for tp, ulog in logs.items():
                tierable = is_tierable(ulog, self.config.system_enable) and not ulog.deleted
                state = self._partitions.get(tp)
                if tierable and state is None:
                    self._adopt(tp, ulog)
                    changed = True
                elif not tierable and state is not None:
                    self._release(tp, ulog)
                    changed = True
                elif not tierable and tp not in self._untiered_checked and not ulog.deleted:
                    self._check_untiered(tp, ulog)
            for tp in [tp for tp in self._partitions if tp not in logs]:
                self._release(tp, None)
                changed = True
            for tp in [tp for tp in self._conflicts if tp not in logs]:
                del self._conflicts[tp]
            self._untiered_checked.intersection_update(logs)
        if changed:
            # `tierlog tier status` reads task states from the file: without this a new task showed
            # as unknown, and after a restart the previous process's stopped task and error stayed.
            self._write_status()

    def _adopt(self, tp: TopicPartition, ulog: UnifiedLog) -> None:
        tip = TopicIdPartition(ulog.topic_id or ZERO_TOPIC_ID, tp[0], tp[1])
        if tp in self._conflicts:
            return  # offline until the operator decides (tierlog tier restore) and the broker restarts
        try:
            action = self._restorer.reconcile(tip, ulog, check_boundary=False)
        except PartitionConflictError as e:
            self._conflicts[tp] = str(e)
            ulog.take_offline(str(e))
            log.error("partition offline: %s; nothing is served, appended or deleted until the operator decides "
                      "(docs/operations.md, 'Losing a disk')", e)
            self._write_status()
            return
        except Exception as e:
            # The remote tier holds offsets the local log lacks: serving or appending now would hand
            # them out again. Offline until a later sync pass restores it.
            reason = f"restoring from the remote tier failed: {type(e).__name__}: {e}"
            first = ulog.offline_reason != reason
            ulog.take_offline(reason)
            if first:
                log.error("%s-%d offline: %s (retried every %d ms)", tp[0], tp[1], reason,
                          self.config.task_interval_ms, exc_info=not isinstance(e, RemoteStorageError | OSError))
                self._write_status()
            return
        if ulog.offline_reason is not None:
            log.info("%s-%d is online again", tp[0], tp[1])
            ulog.bring_online()
        state = PartitionState(tp, tip, lock=self._segments_lock(tip))
        state.boundary_unchecked = action is RestoreAction.CHECK_BOUNDARY
        before = self._persisted_partitions.pop(f"{tp[0]}-{tp[1]}", None)
        if isinstance(before, dict) and before.get("topic_id") == uuid_to_base64(tip.topic_id):
            horizon = before.get("remote_delete_horizon_ms")
            state.remote_delete_horizon_ms = horizon if isinstance(horizon, int) else None
        self._partitions[tp] = state
        highest = highest_finished_offset(self.rlmm, tip)
        ulog.enable_tiering(highest)
        log.info("tiering %s-%d (remote tier holds offsets up to %d)", tp[0], tp[1], highest)
        self._schedule_copy(state, 0)

    def _check_untiered(self, tp: TopicPartition, ulog: UnifiedLog) -> None:
        """A log whose topic is not tiered (remote.storage.enable turned off) may still have remote
        segments: if its local log ends at or below their end it goes offline until tiering is back
        on (then adopting it restores it). Checked once per log while it stays untiered."""
        tip = TopicIdPartition(ulog.topic_id or ZERO_TOPIC_ID, tp[0], tp[1])
        try:
            take_untiered_offline(self.rlmm, tip, ulog, f"remote.storage.enable=false for topic {tp[0]}")
        except Exception as e:
            log.warning("could not compare %s-%d with its remote segments: %s", tp[0], tp[1], e)
            return
        self._untiered_checked.add(tp)

    def _release(self, tp: TopicPartition, ulog: UnifiedLog | None) -> None:
        state = self._partitions.pop(tp)
        state.released = True
        if state.copy_handle is not None:
            state.copy_handle.cancel()
        if ulog is not None:
            ulog.disable_tiering()
        log.info("stopped tiering %s-%d", tp[0], tp[1])

    def _check_boundary(self, state: PartitionState, ulog: UnifiedLog) -> bool:
        """The batch at the remote end, compared once with the local one at the same offsets: a log
        written at offsets the remote tier holds (by a broker that did not know of them) goes offline
        before anything of it is copied or served for long. False when the partition went offline."""
        try:
            self._restorer.reconcile(state.tip, ulog, check_boundary=True)
        except PartitionConflictError as e:
            self._conflicts[state.tp] = str(e)
            ulog.take_offline(str(e))
            state.copy_stopped = True
            log.error("partition offline: %s; nothing is served, appended or deleted until the operator decides "
                      "(docs/operations.md, 'Losing a disk')", e)
            self._ctx.record_error(state, str(e))
            return False
        except Exception as e:
            log.warning("could not compare %s-%d with its remote copy yet: %s", *state.tp, e)
            return True  # the copy run goes on; the comparison is tried again next run
        state.boundary_unchecked = False
        return True

    def _schedule_copy(self, state: PartitionState, delay_ms: int) -> None:
        if self.workers is None or self._closed:
            return
        topic, partition = state.tp
        state.copy_handle = self.workers.schedule(
            f"remote-log-copy-{topic}-{partition}", lambda: self._copy_task(state), delay_ms)

    def _copy_task(self, state: PartitionState) -> None:
        if state.released or state.copy_stopped or self._closed:
            return
        self.copier.copy(state)
        self.compactor.maybe_compact(state)
        if not state.copy_stopped and not state.released:
            self._schedule_copy(state, retry_delay_ms(state.consecutive_failures, self.config.task_interval_ms,
                                                      self.config.retry_max_delay_ms))

    def restart_copy(self, topic: str, partition: int) -> bool:
        """Re-create a copy task that seed 002 stopped (what a restart or leadership change does in
        Kafka), e.g. after the operator raised the limit."""
        state = self._partitions.get((topic, partition))
        if state is None or not state.copy_stopped:
            return False
        state.copy_stopped = False
        state.consecutive_failures = 0
        self._write_status()
        self._schedule_copy(state, 0)
        return True

    # -- helpers --------------------------------------------------------------------------------

    def _segments_lock(self, tip: TopicIdPartition) -> threading.Lock:
        with self._lock:
            lock = self._segment_locks.get(tip)
            if lock is None:
                lock = self._segment_locks[tip] = threading.Lock()
            return lock

    def _tip_for(self, topic: str, partition: int) -> TopicIdPartition | None:
        state = self._partitions.get((topic, partition))
        if state is not None:
            return state.tip
        for tip in self.rlmm.partitions():
            if tip.topic == topic and tip.partition == partition:
                return tip
        return None

    def _now(self) -> int:
        return self.clock.wall_ms()

    # -- copy -----------------------------------------------------------------------------------

    def copy_all(self) -> int:
        """One copy run of every tiered partition (tests and tools; the broker uses the tasks)."""
        self.sync_partitions()
        return sum(self.copier.copy(state) for state in list(self._partitions.values()))

    def copy_partition(self, topic: str, partition: int) -> int:
        state = self._partitions.get((topic, partition))
        return 0 if state is None else self.copier.copy(state)

    def compact_partition(self, topic: str, partition: int, *, force: bool = False) -> RemoteCompactionResult | None:
        """One remote compaction of a compacted partition: when due (its dirty ratio), or with
        ``force`` whenever it has remote segments. None when it did not run or failed (logged)."""
        state = self._partitions.get((topic, partition))
        return None if state is None else self.compactor.maybe_compact(state, force=force)

    # -- expiration and deletion ----------------------------------------------------------------

    def expire_all(self, now_ms: int | None = None, *, wait: bool = True) -> int:
        """One expiration pass over every tiered partition. With ``wait`` false (the periodic pass)
        a partition whose copy run is in flight is left for the next pass rather than waited for:
        one partition with a slow upload must not hold up the retention of all the others."""
        if self._closed:
            return 0
        deleted = 0
        for state in list(self._partitions.values()):
            deleted += len(self.expire_partition(*state.tp, now_ms=now_ms, wait=wait))
        return deleted

    def _expire_pass(self) -> None:
        # Manifests (tiered/manifest.py) checked at the first pass and retried when a write failed:
        # on a worker, since each is a request to the remote store.
        maintain = getattr(self.rlmm, "maintain_manifests", None)
        if callable(maintain):
            maintain()
        if self.compaction_requests is not None:
            self.compaction_requests.poll()
        self.expire_all(wait=False)

    def expire_partition(self, topic: str, partition: int, now_ms: int | None = None, *,
                         wait: bool = True) -> Expired:
        return self.expiration.expire_partition(topic, partition, now_ms, wait=wait)

    def delete_records(self, topic: str, partition: int, offset: int) -> None:
        """Move the partition's log start offset (DeleteRecords): reads below it fail at once, remote
        segments wholly below it go with the next expiration pass."""
        ulog = self.logs.get_log(topic, partition)
        state = self._partitions.get((topic, partition))
        if state is not None:
            self.rlmm.update_log_start_offset(state.tip, offset, self._now())
        if ulog is not None and offset > ulog.log_start_offset:
            ulog.maybe_increment_log_start_offset(offset, "delete records")

    def failed_deletes(self) -> list[FailedRemoteDelete]:
        """The remote deletes that failed in this process and are not done, oldest segment first."""
        return self.deleter.failed_deletes()

    def mark_partition_for_deletion(self, topic: str, partition: int, topic_id: bytes) -> bool:
        return self.partition_deletion.mark_partition_for_deletion(topic, partition, topic_id)

    def marked_for_deletion(self, tip: TopicIdPartition) -> bool:
        return self.partition_deletion.marked_for_deletion(tip)

    def delete_partition_data(self, topic: str, partition: int, topic_id: bytes | None = None) -> int:
        return self.partition_deletion.delete_partition_data(topic, partition, topic_id)

    # -- reads ----------------------------------------------------------------------------------

    def remote_log_start_offset(self, topic: str, partition: int) -> int | None:
        return self.reader.remote_log_start_offset(topic, partition)

    def earliest_offset(self, topic: str, partition: int) -> int | None:
        return self.reader.earliest_offset(topic, partition)

    def max_timestamp(self, topic: str, partition: int) -> int:
        return self.reader.max_timestamp(topic, partition)

    def find_offset_by_timestamp(self, topic: str, partition: int, timestamp: int) -> tuple[int, int] | None:
        return self.reader.find_offset_by_timestamp(topic, partition, timestamp)

    def read(self, topic: str, partition: int, fetch_offset: int, max_bytes: int,
             min_one_message: bool = True) -> bytes | None:
        """The bytes the local log would have returned for this read, from the remote tier; None when
        the offset is not there (the caller answers OFFSET_OUT_OF_RANGE)."""
        info = self.fetch(topic, partition, fetch_offset, max_bytes, min_one_message=min_one_message)
        return None if info is None else info.records

    def fetch(self, topic: str, partition: int, fetch_offset: int, max_bytes: int, *,
              min_one_message: bool = True, read_committed: bool = False) -> RemoteFetchInfo | None:
        return self.reader.fetch(topic, partition, fetch_offset, max_bytes, min_one_message=min_one_message,
                                 read_committed=read_committed)

    # -- status ---------------------------------------------------------------------------------

    def uploaded_size(self, md: RemoteLogSegmentMetadata) -> int:
        if md.custom_metadata is not None and self._uploaded_size is not None:
            try:
                size = self._uploaded_size(md.custom_metadata)
            except TierlogError:
                size = None
            if size is not None:
                return size
        return md.segment_size_in_bytes

    def status(self) -> list[PartitionTierStatus]:
        out: list[PartitionTierStatus] = []
        seen: set[TopicPartition] = set()
        logs = self.logs.all_logs()
        for tp, ulog in sorted(logs.items()):
            state = self._partitions.get(tp)
            tip = state.tip if state is not None else self._tip_for(*tp)
            if state is None and tip is None and not ulog.config.remote_storage_enable:
                continue
            seen.add(tp)
            out.append(self._status_of(tp, ulog, state, tip))
        for tip in self.rlmm.partitions():
            if (tip.topic, tip.partition) not in seen:
                out.append(self._status_of((tip.topic, tip.partition), None, None, tip))
        return out

    def partition_status(self, topic: str, partition: int) -> PartitionTierStatus | None:
        """The status of one partition (the web console pages through partitions), None if never tiered."""
        tp = (topic, partition)
        ulog = self.logs.get_log(topic, partition)
        state = self._partitions.get(tp)
        tip = state.tip if state is not None else self._tip_for(topic, partition)
        if state is None and tip is None and (ulog is None or not ulog.config.remote_storage_enable):
            return None
        return self._status_of(tp, ulog, state, tip)

    def remote_segments(self, topic: str, partition: int) -> list[RemoteLogSegmentMetadata]:
        """Every remote segment's metadata of a partition, whatever its state, oldest first."""
        tip = self._tip_for(topic, partition)
        return [] if tip is None else list(self.rlmm.list_remote_log_segments(tip))

    def _status_of(self, tp: TopicPartition, ulog: UnifiedLog | None, state: PartitionState | None,
                   tip: TopicIdPartition | None) -> PartitionTierStatus:
        return partition_status(tp, ulog, state, tip, self.rlmm, given_up=self.deleter.given_up,
                                uploaded_size=self.uploaded_size,
                                remote_log_start_offset=self.remote_log_start_offset(*tp) if tip else None)

    def _write_status(self) -> None:
        """Persist what only this process knows (task states and errors) for ``tierlog tier status``."""
        if self.status_path is None:
            return
        entries: dict[str, object] = {
            f"{s.tp[0]}-{s.tp[1]}": {"copy_task": "stopped" if s.copy_stopped else "active",
                                     "last_error": s.last_error, "last_error_ms": s.last_error_ms,
                                     "consecutive_failures": s.consecutive_failures, **compaction_fields(s),
                                     "topic_id": uuid_to_base64(s.tip.topic_id),
                                     "remote_delete_horizon_ms": s.remote_delete_horizon_ms}
            for s in list(self._partitions.values())
        }
        for key, entry in list(self._persisted_partitions.items()):
            entries.setdefault(key, entry)  # not adopted (yet) by this process: kept as it was
        for (topic, partition), ulog in self.logs.all_logs().items():
            if ulog.offline_reason is not None:
                entries[f"{topic}-{partition}"] = {"copy_task": "offline", "last_error": ulog.offline_reason,
                                                   "last_error_ms": None, "consecutive_failures": 0}
        # Only the given-up deletes: those still retried are DELETE_SEGMENT_STARTED in the metadata.
        deletes = [asdict(e) for e in self.failed_deletes() if e.given_up]
        try:
            write_status_file(self.status_path, {"written_ms": self._now(), "partitions": entries,
                                                 "deletes": deletes})
        except OSError as e:
            log.warning("could not write %s: %s", self.status_path, e)
