"""Idempotent and transactional producer state of one partition (Kafka's ProducerStateManager).

Longer than most modules (about 810 lines) on purpose: the staging of an append, the ongoing and
completed transactions and the last stable offset are one state machine whose checks (KAFKA-FACTS
§4.2) must see each other; the snapshot format and the rebuild already live in their own modules.

The state answers three questions on the append path: is this batch a retry of one already written
(duplicate detection over the last 5 batches of each producer), is it acceptable (epoch, sequence and
transaction checks, KAFKA-FACTS §4.2), and where does the last stable offset stand. It is rebuilt at
startup from the newest ``.snapshot`` file plus a replay of the batch headers written after it
(``producer_rebuild``), so every input it needs is in the 61-byte batch header, except the marker of
a control batch, which is read from that batch's first record.

How the log drives it (all calls under the partition lock; the manager does no locking of its own):

* load: ``psm = ProducerStateManager(dir, producer_id_expiration_ms)``;
  ``psm.remove_stray_snapshots(segment_base_offsets)``; ``producer_rebuild.rebuild_producer_state(psm,
  segments, log_start_offset, log_end_offset, now_ms, reload_from_clean_shutdown=had_clean_shutdown)``;
* append: ``staged = validate_and_stage(headers, origin)`` **after** offsets have been assigned and
  **before** any byte is written; if ``staged.duplicate`` is set, write nothing and answer with its
  offsets; otherwise write, then ``commit_staged(staged, last_offset)`` and put the aborted
  :class:`TxnCompletion` entries it returns into the segment's transaction index;
* roll: ``update_map_end_offset(new_base)``, ``take_snapshot(sync=False)``, later ``flush_snapshots()``
  from the flush the roll schedules;
* close: ``update_map_end_offset(log_end_offset)``, ``take_snapshot()``;
* segment deletion: ``remove_and_mark_snapshot_for_deletion(segment.base_offset)``, delete the returned
  path after ``file.delete.delay.ms``; then ``on_log_start_offset_incremented(new_log_start)``;
* truncation: ``rebuild_producer_state(psm, segments, log_start_offset, target_offset, now_ms,
  reload_from_clean_shutdown=False)`` (it calls ``truncate_and_reload`` itself), or
  ``truncate_fully_and_start_at(offset)`` when everything goes;
* periodically: ``remove_expired_producers(now_ms)``; on a high-watermark move
  ``on_high_watermark_updated(hw)``.
"""

from __future__ import annotations

import enum
import logging
import struct
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

from tierlog._util.files import write_atomic
from tierlog._util.varint import read_varint, read_varlong
from tierlog.errors import (
    CorruptRecordError,
    CorruptSnapshotError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from tierlog.records.control import EndTransactionMarker
from tierlog.records.header import (
    BATCH_HEADER_SIZE,
    CONTROL_MASK,
    INT32_MAX,
    LOG_APPEND_TIME,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    TRANSACTIONAL_MASK,
    BatchHeader,
    decrement_sequence,
)
from tierlog.storage.producer_snapshot import (
    SnapshotEntry,
    SnapshotFile,
    SnapshotFiles,
    read_snapshot_entries,
    snapshot_path,
    write_snapshot_entries,
)

log = logging.getLogger(__name__)

#: A NamedTuple built without its Python-level ``__new__``, on the append path.
_new_tuple = tuple.__new__
NUM_BATCHES_TO_RETAIN = 5  # the producer's max.in.flight.requests.per.connection bound for idempotence
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000
NO_COORDINATOR_EPOCH = -1

CONTROL_TYPE_ABORT = 0
CONTROL_TYPE_COMMIT = 1


class AppendOrigin(enum.Enum):
    CLIENT = "client"  # produce requests: duplicate detection and every check
    COORDINATOR = "coordinator"  # transaction markers and group-coordinator writes: epoch checks only
    REPLICATION = "replication"  # follower fetches and log loading: the leader already validated, never raise


class BatchMetadata(NamedTuple):
    """What is remembered of one written batch: enough to answer a retry with the original offsets.

    A NamedTuple rather than a frozen dataclass because one is built per replayed batch and tuple
    construction is several times cheaper.
    """

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class ProducerStateEntry:
    """Mutable per-producer state. An epoch change clears the batch window, because sequences restart."""

    __slots__ = (
        "batch_metadata", "coordinator_epoch", "current_txn_first_offset", "last_timestamp",
        "producer_epoch", "producer_id",
    )

    def __init__(
        self,
        producer_id: int,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        batch_metadata: Iterable[BatchMetadata] = (),
        coordinator_epoch: int = NO_COORDINATOR_EPOCH,
        last_timestamp: int = NO_TIMESTAMP,
        current_txn_first_offset: int | None = None,
    ) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.batch_metadata: deque[BatchMetadata] = deque(batch_metadata, maxlen=NUM_BATCHES_TO_RETAIN)
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset

    @classmethod
    def empty(cls, producer_id: int) -> ProducerStateEntry:
        return cls(producer_id)

    def copy_without_batches(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id, self.producer_epoch, (), self.coordinator_epoch, self.last_timestamp,
            self.current_txn_first_offset,
        )

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id, self.producer_epoch, self.batch_metadata, self.coordinator_epoch,
            self.last_timestamp, self.current_txn_first_offset,
        )

    @property
    def is_empty(self) -> bool:
        return not self.batch_metadata

    @property
    def first_seq(self) -> int:
        return self.batch_metadata[0].first_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batch_metadata[-1].last_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def first_data_offset(self) -> int:
        return self.batch_metadata[0].first_offset if self.batch_metadata else -1

    @property
    def last_data_offset(self) -> int:
        return self.batch_metadata[-1].last_offset if self.batch_metadata else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batch_metadata[-1].offset_delta if self.batch_metadata else 0

    def maybe_update_producer_epoch(self, producer_epoch: int) -> bool:
        if self.producer_epoch != producer_epoch:
            self.batch_metadata.clear()
            self.producer_epoch = producer_epoch
            return True
        return False

    def add_batch(self, producer_epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int) -> None:
        self.maybe_update_producer_epoch(producer_epoch)
        # deque(maxlen=5) drops the oldest entry, which is Kafka's NUM_BATCHES_TO_RETAIN window
        self.batch_metadata.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def update(self, next_entry: ProducerStateEntry) -> None:
        """Merge the entry a ProducerAppendInfo built on top of this one."""
        self.maybe_update_producer_epoch(next_entry.producer_epoch)
        self.batch_metadata.extend(next_entry.batch_metadata)
        self.coordinator_epoch = next_entry.coordinator_epoch
        self.current_txn_first_offset = next_entry.current_txn_first_offset
        self.last_timestamp = next_entry.last_timestamp

    def find_duplicate_batch(self, header: BatchHeader) -> BatchMetadata | None:
        if header.producer_epoch != self.producer_epoch:
            return None
        return self.batch_with_sequence_range(header.base_sequence, header.last_sequence)

    def batch_with_sequence_range(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for metadata in self.batch_metadata:
            if metadata.first_seq == first_seq and metadata.last_seq == last_seq:
                return metadata
        return None

    def _key(self) -> tuple[object, ...]:
        return (
            self.producer_id, self.producer_epoch, tuple(self.batch_metadata), self.coordinator_epoch,
            self.last_timestamp, self.current_txn_first_offset,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ProducerStateEntry):
            return NotImplemented
        return self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (
            f"ProducerStateEntry(producer_id={self.producer_id}, epoch={self.producer_epoch}, "
            f"batches={list(self.batch_metadata)}, coordinator_epoch={self.coordinator_epoch}, "
            f"last_timestamp={self.last_timestamp}, txn_first_offset={self.current_txn_first_offset})"
        )


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # offset of the COMMIT/ABORT marker
    is_aborted: bool


@dataclass(frozen=True, slots=True)
class TxnCompletion:
    """A transaction ended by an append, with the last stable offset at that moment: an aborted one is
    written to the transaction index as (producer_id, first_offset, last_offset, last_stable_offset)."""

    txn: CompletedTxn
    last_stable_offset: int

    @property
    def is_aborted(self) -> bool:
        return self.txn.is_aborted


@dataclass(slots=True)
class TxnMetadata:
    producer_id: int
    first_offset: int
    last_offset: int | None = None


class EndTxnMarker(NamedTuple):
    control_type: int  # CONTROL_TYPE_ABORT or CONTROL_TYPE_COMMIT
    coordinator_epoch: int
    timestamp: int  # the marker record's timestamp, which becomes the producer's last timestamp


def read_end_txn_marker(header: BatchHeader) -> EndTxnMarker | None:
    """The end-transaction marker held by a control batch, or None for an empty control batch (the
    cleaner can leave one behind). Only the first record is read: markers are written uncompressed by
    the broker and the log keeps control batches uncompressed, so the header-only replay stays cheap.
    """
    if header.records_count == 0:
        return None
    if header.compression != 0:
        raise CorruptRecordError(
            f"control batch at offset {header.base_offset} is compressed; decode it and pass the marker"
        )
    start = header.position + BATCH_HEADER_SIZE
    end = header.position + header.size_bytes
    if end > len(header.buf):
        raise CorruptRecordError(f"control batch at offset {header.base_offset} is truncated")
    # A copy of a few dozen bytes keeps no view into the (possibly memory-mapped) segment alive.
    body = bytes(header.buf[start:end])
    try:
        _length, pos = read_varint(body, 0)
        pos += 1  # record attributes
        timestamp_delta, pos = read_varlong(body, pos)
        _offset_delta, pos = read_varint(body, pos)
        key_length, pos = read_varint(body, pos)
        if key_length < 0 or pos + key_length > len(body):
            raise InvalidRecordError(f"control record key of {key_length} bytes does not fit the batch")
        key = body[pos : pos + key_length]
        pos += key_length
        value_length, pos = read_varint(body, pos)
        if value_length < 0 or pos + value_length > len(body):
            raise InvalidRecordError(f"end transaction marker value of {value_length} bytes does not fit the batch")
        marker = EndTransactionMarker.from_key_value(key, body[pos : pos + value_length])
    except (IndexError, struct.error, InvalidRecordError) as e:
        raise InvalidRecordError(f"control batch at offset {header.base_offset}: {e}") from e
    control_type = CONTROL_TYPE_COMMIT if marker.is_commit else CONTROL_TYPE_ABORT
    coordinator_epoch = marker.coordinator_epoch
    if header.timestamp_type == LOG_APPEND_TIME:
        timestamp = header.max_timestamp
    else:
        timestamp = header.base_timestamp + timestamp_delta
    return EndTxnMarker(control_type, coordinator_epoch, timestamp)


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerAppendInfo:
    """The validated, not yet applied effect of one append on one producer.

    It starts from a copy of the producer's entry with an empty batch window, so a validation failure
    leaves the manager untouched, and several batches of one request build on each other.
    """

    def __init__(self, producer_id: int, current_entry: ProducerStateEntry, origin: AppendOrigin) -> None:
        self.producer_id = producer_id
        self.origin = origin
        self._current = current_entry
        self._updated = current_entry.copy_without_batches()
        self._started: list[TxnMetadata] = []

    @property
    def started_transactions(self) -> Sequence[TxnMetadata]:
        return self._started

    def to_entry(self) -> ProducerStateEntry:
        return self._updated

    def append(
        self,
        header: BatchHeader,
        first_offset_override: int | None = None,
        marker: EndTxnMarker | None = None,
    ) -> CompletedTxn | None:
        """Validate and stage one batch of this producer; return the transaction a marker completed.

        ``first_offset_override`` replaces the batch's base offset as its first offset (Kafka passes
        offset metadata here); ``marker`` spares re-reading a control batch the caller already decoded.
        """
        if header.producer_id != self.producer_id:
            raise ValueError(f"batch of producer {header.producer_id} staged for producer {self.producer_id}")
        if header.is_control:
            if marker is None:
                marker = read_end_txn_marker(header)
                if marker is None:
                    # the whole transaction was cleaned away, so there is nothing to end
                    return None
            return self.append_end_txn_marker(marker, header.producer_epoch, header.base_offset, marker.timestamp)
        first_offset = header.base_offset if first_offset_override is None else first_offset_override
        self.append_data_batch(
            header.producer_epoch, header.base_sequence, header.last_sequence, header.max_timestamp,
            first_offset, header.last_offset, header.is_transactional,
        )
        return None

    def append_data_batch(
        self,
        epoch: int,
        first_seq: int,
        last_seq: int,
        last_timestamp: int,
        first_offset: int,
        last_offset: int,
        is_transactional: bool,
    ) -> None:
        self._check_producer_epoch(epoch, first_offset)
        if self.origin is AppendOrigin.CLIENT:
            self._check_sequence(epoch, first_seq, first_offset)
        updated = self._updated
        updated.add_batch(epoch, last_seq, last_offset, last_offset - first_offset, last_timestamp)
        txn_first = updated.current_txn_first_offset
        if txn_first is not None and not is_transactional:
            message = (
                f"non-transactional batch at offset {first_offset} from producer {self.producer_id} "
                f"while its transaction from offset {txn_first} is open"
            )
            if self.origin is not AppendOrigin.REPLICATION:
                raise InvalidTxnStateError(message)
            log.warning("%s; accepted because it is replicated", message)
        elif txn_first is None and is_transactional:
            updated.current_txn_first_offset = first_offset
            self._started.append(TxnMetadata(self.producer_id, first_offset))

    def append_end_txn_marker(
        self, marker: EndTxnMarker, producer_epoch: int, offset: int, timestamp: int
    ) -> CompletedTxn | None:
        self._check_producer_epoch(producer_epoch, offset)
        updated = self._updated
        if updated.coordinator_epoch > marker.coordinator_epoch:
            message = (
                f"transaction marker at offset {offset} for producer {self.producer_id} has coordinator epoch "
                f"{marker.coordinator_epoch}, older than {updated.coordinator_epoch}"
            )
            if self.origin is not AppendOrigin.REPLICATION:
                raise TransactionCoordinatorFencedError(message)
            log.info("%s; accepted because it is replicated", message)
        # A marker that ends no open transaction changes no last stable offset and has no index entry.
        completed = None
        if updated.current_txn_first_offset is not None:
            completed = CompletedTxn(
                self.producer_id, updated.current_txn_first_offset, offset,
                marker.control_type == CONTROL_TYPE_ABORT,
            )
        updated.maybe_update_producer_epoch(producer_epoch)
        updated.current_txn_first_offset = None
        updated.coordinator_epoch = marker.coordinator_epoch
        updated.last_timestamp = timestamp
        return completed

    def _check_producer_epoch(self, producer_epoch: int, offset: int) -> None:
        if producer_epoch < self._updated.producer_epoch:
            message = (
                f"epoch {producer_epoch} of producer {self.producer_id} at offset {offset} is older than "
                f"the current epoch {self._updated.producer_epoch}"
            )
            if self.origin is AppendOrigin.REPLICATION:
                log.warning("%s; accepted because it is replicated", message)
            else:
                raise InvalidProducerEpochError(message)

    def _check_sequence(self, producer_epoch: int, first_seq: int, offset: int) -> None:
        updated = self._updated
        if producer_epoch != updated.producer_epoch:
            # A bumped epoch restarts sequences at 0; an unknown current epoch (no state, e.g. expired or
            # removed by retention) accepts whatever the producer continues with.
            if first_seq != 0 and updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"producer {self.producer_id} at offset {offset}: new epoch {producer_epoch} "
                    f"must start at sequence 0, got {first_seq}"
                )
            return
        if not updated.is_empty:
            current_last_seq = updated.last_seq
        elif producer_epoch == self._current.producer_epoch:
            current_last_seq = self._current.last_seq
        else:
            current_last_seq = NO_SEQUENCE
        if self._current.producer_epoch == NO_PRODUCER_EPOCH or _in_sequence(current_last_seq, first_seq):
            return
        raise OutOfOrderSequenceError(
            f"producer {self.producer_id} at offset {offset}: sequence {first_seq} does not follow "
            f"{current_last_seq} (epoch {producer_epoch})"
        )


@dataclass(slots=True)
class StagedAppend:
    """The producer-state outcome of validating one append's batches, before anything is written.

    If ``duplicate`` is set, the append is a retry: write nothing and answer with
    ``duplicate.first_offset``, ``duplicate.last_offset`` and ``duplicate.timestamp``.
    """

    append_infos: dict[int, ProducerAppendInfo] = field(default_factory=dict)
    completed_txns: list[CompletedTxn] = field(default_factory=list)
    duplicate: BatchMetadata | None = None


@dataclass(slots=True)
class StagedBatch:
    """What :meth:`ProducerStateManager.validate_and_stage_batch` stages for the common idempotent
    batch (a known producer's next data batch, same epoch, no transaction starting or wrongly
    open): the batch to add to that producer's window. Committing it does what committing the
    :class:`StagedAppend` of the same batch does, without the copy of the entry and its merge."""

    entry: ProducerStateEntry
    metadata: BatchMetadata
    duplicate: None = None


#: What validating an append without producer ids stages: nothing. Shared, as the produce path
#: would otherwise build an empty one per append; never filled (validate_and_stage fills only a
#: StagedAppend it made).
NOTHING_STAGED = StagedAppend()


def is_producer_expired(entry: ProducerStateEntry, now_ms: int, expiration_ms: int) -> bool:
    """A producer with an open transaction never expires: its transaction still holds back the LSO."""
    return entry.current_txn_first_offset is None and now_ms - entry.last_timestamp >= expiration_ms


def expired_producers(entries: Iterable[ProducerStateEntry], now_ms: int, expiration_ms: int) -> list[int]:
    return [e.producer_id for e in entries if is_producer_expired(e, now_ms, expiration_ms)]


def entry_to_snapshot(entry: ProducerStateEntry) -> SnapshotEntry:
    txn = entry.current_txn_first_offset
    return SnapshotEntry(
        entry.producer_id, entry.producer_epoch, entry.last_seq, entry.last_data_offset,
        entry.last_offset_delta, entry.last_timestamp, entry.coordinator_epoch, -1 if txn is None else txn,
    )


def entry_from_snapshot(s: SnapshotEntry) -> ProducerStateEntry:
    batches = [BatchMetadata(s.last_sequence, s.last_offset, s.offset_delta, s.timestamp)] if s.last_offset >= 0 else []
    txn = s.current_txn_first_offset if s.current_txn_first_offset >= 0 else None
    return ProducerStateEntry(s.producer_id, s.producer_epoch, batches, s.coordinator_epoch, s.timestamp, txn)


def read_snapshot(path: Path) -> list[ProducerStateEntry]:
    """Every producer in a snapshot file; CorruptSnapshotError if it is unreadable in any way."""
    return [entry_from_snapshot(s) for s in read_snapshot_entries(path)]


def write_snapshot(path: Path, entries: Iterable[ProducerStateEntry], sync: bool = True) -> None:
    write_snapshot_entries(path, [entry_to_snapshot(e) for e in entries], sync=sync)


class ProducerStateManager:
    def __init__(self, log_dir: Path, producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
                 dir_listing: Iterable[str] | None = None, snapshot_offsets: Iterable[int] | None = None) -> None:
        self._log_dir: Path | None = Path(log_dir)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._producers: dict[int, ProducerStateEntry] = {}
        # first offset -> txn; few transactions are open at once, so ordering is computed on demand
        self._ongoing_txns: dict[int, TxnMetadata] = {}
        # completed but not yet below the high watermark: they still bound the first unstable offset
        self._unreplicated_txns: dict[int, TxnMetadata] = {}
        self._map_end_offset = 0
        self._last_snap_offset = 0
        self._snapshots = SnapshotFiles(self._log_dir, dir_listing, snapshot_offsets)

    @classmethod
    def detached(cls, producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> ProducerStateManager:
        """State with no directory, for replays that write their result elsewhere (seed 001): it never
        lists, reads or deletes a live partition's snapshots, so it cannot race the log's manager."""
        psm = cls.__new__(cls)
        psm._log_dir = None
        psm.producer_id_expiration_ms = producer_id_expiration_ms
        psm._producers = {}
        psm._ongoing_txns = {}
        psm._unreplicated_txns = {}
        psm._map_end_offset = 0
        psm._last_snap_offset = 0
        psm._snapshots = SnapshotFiles(None)
        return psm

    # -- configuration and views --------------------------------------------------------------------

    @property
    def log_dir(self) -> Path:
        if self._log_dir is None:
            raise ValueError("this producer state has no log directory")
        return self._log_dir

    @property
    def producer_id_expiration_ms(self) -> int:
        return self._producer_id_expiration_ms

    @producer_id_expiration_ms.setter
    def producer_id_expiration_ms(self, value: int) -> None:
        # dynamic config (producer.id.expiration.ms): the next expiration check uses the new value
        if value < 1:
            raise ValueError(f"producer.id.expiration.ms must be at least 1, got {value}")
        self._producer_id_expiration_ms = value

    @property
    def producers(self) -> Mapping[int, ProducerStateEntry]:
        return MappingProxyType(self._producers)

    @property
    def active_producers_count(self) -> int:
        return len(self._producers)

    @property
    def map_end_offset(self) -> int:
        """The offset up to which the state reflects the log (exclusive); a snapshot is named after it."""
        return self._map_end_offset

    @property
    def ongoing_txns(self) -> Mapping[int, TxnMetadata]:
        return MappingProxyType(self._ongoing_txns)

    def is_empty(self) -> bool:
        return not self._producers and not self._unreplicated_txns

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    # -- append path ---------------------------------------------------------------------------------

    def check_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        """The originally written batch if ``header`` is a retry of one of the producer's last 5 batches."""
        if not header.has_producer_id:
            return None
        entry = self._producers.get(header.producer_id)
        return None if entry is None else entry.find_duplicate_batch(header)

    def prepare_update(self, producer_id: int, origin: AppendOrigin) -> ProducerAppendInfo:
        current = self._producers.get(producer_id) or ProducerStateEntry.empty(producer_id)
        return ProducerAppendInfo(producer_id, current, origin)

    def validate_and_stage(
        self,
        headers: Iterable[BatchHeader],
        origin: AppendOrigin,
        markers: Mapping[int, EndTxnMarker] | None = None,
    ) -> StagedAppend:
        """Validate every batch of one append against the current state, changing nothing.

        Call after offsets are assigned (the staged offsets are the batches' offsets) and before writing;
        any validation error rejects the whole append. A CLIENT retry of a cached batch returns at once
        with ``duplicate`` set, as Kafka treats the whole request as the duplicate.
        ``markers`` optionally maps a control batch's base offset to its already decoded marker;
        otherwise the marker is read from the batch's first record.
        """
        staged: StagedAppend | None = None
        for header in headers:
            if header.producer_id <= NO_PRODUCER_ID:
                continue
            if staged is None:
                staged = StagedAppend()
            if origin is AppendOrigin.CLIENT:
                duplicate = self.check_duplicate(header)
                if duplicate is not None:
                    return StagedAppend(duplicate=duplicate)
            info = staged.append_infos.get(header.producer_id)
            if info is None:
                info = staged.append_infos[header.producer_id] = self.prepare_update(header.producer_id, origin)
            marker = markers.get(header.base_offset) if markers and header.is_control else None
            completed = info.append(header, marker=marker)
            if completed is not None:
                staged.completed_txns.append(completed)
        return NOTHING_STAGED if staged is None else staged

    def validate_and_stage_batch(self, header: BatchHeader, origin: AppendOrigin) -> StagedAppend | StagedBatch:
        """:meth:`validate_and_stage` of one batch (what a produce request carries per partition).

        A Java or librdkafka producer is idempotent by default, so nearly every produced batch has a
        producer id, and nearly always it is that producer's next batch: same epoch, the sequence
        following its last one, no transaction starting or wrongly open. That case is checked here
        directly (~4 µs less than staging a copy of the producer's entry and merging it back); every
        other case -- a new or fenced producer, a new epoch, a sequence gap, a retry, a control or the
        first transactional batch -- goes through :meth:`validate_and_stage`, which raises or answers
        as before. ``tests/unit/storage/test_producer_state_fast.py`` holds the two equal."""
        producer_id = header.producer_id
        if producer_id <= NO_PRODUCER_ID:
            return NOTHING_STAGED
        entry = self._producers.get(producer_id)
        if entry is not None and origin is AppendOrigin.CLIENT and entry.batch_metadata:
            attributes = header.attributes
            epoch = header.producer_epoch
            if (not attributes & CONTROL_MASK and epoch == entry.producer_epoch and epoch != NO_PRODUCER_EPOCH
                    and header.base_sequence >= 0 and header.last_offset_delta >= 0
                    and (entry.current_txn_first_offset is not None) == bool(attributes & TRANSACTIONAL_MASK)):
                window = entry.batch_metadata
                first_seq = header.base_sequence
                offset_delta = header.last_offset_delta
                last_seq = (first_seq + offset_delta if first_seq <= INT32_MAX - offset_delta
                            else offset_delta - (INT32_MAX - first_seq) - 1)  # increment_sequence
                previous = window[-1].last_seq
                if first_seq == previous + 1 or (first_seq == 0 and previous == INT32_MAX):
                    for m in window:  # a retry of one of the last five (a loop: a generator costs ~0.4 µs)
                        if m.last_seq == last_seq and m.first_seq == first_seq:
                            break
                    else:
                        last_offset = header.base_offset + offset_delta
                        # The NamedTuple built without its Python-level __new__ (~0.1 µs).
                        return StagedBatch(entry, _new_tuple(BatchMetadata, (last_seq, last_offset, offset_delta,
                                                                             header.max_timestamp)))
        return self.validate_and_stage((header,), origin)

    def commit_staged(self, staged: StagedAppend | StagedBatch, last_offset: int) -> list[TxnCompletion]:
        """Apply a staged append once its bytes are in the segment; ``last_offset`` is the append's last
        offset. Returns the transactions it ended, each with the LSO the transaction index needs."""
        if type(staged) is StagedBatch:
            self.commit_batch(staged, last_offset)
            return []
        assert isinstance(staged, StagedAppend)
        if staged.duplicate is not None:
            raise ValueError("a duplicate append writes nothing and must not be committed")
        for info in staged.append_infos.values():
            self.update(info)
        completions = []
        for txn in staged.completed_txns:
            completions.append(TxnCompletion(txn, self.last_stable_offset(txn)))
            self.complete_txn(txn)
        # even appends without producer ids move it, so the next snapshot is named after the log end
        self.update_map_end_offset(last_offset + 1)
        return completions

    def commit_batch(self, staged: StagedBatch, last_offset: int) -> None:
        """:meth:`commit_staged` of what :meth:`validate_and_stage_batch` staged for a producer's next
        batch, which completes no transaction: the batch joins the producer's window."""
        entry, metadata = staged.entry, staged.metadata
        entry.batch_metadata.append(metadata)  # the window keeps its last 5, as add_batch
        entry.last_timestamp = metadata.timestamp
        self._map_end_offset = last_offset + 1

    def update(self, append_info: ProducerAppendInfo) -> None:
        producer_id = append_info.producer_id
        if producer_id == NO_PRODUCER_ID:
            raise ValueError("cannot update producer state without a producer id")
        updated = append_info.to_entry()
        current = self._producers.get(producer_id)
        if current is not None:
            current.update(updated)
        else:
            # the append info is spent after this call, so its entry can be adopted without a copy
            self._producers[producer_id] = updated
        for txn in append_info.started_transactions:
            self._ongoing_txns[txn.first_offset] = txn

    def complete_txn(self, completed: CompletedTxn) -> None:
        txn = self._ongoing_txns.pop(completed.first_offset, None)
        if txn is None:
            raise ValueError(
                f"cannot complete the transaction of producer {completed.producer_id} from offset "
                f"{completed.first_offset}: it was never started"
            )
        txn.last_offset = completed.last_offset
        self._unreplicated_txns[completed.first_offset] = txn

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO right after ``completed`` ends: the start of the oldest other open transaction, or the
        offset after the marker."""
        others = [o for o, t in self._ongoing_txns.items() if t.producer_id != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def first_unstable_offset(self) -> int | None:
        """The first offset not yet stable: an open transaction, or a completed one above the HW."""
        candidates = []
        if self._unreplicated_txns:
            candidates.append(min(self._unreplicated_txns))
        if self._ongoing_txns:
            candidates.append(min(self._ongoing_txns))
        return min(candidates) if candidates else None

    def first_undecided_offset(self) -> int | None:
        return min(self._ongoing_txns) if self._ongoing_txns else None

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        if self._unreplicated_txns:  # every append calls this; almost always there is none
            self._remove_unreplicated_txns(high_watermark)

    def _remove_unreplicated_txns(self, offset: int) -> None:
        for first, txn in list(self._unreplicated_txns.items()):
            if txn.last_offset is not None and txn.last_offset < offset:
                del self._unreplicated_txns[first]

    def update_map_end_offset(self, offset: int) -> None:
        self._map_end_offset = offset

    # -- expiration ----------------------------------------------------------------------------------

    def remove_expired_producers(self, now_ms: int) -> list[int]:
        expired = expired_producers(self._producers.values(), now_ms, self._producer_id_expiration_ms)
        for producer_id in expired:
            del self._producers[producer_id]
        return expired

    # -- snapshots -----------------------------------------------------------------------------------

    def take_snapshot(self, sync: bool = True) -> Path | None:
        """Write the state as ``<map_end_offset>.snapshot`` unless nothing moved since the last one."""
        if self._map_end_offset <= self._last_snap_offset:
            return None
        path = snapshot_path(self.log_dir, self._map_end_offset)
        write_snapshot(path, self._producers.values(), sync=sync)
        self._snapshots.add(self._map_end_offset, path, synced=sync)
        self._last_snap_offset = self._map_end_offset
        return path

    def flush_snapshots(self) -> None:
        """fsync the snapshots taken with ``sync=False`` (the log's flush after a roll calls this)."""
        self._snapshots.flush()

    def refresh_snapshots(self) -> None:
        """Re-list the snapshot files, e.g. after another component wrote one into the log directory."""
        self._snapshots.refresh()

    def list_snapshots(self) -> list[SnapshotFile]:
        return self._snapshots.files()

    @property
    def latest_snapshot_offset(self) -> int | None:
        return self._snapshots.latest

    @property
    def oldest_snapshot_offset(self) -> int | None:
        return self._snapshots.oldest

    def snapshot_file_for(self, offset: int) -> Path | None:
        """The snapshot named exactly ``offset`` (Kafka's fetchSnapshot; the tiered copy asks for the one
        at the next segment's base), or None."""
        return self._snapshots.get(offset)

    def delete_snapshot(self, offset: int) -> bool:
        return self._snapshots.delete(offset)

    def remove_and_mark_snapshot_for_deletion(self, offset: int) -> Path | None:
        """Rename the snapshot of a deleted segment to ``.snapshot.deleted`` and return the new path; the
        caller deletes it after ``file.delete.delay.ms`` like the segment's other files."""
        return self._snapshots.mark_for_deletion(offset)

    def delete_snapshots_below(self, offset: int) -> None:
        self._snapshots.delete_below(offset)

    def remove_stray_snapshots(self, segment_base_offsets: Iterable[int], dir_listing: Iterable[str] | None = None,
                               snapshot_offsets: Iterable[int] | None = None) -> None:
        """Keep the snapshots at segment bases, plus the single newest other one if it lies above every
        base (the log-end snapshot of a clean shutdown); delete the rest (KAFKA-FACTS §2.12 step 7).
        Also deletes temp files a crash left mid-write."""
        self._snapshots.remove_strays(segment_base_offsets, dir_listing, snapshot_offsets)

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        self._remove_unreplicated_txns(log_start_offset)
        if self._map_end_offset < log_start_offset:
            self._map_end_offset = log_start_offset
        latest = self.latest_snapshot_offset
        self._last_snap_offset = log_start_offset if latest is None else latest

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int, *,
                            keep_start_snapshot: bool = False) -> None:
        """Drop snapshots outside (log_start, log_end], then, unless the state already ends at the log
        end, reload from the newest readable snapshot (the caller replays the log after it).

        ``keep_start_snapshot`` keeps the one at ``log_start_offset`` too: for a tiered log that start
        is Kafka's *local* log start, above the log start Kafka passes here, and the snapshot there
        holds the producers of the segments that are only in the remote tier (or were restored from
        it)."""
        self._snapshots.delete_outside(log_start_offset - 1 if keep_start_snapshot else log_start_offset,
                                       log_end_offset)
        if log_end_offset != self._map_end_offset:
            self._producers.clear()
            self._ongoing_txns.clear()
            # the offset is at most the high watermark, so everything unreplicated is gone with it
            self._unreplicated_txns.clear()
            self._load_from_snapshot(log_start_offset, now_ms)
        else:
            self.on_log_start_offset_incremented(log_start_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self._producers.clear()
        self._ongoing_txns.clear()
        self._unreplicated_txns.clear()
        self._snapshots.delete_all()
        self._last_snap_offset = 0
        self._map_end_offset = offset

    def truncate_fully_and_reload_snapshots(self) -> None:
        """Forget all state and pick up the snapshot files now on disk (e.g. one fetched from the remote
        tier) for the next ``truncate_and_reload``."""
        self.truncate_fully_and_start_at(0)
        self.refresh_snapshots()

    def install_snapshot(self, offset: int, snapshot: bytes, now_ms: int) -> int:
        """Start over at ``offset`` with the producers of a snapshot taken there by another copy of
        the log (the remote tier's, when a partition is restored from it): every local snapshot goes,
        the bytes become ``<offset>.snapshot`` and are loaded, expired producers left out. Returns
        the producers loaded; an unreadable snapshot leaves the state empty and says so."""
        self.truncate_fully_and_start_at(offset)
        path = snapshot_path(self.log_dir, offset)
        write_atomic(path, snapshot)
        self._snapshots.refresh()
        self._load_from_snapshot(offset, now_ms)
        return len(self._producers)

    def _load_from_snapshot(self, log_start_offset: int, now_ms: int) -> None:
        while (offset := self._snapshots.latest) is not None:
            path = self._snapshots.get(offset)
            assert path is not None
            try:
                log.info("loading producer state from snapshot %s", path)
                entries = read_snapshot(path)
            except CorruptSnapshotError as e:
                log.warning("deleting corrupt producer snapshot %s: %s", path, e)
                self.delete_snapshot(offset)
                continue
            for entry in entries:
                if not is_producer_expired(entry, now_ms, self._producer_id_expiration_ms):
                    self._load_producer_entry(entry)
            self._last_snap_offset = offset
            self._map_end_offset = offset
            return
        self._last_snap_offset = log_start_offset
        self._map_end_offset = log_start_offset

    def _load_producer_entry(self, entry: ProducerStateEntry) -> None:
        self._producers[entry.producer_id] = entry
        if entry.current_txn_first_offset is not None:
            first = entry.current_txn_first_offset
            self._ongoing_txns[first] = TxnMetadata(entry.producer_id, first)
