"""The remote log manager: copies closed segments of tiered topics to the remote tier, applies
total retention to the remote tier, serves reads below the local log start offset, and reports
per-partition status (Kafka's RemoteLogManager, KAFKA-FACTS §5.6–5.9).

Per partition there is a copy task, re-armed after every run: after the task interval when the run
went well, after an exponentially growing delay when runs keep failing without copying anything (a
store that is down is not hammered; one with intermittent errors is not left to fall behind).
Seed 002 stops a partition's copy task for good (until restart or :meth:`RemoteLogManager.restart_copy`)
while every other partition goes on. One expiration pass over all partitions runs every interval; it
passes over a partition whose copy run is in flight (next interval), so one slow upload does not hold
up the others. In a broker both run on the manager's own threads, so a remote store that is slow or
hung never holds the broker's shared scheduler (retention, flushes, the metadata log).

Copy protocol for one segment (what makes a crash or a store outage safe):

1. COPY_SEGMENT_STARTED is recorded durably under a fresh segment id;
2. the plugin uploads the segment, its indexes, the producer snapshot (rebuilt first if missing,
   seed 001) and the leader-epoch checkpoint;
3. on failure the upload is deleted (DELETE_SEGMENT_STARTED, plugin delete, DELETE_SEGMENT_FINISHED);
   if even that fails, the record stays in DELETE_SEGMENT_STARTED and the expiration pass retries it;
4. custom metadata over the limit (seed 002): delete as in 3, never FINISHED, stop the copy task;
5. otherwise COPY_SEGMENT_FINISHED with the custom metadata, and only then the log's
   ``highest_offset_in_remote_storage`` moves, which is what lets local retention delete the local copy.

A COPY_SEGMENT_STARTED record that is not being copied (a crash between 1 and 5) is a dangling upload
and is deleted at the start of the partition's next copy run. Deleting a deleted topic's remote data
waits until no copy of the partition is in flight: a copy finishing after the listing would leave
objects that belong to no segment.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

from tierlog._util.framed import FramedFileError, read_framed, write_framed
from tierlog.clock import SYSTEM_CLOCK, Clock
from tierlog.config.broker_config import BrokerConfig
from tierlog.errors import CorruptRecordError, TierlogError
from tierlog.ids import TopicPartition, uuid_to_base64
from tierlog.records.header import BATCH_HEADER_SIZE
from tierlog.scheduler import Scheduler, TaskHandle, ThreadScheduler
from tierlog.storage.checkpoints import LeaderEpochCheckpointFile
from tierlog.storage.index import TimeIndex
from tierlog.storage.log import UnifiedLog
from tierlog.storage.producer_rebuild import (
    iter_segment_headers,
    rebuild_snapshot_for_range,
    replay_window_start,
)
from tierlog.storage.producer_snapshot import snapshot_path
from tierlog.storage.producer_state import read_snapshot
from tierlog.storage.producer_state_horizon import snapshot_known_complete
from tierlog.storage.txn_index import AbortedTxn
from tierlog.tiered.api import (
    ZERO_TOPIC_ID,
    CustomMetadataSizeLimitExceededError,
    LogSegmentData,
    RemoteLogMetadataManager,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteStorageError,
    RemoteStorageManager,
    TopicIdPartition,
    load_remote_storage_manager,
    plugin_properties,
)
from tierlog.tiered.index_cache import CACHE_DIR_NAME, RemoteIndexCache
from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager
from tierlog.tiered.policy import (
    RemoteDeletionReason,
    RemoteRetentionPolicy,
    candidate_segments,
    remote_deletable_segments,
    retry_delay_ms,
)
from tierlog.tiered.restore import PartitionConflictError, PartitionRestorer, RestoreAction

log = logging.getLogger(__name__)

S = RemoteLogSegmentState
METADATA_DIR_NAME = "remote-log-metadata"
STATUS_FILE_NAME = "tier-status"
#: A copy run working through a backlog logs its progress at most this often.
PROGRESS_INTERVAL_S = 10.0
_STATUS_MAGIC = b"TLTS"
_STATUS_VERSION = 1
# Bytes of a batch header a remote read needs to decide whether to skip the batch: base offset,
# length, and (at byte 23) the last offset delta.
_SKIP_HEADER = struct.Struct(">qi11xi")
_READ_AHEAD = 23 + 4


class LogSource(Protocol):
    """What the remote log manager needs of the LogManager."""

    def all_logs(self) -> dict[TopicPartition, UnifiedLog]: ...

    def get_log(self, topic: str, partition: int) -> UnifiedLog | None: ...


@dataclass(frozen=True)
class RemoteLogManagerConfig:
    system_enable: bool = False
    task_interval_ms: int = 30000
    custom_metadata_max_bytes: int = 128
    index_cache_bytes: int = 1 << 30
    producer_id_expiration_ms: int = 86400000
    broker_id: int = 1
    #: Longest wait between two attempts of a failing copy task.
    retry_max_delay_ms: int = 300000
    #: Threads of the remote log manager's own pool (copy tasks and the expiration pass) when the
    #: broker runs real threads: a slow or hung remote store then ties up these, never the broker's
    #: shared scheduler (retention, flushes, checkpoints, the metadata log). Kafka's
    #: remote.log.manager.copier.thread.pool.size plays this part there.
    worker_threads: int = 4

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> RemoteLogManagerConfig:
        return cls(
            system_enable=config.get_bool("remote.log.storage.system.enable"),
            task_interval_ms=config.get_int("remote.log.manager.task.interval.ms"),
            custom_metadata_max_bytes=config.get_int("remote.log.metadata.custom.metadata.max.bytes"),
            index_cache_bytes=config.get_int("remote.log.index.file.cache.total.size.bytes"),
            producer_id_expiration_ms=config.get_int("producer.id.expiration.ms"),
            broker_id=config.node_id,
        )


@dataclass(frozen=True)
class PartitionTierStatus:
    topic: str
    partition: int
    topic_id: str
    #: "active", "stopped" (seed 002 or removed), "disabled" (remote storage off for the topic)
    copy_task: str
    highest_tiered_offset: int
    remote_log_start_offset: int | None
    local_log_start_offset: int | None
    log_end_offset: int | None
    local_bytes: int
    remote_bytes: int
    remote_segments: int
    copy_lag_segments: int
    copy_lag_bytes: int
    last_error: str | None = None
    last_error_ms: int | None = None
    consecutive_failures: int = 0
    segments_copied: int = 0
    #: Segment bytes this process copied (``segments_copied`` counts the segments).
    bytes_copied: int = 0
    #: Failed runs of the copy task in this process (the seed 002 stop included).
    copy_errors: int = 0


@dataclass(frozen=True)
class RemoteFetchInfo:
    records: bytes
    #: The remote segment the bytes come from (None when no batch at or after the offset exists).
    segment: RemoteLogSegmentMetadata | None
    aborted_transactions: list[AbortedTxn] | None = None


@dataclass
class _PartitionState:
    tp: TopicPartition
    tip: TopicIdPartition
    #: Held by a copy run and an expiration pass; shared by every state of the same topic id and
    #: partition (see RemoteLogManager._segments_lock).
    lock: threading.Lock = field(default_factory=threading.Lock)
    copy_handle: TaskHandle | None = None
    copy_stopped: bool = False
    released: bool = False
    last_error: str | None = None
    last_error_ms: int | None = None
    consecutive_failures: int = 0
    segments_copied: int = 0
    bytes_copied: int = 0
    copy_errors: int = 0
    #: largest timestamp per closed segment base offset, for seed 001's replay window
    max_timestamps: dict[int, int] = field(default_factory=dict)
    #: The local log overlaps the remote end: the copy run compares that batch first (restore).
    boundary_unchecked: bool = False


def is_tierable(ulog: UnifiedLog, system_enable: bool) -> bool:
    """Kafka's ``UnifiedLog.remoteLogEnabled``: broker-wide switch, topic switch, never compacted or
    internal topics."""
    return (system_enable and ulog.config.remote_storage_enable and ulog.config.delete_enabled
            and "compact" not in ulog.config.cleanup_policy and not ulog.topic.startswith("__"))


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
        self.index_cache = RemoteIndexCache(index_cache_dir, config.index_cache_bytes, rsm)
        self._partitions: dict[TopicPartition, _PartitionState] = {}
        #: One lock per partition's remote segments, kept apart from the partition's state: a state is
        #: dropped when the partition stops being tiered, while its copy run may still be uploading.
        self._segment_locks: dict[TopicIdPartition, threading.Lock] = {}
        self._lock = threading.RLock()
        self._tasks: list[TaskHandle] = []
        self._restorer = PartitionRestorer(rsm, rlmm, lambda md, offset, n: self._read_segment(md, offset, n, True))
        #: Partitions whose local log and remote copy disagree, with why: offline, never re-adopted.
        self._conflicts: dict[TopicPartition, str] = {}
        self._closed = False
        #: The plugin's reading of its own custom metadata, for status (optional hook).
        self._uploaded_size: Callable[[bytes], int | None] | None = getattr(rsm, "uploaded_size_bytes", None)

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
            for tp in [tp for tp in self._partitions if tp not in logs]:
                self._release(tp, None)
                changed = True
            for tp in [tp for tp in self._conflicts if tp not in logs]:
                del self._conflicts[tp]
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
        state = _PartitionState(tp, tip, lock=self._segments_lock(tip))
        state.boundary_unchecked = action is RestoreAction.CHECK_BOUNDARY
        self._partitions[tp] = state
        highest = self._highest_finished_offset(tip)
        with ulog.lock:
            ulog.highest_offset_in_remote_storage = max(ulog.highest_offset_in_remote_storage, highest)
            ulog.remote_log_enabled = True
        log.info("tiering %s-%d (remote tier holds offsets up to %d)", tp[0], tp[1], highest)
        self._schedule_copy(state, 0)

    def _release(self, tp: TopicPartition, ulog: UnifiedLog | None) -> None:
        state = self._partitions.pop(tp)
        state.released = True
        if state.copy_handle is not None:
            state.copy_handle.cancel()
        if ulog is not None:
            ulog.remote_log_enabled = False
        log.info("stopped tiering %s-%d", tp[0], tp[1])

    def _schedule_copy(self, state: _PartitionState, delay_ms: int) -> None:
        if self.workers is None or self._closed:
            return
        topic, partition = state.tp
        state.copy_handle = self.workers.schedule(
            f"remote-log-copy-{topic}-{partition}", lambda: self._copy_task(state), delay_ms)

    def _copy_task(self, state: _PartitionState) -> None:
        if state.released or state.copy_stopped or self._closed:
            return
        self._copy(state)
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

    def _highest_finished_offset(self, tip: TopicIdPartition) -> int:
        return max((m.end_offset for m in self.rlmm.list_remote_log_segments(tip)
                    if m.state is S.COPY_SEGMENT_FINISHED), default=-1)

    def _now(self) -> int:
        return self.clock.wall_ms()

    def _record_error(self, state: _PartitionState, message: str) -> None:
        state.last_error = message
        state.last_error_ms = self._now()
        self._write_status()

    # -- copy -----------------------------------------------------------------------------------

    def copy_all(self) -> int:
        """One copy run of every tiered partition (tests and tools; the broker uses the tasks)."""
        self.sync_partitions()
        return sum(self._copy(state) for state in list(self._partitions.values()))

    def copy_partition(self, topic: str, partition: int) -> int:
        state = self._partitions.get((topic, partition))
        return 0 if state is None else self._copy(state)

    def _copy(self, state: _PartitionState) -> int:
        """One run of the partition's copy task; returns the segments copied. Never raises: errors
        are logged and kept in the partition's status."""
        if state.copy_stopped or state.released:
            return 0
        ulog = self.logs.get_log(*state.tp)
        if ulog is None or ulog.deleted or ulog.offline_reason is not None:
            return 0
        if state.boundary_unchecked and not self._check_boundary(state, ulog):
            return 0
        copied = 0
        topic, partition = state.tp
        base = -1  # the segment being copied, for the failure line (-1: before any segment)
        with state.lock:
            try:
                self._delete_dangling_uploads(state)
                highest = self._highest_finished_offset(state.tip)
                with ulog.lock:
                    ulog.highest_offset_in_remote_storage = max(ulog.highest_offset_in_remote_storage, highest)
                    start = max(ulog.log_start_offset, self.rlmm.log_start_offset(state.tip) or 0)
                    bases = ulog.segments.base_offsets
                    lso = ulog.last_stable_offset
                backlog = candidate_segments(bases, lso, ulog.highest_offset_in_remote_storage, start)
                progress_at = time.monotonic() + PROGRESS_INTERVAL_S
                for base, next_base in backlog:
                    if state.copy_stopped or state.released or self._closed:
                        break
                    self._copy_segment(state, ulog, base, next_base)
                    copied += 1
                    state.segments_copied += 1
                    if time.monotonic() >= progress_at and copied < len(backlog):
                        progress_at = time.monotonic() + PROGRESS_INTERVAL_S
                        log.info("remote copy progress topic=%s partition=%d copied_segments=%d "
                                 "remaining_segments=%d", topic, partition, copied, len(backlog) - copied)
                if state.consecutive_failures:
                    log.info("copying %s-%d to the remote tier works again", *state.tp)
                    state.consecutive_failures = 0
                    self._write_status()
            except CustomMetadataSizeLimitExceededError as e:
                state.copy_stopped = True
                state.copy_errors += 1
                log.error("remote copy failed topic=%s partition=%d base_offset=%d task=stopped error=%s", topic,
                          partition, base, e)
                self._record_error(state, str(e))
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
                self._record_error(state, f"{type(e).__name__}: {e}")
        return copied

    def _check_boundary(self, state: _PartitionState, ulog: UnifiedLog) -> bool:
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
            self._record_error(state, str(e))
            return False
        except Exception as e:
            log.warning("could not compare %s-%d with its remote copy yet: %s", *state.tp, e)
            return True  # the copy run goes on; the comparison is tried again next run
        state.boundary_unchecked = False
        return True

    def _delete_dangling_uploads(self, state: _PartitionState) -> None:
        for md in self.rlmm.list_remote_log_segments(state.tip):
            if md.state is S.COPY_SEGMENT_STARTED:
                log.warning("deleting the unfinished upload %s [%d, %d] left by an earlier run",
                            md.segment_id, md.start_offset, md.end_offset)
                self._delete_remote_segment(md, best_effort=False)

    def _copy_segment(self, state: _PartitionState, ulog: UnifiedLog, base: int, next_base: int) -> None:
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
        now = self._now()
        md = RemoteLogSegmentMetadata(
            segment_id=RemoteLogSegmentId.generate(state.tip), start_offset=base, end_offset=next_base - 1,
            max_timestamp_ms=seg.largest_timestamp, broker_id=self.config.broker_id, event_timestamp_ms=now,
            segment_size_in_bytes=seg.size_bytes, segment_leader_epochs=epochs,
        )
        txn_path = seg.txn_index.path
        data = LogSegmentData(
            log_segment=seg.log_path, offset_index=seg.offset_index_path, time_index=seg.time_index_path,
            transaction_index=txn_path if txn_path.exists() else None, producer_snapshot_index=snapshot,
            leader_epoch_index=LeaderEpochCheckpointFile.encode(cache.epoch_entries_in_range(-1, next_base)),
        )
        self.rlmm.add_remote_log_segment_metadata(md)
        started = time.monotonic()
        log.info("remote copy started topic=%s partition=%d base_offset=%d end_offset=%d size_bytes=%d "
                 "segment_id=%s", state.tp[0], state.tp[1], base, md.end_offset, md.segment_size_in_bytes,
                 md.segment_id.id_str)
        try:
            custom = self.rsm.copy_log_segment_data(md, data)
        except Exception as e:
            self._delete_remote_segment(md, best_effort=True)
            if isinstance(e, RemoteStorageError):
                raise
            raise RemoteStorageError(f"copying segment {base} failed: {type(e).__name__}: {e}") from e
        limit = self.config.custom_metadata_max_bytes
        if custom is not None and len(custom) > limit:
            # Seed 002: the plugin gets its custom metadata back for the delete (it may say where
            # the data went); it is not stored, and the segment never becomes FINISHED.
            log.error("custom metadata of %d bytes for segment %d of %s-%d exceeds "
                      "remote.log.metadata.custom.metadata.max.bytes=%d; deleting the uploaded data",
                      len(custom), base, state.tp[0], state.tp[1], limit)
            self._delete_remote_segment(md, best_effort=True, plugin_custom_metadata=custom)
            raise CustomMetadataSizeLimitExceededError(
                f"custom metadata of {len(custom)} bytes for segment [{base}, {next_base - 1}] exceeds the "
                f"limit of {limit} bytes (remote.log.metadata.custom.metadata.max.bytes)")
        self.rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            md.segment_id, self._now(), S.COPY_SEGMENT_FINISHED, self.config.broker_id, custom))
        with ulog.lock:
            ulog.highest_offset_in_remote_storage = max(ulog.highest_offset_in_remote_storage, md.end_offset)
        state.bytes_copied += md.segment_size_in_bytes
        log.info("remote copy finished topic=%s partition=%d base_offset=%d end_offset=%d size_bytes=%d "
                 "segment_id=%s seconds=%.3f", state.tp[0], state.tp[1], base, md.end_offset,
                 md.segment_size_in_bytes, md.segment_id.id_str, time.monotonic() - started)

    def _delete_remote_segment(self, md: RemoteLogSegmentMetadata, *, best_effort: bool,
                               plugin_custom_metadata: bytes | None = None) -> bool:
        """DELETE_SEGMENT_STARTED, plugin delete, DELETE_SEGMENT_FINISHED. A failed plugin delete
        leaves DELETE_SEGMENT_STARTED for the expiration pass to retry: never an orphan."""
        broker = self.config.broker_id
        if md.state is not S.DELETE_SEGMENT_STARTED:
            self.rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
                md.segment_id, self._now(), S.DELETE_SEGMENT_STARTED, broker, md.custom_metadata))
        self.index_cache.remove(md.segment_id)
        target = md if plugin_custom_metadata is None else RemoteLogSegmentMetadata(
            md.segment_id, md.start_offset, md.end_offset, md.max_timestamp_ms, md.broker_id,
            md.event_timestamp_ms, md.segment_size_in_bytes, md.segment_leader_epochs, md.state,
            plugin_custom_metadata)
        try:
            self.rsm.delete_log_segment_data(target)
        except Exception as e:
            if not best_effort:
                raise
            log.warning("could not delete remote segment %s (retried by the expiration pass): %s",
                        md.segment_id, e)
            return False
        self.rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            md.segment_id, self._now(), S.DELETE_SEGMENT_FINISHED, broker, md.custom_metadata))
        return True

    # -- seed 001 -------------------------------------------------------------------------------

    def _producer_snapshot(self, state: _PartitionState, ulog: UnifiedLog, base: int, next_base: int) -> Path:
        """The producer snapshot at the segment's end (seed 001). The one on disk is uploaded only when
        it is known to hold the producer state: written from a state with no recorded horizon, or one
        whose horizon lies below every producer that can be live at the segment's end. Otherwise, or
        when it is missing or unreadable, it is rebuilt by replaying the segments within
        ``producer.id.expiration.ms`` before the segment's end -- so an empty file goes up only when
        that replay finds no producer."""
        existing = ulog.producer_state.snapshot_file_for(next_base)
        bases = [b for b in ulog.segments.base_offsets if b <= base]
        stamps = [(b, self._max_timestamp(state, ulog, b)) for b in bases]
        start = replay_window_start(stamps, stamps[-1][1], self.config.producer_id_expiration_ms,
                                    ulog.log_start_offset)
        why = self._distrust(existing, ulog, base, start)
        if why is None:
            assert existing is not None
            return existing
        # Only the segments holding offsets in [start, next_base) are opened and replayed.
        window = [ulog.segments.get(b) for i, b in enumerate(bases)
                  if (bases[i + 1] if i + 1 < len(bases) else next_base) > start]
        # Written beside the log dir first (the log manager skips the cache dir), then moved in under
        # the log's lock, so the producer state never lists a half-written snapshot.
        scratch = ulog.dir.parent / CACHE_DIR_NAME / "snapshot-rebuild" / ulog.dir.name
        scratch.mkdir(parents=True, exist_ok=True)
        built = rebuild_snapshot_for_range(window, start, next_base, next_base, scratch)
        target = snapshot_path(ulog.dir, next_base)
        with ulog.lock:
            shutil.move(str(built), str(target))
            ulog.producer_state.refresh_snapshots()
        log.info("rebuilt the producer snapshot %s for segment %d of %s-%d from offset %d (seed 001): %s",
                 target.name, base, state.tp[0], state.tp[1], start, why)
        return target

    @staticmethod
    def _distrust(existing: Path | None, ulog: UnifiedLog, base: int, window_start: int) -> str | None:
        """Why the snapshot on disk cannot be uploaded as the segment's producer state, or None."""
        if existing is None or not existing.exists():
            return "it was missing"
        try:
            entries = read_snapshot(existing)
        except TierlogError as e:
            return f"it was unreadable ({e})"
        horizon = ulog.producer_state_horizon()
        if not snapshot_known_complete(horizon, window_start):
            return (f"it was taken from a producer state that knows no producer below offset {horizon} "
                    f"(its snapshots were lost), and producers from offset {window_start} on can be live")
        if not entries and horizon is None and _legacy_placeholder(ulog, base):
            return "it was an empty placeholder while the segment holds idempotent batches"
        return None

    def _max_timestamp(self, state: _PartitionState, ulog: UnifiedLog, base: int) -> int:
        cached = state.max_timestamps.get(base)
        if cached is None:
            seg = ulog.segments.get(base)
            # Closed segments' time indexes are trimmed; reading the last entry opens nothing else.
            ts = TimeIndex.last_timestamp_from_file(seg.time_index_path) if not seg.indexes_loaded else None
            cached = seg.largest_timestamp if ts is None else ts
            state.max_timestamps[base] = cached
        return cached

    # -- expiration -----------------------------------------------------------------------------

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
        self.expire_all(wait=False)

    def expire_partition(self, topic: str, partition: int, now_ms: int | None = None, *, wait: bool = True
                         ) -> list[tuple[RemoteLogSegmentMetadata, RemoteDeletionReason]]:
        """One expiration pass: retry interrupted deletes, then apply total retention to the remote
        tier, publishing the new log start offset before deleting (KAFKA-FACTS §5.8). Without
        ``wait`` nothing happens while the partition's copy run is in flight."""
        state = self._partitions.get((topic, partition))
        ulog = self.logs.get_log(topic, partition)
        if state is None or ulog is None or ulog.offline_reason is not None:
            return []
        now = self._now() if now_ms is None else now_ms
        if not state.lock.acquire(blocking=wait):
            log.debug("remote retention of %s-%d waits for its copy run in flight", topic, partition)
            return []
        try:
            return self._expire_locked(state, ulog, now)
        finally:
            state.lock.release()

    def _expire_locked(self, state: _PartitionState, ulog: UnifiedLog, now: int
                       ) -> list[tuple[RemoteLogSegmentMetadata, RemoteDeletionReason]]:
        topic, partition = state.tp
        try:
            segments = list(self.rlmm.list_remote_log_segments(state.tip))
            for md in segments:
                if md.state is S.DELETE_SEGMENT_STARTED:
                    self._delete_remote_segment(md, best_effort=False)
            finished = [m for m in segments if m.state is S.COPY_SEGMENT_FINISHED]
            if not finished:
                return []
            policy = RemoteRetentionPolicy.from_config(ulog.config, self.rlmm.log_start_offset(state.tip) or 0)
            plan = remote_deletable_segments(finished, policy, now, self._local_only_bytes(ulog))
            if not plan:
                return []
            new_start = plan[-1][0].end_offset + 1
            self.rlmm.update_log_start_offset(state.tip, new_start, now)
            for md, reason in plan:
                log.info("remote segment deleted topic=%s partition=%d base_offset=%d end_offset=%d reason=%s "
                         "size_bytes=%d", topic, partition, md.start_offset, md.end_offset, reason.value,
                         md.segment_size_in_bytes)
                self._delete_remote_segment(md, best_effort=False)
            # The whole log now starts there: local segments below it go with the next local
            # retention pass (Kafka's updateLogStartOffsetFromRemoteTier).
            if new_start <= ulog.high_watermark:
                ulog.maybe_increment_log_start_offset(new_start, "remote retention")
            return plan
        except (RemoteStorageError, TierlogError, OSError) as e:
            log.error("remote retention of %s-%d failed: %s", topic, partition, e)
            self._record_error(state, f"expiration: {type(e).__name__}: {e}")
            return []

    def _local_only_bytes(self, ulog: UnifiedLog) -> int:
        """Bytes of local segments not (wholly) in the remote tier, newest first until a tiered one."""
        total = 0
        with ulog.lock:
            bases = ulog.segments.base_offsets
            highest = ulog.highest_offset_in_remote_storage
            for i in range(len(bases) - 1, -1, -1):
                upper = bases[i + 1] if i + 1 < len(bases) else ulog.log_end_offset
                if upper - 1 <= highest and i + 1 < len(bases):
                    break
                total += ulog.segments.get(bases[i]).size_bytes
        return total

    def delete_records(self, topic: str, partition: int, offset: int) -> None:
        """Move the partition's log start offset (DeleteRecords): reads below it fail at once, remote
        segments wholly below it go with the next expiration pass."""
        ulog = self.logs.get_log(topic, partition)
        state = self._partitions.get((topic, partition))
        if state is not None:
            self.rlmm.update_log_start_offset(state.tip, offset, self._now())
        if ulog is not None and offset > ulog.log_start_offset:
            ulog.maybe_increment_log_start_offset(offset, "delete records")

    def mark_partition_for_deletion(self, topic: str, partition: int, topic_id: bytes) -> bool:
        """Record durably, before the deletion itself runs (later, retried), that the partition's
        remote data is to go: a broker that restarts before it is done knows to finish it, and a
        partition the metadata does not know without this mark (a restored metadata backup) is
        kept. Only partitions with remote data or a copy task are marked. True if marked."""
        tip = TopicIdPartition(topic_id, topic, partition)
        state = self._partitions.get((topic, partition))
        if tip not in set(self.rlmm.partitions()) and (state is None or state.tip != tip):
            return False
        if self.rlmm.remote_partition_delete_state(tip) is None:
            self._put_partition_delete_state(tip, RemotePartitionDeleteState.DELETE_PARTITION_MARKED)
        return True

    def _put_partition_delete_state(self, tip: TopicIdPartition, state: RemotePartitionDeleteState) -> None:
        self.rlmm.put_remote_partition_delete_metadata(
            RemotePartitionDeleteMetadata(tip, state, self._now(), self.config.broker_id))

    def marked_for_deletion(self, tip: TopicIdPartition) -> bool:
        state = self.rlmm.remote_partition_delete_state(tip)
        return state is not None and state is not RemotePartitionDeleteState.DELETE_PARTITION_FINISHED

    def delete_partition_data(self, topic: str, partition: int, topic_id: bytes | None = None) -> int:
        """Delete every remote segment of a partition whose topic is being deleted (Kafka's
        stopPartitions with delete): DELETE_PARTITION_MARKED, each segment deleted, then
        DELETE_PARTITION_FINISHED. Returns the segments deleted; a failure leaves the rest in
        DELETE_SEGMENT_STARTED or FINISHED and raises, so the caller can retry. So does a copy of
        the partition still in flight (RemoteStorageError): nothing is deleted until it ended."""
        # With the topic id, a topic re-created under the same name meanwhile is not touched.
        tip = self._tip_for(topic, partition) if topic_id is None else TopicIdPartition(topic_id, topic, partition)
        if tip is None:
            return 0
        state = self._partitions.get((topic, partition))
        if state is not None and state.tip == tip:
            self._release((topic, partition), self.logs.get_log(topic, partition))
        # A copy run still uploading (released or not, it stops after the segment it is on) would
        # finish after the listing below, and its objects would belong to no segment. Its end is
        # not waited for here (the caller may be a shared scheduler thread): the caller retries.
        lock = self._segments_lock(tip)
        if not lock.acquire(blocking=False):
            raise RemoteStorageError(f"a copy of {topic}-{partition} to the remote tier is in flight")
        try:
            self._put_partition_delete_state(tip, RemotePartitionDeleteState.DELETE_PARTITION_MARKED)
            deleted = 0
            for md in list(self.rlmm.list_remote_log_segments(tip)):
                self._delete_remote_segment(md, best_effort=False)
                deleted += 1
            self._put_partition_delete_state(tip, RemotePartitionDeleteState.DELETE_PARTITION_FINISHED)
        finally:
            lock.release()
        log.info("deleted %d remote segments of %s-%d", deleted, topic, partition)
        return deleted

    # -- reads ----------------------------------------------------------------------------------

    def _tip_for(self, topic: str, partition: int) -> TopicIdPartition | None:
        state = self._partitions.get((topic, partition))
        if state is not None:
            return state.tip
        for tip in self.rlmm.partitions():
            if tip.topic == topic and tip.partition == partition:
                return tip
        return None

    def remote_log_start_offset(self, topic: str, partition: int) -> int | None:
        """The first offset readable from the remote tier, or None when it holds nothing."""
        tip = self._tip_for(topic, partition)
        if tip is None:
            return None
        floor = self.rlmm.log_start_offset(tip) or 0
        # Segments wholly below the log start offset (DeleteRecords, before the expiry pass deletes
        # them) hold nothing readable.
        first = next((m for m in self.rlmm.list_remote_log_segments(tip)
                      if m.state is S.COPY_SEGMENT_FINISHED and m.end_offset >= floor), None)
        if first is None:
            return None
        return max(first.start_offset, floor)

    def earliest_offset(self, topic: str, partition: int) -> int | None:
        """ListOffsets EARLIEST across both tiers."""
        remote = self.remote_log_start_offset(topic, partition)
        ulog = self.logs.get_log(topic, partition)
        local = None if ulog is None else ulog.log_start_offset
        if remote is None:
            return local
        return remote if local is None else min(remote, local)

    def find_offset_by_timestamp(self, topic: str, partition: int, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``timestamp`` in the remote tier, for
        ListOffsets by time (Kafka's RemoteLogManager#findOffsetByTimestamp): the first finished
        segment whose largest timestamp reaches it is read and its records decoded."""
        from tierlog.records import decode_batch, iter_headers  # decoding is needed only here

        tip = self._tip_for(topic, partition)
        if tip is None:
            return None
        start = self.remote_log_start_offset(topic, partition)
        if start is None:
            return None
        for md in list(self.rlmm.list_remote_log_segments(tip)):
            if md.state is not S.COPY_SEGMENT_FINISHED or md.end_offset < start or md.max_timestamp_ms < timestamp:
                continue
            with self.rsm.fetch_log_segment(md, 0) as stream:
                data = stream.read()
            for header in iter_headers(data):
                if header.max_timestamp < timestamp or header.is_control or header.last_offset < start:
                    continue
                for record in decode_batch(header):
                    if record.timestamp >= timestamp and record.offset >= start:
                        return record.offset, record.timestamp
        return None

    def read(self, topic: str, partition: int, fetch_offset: int, max_bytes: int,
             min_one_message: bool = True) -> bytes | None:
        """The bytes the local log would have returned for this read, from the remote tier; None when
        the offset is not there (the caller answers OFFSET_OUT_OF_RANGE)."""
        info = self.fetch(topic, partition, fetch_offset, max_bytes, min_one_message=min_one_message)
        return None if info is None else info.records

    def fetch(self, topic: str, partition: int, fetch_offset: int, max_bytes: int, *,
              min_one_message: bool = True, read_committed: bool = False) -> RemoteFetchInfo | None:
        tip = self._tip_for(topic, partition)
        if tip is None or fetch_offset < (self.rlmm.log_start_offset(tip) or 0):
            return None
        md = self.rlmm.remote_log_segment_metadata(tip, fetch_offset)
        if md is None:
            return None
        while md is not None:
            records = self._read_segment(md, fetch_offset, max_bytes, min_one_message)
            if records is not None:
                aborted = None
                if read_committed:
                    upper = _next_offset_after(records, md.end_offset + 1)
                    aborted = self.index_cache.collect_aborted_txns(md, fetch_offset, upper).aborted_transactions
                return RemoteFetchInfo(records, md, aborted)
            # No batch at or after the offset in this segment (compaction): the next one.
            md = self.rlmm.remote_log_segment_metadata(tip, md.end_offset + 1)
        return RemoteFetchInfo(b"", None, [] if read_committed else None)

    def _read_segment(self, md: RemoteLogSegmentMetadata, offset: int, max_bytes: int,
                      min_one_message: bool) -> bytes | None:
        """Mirror of LogSegment.read over the remote copy: start at the index position, skip batches
        ending before ``offset``, return up to ``max_bytes`` (the whole first batch if
        ``min_one_message``), possibly ending in a partial batch exactly as the local read does."""
        position = self.index_cache.lookup_offset(md, offset).position
        with self.rsm.fetch_log_segment(md, position) as stream:
            while True:
                head = _read_exact(stream, _READ_AHEAD)
                if len(head) < _READ_AHEAD:
                    return None
                base, length, delta = _SKIP_HEADER.unpack_from(head)
                size = 12 + length
                if length < BATCH_HEADER_SIZE - 12:
                    return None  # a torn or zeroed tail ends the data, as the local iterator does
                if base + delta >= offset:
                    break
                _skip(stream, size - _READ_AHEAD)
                position += size
            adjusted = max(max_bytes, size) if min_one_message else max_bytes
            if adjusted == 0:
                return b""
            fetch_size = min(md.segment_size_in_bytes - position, adjusted)
            if fetch_size <= 0:
                return b""
            if fetch_size <= _READ_AHEAD:
                return head[:fetch_size]
            return head + _read_exact(stream, fetch_size - _READ_AHEAD)

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

    def _status_of(self, tp: TopicPartition, ulog: UnifiedLog | None, state: _PartitionState | None,
                   tip: TopicIdPartition | None) -> PartitionTierStatus:
        finished = [] if tip is None else [m for m in self.rlmm.list_remote_log_segments(tip)
                                           if m.state is S.COPY_SEGMENT_FINISHED]
        highest = max((m.end_offset for m in finished), default=-1)
        lag_segments = lag_bytes = local_bytes = 0
        local_start = leo = None
        if ulog is not None:
            with ulog.lock:
                bases = ulog.segments.base_offsets
                local_bytes = ulog.size_bytes
                local_start, leo = ulog.log_start_offset, ulog.log_end_offset
                for base, _next in candidate_segments(bases, ulog.last_stable_offset, highest, local_start):
                    lag_segments += 1
                    lag_bytes += ulog.segments.get(base).size_bytes
        offline = None if ulog is None else ulog.offline_reason
        task = ("offline" if offline is not None else "disabled" if state is None
                else "stopped" if state.copy_stopped else "active")
        return PartitionTierStatus(
            topic=tp[0], partition=tp[1], topic_id=uuid_to_base64(tip.topic_id) if tip else "",
            copy_task=task, highest_tiered_offset=highest,
            remote_log_start_offset=self.remote_log_start_offset(*tp) if tip else None,
            local_log_start_offset=local_start, log_end_offset=leo, local_bytes=local_bytes,
            remote_bytes=sum(self.uploaded_size(m) for m in finished), remote_segments=len(finished),
            copy_lag_segments=lag_segments, copy_lag_bytes=lag_bytes,
            last_error=state.last_error if state and state.last_error else offline,
            last_error_ms=state.last_error_ms if state else None,
            consecutive_failures=state.consecutive_failures if state else 0,
            segments_copied=state.segments_copied if state else 0,
            bytes_copied=state.bytes_copied if state else 0, copy_errors=state.copy_errors if state else 0,
        )

    def _write_status(self) -> None:
        """Persist what only this process knows (task states and errors) for ``tierlog tier status``."""
        if self.status_path is None:
            return
        entries = {
            f"{s.tp[0]}-{s.tp[1]}": {"copy_task": "stopped" if s.copy_stopped else "active",
                                     "last_error": s.last_error, "last_error_ms": s.last_error_ms,
                                     "consecutive_failures": s.consecutive_failures}
            for s in list(self._partitions.values())
        }
        for (topic, partition), ulog in self.logs.all_logs().items():
            if ulog.offline_reason is not None:
                entries[f"{topic}-{partition}"] = {"copy_task": "offline", "last_error": ulog.offline_reason,
                                                   "last_error_ms": None, "consecutive_failures": 0}
        try:
            write_status_file(self.status_path, {"written_ms": self._now(), "partitions": entries})
        except OSError as e:
            log.warning("could not write %s: %s", self.status_path, e)


# -- status file ------------------------------------------------------------------------------------


def write_status_file(path: Path, payload: Mapping[str, object]) -> None:
    write_framed(path, _STATUS_MAGIC, _STATUS_VERSION, json.dumps(payload, sort_keys=True).encode("utf-8"), sync=False)


def read_status_file(path: Path) -> dict[str, object] | None:
    """The persisted task states and errors, or None if absent or damaged."""
    try:
        found = read_framed(path, _STATUS_MAGIC, {_STATUS_VERSION})
    except FramedFileError:
        return None
    if found is None:
        return None
    loaded = json.loads(found[1])
    return loaded if isinstance(loaded, dict) else None


def status_as_dict(status: PartitionTierStatus) -> dict[str, object]:
    return asdict(status)


# -- stream helpers -----------------------------------------------------------------------------------


def _read_exact(stream: BinaryIO, n: int) -> bytes:
    chunks = []
    while n > 0:
        chunk = stream.read(n)
        if not chunk:
            break
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _skip(stream: BinaryIO, n: int) -> None:
    if n <= 0:
        return
    if stream.seekable():
        stream.seek(n, os.SEEK_CUR)
    else:
        while n > 0:
            chunk = stream.read(min(n, 1 << 20))
            if not chunk:
                return
            n -= len(chunk)


def _next_offset_after(records: bytes, default: int) -> int:
    """The offset after the last whole batch in ``records`` (the upper bound for aborted txns)."""
    pos = 0
    last = None
    while pos + _READ_AHEAD <= len(records):
        base, length, delta = _SKIP_HEADER.unpack_from(records, pos)
        if pos + 12 + length > len(records):
            break
        last = base + delta + 1
        pos += 12 + length
    return default if last is None else last


def _legacy_placeholder(ulog: UnifiedLog, base: int) -> bool:
    """An empty snapshot at the end of a segment that holds idempotent batches cannot be the true
    state. Data dirs whose loader wrote placeholders before horizons were recorded have nothing else
    to tell them by."""
    seg = ulog.segments.get(base)
    return any(h.producer_id >= 0 for h in iter_segment_headers(seg, base))


# -- composition ------------------------------------------------------------------------------------


def default_local_remote_dir(log_dir: Path) -> Path:
    """Where the embedded default keeps the remote tier: beside the first log dir, never inside it
    (the log manager would take its directories for partitions)."""
    return log_dir.parent / f"{log_dir.name}-remote"


def create_remote_log_manager(config: BrokerConfig, logs: LogSource, *, clock: Clock = SYSTEM_CLOCK,
                              scheduler: Scheduler | None = None) -> RemoteLogManager | None:
    """The broker's remote log manager, or None when ``remote.log.storage.system.enable`` is false.
    State lives in the first log dir: ``remote-log-metadata/`` and ``remote-log-index-cache/``."""
    rlm_config = RemoteLogManagerConfig.from_broker_config(config)
    if not rlm_config.system_enable:
        return None
    first_dir = config.log_dirs[0].resolve()
    class_name = config.get_str("remote.log.storage.manager.class.name")
    props = plugin_properties(config.plugin_props, config.get_str("remote.log.storage.manager.impl.prefix"),
                              config.node_id)
    if class_name.endswith("LocalDirectoryRemoteStorageManager"):
        props.setdefault("dir", str(default_local_remote_dir(first_dir)))
    rsm = load_remote_storage_manager(class_name, props)
    metadata_dir = first_dir / METADATA_DIR_NAME
    rlmm = FileRemoteLogMetadataManager(metadata_dir)
    # Threads of its own beside a broker's thread pool; a test's manual scheduler drives both.
    workers = (ThreadScheduler(rlm_config.worker_threads, clock, name="remote-log-manager")
               if isinstance(scheduler, ThreadScheduler) else None)
    return RemoteLogManager(rlm_config, logs, rsm, rlmm, index_cache_dir=first_dir / CACHE_DIR_NAME, clock=clock,
                            scheduler=scheduler, status_path=metadata_dir / STATUS_FILE_NAME, workers=workers)
