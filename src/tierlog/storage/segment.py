"""One log segment: the ``.log`` file and its offset, time and transaction indexes.

Indexes are lazy (Kafka's LazyIndex): the files are not opened until first use, so a log with
many inactive segments opens without touching them (seed 003).

Longer than most modules (about 870 lines) because LogSegment is one class: its checked reads
(locating a batch through the index while distrusting a damaged index), recovery and sanity checks
share the segment's private state (the log file, the lazy indexes, the damage already seen) and
split across modules would have to expose it; the batch walking itself is in ``batch_check``.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import threading
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar, cast

from tierlog.errors import (
    CorruptIndexError,
    CorruptRecordError,
    IndexOffsetOverflowError,
    TierlogError,
    UnsupportedRecordFormatError,
)
from tierlog.records.header import (
    BATCH_HEADER_SIZE,
    HEADER_SIZE_UP_TO_MAGIC,
    INT32_MAX,
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
)
from tierlog.records.reader import records_max_timestamp
from tierlog.storage import files
from tierlog.storage.batch_check import (
    BatchProblem,
    BatchWalk,
    CheckedBatch,
    VerifiedSpans,
    first_unsupported,
)
from tierlog.storage.file_records import FileRecords, FileRegion
from tierlog.storage.index import OffsetIndex, TimeIndex, looks_untrimmed
from tierlog.storage.txn_index import TransactionIndex

log = logging.getLogger(__name__)

OFFSET_ENTRY_BYTES = 8
TIME_ENTRY_BYTES = 12
#: Bytes read per step while checking batches never checked before.
CHECK_CHUNK_BYTES = 1 << 20
_HEADER_FIELDS = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LENGTH = struct.Struct(">i")
_TIMESTAMP_FIELDS = struct.Struct(">hiqq")  # at byte 21: attributes, lastOffsetDelta, baseTimestamp, maxTimestamp


class SegmentDamageError(CorruptRecordError):
    """The batch at the requested offset (or one before it in its segment) is damaged: it fails its
    CRC, is cut short or its offsets are out of order. Answered with CORRUPT_MESSAGE."""

    def __init__(self, path: Path, problem: BatchProblem) -> None:
        super().__init__(f"{path}: damaged data at byte {problem.position} (offset {problem.offset}): {problem.reason}")
        self.path = path
        self.problem = problem


class _Closeable(Protocol):
    def close(self) -> None: ...
    def delete_if_exists(self) -> bool: ...
    def rename_to(self, path: Path) -> None: ...


IndexT = TypeVar("IndexT", OffsetIndex, TimeIndex)


class LazyIndex(Generic[IndexT]):
    """An index that is constructed (and its file opened) on first :meth:`get`."""

    def __init__(self, path: Path, factory: Callable[[Path], IndexT]) -> None:
        self.path = path
        self._factory: Callable[[Path], IndexT] = factory
        self._index: IndexT | None = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._index is not None

    def get(self) -> IndexT:
        index = self._index
        if index is None:
            with self._lock:
                if self._index is None:
                    self._index = self._factory(self.path)
                index = self._index
        return index

    def rename_to(self, path: Path) -> None:
        with self._lock:
            if self._index is not None:
                self._index.rename_to(path)
            elif self.path.exists():
                os.replace(self.path, path)
            self.path = path

    def delete_if_exists(self) -> None:
        with self._lock:
            if self._index is not None:
                self._index.close()
                self._index = None
            self.path.unlink(missing_ok=True)

    def close(self) -> None:
        with self._lock:
            if self._index is not None:
                self._index.close()
                self._index = None


@dataclass(frozen=True)
class LogOffsetMetadata:
    message_offset: int
    segment_base_offset: int = -1
    relative_position: int = 0


@dataclass(frozen=True)
class FetchDataInfo:
    offset_metadata: LogOffsetMetadata
    records: FileRegion | None
    first_entry_incomplete: bool = False

    @property
    def size_bytes(self) -> int:
        return 0 if self.records is None else self.records.size

    def read_bytes(self) -> bytes:
        return b"" if self.records is None else self.records.read_bytes()


@dataclass(frozen=True)
class BatchPosition:
    offset: int  # the batch's base offset
    position: int
    size: int
    last_offset: int


@dataclass(frozen=True)
class SegmentSettings:
    """The parts of the topic config a segment needs (the log rebuilds it on a config change)."""

    index_interval_bytes: int = 4096
    max_index_size: int = 10485760
    preallocate_bytes: int = 0
    #: Every batch must be record batch v2: a batch of another magic is damage, never data of another
    #: format to refuse the partition for (the metadata log, see ``segment_settings``).
    v2_only: bool = False


def should_roll(
    *,
    segment_size: int,
    max_segment_bytes: int,
    messages_size: int,
    first_batch_timestamp: int | None,
    created_ms: int,
    now_ms: int,
    max_timestamp_in_messages: int,
    max_segment_ms: int,
    roll_jitter_ms: int,
    indexes_full: bool,
    base_offset: int,
    max_offset_in_messages: int,
) -> bool:
    """Kafka's roll conditions (LogSegment#shouldRoll, KAFKA-FACTS §3.2), as a pure function."""
    if segment_size > max_segment_bytes - messages_size:
        return True
    if segment_size > 0:
        if first_batch_timestamp is not None and first_batch_timestamp >= 0:
            waited = max_timestamp_in_messages - first_batch_timestamp
        else:
            waited = now_ms - created_ms
        if waited > max_segment_ms - roll_jitter_ms:
            return True
    if indexes_full:
        return True
    return max_offset_in_messages - base_offset > INT32_MAX


class LogSegment:
    def __init__(
        self,
        directory: Path,
        base_offset: int,
        settings: SegmentSettings,
        *,
        created_ms: int,
        roll_jitter_ms: int = 0,
        create: bool = False,
        file_suffix: str = "",
    ) -> None:
        self.dir = directory
        self.base_offset = base_offset
        self.settings = settings
        self.created_ms = created_ms
        self.roll_jitter_ms = roll_jitter_ms
        # Built from one prefix string: Path construction is a measurable part of opening a log
        # with thousands of segments.
        prefix = f"{base_offset:020d}"
        self.log = FileRecords(
            directory / f"{prefix}{files.LOG_SUFFIX}{file_suffix}",
            preallocate_bytes=settings.preallocate_bytes if create else 0,
            create=create,
        )
        self._offset_index = LazyIndex(
            directory / f"{prefix}{files.INDEX_SUFFIX}{file_suffix}",
            lambda p: OffsetIndex(p, base_offset, settings.max_index_size),
        )
        self._time_index = LazyIndex(
            directory / f"{prefix}{files.TIME_INDEX_SUFFIX}{file_suffix}",
            lambda p: TimeIndex(p, base_offset, settings.max_index_size),
        )
        self.txn_index = TransactionIndex(directory / f"{prefix}{files.TXN_INDEX_SUFFIX}{file_suffix}", base_offset)
        #: Recovery emptied the transaction index; the loader refills it from the batches.
        self.txn_index_reset = False
        self._bytes_since_last_index_entry = 0
        self._max_ts_and_offset: tuple[int, int] | None = None
        self._first_batch_timestamp: int | None = None
        self._first_batch_timestamp_loaded = False
        #: Seed 003: False until the offset and time index passed their sanity check.
        self.checked = create
        #: Parts of the .log whose batches are known good: appended by this process (validated before
        #: they were written), scanned by recovery or checked by an earlier read. Reads check the rest
        #: before serving it.
        self.verified = VerifiedSpans()
        #: The first damage found in the .log (reads stop before it), and whether the log has said so.
        self.damage: BatchProblem | None = None
        self.damage_reported = False
        #: The problem recovery stopped at, if it stopped early (the loader reports it).
        self.recovery_problem: BatchProblem | None = None
        self._index_distrusted = False
        #: Some batch's header max timestamp disagrees with its records (stored by an older tierlog,
        #: which kept the producer's value): timestamps then come from the records, not the headers.
        self.headers_lie = False
        if create:
            self._max_ts_and_offset = (-1, base_offset)
            self._first_batch_timestamp_loaded = True
            # Kafka creates both index files with the segment so a crash leaves them present.
            self._offset_index.get()
            self._time_index.get()

    # -- indexes ----------------------------------------------------------------------------------

    @property
    def offset_index(self) -> OffsetIndex:
        return self._offset_index.get()

    @property
    def time_index(self) -> TimeIndex:
        return self._time_index.get()

    @property
    def indexes_loaded(self) -> bool:
        return self._offset_index.loaded or self._time_index.loaded

    @property
    def offset_index_path(self) -> Path:
        return self._offset_index.path

    @property
    def time_index_path(self) -> Path:
        return self._time_index.path

    # -- producer-state replay (producer_rebuild.SegmentSource) ---------------------------------------

    @property
    def log_path(self) -> Path:
        return self.log.path

    def start_position_for(self, offset: int) -> int:
        return self.offset_index.lookup(offset)[1]

    # -- sizes and timestamps ---------------------------------------------------------------------

    @property
    def size_bytes(self) -> int:
        return self.log.size_bytes

    def _max_ts(self) -> tuple[int, int]:
        if self._max_ts_and_offset is None:
            lying = self._first_header_contradicting_itself()
            if lying is not None:
                # The time index an older tierlog built from such headers skipped the lying batch:
                # its last entry may name an honest batch before it and check out, while the
                # segment's newest records are in the lying one (the floor would delete them).
                log.info("batch header at offset %d of %s says max timestamp %d below its base timestamp %d "
                            "(written so by an older tierlog); deriving the segment's time index and largest "
                            "timestamp from its records", lying.base_offset, self.log.path, lying.max_timestamp,
                            lying.base_timestamp)
                self._rebuild_from_records()
                assert self._max_ts_and_offset is not None
                return self._max_ts_and_offset
            entry = self.time_index.last_entry()
            if entry[0] >= 0 and not self._time_entry_matches(entry[0], entry[1], check_records=True):
                # Retention deletes by this timestamp: one flipped byte must not make a segment
                # look years old (or keep it forever).
                self._rebuild_for_time_index(entry[0], entry[1])
                assert self._max_ts_and_offset is not None
                return self._max_ts_and_offset
            if entry[0] < 0 and self.log.size_bytes > 0:
                # No batch header named a timestamp: an older tierlog stored a producer's -1 (Sarama
                # 1.22) as it came, or the records really have none. Their records decide.
                log.info("the time index %s has no entry; deriving the timestamps of %s from its records",
                         self.time_index_path, self.log.path)
                self._rebuild_from_records()
                assert self._max_ts_and_offset is not None
                return self._max_ts_and_offset
            self._max_ts_and_offset = (entry[0], entry[1])
        return self._max_ts_and_offset

    def _first_header_contradicting_itself(self) -> BatchHeader | None:
        """Header-only scan for a batch whose header max timestamp contradicts the header's own base
        timestamp (the first record's): -1, or any value below it, over records that have timestamps.
        Stored so only by an older tierlog, which kept the producer's value (Sarama 1.22 writes -1);
        tierlog rewrites such headers on append. A LogAppendTime batch's max is the append time and
        may be below its records'. Reads three header fields per batch from a mapping (once per
        segment and process); damage ends the scan, reads report it."""
        size = self.log.size_bytes
        if size < BATCH_HEADER_SIZE:
            return None
        with mmap.mmap(self.log.fd, 0, access=mmap.ACCESS_READ) as mm:
            end = min(size, len(mm))
            pos = 0
            while end - pos >= BATCH_HEADER_SIZE:
                (length,) = _LENGTH.unpack_from(mm, pos + 8)
                if length < MIN_BATCH_LENGTH or mm[pos + 16] != MAGIC_V2 or pos + LOG_OVERHEAD + length > end:
                    return None
                attributes, _, base_ts, max_ts = _TIMESTAMP_FIELDS.unpack_from(mm, pos + 21)
                if base_ts >= 0 and max_ts < base_ts and not attributes & TIMESTAMP_TYPE_MASK:
                    found = BatchHeader(bytes(mm[pos : pos + BATCH_HEADER_SIZE]), 0)
                    found.position = pos
                    return found
                pos += LOG_OVERHEAD + length
        return None

    def _rebuild_from_records(self) -> None:
        """Rebuild the indexes and the largest timestamp from the records, keeping the bytes; an index
        with room left (the active segment's) gets its room back."""
        room = self.offset_index.max_entries > self.offset_index.entries
        self.recover(truncate=False)
        if room:
            self.resize_indexes(self.settings.max_index_size)

    def _time_entry_matches(self, timestamp: int, offset: int, *, check_records: bool = False) -> bool:
        """Whether the batch a time index entry names (by its last offset) has that largest timestamp,
        as every entry written by an append or a recovery says: in its header, or -- where the header
        lies and a recovery took it from the records -- in its records. ``check_records``: a header
        that matches must also agree with the records (once per segment, when its largest timestamp
        is first needed: a batch stored with a lying header is found there)."""
        try:
            found = self.translate_offset(offset)
        except (CorruptRecordError, TierlogError, OSError):
            return False
        if found is None or found.last_offset != offset:
            return False
        head = os.pread(self.log.fd, BATCH_HEADER_SIZE, found.position)
        if len(head) != BATCH_HEADER_SIZE:
            return False
        header_ts = BatchHeader(head, 0).max_timestamp
        if header_ts == timestamp and not check_records:
            return True
        records_ts = records_max_timestamp(BatchHeader(self.log.read(found.position, found.size), 0))
        if records_ts != header_ts:
            self.headers_lie = True
        return records_ts == timestamp

    def _rebuild_for_time_index(self, timestamp: int, offset: int) -> None:
        log.warning("the time index %s names timestamp %d at offset %d, which the batches there do not carry; "
                    "rebuilding the indexes of %s from its batches", self.time_index_path, timestamp, offset,
                    self.log.path)
        self._rebuild_from_records()

    @property
    def max_timestamp_so_far(self) -> int:
        return self._max_ts()[0]

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        return self._max_ts()[1]

    @property
    def largest_timestamp(self) -> int:
        """The largest record timestamp, or the file's mtime when no record has one (retention)."""
        ts = self.max_timestamp_so_far
        if ts >= 0:
            return ts
        return self.last_modified_ms

    @property
    def last_modified_ms(self) -> int:
        return int(os.stat(self.log.path).st_mtime * 1000)

    @property
    def first_batch_timestamp(self) -> int | None:
        if not self._first_batch_timestamp_loaded:
            first = next(self.log.iter_headers_from(0), None)
            self._first_batch_timestamp = None if first is None else self._batch_max_timestamp(first)
            self._first_batch_timestamp_loaded = True
        return self._first_batch_timestamp

    def _batch_max_timestamp(self, header: BatchHeader) -> int:
        """A stored batch's largest timestamp as its records say it (:func:`records_max_timestamp`);
        ``header`` may hold only the 61 header bytes (:meth:`FileRecords.iter_headers_from`)."""
        return records_max_timestamp(BatchHeader(self.log.read(header.position, header.size_bytes), 0))

    def indexes_full(self) -> bool:
        return self._offset_index.get().is_full or self._time_index.get().is_full

    def should_roll(self, messages_size: int, max_timestamp_in_messages: int, max_offset_in_messages: int,
                    now_ms: int, max_segment_bytes: int, max_segment_ms: int) -> bool:
        """:func:`should_roll` of this segment, read from its fields: the roll check of every append,
        without the function's twelve keyword arguments and the properties behind them (~0.5 µs).
        ``test_segment_should_roll.py`` holds the two equal."""
        segment_size = self.log.size_bytes
        if segment_size > max_segment_bytes - messages_size:
            return True
        if segment_size > 0:
            first = self._first_batch_timestamp if self._first_batch_timestamp_loaded else self.first_batch_timestamp
            if first is not None and first >= 0:
                waited = max_timestamp_in_messages - first
            else:
                waited = now_ms - self.created_ms
            if waited > max_segment_ms - self.roll_jitter_ms:
                return True
        # indexes_full(), reading a loaded index's counts directly (~0.15 µs less per append)
        offsets, times = self._offset_index._index, self._time_index._index
        if offsets is None or times is None:
            if self.indexes_full():
                return True
        elif offsets._entries >= offsets._max_entries or times._entries >= times._max_entries - 1:
            return True
        return max_offset_in_messages - self.base_offset > INT32_MAX

    # -- append and read ----------------------------------------------------------------------------

    def append(self, records: bytes | bytearray | memoryview | Sequence[bytes | bytearray | memoryview],
               headers: Sequence[BatchHeader], patched_epoch: int | None = None) -> None:
        """Append already-validated batches (offsets assigned): one buffer, or the pieces that make it
        up, in order. ``headers`` give each batch's fields and its position within ``records``.
        With ``patched_epoch``: ``records`` is a buffer holding the one batch of ``headers``, written
        with its assigned base offset and that partition leader epoch set in a copy of its header
        (:meth:`FileRecords.append_patched`), the buffer's own bytes left as they are."""
        if not headers:
            return
        first, last_header = headers[0], headers[-1]
        last = last_header.base_offset + last_header.last_offset_delta
        if last - self.base_offset > INT32_MAX or first.base_offset < self.base_offset:
            raise IndexOffsetOverflowError(
                f"offsets [{first.base_offset}, {last}] do not fit segment {self.base_offset}"
            )
        log_file = self.log
        physical_position = log_file.size_bytes
        if physical_position == 0:
            self._first_batch_timestamp_loaded = True
            self._first_batch_timestamp = first.max_timestamp
        if patched_epoch is None:
            written = log_file.append(records)
        else:
            written = log_file.append_patched(cast("bytes | bytearray | memoryview", records), first.position,
                                              first.size_bytes, first.base_offset, patched_epoch)
        # Validated before they were written: later reads send these bytes without checking them again.
        self.verified.add(physical_position, physical_position + written, first.base_offset, last + 1)
        known = self._max_ts_and_offset
        max_ts, offset_of_max = self._max_ts() if known is None else known
        # Kafka's LogSegment.append: an index entry once more than index.interval.bytes were
        # appended since the last (every 16 KiB batch at the default 4096).
        interval = self.settings.index_interval_bytes
        since = self._bytes_since_last_index_entry
        delta = physical_position - first.position  # a header's position within ``records`` -> in the file
        for h in headers:
            batch_last = h.base_offset + h.last_offset_delta
            if h.max_timestamp > max_ts:
                max_ts, offset_of_max = h.max_timestamp, batch_last
            if since > interval:
                self._offset_index.get().append(batch_last, delta + h.position)
                self._time_index.get().maybe_append(max_ts, offset_of_max)
                since = 0
            since += h.size_bytes
        self._bytes_since_last_index_entry = since
        self._max_ts_and_offset = (max_ts, offset_of_max)

    def append_batch(self, buf: bytes | bytearray | memoryview, header: BatchHeader, partition_leader_epoch: int) -> None:
        """:meth:`append` of ``buf``'s one batch ``header`` with ``patched_epoch``, in straight lines
        (the one-batch append of every produced partition: no loop, no sequences, ~0.4 µs less).
        ``test_append_one_batch.py`` holds the logs and indexes written by either equal."""
        base_offset = header.base_offset
        last = base_offset + header.last_offset_delta
        if last - self.base_offset > INT32_MAX or base_offset < self.base_offset:
            raise IndexOffsetOverflowError(f"offsets [{base_offset}, {last}] do not fit segment {self.base_offset}")
        log_file = self.log
        physical_position = log_file.size_bytes
        max_timestamp = header.max_timestamp
        if physical_position == 0:
            self._first_batch_timestamp_loaded = True
            self._first_batch_timestamp = max_timestamp
        size = header.size_bytes
        written = log_file.append_patched(buf, header.position, size, base_offset, partition_leader_epoch)
        # Validated before it was written: later reads send these bytes without checking them again.
        self.verified.add(physical_position, physical_position + written, base_offset, last + 1)
        known = self._max_ts_and_offset
        max_ts, offset_of_max = self._max_ts() if known is None else known
        if max_timestamp > max_ts:
            max_ts, offset_of_max = max_timestamp, last
            self._max_ts_and_offset = (max_ts, offset_of_max)
        elif known is None:
            self._max_ts_and_offset = (max_ts, offset_of_max)
        since = self._bytes_since_last_index_entry
        if since > self.settings.index_interval_bytes:
            self._offset_index.get().append(last, physical_position)
            self._time_index.get().maybe_append(max_ts, offset_of_max)
            since = 0
        self._bytes_since_last_index_entry = since + size

    def translate_offset(self, offset: int, starting_position: int = 0) -> BatchPosition | None:
        """The first batch whose last offset is ≥ ``offset`` (FileRecords.searchForOffsetWithSize)."""
        _, position = self.offset_index.lookup(offset)
        for h in self.log.iter_headers_from(max(position, starting_position)):
            if h.last_offset >= offset:
                return BatchPosition(h.base_offset, h.position, h.size_bytes, h.last_offset)
        return None

    def read(
        self, start_offset: int, max_size: int, max_position: int | None = None, min_one_message: bool = False,
        *, upper_offset: int | None = None,
    ) -> FetchDataInfo | None:
        """Up to ``max_size`` bytes from the batch holding ``start_offset``, every batch in them
        checked (or known good) first. ``upper_offset`` is the next segment's base offset (None for
        the active segment). Damage after the first batch shortens the read to the batches before
        it; damage at or before ``start_offset`` raises :class:`SegmentDamageError`. Both leave
        :attr:`damage` set for the log to report."""
        if max_size < 0:
            raise ValueError(f"invalid max size {max_size} for a read from segment {self.log.path}")
        damage = self.damage
        if damage is not None and damage.torn and start_offset >= damage.offset:
            return None  # the file ends before this offset: the data is in the next segment or gone
        start = self._locate(start_offset, upper_offset)
        if self._index_distrusted:
            # Reads work without the index but walk from the segment start: rebuild it once instead.
            log.warning("rebuilding the indexes of %s from its batches", self.log.path)
            self.recover(upper_offset=upper_offset, truncate=False)
            if upper_offset is None:
                self.resize_indexes(self.settings.max_index_size)  # the active segment appends on
        if start is None:
            return None
        metadata = LogOffsetMetadata(start_offset, self.base_offset, start.position)
        adjusted_max = max(max_size, start.size) if min_one_message else max_size
        if adjusted_max == 0:
            return FetchDataInfo(metadata, None)
        limit = self.log.size_bytes if max_position is None else max_position
        fetch_size = min(limit - start.position, adjusted_max)
        if fetch_size <= 0:
            return FetchDataInfo(metadata, None)
        good_end = self._check_through(start, start.position + fetch_size, upper_offset)
        fetch_size = min(fetch_size, good_end - start.position)
        return FetchDataInfo(
            metadata, self.log.region(start.position, fetch_size), first_entry_incomplete=adjusted_max < start.size
        )

    # -- checking batches before they are served ----------------------------------------------------

    def _refuse_unsupported(self, problem: BatchProblem | None) -> None:
        if problem is not None and problem.unsupported:
            raise UnsupportedRecordFormatError(
                f"{self.log.path}: byte {problem.position} (offset {problem.offset}) holds {problem.reason}; "
                "the partition is refused and its files are left as they are")

    def refuse_unsupported_format(self) -> None:
        """Raise UnsupportedRecordFormatError if the segment holds data of a format tierlog does not
        read, judged from its entries' length and magic fields (see :func:`first_unsupported`), without
        opening its indexes: recovery asks every segment it will rewrite before it rewrites any."""
        size = self.log.size_bytes
        if self.settings.v2_only or size < HEADER_SIZE_UP_TO_MAGIC:
            return
        with mmap.mmap(self.log.fd, 0, access=mmap.ACCESS_READ) as mm:
            self._refuse_unsupported(first_unsupported(mm, min(size, len(mm)), self.base_offset))

    def _walk(self, position: int, *, expected_offset: int | None, upper_offset: int | None = None,
              stop_offset: int | None = None, exact_end: int | None = None,
              on_batch: Callable[[CheckedBatch], None] | None = None) -> BatchWalk:
        """A :class:`BatchWalk` of this segment's batches from ``position``."""
        return BatchWalk(position, expected_offset=expected_offset, segment_base=self.base_offset,
                         upper_offset=upper_offset, stop_offset=stop_offset, exact_end=exact_end,
                         on_batch=on_batch, v2_only=self.settings.v2_only)

    def _note_damage(self, problem: BatchProblem) -> None:
        self._refuse_unsupported(problem)
        if self.damage is None or problem.position < self.damage.position:
            self.damage = problem
            self.damage_reported = False

    def _run_walk(self, walk: BatchWalk, stop_at: int | None = None) -> None:
        """Feed ``walk`` the file from its position in ``pread`` chunks, jumping over spans checked
        before, until it is done or has reached ``stop_at`` (or its stop offset)."""
        fd = self.log.fd
        file_end = self.log.size_bytes
        need = 0
        while not walk.done:
            if not walk.pending and (walk.found is not None or (stop_at is not None and walk.position >= stop_at)):
                return
            if not walk.pending and walk.expected is not None:
                span = self.verified.starting_at(walk.position)
                if span is not None and span.first_offset == walk.expected and (
                        walk.stop_offset is None or span.next_offset <= walk.stop_offset):
                    walk.skip_to(span.end, span.first_offset, span.next_offset)
                    continue
            want = CHECK_CHUNK_BYTES if stop_at is None else max(stop_at - walk.position, 64 << 10)
            size = max(min(want, 8 * CHECK_CHUNK_BYTES, file_end - walk.position), need)
            position = walk.position
            buf = os.pread(fd, size, position) if size > 0 else b""
            need = walk.feed(buf, position, min(file_end, position + len(buf)) if len(buf) < size else file_end,
                             stop_at)
            if need and walk.position == position and len(buf) >= need:
                raise CorruptRecordError(f"{self.log.path}: the batch check at byte {position} made no progress")

    def _record_walk(self, start: int, walk: BatchWalk) -> None:
        if walk.first_offset is not None and walk.next_offset is not None:
            self.verified.add(start, walk.confirmed, walk.first_offset, walk.next_offset)

    def _plausible_entry(self, entry_offset: int, position: int) -> bool:
        """Whether the batch at an offset index entry's position looks like the one it names: a whole
        v2 batch within the segment whose last offset is at most the entry's (Kafka indexes an
        append's last offset at its first batch). A damaged entry fails this; it is then not used."""
        return self._entry_head(entry_offset, position) is not None

    def _entry_head(self, entry_offset: int, position: int) -> bytes | None:
        """The header of the batch at an index entry's position if :meth:`_plausible_entry`, else None."""
        head = os.pread(self.log.fd, BATCH_HEADER_SIZE, position)
        if len(head) == BATCH_HEADER_SIZE:
            base, length, _epoch, magic = _HEADER_FIELDS.unpack_from(head)
            (delta,) = _LAST_OFFSET_DELTA.unpack_from(head, 23)
            if (magic == MAGIC_V2 and length >= MIN_BATCH_LENGTH and position + LOG_OVERHEAD + length <= self.log.size_bytes
                    and self.base_offset <= base <= base + delta <= entry_offset):
                return head
        if not self._index_distrusted:
            self._index_distrusted = True
            log.warning("the offset index %s names position %d for offset %d, where no such batch starts; reading "
                        "%s from checked positions instead", self.offset_index_path, position, entry_offset,
                        self.log.path)
        return None

    def _index_start(self, offset: int) -> tuple[int, int, bytes] | None:
        """The offset index entry for ``offset`` if it passes :meth:`_plausible_entry`, with the
        header of the batch there; None for no entry (the segment's start) or one that fails."""
        entry_offset, position = self.offset_index.lookup(offset)
        if position == 0:
            return None
        head = self._entry_head(entry_offset, position)
        return None if head is None else (entry_offset, position, head)

    def _locate(self, offset: int, upper_offset: int | None) -> CheckedBatch | None:
        """The checked batch holding ``offset`` (or the first after it), None when the segment has no
        such batch; raises SegmentDamageError when damage stands in the way."""
        span = self.verified.containing_offset(offset)
        if span is not None:
            found = self._find_in_span(span.start, span.end, offset)
            if found is not None:
                return found
        trusted = self.verified.last_before_offset(offset)
        start, expected = (trusted.end, trusted.next_offset) if trusted is not None else (0, self.base_offset)
        if not self._index_distrusted:
            entry = self._index_start(offset)
            if entry is not None and entry[1] > start:
                walk = self._walk(entry[1], expected_offset=None,
                              upper_offset=upper_offset, stop_offset=offset)
                self._run_walk(walk)
                if not walk.unanchored and not (walk.problem is not None and walk.problem.position == entry[1]):
                    return self._finish_locate(entry[1], walk, offset)
                # The batch at the entry cannot be vouched for: go again from a position that can.
        walk = self._walk(start, expected_offset=expected, upper_offset=upper_offset,
                          stop_offset=offset)
        self._run_walk(walk)
        return self._finish_locate(start, walk, offset)

    def _finish_locate(self, start: int, walk: BatchWalk, offset: int) -> CheckedBatch | None:
        self._record_walk(start, walk)
        problem = walk.problem
        if problem is not None:
            self._note_damage(problem)
        if walk.found is not None:
            return walk.found
        if problem is not None and not problem.torn:
            after = self._resume_after(problem, offset, walk.upper_offset)
            if after is not None:
                return after
            raise SegmentDamageError(self.log.path, problem)
        return None

    def _resume_after(self, problem: BatchProblem, offset: int, upper_offset: int | None) -> CheckedBatch | None:
        """A read of an offset past a damaged batch (a consumer seeking past it): if the damaged
        batch's length still leads to a batch that the one after it confirms, and that batch holds
        ``offset``, reads go on there. None when nothing can be vouched for."""
        head = os.pread(self.log.fd, LOG_OVERHEAD, problem.position)
        if len(head) < LOG_OVERHEAD:
            return None
        (length,) = _LENGTH.unpack_from(head, 8)
        position = problem.position + LOG_OVERHEAD + length
        if length < BATCH_HEADER_SIZE - LOG_OVERHEAD or position >= self.log.size_bytes:
            return None
        walk = self._walk(position, expected_offset=None, upper_offset=upper_offset,
                          stop_offset=offset)
        self._run_walk(walk)
        found = walk.found
        if walk.unanchored or found is None or found.base_offset <= problem.offset or found.base_offset > offset:
            return None  # garbage, or the offset is in (or right after) the damaged batch
        self._record_walk(position, walk)
        return found

    def _find_in_span(self, span_start: int, span_end: int, offset: int) -> CheckedBatch | None:
        """Within checked bytes the headers can be followed without checking the batches again
        (FileRecords.iter_headers_from's rules, without a header object per batch: every fetch
        comes here). The header at the index entry, read to judge the entry, is not read again."""
        position = span_start
        head: bytes | None = None
        entry = None if self._index_distrusted else self._index_start(offset)
        if entry is not None and span_start <= entry[1] < span_end:
            position, head = entry[1], entry[2]
        fd = self.log.fd
        end = min(span_end, self.log.size_bytes)
        while end - position >= HEADER_SIZE_UP_TO_MAGIC:
            if head is None:
                head = os.pread(fd, BATCH_HEADER_SIZE, position)
            base, length, _epoch, magic = _HEADER_FIELDS.unpack_from(head) if len(head) >= 17 else (0, -1, 0, 0)
            if length < MIN_BATCH_LENGTH:
                raise CorruptRecordError(f"{self.log.path}: record batch size {length} at position {position} is below "
                                         "the minimum")
            size = LOG_OVERHEAD + length
            if position + size > end:
                return None
            if magic != MAGIC_V2 or len(head) < BATCH_HEADER_SIZE or size < BATCH_HEADER_SIZE:
                raise CorruptRecordError(f"{self.log.path}: no whole v2 batch header at position {position}")
            last = base + _LAST_OFFSET_DELTA.unpack_from(head, 23)[0]
            if last >= offset:
                return CheckedBatch(position, size, base, last)
            position += size
            head = None
        return None

    def _check_through(self, start: CheckedBatch, end: int, upper_offset: int | None) -> int:
        """Make sure every batch starting before ``end`` is checked, from the checked batch ``start``;
        returns ``end``, or the position of the first damage if that comes first."""
        damage = self.damage
        if damage is not None and start.position < damage.position < end:
            end = damage.position
        span = self.verified.containing_position(start.position)
        if span is not None and span.end >= end:
            return end
        position, expected = (span.end, span.next_offset) if span is not None else (
            start.position + start.size, start.last_offset + 1)
        if position >= end:
            return end
        problem = self._check_from(position, expected, end, upper_offset)
        return end if problem is None else min(end, problem.position)

    def _check_from(self, position: int, expected: int, end: int, upper_offset: int | None) -> BatchProblem | None:
        """Walk the batches from ``position`` (whose base offset must be ``expected``) to ``end``,
        remembering what passed and noting the first damage, which is returned."""
        walk = self._walk(position, expected_offset=expected, upper_offset=upper_offset)
        self._run_walk(walk, stop_at=end)
        self._record_walk(position, walk)
        if walk.problem is not None:
            self._note_damage(walk.problem)
        return walk.problem

    def check_all_batches(self, upper_offset: int | None) -> BatchProblem | None:
        """Check every batch of the file not known good (from its start, offsets from the base
        offset, below ``upper_offset``); the first damage, also left in :attr:`damage`, or None.
        Spans checked before (by appends and reads) are skipped, and known damage is answered at once."""
        if self.damage is not None:
            return self.damage
        end = self.log.size_bytes
        span = self.verified.containing_position(0)
        position, expected = (span.end, span.next_offset) if span is not None else (0, self.base_offset)
        return None if position >= end else self._check_from(position, expected, end, upper_offset)

    @property
    def index_distrusted(self) -> bool:
        """An offset index entry named a position where its batch does not start."""
        return self._index_distrusted

    def check_tail(self, end_offset: int | None = None) -> BatchProblem | None:
        """Check the batches from the second-to-last offset index entry on (all of them if there are
        fewer entries): the end of the active segment after a clean shutdown, where the log end offset
        is read from. ``end_offset`` is where the data must end if known (the clean shutdown's log end
        offset, the name of its producer snapshot)."""
        oi = self.offset_index
        position, expected = 0, self.base_offset
        if oi.entries >= 2:
            entry_offset, entry_position = oi.entry(oi.entries - 2)
            if entry_position > 0 and self._plausible_entry(entry_offset, entry_position):
                position = entry_position
        walk = self._walk(position, expected_offset=None if position else expected,
                          exact_end=end_offset)
        self._run_walk(walk)
        if position and (walk.unanchored or (walk.problem is not None and walk.problem.position == position)):
            position = 0
            walk = self._walk(0, expected_offset=expected, exact_end=end_offset)
            self._run_walk(walk)
        self._record_walk(position, walk)
        return walk.problem

    def read_next_offset(self) -> int:
        """The offset after the last batch in this segment (base offset when empty)."""
        _, position = self.offset_index.last_entry()
        next_offset = self.base_offset
        for h in self.log.iter_headers_from(position):
            next_offset = h.next_offset
        return next_offset

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with a timestamp ≥ ``timestamp`` and an offset
        ≥ ``starting_offset``, or None."""
        from tierlog.records import decode_batch  # decoding records is needed only here

        index_ts, index_offset = self.time_index.lookup(timestamp)
        if index_ts >= 0 and not self._time_entry_matches(index_ts, index_offset):
            # A damaged entry would start the search too late and skip records.
            self._rebuild_for_time_index(index_ts, index_offset)
            _, index_offset = self.time_index.lookup(timestamp)
        start = self.translate_offset(max(index_offset, starting_offset))
        if start is None:
            return None
        headers_lie = self.headers_lie
        for h in self.log.iter_headers_from(start.position):
            if h.is_control:
                continue
            # A lying header (stored by an older tierlog) may say -1 where the records hold the answer.
            if h.max_timestamp >= timestamp or (headers_lie and self._batch_max_timestamp(h) >= timestamp):
                full = BatchHeader(self.log.read(h.position, h.size_bytes), 0)
                for record in decode_batch(full):
                    if record.timestamp >= timestamp and record.offset >= starting_offset:
                        return record.offset, record.timestamp
        return None

    # -- recovery and checks ------------------------------------------------------------------------

    def recover(self, on_batch: Callable[[BatchHeader], None] | None = None, *, upper_offset: int | None = None,
                truncate: bool = True, exact_end: int | None = None) -> int:
        """Rebuild the indexes from the log, checking every batch (whole, CRC, offsets in order and
        inside [base offset, ``upper_offset``)) and stopping at the first that fails (LogSegment#recover).

        ``truncate``: cut the file there and return how many bytes went (the active segment, or a
        torn tail after a crash). Otherwise the bytes stay and :attr:`damage` marks where reads stop:
        for an inactive segment after a clean shutdown the bytes after a flipped bit are still the
        only copy there is. ``exact_end``: the offset the data must end at, if known (a clean
        shutdown's log end offset). ``on_batch`` sees every valid batch (leader epochs, producer state).

        The time index and the largest timestamp come from each batch's records, not its header: a
        batch stored by an older tierlog keeps its producer's header value, which may be -1 or wrong.
        The bytes are not rewritten; :attr:`headers_lie` remembers that the headers cannot be trusted.
        """
        self.verified.clear()
        # The index entries are gathered first and written only once the walk has shown the data is
        # of a format tierlog reads: a refused partition's index files stay as they were.
        offset_entries = array("q")  # last offset, position
        time_entries = array("q")  # max timestamp so far, its offset
        valid_bytes = 0
        last_index_entry = 0
        max_ts, offset_of_max = -1, self.base_offset
        first_ts: int | None = None
        headers_lie = False
        problem: BatchProblem | None = None
        size = self.log.size_bytes
        if size > 0:
            with open(self.log.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:

                def confirmed(b: CheckedBatch) -> None:
                    nonlocal last_index_entry, max_ts, offset_of_max, first_ts, headers_lie
                    h = BatchHeader(mm, b.position)
                    batch_ts = records_max_timestamp(h)
                    if batch_ts != h.max_timestamp:
                        headers_lie = True
                    if first_ts is None:
                        first_ts = batch_ts
                    if batch_ts > max_ts:
                        max_ts, offset_of_max = batch_ts, b.last_offset
                    if b.position - last_index_entry > self.settings.index_interval_bytes:
                        offset_entries.extend((b.last_offset, b.position))
                        time_entries.extend((max_ts, offset_of_max))
                        last_index_entry = b.position
                    if on_batch is not None:
                        # Hand out a copy of the header so no view of the mapping outlives it.
                        on_batch(BatchHeader(bytes(mm[b.position : b.position + BATCH_HEADER_SIZE]), 0))

                walk = self._walk(0, expected_offset=self.base_offset,
                              upper_offset=upper_offset, exact_end=exact_end, on_batch=confirmed)
                walk.feed(mm, 0, min(size, len(mm)))
                valid_bytes = walk.confirmed
                problem = walk.problem
                if walk.first_offset is not None and walk.next_offset is not None:
                    self.verified.add(0, valid_bytes, walk.first_offset, walk.next_offset)
        # Before anything is truncated or marked: data of another format is not damage.
        self._refuse_unsupported(problem)
        self.offset_index.reset()
        self.time_index.reset()
        if truncate:
            # The data may be cut: its aborted-transaction entries are rebuilt from the batches by
            # the loader (txn_rebuild), as Kafka's recovery rebuilds them with the producer state.
            # Kept bytes keep their entries.
            self.txn_index.reset()
            self.txn_index_reset = True
        for i in range(0, len(offset_entries), 2):
            self.offset_index.append(offset_entries[i], offset_entries[i + 1])
            self.time_index.maybe_append(time_entries[i], time_entries[i + 1])
        self.recovery_problem = problem
        if headers_lie:
            log.warning("batch headers of %s carry max timestamps their records do not (written so by an older "
                        "tierlog); its time index and largest timestamp come from the records", self.log.path)
        self.headers_lie = headers_lie
        self.damage = None
        self.damage_reported = False
        truncated = 0
        if problem is not None:
            if truncate:
                log.warning("found invalid data in %s at byte %d (offset %d): %s; truncating there", self.log.path,
                            problem.position, problem.offset, problem.reason)
            else:
                log.warning("found damaged data in %s at byte %d (offset %d): %s; reads stop there", self.log.path,
                            problem.position, problem.offset, problem.reason)
                self.damage = problem
        if truncate:
            truncated = size - valid_bytes
            if truncated > 0:
                log.warning("truncated %d invalid bytes at the end of %s", truncated, self.log.path)
            self.log.truncate_to(valid_bytes)
        self.offset_index.trim_to_valid_size()
        self.time_index.maybe_append(max_ts, offset_of_max, skip_full_check=True)
        self.time_index.trim_to_valid_size()
        self._max_ts_and_offset = (max_ts, offset_of_max)
        self._first_batch_timestamp = first_ts
        self._first_batch_timestamp_loaded = True
        self._bytes_since_last_index_entry = 0
        self._index_distrusted = False
        self.checked = True
        return truncated

    def cheap_untrimmed_check(self) -> bool:
        """True if the time or offset index looks like a preallocated file never trimmed (KAFKA-19200),
        judged from a stat and at most the last entry."""
        size = self.settings.max_index_size
        return looks_untrimmed(self._time_index.path, TIME_ENTRY_BYTES, size) or looks_untrimmed(
            self._offset_index.path, OFFSET_ENTRY_BYTES, size
        )

    def sanity_check(self, next_base_offset: int | None, *, active: bool = False) -> None:
        """Seed 003's index check: files present, entry count vs file size, monotonic entries, last
        offsets within [base, next base). Raises CorruptIndexError saying what is wrong."""
        for path in (self._offset_index.path, self._time_index.path):
            if not path.exists():
                raise CorruptIndexError(f"{path} is missing")
        if not active and self.cheap_untrimmed_check():
            raise CorruptIndexError(f"an index of {self.log.path} is preallocated and was never trimmed")
        oi, ti = self.offset_index, self.time_index
        oi.sanity_check()
        ti.sanity_check()
        if oi.entries > 0:
            last_offset, last_position = oi.last_entry()
            if last_position >= self.log.size_bytes:
                # A .log cut short (or an index from a longer one): the entry points past the data.
                raise CorruptIndexError(f"{oi.path}: the last entry (offset {last_offset}) points at byte "
                                        f"{last_position}, past the end of {self.log.path} ({self.log.size_bytes} bytes)")
        if next_base_offset is not None:
            last_offset, _ = oi.last_entry()
            if oi.entries > 0 and last_offset >= next_base_offset:
                raise CorruptIndexError(
                    f"{oi.path}: last offset {last_offset} is not below the next segment's base {next_base_offset}"
                )
            _, ts_offset = ti.last_entry()
            if ti.entries > 0 and ts_offset >= next_base_offset:
                raise CorruptIndexError(
                    f"{ti.path}: last offset {ts_offset} is not below the next segment's base {next_base_offset}"
                )

    # -- lifecycle ------------------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every batch at or after ``offset``; return the bytes removed."""
        mapping = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        # The segment becomes the active one again: give its indexes their full size back.
        self.offset_index.resize(self.settings.max_index_size)
        self.time_index.resize(self.settings.max_index_size)
        if mapping is None:
            return 0
        self.verified.truncate(mapping.position, mapping.offset)
        if self.damage is not None and self.damage.position >= mapping.position:
            self.damage = None
        removed = self.log.truncate_to(mapping.position)
        if self.log.size_bytes == 0:
            self.created_ms = self.created_ms  # unchanged; kept for clarity of Kafka's parity
            self._first_batch_timestamp = None
        entry = self.time_index.last_entry()
        self._max_ts_and_offset = (entry[0], entry[1])
        self._bytes_since_last_index_entry = 0
        return removed

    def on_become_inactive(self) -> None:
        """Final time index entry, then trim indexes and log to their valid sizes (roll and close)."""
        max_ts, offset_of_max = self._max_ts()
        self.time_index.maybe_append(max_ts, offset_of_max, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self.log.trim()

    def release_indexes(self) -> None:
        """Close the index files (and their mappings) of an inactive segment; they reopen lazily.
        Checking thousands of segments would otherwise hold a descriptor per index."""
        self._offset_index.close()
        self._time_index.close()

    def resize_indexes(self, size: int) -> None:
        self.offset_index.resize(size)
        self.time_index.resize(size)

    def flush(self) -> None:
        self.log.flush()
        if self._offset_index.loaded:
            self.offset_index.flush()
        if self._time_index.loaded:
            self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        if self._time_index.loaded or self.log.is_open:
            try:
                max_ts, offset_of_max = self._max_ts()
                self.time_index.maybe_append(max_ts, offset_of_max, skip_full_check=True)
            except TierlogError as e:
                log.warning("could not write the final time index entry of %s: %s", self.log.path, e)
        self._offset_index.close()
        self._time_index.close()
        self.txn_index.close()
        self.log.close()

    def close_unchanged(self) -> None:
        """Close without the final time index entry (a refused partition: nothing new is written;
        its data may not even be readable); the indexes are trimmed back to their valid size,
        undoing the preallocation that loading the active segment made."""
        self._offset_index.close()
        self._time_index.close()
        self.txn_index.close()
        self.log.close()

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        def renamed(p: Path) -> Path:
            name = p.name[: len(p.name) - len(old_suffix)] if old_suffix and p.name.endswith(old_suffix) else p.name
            return p.with_name(name + new_suffix)

        self.log.rename_to(renamed(self.log.path))
        self._offset_index.rename_to(renamed(self._offset_index.path))
        self._time_index.rename_to(renamed(self._time_index.path))
        self.txn_index.rename_to(renamed(self.txn_index.path))

    def delete_files(self) -> None:
        self.close()
        for p in (self.log.path, self._offset_index.path, self._time_index.path, self.txn_index.path):
            p.unlink(missing_ok=True)

    def all_paths(self) -> list[Path]:
        return [self.log.path, self._offset_index.path, self._time_index.path, self.txn_index.path]

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, path={self.log.path})"
