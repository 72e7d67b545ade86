"""Decoding batches into records, and the deep validation the broker runs on every produced batch."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import cast

from tierlog.errors import CorruptRecordError, InvalidRecordError, TierlogError
from tierlog.records.compression import CompressionType, decompress
from tierlog.records.header import (
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    CONTROL_MASK,
    LOG_APPEND_TIME,
    MAGIC_V2,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    BatchHeader,
    Buffer,
    iter_headers,
)
from tierlog.records.record import Record, decode_record, skip_record

#: The C walk (_cwalk.c), built by the install step when a C compiler is there: ~7 ns a record and
#: ~0.3 µs a call against the numba walk's ~13 ns and ~1.2 µs. Same results (test_fastwalk.py).
#: None when it was installed without a compiler: the numba walk then.
c_walk_records: Callable[[Buffer, int, int, int, int, bool], tuple[bool, int, int, int, int, int, bool, int]] | None
#: The checks of a record set that is one whole uncompressed batch in one C call (the produce
#: path's common case): :func:`check_batch_python` is its reference. None without the C walk.
c_check_batch: Callable[[Buffer, int, bool], tuple[int, int, int, bool] | None] | None
#: :func:`check_header_python` in one C call: ``c_check_batch`` answering the batch's header too,
#: built in C (~0.4 µs less than BatchHeader's ``__init__``). None without the C walk.
c_check_header: Callable[[Buffer, int, bool], tuple[BatchHeader, int, int, int, bool] | None] | None
try:
    from tierlog.records._cwalk import check_batch as c_check_batch
    from tierlog.records._cwalk import check_header as c_check_header
    from tierlog.records._cwalk import set_header_type as _set_header_type
    from tierlog.records._cwalk import walk_records as c_walk_records
except ImportError:
    c_walk_records = c_check_batch = c_check_header = None
else:
    _set_header_type(BatchHeader)  # raises if BatchHeader's slots are not the fields the C sets


def _numba_walk(buf: Buffer, pos: int, end: int, count: int, base_timestamp: int,
                from_client: bool) -> tuple[bool, int, int, int, int, int, bool, int]:
    """The numba walk, imported on first use: numba and numpy take ~0.4 s to import, which every
    CLI command that reads a batch header (``tier status``, ``metadata show``) paid for nothing
    where the C walk is built."""
    import numpy as np

    from tierlog.records._fastwalk import walk_records
    return walk_records(np.frombuffer(buf, dtype=np.uint8), pos, end, count, base_timestamp, from_client)


def _records_region(header: BatchHeader, *, any_buffer: bool = False) -> tuple[bytes, int, int]:
    """The (decompressed if needed) record bytes of a batch as (buffer, start, end).

    An uncompressed batch in a ``bytes`` buffer is read in place, so keys and values are sliced once.
    With ``any_buffer`` (callers that only walk the bytes, never slice values out) a batch in any
    buffer is: the produce path validates a 1 MiB batch without copying it.
    """
    if header.magic != MAGIC_V2:
        raise CorruptRecordError(f"record batch at offset {header.base_offset} has unsupported magic {header.magic}")
    if header.size_bytes < BATCH_HEADER_SIZE:
        raise CorruptRecordError(
            f"record batch at offset {header.base_offset} is {header.size_bytes} bytes, "
            f"smaller than the {BATCH_HEADER_SIZE}-byte header"
        )
    if header.position + header.size_bytes > len(header.buf):
        raise CorruptRecordError(
            f"record batch at offset {header.base_offset} declares {header.size_bytes} bytes "
            f"but only {len(header.buf) - header.position} remain"
        )
    if header.records_count < 0:
        raise InvalidRecordError(
            f"Found invalid record count {header.records_count} in magic v2 batch at offset {header.base_offset}"
        )
    codec = header.compression
    if codec != CompressionType.NONE:
        data = decompress(codec, header.body())
        return data, 0, len(data)
    if isinstance(header.buf, bytes) or any_buffer:
        start = header.position + BATCH_HEADER_SIZE
        # Only bytes are handed out for slicing; a walk reads bytearray and memoryview items the same.
        return cast(bytes, header.buf), start, header.position + header.size_bytes
    data = bytes(header.body())
    return data, 0, len(data)


def _premature_eof(header: BatchHeader, found: int) -> InvalidRecordError:
    return InvalidRecordError(
        f"Incorrect declared batch size, premature EOF reached: batch at offset {header.base_offset} "
        f"declares {header.records_count} records but holds only {found}"
    )


def _bytes_remaining(header: BatchHeader, remaining: int) -> InvalidRecordError:
    return InvalidRecordError(
        f"Incorrect declared batch size, records still remaining in file: {remaining} bytes follow the "
        f"{header.records_count} declared records of the batch at offset {header.base_offset}"
    )


def decode_batch(header: BatchHeader) -> list[Record]:
    """All records of one batch, decompressed. The CRC is not checked (call ``header.ensure_valid()``).

    For a LogAppendTime batch every record's timestamp is the batch maxTimestamp, as Kafka reports it.
    """
    buf, pos, end = _records_region(header)
    count = header.records_count
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    log_append_time = header.max_timestamp if header.timestamp_type == LOG_APPEND_TIME else None
    records: list[Record] = []
    append = records.append
    try:
        for _ in range(count):
            if pos >= end:
                break
            record, pos = decode_record(buf, pos, end, base_offset, base_timestamp, log_append_time)
            append(record)
    except InvalidRecordError as e:
        raise InvalidRecordError(f"record {len(records)} of the batch at offset {base_offset}: {e}") from e
    if len(records) != count:
        raise _premature_eof(header, len(records))
    if pos != end:
        raise _bytes_remaining(header, end - pos)
    return records


def iter_batches(
    buf: Buffer, *, start: int = 0, end: int | None = None, verify_crc: bool = False
) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """Each batch of ``buf[start:end]`` with its records (iteration rules of :func:`iter_headers`)."""
    for header in iter_headers(buf, start, end):
        if verify_crc:
            header.ensure_valid()
        yield header, decode_batch(header)


def iter_records(
    buf: Buffer, *, start: int = 0, end: int | None = None, verify_crc: bool = False
) -> Iterator[Record]:
    """Every record of every batch of ``buf[start:end]``, in log order."""
    for _, records in iter_batches(buf, start=start, end=end, verify_crc=verify_crc):
        yield from records


@dataclass(slots=True)
class BatchStats:
    """What validating a batch learned, for the checks the caller owns (timestamps, keys, sizes).
    Not frozen: a frozen dataclass's ``__init__`` costs ~0.8 µs more, once per produced batch.

    Timestamps are the records' own (baseTimestamp + delta) and ignore NO_TIMESTAMP records; both are
    NO_TIMESTAMP when no record has one.
    """

    record_count: int
    min_timestamp: int
    max_timestamp: int
    #: offsetDelta of the first record that has max_timestamp (-1 when there is none).
    max_timestamp_offset_delta: int
    #: True when some record has a null key (a compacted topic rejects the batch then).
    has_null_key: bool
    #: Size of the records after decompression.
    uncompressed_size_bytes: int


def walk_records_python(
    buf: bytes, pos: int, end: int, count: int, base_timestamp: int, from_client: bool, base_offset: int
) -> tuple[int, int, int, int, int, bool, int]:
    """The compiled walk (:func:`walk_records`) in Python, raising InvalidRecordError that names
    the record and what is wrong with it. Returns (found, end position, min ts, max ts, offsetDelta
    of max ts, has null key, last offsetDelta); ``base_offset`` is only for the message."""
    min_ts = max_ts = NO_TIMESTAMP
    max_ts_delta = -1
    has_null_key = False
    previous_delta = -1
    found = 0
    try:
        for index in range(count):
            if pos >= end:
                break
            timestamp_delta, offset_delta, has_key, pos = skip_record(buf, pos, end)
            if from_client:
                if offset_delta != index:
                    raise InvalidRecordError(
                        f"offsetDelta {offset_delta} where {index} was expected: "
                        "offsets inside a batch must be contiguous from 0"
                    )
            elif offset_delta <= previous_delta:
                raise InvalidRecordError(
                    f"offsetDelta {offset_delta} does not increase (previous {previous_delta})"
                )
            previous_delta = offset_delta
            has_null_key = has_null_key or not has_key
            ts = base_timestamp + timestamp_delta
            if ts != NO_TIMESTAMP:
                if ts > max_ts:
                    max_ts = ts
                    max_ts_delta = offset_delta
                if min_ts == NO_TIMESTAMP or ts < min_ts:
                    min_ts = ts
            found += 1
    except InvalidRecordError as e:
        raise InvalidRecordError(f"record {found} of the batch at offset {base_offset}: {e}") from e
    return found, pos, min_ts, max_ts, max_ts_delta, has_null_key, previous_delta


def validate_batch(header: BatchHeader, *, from_client: bool = True) -> BatchStats:
    """Kafka's produce-path checks (Log.analyzeAndValidateRecords + LogValidator.validateBatch), deep.

    Raises CorruptRecordError for a bad CRC, a short or truncated batch or damaged compressed data,
    and InvalidRecordError for everything else. With ``from_client`` (AppendOrigin.CLIENT) it also
    rejects control batches, empty batches, a producer id without a base sequence, and record offset
    deltas other than 0..count-1. Record structure is checked without copying keys or values.
    """
    base_offset = header.base_offset
    if header.magic != MAGIC_V2:
        raise InvalidRecordError(f"record batch at offset {base_offset} has unsupported magic {header.magic}")
    header.ensure_valid()
    count = header.records_count
    if count < 0:
        raise InvalidRecordError(f"Found invalid record count {count} in magic v2 batch at offset {base_offset}")
    attributes = header.attributes
    if from_client:
        # Fields, not the properties that say the same: this runs for every produced batch.
        if attributes & CONTROL_MASK:
            raise InvalidRecordError("Clients are not allowed to write control records")
        if header.last_offset_delta < 0:
            raise InvalidRecordError(
                f"Batch has an invalid offset range: [{base_offset}, {header.last_offset}] "
                f"(lastOffsetDelta {header.last_offset_delta})"
            )
        if count == 0:
            raise InvalidRecordError(f"Invalid reported count for record batch: {count}")
        if header.last_offset_delta + 1 != count:
            raise InvalidRecordError(
                f"Inconsistent batch offset range [{base_offset}, {header.last_offset}] and count of "
                f"records {count}: lastOffsetDelta must be {count - 1}"
            )
        if header.producer_id > NO_PRODUCER_ID and header.base_sequence < 0:
            raise InvalidRecordError(
                f"Invalid sequence number {header.base_sequence} in record batch with producerId "
                f"{header.producer_id}"
            )
    if attributes & COMPRESSION_MASK == 0:
        # ensure_valid checked the batch is whole: its records are walked where they lie, without
        # _records_region's checks again.
        position = header.position
        return _walk(header, header.buf, position + BATCH_HEADER_SIZE, position + header.size_bytes, from_client)
    return walk_batch(header, from_client=from_client)


def check_batch_python(buf: Buffer, computed_crc: int, from_client: bool) -> tuple[int, int, int, bool] | None:
    """What the C ``check_batch`` answers, from the Python checks it stands for: for a record set
    that is exactly one whole uncompressed v2 batch whose CRC is ``computed_crc`` and that
    :func:`validate_batch` accepts, (min timestamp, max timestamp, offsetDelta of the max, has a
    null key) as its :class:`BatchStats` say; None for anything else (a damaged or refused batch,
    several batches, a compressed one). The produce path then runs the Python checks, which raise
    the exact error, so the C call only ever skips work that would have succeeded."""
    size = len(buf)
    if size < BATCH_HEADER_SIZE:
        return None
    header = BatchHeader(buf, 0)
    if header.size_bytes != size or header.magic != MAGIC_V2 or header.crc != computed_crc:
        return None
    if header.attributes & COMPRESSION_MASK:
        return None
    try:
        stats = validate_batch(header, from_client=from_client)
    except TierlogError:
        return None
    return stats.min_timestamp, stats.max_timestamp, stats.max_timestamp_offset_delta, stats.has_null_key


def check_header_python(buf: Buffer, computed_crc: int,
                        from_client: bool) -> tuple[BatchHeader, int, int, int, bool] | None:
    """What the C ``check_header`` answers: :func:`check_batch_python`'s answer after the batch's
    header, ``BatchHeader(buf, 0)``; None when that answers None."""
    checked = check_batch_python(buf, computed_crc, from_client)
    if checked is None:
        return None
    return (BatchHeader(buf, 0), *checked)


def walk_batch(header: BatchHeader, *, from_client: bool = False) -> BatchStats:
    """The record walk of :func:`validate_batch` alone: every record's structure, and the timestamps
    the records themselves carry (decompressing if needed). No CRC or header rules, so a stored
    batch that recovery already checked is not checked twice."""
    buf, pos, end = _records_region(header, any_buffer=True)
    return _walk(header, buf, pos, end, from_client)


def _walk(header: BatchHeader, buf: Buffer, pos: int, end: int, from_client: bool) -> BatchStats:
    count = header.records_count
    uncompressed_size = end - pos
    if c_walk_records is not None:
        fast = c_walk_records(buf, pos, end, count, header.base_timestamp, from_client)
    else:
        fast = _numba_walk(buf, pos, end, count, header.base_timestamp, from_client)
    ok, found, walked_to, min_ts, max_ts, max_ts_delta, has_null_key, last_delta = fast
    if ok and found == count and walked_to == end and not (count and last_delta > header.last_offset_delta):
        return BatchStats(count, min_ts, max_ts, max_ts_delta, has_null_key, uncompressed_size)
    # Something is wrong (or unusual): the Python walk finds it and says exactly what (it reads
    # bytearray, memoryview and mmap items as it reads bytes).
    found, pos, min_ts, max_ts, max_ts_delta, has_null_key, previous_delta = walk_records_python(
        cast(bytes, buf), pos, end, count, header.base_timestamp, from_client, header.base_offset)
    if found != count:
        raise _premature_eof(header, found)
    if pos != end:
        raise _bytes_remaining(header, end - pos)
    if count and previous_delta > header.last_offset_delta:
        raise InvalidRecordError(
            f"last record's offsetDelta {previous_delta} exceeds the batch lastOffsetDelta "
            f"{header.last_offset_delta}"
        )
    return BatchStats(count, min_ts, max_ts, max_ts_delta, has_null_key, uncompressed_size)


def records_max_timestamp(header: BatchHeader) -> int:
    """A stored batch's max timestamp as its records give it, which is what the header should say
    (Kafka's LogValidator sets the header from the records on append; a batch stored by an older
    tierlog keeps whatever its producer wrote, -1 from Sarama 1.22). A LogAppendTime batch's
    header is its timestamp. A batch whose records cannot be walked keeps its header's value: its
    CRC was checked, so those are the bytes the producer sent and readers see."""
    if header.timestamp_type == LOG_APPEND_TIME:
        return header.max_timestamp
    try:
        return walk_batch(header).max_timestamp
    except TierlogError:
        return header.max_timestamp


def records_min_timestamp(header: BatchHeader) -> int | None:
    """A lower bound of the timestamps a reader gets from a stored batch's records (exact for every
    batch a producer writes): a LogAppendTime batch's records all carry its header's timestamp; a
    CreateTime batch's smallest record timestamp, or -1 (NO_TIMESTAMP) when its first timestamp is
    -1, since such records read as -1. None when the records cannot be walked: nothing is known."""
    if header.timestamp_type == LOG_APPEND_TIME:
        return header.max_timestamp
    try:
        smallest = walk_batch(header).min_timestamp
    except TierlogError:
        return None
    if smallest == NO_TIMESTAMP or header.base_timestamp == NO_TIMESTAMP:
        return NO_TIMESTAMP
    return min(smallest, header.base_timestamp)
