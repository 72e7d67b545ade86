"""A partition's log: validated appends with offset assignment, reads, rolls, flushes, truncation,
the log start offset, producer state and the leader-epoch cache (Kafka's UnifiedLog + LocalLog).

Longer than most modules (about 940 lines) because what stays here is one state machine under one
lock: appends, rolls, flushes, reads, the lazy checks of seed 003 and truncation all move or read
the same log end offset, recovery point, active segment and producer state, and each must see the
others' effects (an append checks the segment it rolls to; a read checks the segment it reads; a
truncation rebuilds the producer state appends stage against). The parts with a seam of their own
live beside it: the checks of a produce request's bytes (:mod:`.append_validation`), retention
applied to the log (:mod:`.log_retention`), what the tiered layer may change (:mod:`.log_tiering`),
the durable offset the high watermark follows (:mod:`.high_watermark`) and loading (:mod:`.loader`)."""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from tierlog._util.files import fsync_dir
from tierlog.clock import SYSTEM_CLOCK, Clock
from tierlog.config.definition import INT64_MAX
from tierlog.config.log_config import LogConfig
from tierlog.errors import (
    CorruptIndexError,
    InvalidRecordError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from tierlog.ids import METADATA_TOPIC
from tierlog.records.header import (
    BATCH_HEADER_SIZE,
    CREATE_TIME,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    fast_header_copy,
    set_base_offset,
    set_create_time_max_timestamp,
    set_log_append_time,
    set_max_timestamp,
    set_partition_leader_epoch,
)
from tierlog.scheduler import Scheduler
from tierlog.storage import files
from tierlog.storage.append_validation import (
    check_one_batch,
    header_max_timestamp_fix,
    parse_and_validate,
    record_validation_error,
)
from tierlog.storage.batch_check import BatchProblem
from tierlog.storage.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    PARTITION_METADATA,
    LeaderEpochCheckpointFile,
    PartitionMetadataFile,
)
from tierlog.storage.file_records import FileRecords
from tierlog.storage.high_watermark import DurableOffset, high_watermark_of
from tierlog.storage.io_errors import disk_errors
from tierlog.storage.leader_epoch import LeaderEpochFileCache
from tierlog.storage.log_dir_failure import LogDirFailureChannel, disk_error_of
from tierlog.storage.log_retention import LogRetentionMixin
from tierlog.storage.log_tiering import LogTieringMixin
from tierlog.storage.producer_rebuild import rebuild_producer_state
from tierlog.storage.producer_state import (
    NOTHING_STAGED,
    AppendOrigin,
    BatchMetadata,
    ProducerStateManager,
    StagedAppend,
    StagedBatch,
)
from tierlog.storage.producer_state_horizon import clear_horizon, read_horizon
from tierlog.storage.recompress import PRODUCER as PRODUCER_COMPRESSION
from tierlog.storage.recompress import maybe_recompress
from tierlog.storage.refusal import refuses_partition
from tierlog.storage.segment import FetchDataInfo, LogOffsetMetadata, LogSegment, SegmentSettings
from tierlog.storage.segments import LogSegments
from tierlog.storage.txn_index import AbortedTxn

log = logging.getLogger(__name__)


@dataclass(slots=True)
class LogAppendInfo:
    """What one append did. Not frozen: a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``, ~2 µs per append for these ten."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time_ms: int  # -1 for CreateTime
    log_start_offset: int
    records_count: int
    valid_bytes: int
    duplicate: bool = False
    #: The segment file holding the batches: what a durable acknowledgement waits to see synced.
    sync_file: FileRecords | None = None
    #: That segment's base offset (the durable offset counts its sync once it reaches it).
    sync_segment_base_offset: int = -1


def segment_settings(config: LogConfig, topic: str) -> SegmentSettings:
    """The segment settings of a log of ``topic``. The metadata log is the controller's own and
    KRaft writes it only as record batch v2 (its reader takes nothing else), so there a batch of
    another magic is a damaged magic byte (outside the CRC), truncated at like any damage; in a
    data partition a whole batch of a newer magic may be a newer broker's and refuses the partition."""
    return SegmentSettings(
        index_interval_bytes=config.index_interval_bytes,
        max_index_size=config.segment_index_bytes,
        preallocate_bytes=config.segment_bytes if config.preallocate else 0,
        v2_only=topic == METADATA_TOPIC,
    )


#: The randomness of a log that is given none: segment roll jitter spreads rolls, it needs no seed.
SYSTEM_RANDOM = random.Random()


def random_roll_jitter_ms(config: LogConfig, rng: random.Random = SYSTEM_RANDOM) -> int:
    """Each segment draws its own jitter in [0, min(segment.jitter.ms, segment.ms)) (LogConfig#randomSegmentJitter)."""
    bound = min(config.segment_jitter_ms, config.segment_ms)
    return rng.randrange(bound) if bound > 0 else 0


class UnifiedLog(LogTieringMixin, LogRetentionMixin):
    """One partition's log. All mutation happens under ``lock``; reads take it only briefly."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        segments: LogSegments,
        *,
        log_start_offset: int,
        recovery_point: int,
        next_offset: int,
        producer_state: ProducerStateManager,
        leader_epoch_cache: LeaderEpochFileCache,
        clock: Clock = SYSTEM_CLOCK,
        scheduler: Scheduler | None = None,
        topic_id: bytes | None = None,
        rng: random.Random = SYSTEM_RANDOM,
    ) -> None:
        self.dir = directory
        self.rng = rng
        self.topic, self.partition = files.parse_topic_partition_name(directory.name)
        self.config = config
        self.segments = segments
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self._log_end_offset = next_offset
        #: Below it every record is on disk. A loaded log starts fsynced to its end (the log manager
        #: flushes what recovery kept above the recovery point before serving it).
        self.durable = DurableOffset(next_offset)
        #: Set by the log manager from ``log.durable.acks``: the high watermark follows the durable
        #: offset (records are committed once fsynced) instead of the log end offset.
        self.hw_follows_durable = False
        #: Set by the broker: called when the high watermark moves without an append moving it -- an
        #: fsync, a flush -- on whatever thread moved it, maybe holding this log's lock: it must not block.
        self.on_high_watermark_advanced: Callable[[UnifiedLog], None] | None = None
        self.producer_state = producer_state
        self.leader_epoch_cache = leader_epoch_cache
        self.clock = clock
        self.scheduler = scheduler
        self.topic_id = topic_id
        self.lock = threading.RLock()
        self._unflushed_messages = 0
        self.last_flush_ms = clock.wall_ms()
        # Changed by the remote log manager only through LogTieringMixin's methods.
        self.highest_offset_in_remote_storage = -1
        self.remote_log_enabled = False
        self.copying_up_to = -1
        #: Called with a segment that failed its lazy check, before the earlier ones are checked.
        self.on_corrupt_segment: Callable[[LogSegment, Exception], None] | None = None
        self.deleted = False
        #: .log sizes of segments never materialised, for :meth:`size_bytes_unloaded`.
        self._unloaded_sizes: dict[int, int] = {}
        #: Set when a restart from the remote tier was cut short (log_restore): the remote log manager
        #: runs it again before the partition is served.
        self.pending_restore_offset: int | None = None
        self.offline_reason: str | None = None
        #: Set by the log manager: a disk error here takes the whole log dir offline.
        self.failure_channel: LogDirFailureChannel | None = None
        #: Set by the log manager: called once when a read finds data of a format tierlog does not
        #: read (after a clean shutdown nothing walked the segment at startup), to refuse the partition.
        self.on_refused: Callable[[UnifiedLog, str], None] | None = None
        self.refused_reason: str | None = None

    # -- offsets --------------------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        # A single replica is the whole ISR: what is appended is committed -- once it is fsynced,
        # with durable acknowledgements (high_watermark.py).
        return high_watermark_of(self._log_end_offset, self.durable.offset, self.hw_follows_durable)

    def durable_synced(self, segment_base_offset: int, end_offset: int) -> None:
        """The group commit fsynced the records of the segment at ``segment_base_offset`` below
        ``end_offset`` (called on its sync thread, before the produce is answered)."""
        if self.durable.synced(segment_base_offset, end_offset):
            self._durable_moved()

    def segments_awaiting_sync(self, below_base_offset: int) -> list[tuple[int, int, FileRecords]]:
        """(base offset, next segment's base offset, file) of each closed segment holding records
        between the durable offset and ``below_base_offset``: what must be synced too before records of
        the segment at ``below_base_offset`` count as durable (a roll's own flush runs later, apart)."""
        with self.lock:
            durable = self.durable.offset
            bases = self.segments.base_offsets
            out: list[tuple[int, int, FileRecords]] = []
            for base, next_base in pairwise(bases):
                if base >= below_base_offset:
                    break
                if next_base > durable and self.segments.is_materialized(base):
                    out.append((base, next_base, self.segments.get(base).log))
            return out

    def _durable_moved(self) -> None:
        if not self.hw_follows_durable:
            return
        with self.lock:
            # Transactions completed below the new high watermark stop bounding the LSO.
            self.producer_state.on_high_watermark_updated(self.high_watermark)
        listener = self.on_high_watermark_advanced
        if listener is not None:
            listener(self)

    @property
    def last_stable_offset(self) -> int:
        first_unstable = self.producer_state.first_unstable_offset()
        return self.high_watermark if first_unstable is None else min(first_unstable, self.high_watermark)

    @property
    def active_segment(self) -> LogSegment:
        seg = self.segments.last
        assert seg is not None, "a log always has an active segment"
        return seg

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self.segments)

    def size_bytes_unloaded(self) -> int:
        """:attr:`size_bytes` without materialising the segments nobody has touched yet (seed 003), for
        metrics: their files are stat-ed once, outside the lock, and remembered -- a segment's file
        only changes through its materialised object, whose own size is used from then on."""
        missing: list[int] = []
        with self.lock:
            bases = self.segments.base_offsets
            total = 0
            for base in bases:
                if self.segments.is_materialized(base):
                    total += self.segments.get(base).size_bytes
                else:
                    size = self._unloaded_sizes.get(base)
                    if size is None:
                        missing.append(base)
                    else:
                        total += size
        for base in missing:
            try:
                size = files.log_file(self.dir, base).stat().st_size
            except FileNotFoundError:
                size = 0  # deleted meanwhile: gone from the base offsets next time
            self._unloaded_sizes[base] = size
            total += size
        if len(self._unloaded_sizes) > len(bases) + 64:
            live = set(bases)
            self._unloaded_sizes = {b: n for b, n in self._unloaded_sizes.items() if b in live}
        return total

    @property
    def num_segments(self) -> int:
        return len(self.segments)

    def unchecked_segments(self) -> int:
        """Seed 003: segments whose indexes have not been sanity-checked yet."""
        return sum(
            1 for b in self.segments.base_offsets
            if not self.segments.is_materialized(b) or not self.segments.get(b).checked
        )

    # -- config ---------------------------------------------------------------------------------------

    def update_config(self, config: LogConfig) -> None:
        with self.lock:
            self.config = config
            settings = segment_settings(config, self.topic)
            for seg in self.segments.materialized():
                seg.settings = settings

    # -- append ---------------------------------------------------------------------------------------

    def append_as_leader(
        self, records: bytes | bytearray | memoryview, leader_epoch: int = 0, origin: AppendOrigin = AppendOrigin.CLIENT
    ) -> LogAppendInfo:
        """Validate, assign offsets, check producer state, maybe roll, then write (UnifiedLog#append).
        A disk error on the write or on a segment file's creation takes the log dir offline; a
        record format tierlog does not read refuses the partition (:func:`refuses_partition`)."""
        # Not decorated like the other public methods: their two wrappers cost ~1 µs per call, once
        # per produced partition. Their handling runs in :meth:`_append_failed`, on errors only.
        try:
            config = self.config
            channel = self.failure_channel
            if self.offline_reason is not None or (channel is not None and channel.any_offline):
                self.check_online()  # raises
            checked = None
            if (self.one_batch_path and not config.log_append_time
                    and (origin is AppendOrigin.REPLICATION or config.compression_type == PRODUCER_COMPRESSION)):
                # What a client sends per partition -- one whole uncompressed batch, nothing to
                # rebuild -- checked in one C call, and appended by the one-batch path when its
                # header's max timestamp needs no fix (the general path takes the rest, with the
                # same answer; what was checked is not checked again).
                checked = check_one_batch(records, config, origin is AppendOrigin.CLIENT)
                if checked is not None and (origin is AppendOrigin.REPLICATION
                                            or checked[2] == checked[0].max_timestamp):
                    return self._append_one_batch(records, checked[0], checked[1], checked[2], len(records),
                                                  leader_epoch, origin, config)
            return self._append_as_leader(records, leader_epoch, origin, checked)
        except (OSError, KafkaStorageError) as e:
            self._append_failed(e)
            raise  # not reached: _append_failed raises

    @refuses_partition
    @disk_errors
    def _append_failed(self, e: OSError | KafkaStorageError) -> None:
        """Raise what a failed append raises for ``e``: a roll inside the append maps its OSError to
        KafkaStorageError (io_errors) itself, and the disk error behind it still takes the dir offline."""
        cause = e if isinstance(e, OSError) else disk_error_of(e)
        if cause is None:
            raise e
        raise self._disk_failed(cause, f"append to {self.topic}-{self.partition}") from e

    def _disk_failed(self, e: OSError, action: str) -> KafkaStorageError:
        if self.failure_channel is not None:
            return self.failure_channel.raise_offline(self.dir.parent, e, action)
        return KafkaStorageError(f"{action} failed: {e}")

    def _append_as_leader(self, records: bytes | bytearray | memoryview, leader_epoch: int, origin: AppendOrigin,
                          checked: tuple[BatchHeader, int, int, int, bool] | None) -> LogAppendInfo:
        """:meth:`append_as_leader` of everything its one-batch path does not take (the log known
        online); ``checked``: what check_one_batch answered for ``records``, if it was asked."""
        # Runs once per produced partition, often on the event loop (~25 µs of Python per 16 KiB
        # batch before it was trimmed): lookups are hoisted, and nothing is built that the common
        # case (no recompression, no LogAppendTime, no producer ids) does not use.
        data: bytes | bytearray | memoryview = records
        config = self.config
        log_append_time = config.log_append_time
        from_client = origin is AppendOrigin.CLIENT
        compact = config.compact
        # The clock read here only dates the per-record errors of a batch refused for its keys,
        # which only a compacted topic refuses.
        headers, stats = parse_and_validate(data, config, from_client=from_client,
                                            topic_partition=f"{self.topic}-{self.partition}" if compact else "",
                                            now_ms=self.clock.wall_ms() if compact else None, checked=checked)
        # ``owned``: a buffer of this call's own, whose batches are edited in place. Otherwise the
        # request's bytes are written as they are, behind headers patched in small copies: offsets
        # and the leader epoch lie outside the CRC, and a 1 MiB batch is not copied to change them.
        owned = False
        if origin is not AppendOrigin.REPLICATION and config.compression_type != PRODUCER_COMPRESSION:
            recompressed, headers = maybe_recompress(data, headers, config.compression_type)
            owned, data = recompressed is not data, recompressed
            for h in headers if owned else ():
                if h.size_bytes > config.max_message_bytes:
                    raise RecordTooLargeError(f"record batch of {h.size_bytes} bytes after recompression to "
                                              f"{config.compression_type} exceeds max.message.bytes "
                                              f"{config.max_message_bytes}")
        if log_append_time and not owned:
            # LogAppendTime rewrites timestamps under the CRC: the batches get a copy of their own.
            data = bytearray(data)
            headers = [BatchHeader(data, h.position) for h in headers]
            owned = True
        size = len(data)
        if (len(headers) == 1 and not owned and self.one_batch_path
                and (origin is AppendOrigin.REPLICATION or stats[0].max_timestamp == headers[0].max_timestamp)):
            return self._append_one_batch(data, headers[0], stats[0].min_timestamp, stats[0].max_timestamp, size,
                                          leader_epoch, origin, config)
        with self.lock:
            now_ms = self.clock.wall_ms()
            if config.checks_create_times:
                # Every record's timestamp against message.timestamp.before/after.max.ms (Kafka's
                # LogValidator.validateTimestamp), not the header's, which the producer may have got
                # wrong: the oldest and newest record of a batch bound the rest; records without one
                # (-1) are not checked, nor a batch stamped LogAppendTime. Since Kafka 4
                # (message.timestamp.after.max.ms one hour) this runs for every produced batch: inline.
                before_ms, after_ms = config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms
                for h, st in zip(headers, stats):  # noqa: B905  # equal lengths; strict= costs ~0.1 µs
                    if h.attributes & TIMESTAMP_TYPE_MASK:
                        continue
                    oldest, newest = st.min_timestamp, st.max_timestamp
                    if ((oldest != NO_TIMESTAMP and (now_ms - oldest > before_ms or oldest - now_ms > after_ms))
                            or (newest != NO_TIMESTAMP and (now_ms - newest > before_ms or newest - now_ms > after_ms))):
                        self._refuse_timestamps(h, now_ms, config)
            fix_headers = not log_append_time and origin is not AppendOrigin.REPLICATION
            # Offsets are assigned before the producer checks, which record the batches' offsets.
            offset = self._log_end_offset
            # ``headers`` are this call's own (made by parse_and_validate or the copy above): each
            # becomes the batch as written, its assigned offset and epoch set in place, or is
            # replaced when a field under the CRC changed. Positions stay those within ``data``.
            assigned: list[BatchHeader] = []
            pieces: list[bytes | bytearray | memoryview] = []
            view = memoryview(data)
            # After recompression too: a rebuilt batch is one-for-one with the batch it replaces.
            for h, st in zip(headers, stats):  # noqa: B905  # equal lengths by construction; strict= costs per append
                position = h.position
                fix = header_max_timestamp_fix(h, st) if fix_headers and st.max_timestamp != h.max_timestamp else None
                if owned:
                    assert isinstance(data, bytearray)
                    set_base_offset(data, position, offset)
                    set_partition_leader_epoch(data, position, leader_epoch)
                    if log_append_time:
                        set_log_append_time(data, position, now_ms)
                    elif fix is not None:
                        set_max_timestamp(data, position, CREATE_TIME, fix)
                    if log_append_time or fix is not None:
                        h = BatchHeader(data, position)
                    else:
                        h.base_offset, h.partition_leader_epoch = offset, leader_epoch
                elif fix is None:
                    h.base_offset, h.partition_leader_epoch = offset, leader_epoch
                    pieces += (fast_header_copy(view, position, offset, leader_epoch),
                               view[position + BATCH_HEADER_SIZE:position + h.size_bytes])
                else:
                    end = position + h.size_bytes
                    head = fast_header_copy(view, position, offset, leader_epoch)
                    # Under the CRC: recomputed over the patched header and the body as it came.
                    set_create_time_max_timestamp(head, view[position + BATCH_HEADER_SIZE:end], fix)
                    # The patched fields over the request's bytes: the body (all a reader of
                    # ``buf`` looks at) is the same.
                    h = BatchHeader(head, 0)
                    h.buf, h.position = data, position
                    pieces += (head, view[position + BATCH_HEADER_SIZE:end])
                assigned.append(h)
                offset = h.base_offset + h.last_offset_delta + 1
            first, last = assigned[0], assigned[-1]
            last_offset = last.base_offset + last.last_offset_delta
            producer_state = self.producer_state
            staged: StagedAppend | StagedBatch
            if len(assigned) != 1:
                staged = producer_state.validate_and_stage(assigned, origin)
            elif first.producer_id <= NO_PRODUCER_ID:
                staged = NOTHING_STAGED  # what validate_and_stage answers for batches without producer ids
            else:
                staged = producer_state.validate_and_stage_batch(first, origin)
            duplicate = staged.duplicate
            if duplicate is not None:
                return self._duplicate_appended(duplicate, log_append_time)
            if len(assigned) == 1:
                max_ts, count = first.max_timestamp, first.last_offset_delta + 1
                offset_of_max = last_offset if max_ts > -1 else first.base_offset
            else:
                max_ts, offset_of_max, count = -1, first.base_offset, 0
                for h in assigned:
                    count += h.last_offset_delta + 1
                    if h.max_timestamp > max_ts:
                        max_ts, offset_of_max = h.max_timestamp, h.base_offset + h.last_offset_delta
            segment = self._maybe_roll(size, max_ts, first.base_offset, last_offset, now_ms)
            if leader_epoch >= 0:
                latest_epoch = self.leader_epoch_cache.latest_epoch
                if latest_epoch is None or leader_epoch > latest_epoch:
                    self.leader_epoch_cache.assign(leader_epoch, first.base_offset)
            if owned:
                segment.append(data, assigned)
            else:
                segment.append(pieces, assigned)
            self._appended(segment, staged, last_offset, count, config)
            return LogAppendInfo(first.base_offset, last_offset, max_ts, offset_of_max,
                                 now_ms if log_append_time else -1, self.log_start_offset, count, size,
                                 False, segment.log, segment.base_offset)

    #: The one-batch path of :meth:`_append_as_leader` (False: every append takes the general one;
    #: ``test_append_one_batch.py`` compares the two).
    one_batch_path = True

    def _append_one_batch(self, data: bytes | bytearray | memoryview, h: BatchHeader, oldest: int, newest: int,
                          size: int, leader_epoch: int, origin: AppendOrigin, config: LogConfig) -> LogAppendInfo:
        """:meth:`_append_as_leader` of what a client sends per partition -- one batch, not rebuilt
        (no recompression, no LogAppendTime) and whose header's max timestamp needs no fix -- in
        straight lines, without the lists and loops the general case needs (~1 µs per append).
        Written from ``data`` itself, its header's offset and epoch set in a copy as it is written."""
        with self.lock:
            now_ms = self.clock.wall_ms()
            if config.checks_create_times and not h.attributes & TIMESTAMP_TYPE_MASK:
                # The general path's timestamp check (message.timestamp.before/after.max.ms), for one batch.
                before_ms, after_ms = config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms
                if ((oldest != NO_TIMESTAMP and (now_ms - oldest > before_ms or oldest - now_ms > after_ms))
                        or (newest != NO_TIMESTAMP and (now_ms - newest > before_ms or newest - now_ms > after_ms))):
                    self._refuse_timestamps(h, now_ms, config)
            offset = self._log_end_offset
            h.base_offset, h.partition_leader_epoch = offset, leader_epoch
            count = h.last_offset_delta + 1
            last_offset = offset + count - 1
            staged: StagedAppend | StagedBatch = (
                NOTHING_STAGED if h.producer_id <= NO_PRODUCER_ID
                else self.producer_state.validate_and_stage_batch(h, origin))
            duplicate = staged.duplicate
            if duplicate is not None:
                return self._duplicate_appended(duplicate, False)
            max_ts = h.max_timestamp
            segment = self.segments.last  # _maybe_roll, inline
            assert segment is not None, "a log always has an active segment"
            if not segment.checked:
                self._ensure_checked(segment)
            if segment.should_roll(size, max_ts, last_offset, now_ms, config.segment_bytes, config.max_segment_ms):
                segment = self.roll(offset)
            if leader_epoch >= 0:
                latest_epoch = self.leader_epoch_cache.latest_epoch
                if latest_epoch is None or leader_epoch > latest_epoch:
                    self.leader_epoch_cache.assign(leader_epoch, offset)
            segment.append_batch(data, h, leader_epoch)
            self._appended(segment, staged, last_offset, count, config)
            return LogAppendInfo(offset, last_offset, max_ts, last_offset if max_ts > -1 else offset, -1,
                                 self.log_start_offset, count, size, False, segment.log, segment.base_offset)

    def _duplicate_appended(self, duplicate: BatchMetadata, log_append_time: bool) -> LogAppendInfo:
        """What an append answers for a retried batch it found already written: its first offsets."""
        holding = self._segment_holding(duplicate.first_offset)
        return LogAppendInfo(
            first_offset=duplicate.first_offset, last_offset=duplicate.last_offset,
            max_timestamp=duplicate.timestamp, offset_of_max_timestamp=duplicate.last_offset,
            log_append_time_ms=duplicate.timestamp if log_append_time else -1,
            log_start_offset=self.log_start_offset, records_count=0, valid_bytes=0, duplicate=True,
            sync_file=None if holding is None else holding.log,
            sync_segment_base_offset=-1 if holding is None else holding.base_offset,
        )

    def _appended(self, segment: LogSegment, staged: StagedAppend | StagedBatch, last_offset: int, count: int,
                  config: LogConfig) -> None:
        """After an append's batches are in ``segment``: commit what it staged in the producer state,
        move the log end offset, flush by flush.messages."""
        producer_state = self.producer_state
        if staged is NOTHING_STAGED:
            producer_state.update_map_end_offset(last_offset + 1)  # all commit_staged does for it
        elif type(staged) is StagedBatch:
            producer_state.commit_batch(staged, last_offset)  # commit_staged of it: it completes nothing
        else:
            for completion in producer_state.commit_staged(staged, last_offset):
                if completion.is_aborted:
                    txn = completion.txn
                    segment.txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset,
                                                        completion.last_stable_offset))
        self._log_end_offset = last_offset + 1
        # Without durable acknowledgements the high watermark moves with the log end: completed
        # transactions below it stop bounding the last stable offset (Kafka's onHighWatermarkUpdated).
        # With them it moves at the fsync (durable_synced), and so does this.
        producer_state.on_high_watermark_updated(
            min(self.durable.offset, last_offset + 1) if self.hw_follows_durable else last_offset + 1)
        self._unflushed_messages += count
        if self._unflushed_messages >= config.flush_messages:
            self.flush()

    def _segment_holding(self, offset: int) -> LogSegment | None:
        """The materialised segment holding ``offset`` (a retried batch may still await its sync)."""
        seg = self.segments.floor(offset)
        return seg if seg is not None and self.segments.is_materialized(seg.base_offset) else None

    def _refuse_timestamps(self, header: BatchHeader, now_ms: int, config: LogConfig) -> None:
        """Raise Kafka's error for a batch whose oldest or newest record timestamp is out of range:
        which records, with Kafka's messages (KIP-467), decoded only on this refusing path."""
        error = record_validation_error(header, config, f"{self.topic}-{self.partition}", now_ms)
        assert error is not None, "the batch's oldest or newest record is out of range"
        raise error

    def _maybe_roll(self, size: int, max_ts: int, first_offset: int, last_offset: int, now_ms: int) -> LogSegment:
        seg = self.segments.last  # not active_segment: its property and assertion cost ~0.1 µs per append
        assert seg is not None, "a log always has an active segment"
        if not seg.checked:
            self._ensure_checked(seg)
        config = self.config
        if seg.should_roll(size, max_ts, last_offset, now_ms, config.segment_bytes, config.max_segment_ms):
            return self.roll(first_offset)
        return seg

    # -- roll, flush ----------------------------------------------------------------------------------

    @refuses_partition
    @disk_errors
    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Close the active segment and start a new one at max(expected, LEO); snapshot producer state."""
        with self.lock:
            new_offset = max(expected_next_offset or 0, self._log_end_offset)
            active = self.active_segment
            if active.base_offset == new_offset and active.size_bytes == 0:
                return active
            for stale in (files.log_file(self.dir, new_offset), files.index_file(self.dir, new_offset),
                          files.time_index_file(self.dir, new_offset), files.txn_index_file(self.dir, new_offset)):
                if stale.exists():
                    log.warning("deleting stale file %s before rolling", stale)
                    stale.unlink()
            active.on_become_inactive()
            self.producer_state.update_map_end_offset(new_offset)
            self._take_producer_snapshot(sync=False)
            seg = LogSegment(self.dir, new_offset, segment_settings(self.config, self.topic),
                             created_ms=self.clock.wall_ms(),
                             roll_jitter_ms=random_roll_jitter_ms(self.config, self.rng), create=True)
            self.segments.add(seg)
            log.info("segment rolled topic=%s partition=%d base_offset=%d previous_base_offset=%d "
                     "previous_size_bytes=%d", self.topic, self.partition, new_offset, active.base_offset,
                     active.size_bytes)
        # Kafka flushes the rolled segment asynchronously so the append path does not wait on fsync.
        if self.scheduler is not None:
            self.scheduler.schedule(f"flush-{self.topic}-{self.partition}", lambda: self.flush(new_offset), 0)
        else:
            self.flush(new_offset)
        return seg

    @disk_errors
    def flush(self, offset: int | None = None) -> None:
        """fsync every segment holding offsets below ``offset`` (default LEO); advance the recovery point.

        Never in an offline log dir: after a failed fsync a second one may "succeed" over pages the
        kernel already dropped, and the recovery point must not move past them.

        The segments' data is written back first *without* the log's lock (as Kafka's
        ``UnifiedLog.flush`` fsyncs outside its lock and takes it only to move the recovery point):
        a rolled 1 GiB segment of ``log.durable.acks=none`` appends took 170-420 ms to write back,
        and every append to the partition waited behind the lock meanwhile (bench/latency.py: one
        produce request per roll answered after ~400 ms, the client's queue grew to 40-85 k
        records). The fsyncs under the lock then find little or nothing left to write."""
        with self.lock:
            if self.deleted:
                return
            if self.failure_channel is not None:
                self.failure_channel.check(self.dir.parent)
            target = self._flush_target(offset)
            dirty = [] if target is None else self._segments_to_flush(target)
        try:
            for seg in dirty:
                seg.log.sync_data()  # under the file's own lock: a concurrent close or delete is safe
            with self.lock:
                if self.deleted:
                    return
                if self.failure_channel is not None:
                    self.failure_channel.check(self.dir.parent)  # another flush may have failed meanwhile
                self._flush(offset)
        except (OSError, KafkaStorageError) as e:
            cause = e if isinstance(e, OSError) else disk_error_of(e)
            if cause is None:
                raise
            raise self._disk_failed(cause, f"flush of {self.topic}-{self.partition}") from e

    def _flush_target(self, offset: int | None) -> int | None:
        """The offset a flush of ``offset`` (default LEO) makes durable; None when an explicit
        ``offset`` is already below the recovery point (nothing to do). Called holding the lock."""
        target = self._log_end_offset if offset is None else offset
        return None if target <= self.recovery_point and offset is not None else target

    def _segments_to_flush(self, target: int) -> list[LogSegment]:
        """The materialised segments holding offsets below ``target``, from the recovery point on
        (the active one included): what a flush fsyncs. Called holding the lock."""
        out = []
        for seg in self.segments.from_offset(self.recovery_point):
            if seg.base_offset >= target and seg is not self.active_segment:
                break
            if self.segments.is_materialized(seg.base_offset):
                out.append(seg)
            if seg.base_offset >= target:
                break
        return out

    def _flush(self, offset: int | None) -> None:
        with self.lock:
            target = self._flush_target(offset)
            if target is None:
                return
            for seg in self._segments_to_flush(target):
                seg.flush()
                if seg.log.needs_dir_sync:
                    # A new segment's entry (and a new partition dir's) must survive a power cut
                    # too (Kafka's LocalLog.flush syncs the dir after a roll).
                    fsync_dir(self.dir)
                    fsync_dir(self.dir.parent)
                    seg.log.needs_dir_sync = False
            self.producer_state.flush_snapshots()
            if target > self.recovery_point:
                self.recovery_point = target
            if self.durable.flushed(target):
                self._durable_moved()
            if offset is None:
                self._unflushed_messages = 0
            self.last_flush_ms = self.clock.wall_ms()

    def maybe_flush_by_time(self, now_ms: int) -> None:
        if self._unflushed_messages > 0 and now_ms - self.last_flush_ms >= self.config.flush_ms:
            self.flush()

    # -- read -----------------------------------------------------------------------------------------

    @refuses_partition
    @disk_errors
    def read(self, start_offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_message: bool = True) -> FetchDataInfo:
        """Read from ``start_offset`` up to ``max_bytes``, below the high watermark by default.

        Returns a file region so the broker can send it without copying it through Python. The
        segments are read under the log's lock, which retention and the cleaner hold while they
        delete or replace segments, so a read never finds its segment's file closed under it (with
        ``file.delete.delay.ms=0`` the files go the moment the segment does: the read then either
        went first or finds its offset below the new log start, OFFSET_OUT_OF_RANGE). The region
        stays valid only while the caller holds the lock: take its bytes (or a duplicate of its
        descriptor) before releasing it, as :meth:`read_bytes` and the Fetch path do."""
        end_offset = self.high_watermark if max_offset is None else max_offset
        self.check_online()
        with self.lock:
            return self._read_locked(start_offset, end_offset, max_bytes, min_one_message)

    def _read_locked(self, start_offset: int, end_offset: int, max_bytes: int, min_one_message: bool) -> FetchDataInfo:
        if start_offset == end_offset or start_offset == self._log_end_offset:
            return FetchDataInfo(LogOffsetMetadata(start_offset), None)
        if start_offset > self._log_end_offset or start_offset < self.log_start_offset:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is outside [{self.log_start_offset}, {self._log_end_offset}] "
                f"of {self.topic}-{self.partition}"
            )
        if start_offset > end_offset:
            # Past the high watermark (or the LSO) but within the log: nothing to serve yet (the
            # bound below only cuts the segment holding it, not a later one).
            return FetchDataInfo(LogOffsetMetadata(start_offset), None)
        segment = self.segments.floor(start_offset)
        while segment is not None:
            self._ensure_checked(segment)
            max_position: int | None = None
            next_base = self.segments.next_base_offset(segment.base_offset)
            if end_offset < self._log_end_offset and (next_base is None or end_offset < next_base):
                pos = segment.translate_offset(end_offset)
                max_position = pos.position if pos is not None else None
            try:
                info = segment.read(start_offset, max_bytes, max_position, min_one_message,
                                    upper_offset=next_base)
            finally:
                if segment.damage is not None and not segment.damage_reported:
                    self._report_damage(segment, next_base)
            if info is not None:
                return info
            segment = self.segments.higher(segment.base_offset)
        return FetchDataInfo(LogOffsetMetadata(start_offset), None)

    def refuse(self, reason: str) -> None:
        """Refuse the partition once an operation finds data of a format tierlog does not read, as
        startup refuses it (each public method that reads segments is :func:`refuses_partition`):
        offline from now on, so no append writes a v2 batch after that data (which would make it
        read as a damaged magic byte, and be cut off, at the next recovery)."""
        with self.lock:
            if self.refused_reason is not None:
                return
            self.refused_reason = reason
            self.offline_reason = reason
        if self.on_refused is not None:
            self.on_refused(self, reason)

    # -- aborted transactions (read_committed fetches) --------------------------------------------

    def fetch_upper_bound_offset(self, info: FetchDataInfo) -> int:
        """An offset no batch of ``info`` reaches (Kafka's addAbortedTransactions bound): the offset
        of the first index entry past the read, else the next segment's base, else the log end. An
        over-estimate only adds aborted transactions the client ignores."""
        region = info.records
        base = info.offset_metadata.segment_base_offset
        with self.lock:
            if region is not None and base >= 0 and self.segments.next_base_offset(base - 1) == base:
                segment = self.segments.get(base)
                found = segment.offset_index.fetch_upper_bound_offset(region.position, region.size)
                if found is not None:
                    return found.offset
                after = self.segments.next_base_offset(base)
                if after is not None:
                    return after
            return self._log_end_offset

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions in the local transaction indexes that overlap
        [``start_offset``, ``upper_bound_offset``): from the segment holding ``start_offset`` on,
        until a segment's entries prove the rest cannot matter (LocalLog.collectAbortedTransactions).
        A later segment can hold the ABORT of a transaction that began in the read, so the walk goes
        on past the bound; segments never touched are not opened when they have no ``.txnindex``."""
        with self.lock:
            bases = self.segments.base_offsets
        floor = max((b for b in bases if b <= start_offset), default=bases[0] if bases else None)
        found: list[AbortedTxn] = []
        for base in bases:
            if floor is None or base < floor:
                continue
            with self.lock:
                if self.segments.next_base_offset(base - 1) != base:
                    continue  # deleted meanwhile
                if (not self.segments.is_materialized(base)
                        and not files.txn_index_file(self.dir, base).exists()):
                    continue
                segment = self.segments.get(base)
            result = segment.txn_index.collect_aborted_txns(start_offset, upper_bound_offset)
            found += result.aborted_transactions
            if result.is_complete:
                break
        return found

    def _report_damage(self, segment: LogSegment, next_base: int | None) -> None:
        """Say once, naming the partition, where a read found damaged data; then check every earlier
        segment's indexes (seed 003: a corrupt segment means the ones before it get checked)."""
        with self.lock:
            problem = segment.damage
            if problem is None or segment.damage_reported:
                return
            segment.damage_reported = True
            end = next_base if next_base is not None else self._log_end_offset
            if problem.torn:
                log.error("damaged segment topic=%s partition=%d (%s-%d): %s ends inside a batch at byte %d (%s); "
                          "offsets %d to %d are lost, reads go on at %d", self.topic, self.partition, self.topic,
                          self.partition, segment.log.path, problem.position, problem.reason, problem.offset,
                          end - 1, end)
            else:
                log.error("damaged segment topic=%s partition=%d (%s-%d): %s at byte %d, offset %d: %s; the batches "
                          "before it are served, fetches of the damaged batch get CORRUPT_MESSAGE (a consumer can "
                          "seek past it; the segment holds offsets up to %d)", self.topic, self.partition, self.topic,
                          self.partition, segment.log.path, problem.position, problem.offset, problem.reason, end - 1)
            for earlier in self.segments.lower(segment.base_offset):
                self._check_segment(earlier)

    def read_bytes(self, start_offset: int, max_bytes: int = 1 << 30) -> bytes:
        """The bytes of :meth:`read`, taken under the log's lock: a segment deleted meanwhile
        (``file.delete.delay.ms=0``) cannot close the file before they are read."""
        with self.lock:
            return self.read(start_offset, max_bytes).read_bytes()

    @refuses_partition
    @disk_errors
    def fetch_offset_by_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``timestamp`` (ListOffsets). Under the
        log's lock, as a read: the active segment's indexes are appended to without their own locks
        (OffsetIndex.append), and a time index entry found damaged here rebuilds them."""
        with self.lock:
            for seg in list(self.segments):
                self._ensure_checked(seg)
                if seg.size_bytes == 0 or seg.largest_timestamp < timestamp:
                    continue
                found = seg.find_offset_by_timestamp(timestamp, self.log_start_offset)
                if found is not None:
                    return found
            return None

    @refuses_partition
    @disk_errors
    def max_timestamp_and_offset(self) -> tuple[int, int]:
        best = (-1, -1)
        with self.lock:  # the active segment's largest timestamp moves with each append
            for seg in self.segments:
                self._ensure_checked(seg)
                if seg.size_bytes and seg.max_timestamp_so_far > best[0]:
                    best = (seg.max_timestamp_so_far, seg.offset_of_max_timestamp_so_far)
        return best

    @property
    def appends_write_only(self) -> bool:
        """Whether an append now would do no more than write to the page cache (and the indexes):
        the log open and online, its active segment checked, and no flush.messages fsync to run.
        (A roll may still come due.) The broker then appends on its event loop."""
        return (not self.deleted and self.offline_reason is None and self.active_segment.checked
                and self.config.flush_messages == INT64_MAX)

    def assigns_leader_epoch(self, leader_epoch: int) -> bool:
        """Whether an append as leader in ``leader_epoch`` would start a new epoch here: the first
        batch of a new log, or of a new leadership, writes (and fsyncs) the epoch checkpoint."""
        if leader_epoch < 0:
            return False
        latest = self.leader_epoch_cache.latest_epoch
        return latest is None or leader_epoch > latest

    def check_online(self) -> None:
        """Raise KafkaStorageError if the log, or its log dir, is offline."""
        reason = self.offline_reason
        if reason is not None:
            raise KafkaStorageError(f"{self.topic}-{self.partition} is offline: {reason}")
        channel = self.failure_channel
        if channel is not None and channel.any_offline:
            channel.check(self.dir.parent)

    def producer_state_horizon(self) -> int | None:
        """The offset below which this log's producer state knows no producer (its snapshots were
        lost; see producer_state_horizon), or None when its snapshots hold the full state."""
        with self.lock:
            horizon = read_horizon(self.dir, self._log_end_offset)
            if horizon is not None and horizon <= self.log_start_offset:
                clear_horizon(self.dir)  # nothing below the log start is needed any more
                return None
            return horizon

    def _take_producer_snapshot(self, *, sync: bool) -> None:
        path = self.producer_state.take_snapshot(sync=sync)
        if path is not None:
            log.info("producer snapshot written topic=%s partition=%d offset=%d producers=%d", self.topic,
                     self.partition, self.producer_state.map_end_offset, self.producer_state.active_producers_count)

    # -- seed 003: lazy checking ----------------------------------------------------------------------

    def _ensure_checked(self, segment: LogSegment) -> None:
        if segment.checked:
            return
        with self.lock:
            self._check_segment(segment)

    @refuses_partition
    def check_all_batches(self, segment: LogSegment) -> BatchProblem | None:
        """Check the segment's indexes if startup left them unchecked (seed 003) and every batch not
        known good (CRC, lengths, offsets), e.g. before its files are uploaded to the remote tier;
        damage is reported as a read would report it."""
        self._ensure_checked(segment)
        next_base = self.segments.next_base_offset(segment.base_offset)
        problem = segment.check_all_batches(next_base)
        if problem is not None:
            self._report_damage(segment, next_base)
        return problem

    def _check_segment(self, segment: LogSegment) -> None:
        if segment.checked:
            return
        next_base = self.segments.next_base_offset(segment.base_offset)
        try:
            segment.sanity_check(next_base, active=next_base is None)
            segment.checked = True
        except CorruptIndexError as e:
            log.warning("segment %s of %s-%d failed its check (%s); rebuilding its indexes and checking "
                        "every earlier segment first", segment.base_offset, self.topic, self.partition, e)
            if self.on_corrupt_segment is not None:
                self.on_corrupt_segment(segment, e)
            # An inactive segment keeps its bytes: damage found while rebuilding is marked, not cut off.
            segment.recover(upper_offset=next_base, truncate=next_base is None)
            if next_base is not None:
                segment.on_become_inactive()
            if segment.damage is not None:
                self._report_damage(segment, next_base)
            # KIP-263: corruption in one segment forces a check of every earlier one before access.
            for earlier in self.segments.lower(segment.base_offset):
                self._check_segment(earlier)

    @refuses_partition
    def check_some_segments(self, limit: int) -> int:
        """The background checker's step: check up to ``limit`` unchecked segments, oldest first."""
        done = 0
        for base in self.segments.base_offsets:
            if done >= limit:
                break
            seg = self.segments.get(base)
            if not seg.checked:
                was_loaded = seg.indexes_loaded
                with self.lock:
                    self._check_segment(seg)
                    if not was_loaded and seg is not self.active_segment:
                        seg.release_indexes()  # keep descriptors bounded while sweeping
                done += 1
        return done

    # -- log start offset, truncation -----------------------------------------------------------------

    @refuses_partition
    @disk_errors
    def maybe_increment_log_start_offset(self, new_offset: int, reason: str = "") -> bool:
        with self.lock:
            if new_offset > self.high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot advance the log start offset to {new_offset}, past the high watermark {self.high_watermark}"
                )
            if new_offset <= self.log_start_offset:
                return False
            log.info("log start offset of %s-%d: %d -> %d (%s)", self.topic, self.partition,
                     self.log_start_offset, new_offset, reason)
            self.log_start_offset = new_offset
            self.leader_epoch_cache.truncate_from_start(new_offset)
            self.producer_state.on_log_start_offset_incremented(new_offset)
            return True

    @refuses_partition
    def truncate_to(self, target_offset: int) -> bool:
        """Remove everything at or after ``target_offset``; reload producer state to match."""
        with self.lock:
            if target_offset >= self._log_end_offset:
                return False
            first = self.segments.first
            if first is None or target_offset < first.base_offset:
                self.truncate_fully_and_start_at(target_offset)
                return True
            for seg in list(self.segments):
                if seg.base_offset > target_offset:
                    self.segments.remove(seg.base_offset)
                    seg.delete_files()
            active = self.active_segment
            self._ensure_checked(active)
            active.truncate_to(target_offset)
            self._log_end_offset = target_offset
            self.durable.truncated(target_offset)
            self.recovery_point = min(self.recovery_point, target_offset)
            self.leader_epoch_cache.truncate_from_end(target_offset)
            rebuild_producer_state(self.producer_state, self.segments, self.log_start_offset, target_offset,
                                   self.clock.wall_ms(), reload_from_clean_shutdown=False,
                                   keep_start_snapshot=self.config.remote_storage_enable)
            self.producer_state.on_high_watermark_updated(self.high_watermark)
            return True

    @refuses_partition
    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        with self.lock:
            for seg in list(self.segments):
                self.segments.remove(seg.base_offset)
                seg.delete_files()
            seg = LogSegment(self.dir, new_offset, segment_settings(self.config, self.topic),
                             created_ms=self.clock.wall_ms(),
                             roll_jitter_ms=random_roll_jitter_ms(self.config, self.rng), create=True)
            self.segments.add(seg)
            self._log_end_offset = new_offset
            self.durable.reset(new_offset)
            self.log_start_offset = new_offset
            self.recovery_point = new_offset
            self.leader_epoch_cache.clear_and_flush()
            self.producer_state.truncate_fully_and_start_at(new_offset)

    # -- lifecycle ------------------------------------------------------------------------------------

    def write_partition_metadata(self, topic_id: bytes) -> None:
        self.topic_id = topic_id
        PartitionMetadataFile(self.dir / PARTITION_METADATA).write(topic_id)

    @refuses_partition
    def close(self, *, sync: bool = True) -> None:
        """Clean shutdown of the log: the active segment's final time index entry and trims, a
        producer snapshot at the LEO, files closed. With ``sync`` everything is fsynced and the
        recovery point reaches the LEO; without, the caller syncs the filesystem once for many logs
        (LogManager.shutdown) and then calls :meth:`mark_synced`."""
        with self.lock:
            if self.deleted:
                return
            # The active segment keeps its preallocated index size on disk only while open. Trimmed
            # before the flush, so the fsyncs cover the trims too: a trim lost in a power cut after
            # the clean-shutdown marker would leave KAFKA-19200's untrimmed index behind.
            self.active_segment.on_become_inactive()
            if sync:
                self.flush()
            self.producer_state.update_map_end_offset(self._log_end_offset)
            self._take_producer_snapshot(sync=sync)
            for seg in self.segments.materialized():
                seg.close()

    def mark_synced(self) -> None:
        """Everything this log wrote is on disk (its filesystem was synced): the recovery point
        reaches the log end offset."""
        with self.lock:
            self.recovery_point = max(self.recovery_point, self._log_end_offset)
            if self.durable.flushed(self._log_end_offset):
                self._durable_moved()

    def delete(self) -> None:
        with self.lock:
            for seg in list(self.segments):
                seg.delete_files()
            self.segments = LogSegments(_no_segment)
            self.deleted = True


def _no_segment(base_offset: int) -> LogSegment:
    raise KeyError(f"the log was deleted; no segment {base_offset}")


def leader_epoch_cache_for(directory: Path) -> LeaderEpochFileCache:
    return LeaderEpochFileCache(LeaderEpochCheckpointFile(directory / LEADER_EPOCH_CHECKPOINT))


__all__ = ["InvalidRecordError", "LogAppendInfo", "UnifiedLog", "leader_epoch_cache_for", "parse_and_validate"]
