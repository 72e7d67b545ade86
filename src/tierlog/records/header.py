"""A zero-copy view of the 61-byte record batch v2 header (KAFKA-FACTS §1.1) and the batch-level
edits the broker makes without decompressing: base offset, partition leader epoch, LogAppendTime."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from mmap import mmap

from tierlog._util.crc import crc32c, crc32c_unwrapped
from tierlog.errors import CorruptRecordError

LOG_OVERHEAD = 12  # baseOffset + batchLength
BATCH_HEADER_SIZE = 61  # RECORD_BATCH_OVERHEAD
HEADER_SIZE_UP_TO_MAGIC = 17
MIN_BATCH_LENGTH = 14  # LegacyRecord.RECORD_OVERHEAD_V0: shorter lengths mean a zero-filled tail
CRC_START = 21
MAGIC_V2 = 2

BASE_OFFSET = 0
LENGTH = 8
PARTITION_LEADER_EPOCH = 12
MAGIC = 16
CRC = 17
ATTRIBUTES = 21
LAST_OFFSET_DELTA = 23
BASE_TIMESTAMP = 27
MAX_TIMESTAMP = 35
PRODUCER_ID = 43
PRODUCER_EPOCH = 51
BASE_SEQUENCE = 53
RECORDS_COUNT = 57

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1
INT32_MAX = 2**31 - 1

CREATE_TIME = 0
LOG_APPEND_TIME = 1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")

# mmap is included so a segment file can be walked in place without copying it.
Buffer = bytes | bytearray | memoryview | mmap


def increment_sequence(sequence: int, increment: int) -> int:
    """Sequence arithmetic that wraps at Int32.MAX back to 0 (DefaultRecordBatch.incrementSequence)."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


class BatchHeader:
    """The header fields of one batch, parsed once from ``buf`` at ``position``.

    ``buf`` is kept (not copied) so :meth:`compute_crc` and :meth:`body` read the batch in place.
    """

    __slots__ = (
        "attributes", "base_offset", "base_sequence", "base_timestamp", "batch_length", "buf", "crc",
        "last_offset_delta", "magic", "max_timestamp", "partition_leader_epoch", "position",
        "producer_epoch", "producer_id", "records_count", "size_bytes",
    )

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    buf: Buffer
    position: int
    #: LOG_OVERHEAD + batch_length, the whole batch: a field, not a property, as the produce path
    #: reads it about ten times per batch.
    size_bytes: int

    def __init__(self, buf: Buffer, position: int = 0) -> None:
        if len(buf) - position < BATCH_HEADER_SIZE:
            raise CorruptRecordError(
                f"record batch at position {position} is shorter than the {BATCH_HEADER_SIZE}-byte header"
            )
        (
            self.base_offset, self.batch_length, self.partition_leader_epoch, self.magic, self.crc,
            self.attributes, self.last_offset_delta, self.base_timestamp, self.max_timestamp,
            self.producer_id, self.producer_epoch, self.base_sequence, self.records_count,
        ) = _HEADER.unpack_from(buf, position)
        self.buf = buf
        self.position = position
        self.size_bytes = LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)

    def body(self) -> memoryview:
        """The bytes after the header: raw records or one compressed stream."""
        start = self.position + BATCH_HEADER_SIZE
        return memoryview(self.buf)[start : self.position + self.size_bytes]

    def raw(self) -> memoryview:
        return memoryview(self.buf)[self.position : self.position + self.size_bytes]

    def compute_crc(self) -> int:
        end = self.position + self.size_bytes
        if end > len(self.buf):
            raise CorruptRecordError(f"record batch at position {self.position} is truncated")
        return crc32c(memoryview(self.buf)[self.position + CRC_START : end])

    def is_valid(self) -> bool:
        return (
            self.size_bytes >= BATCH_HEADER_SIZE
            and self.position + self.size_bytes <= len(self.buf)
            and self.compute_crc() == self.crc
        )

    def ensure_valid(self) -> None:
        """Raise CorruptRecordError unless the batch is whole and its CRC matches (Kafka's ensureValid)."""
        if self.size_bytes < BATCH_HEADER_SIZE:
            raise CorruptRecordError(
                f"record batch at offset {self.base_offset} is {self.size_bytes} bytes, "
                f"smaller than the {BATCH_HEADER_SIZE}-byte header"
            )
        end = self.position + self.size_bytes
        if end > len(self.buf):
            raise CorruptRecordError(f"record batch at position {self.position} is truncated")
        # The C function itself: this runs for every produced batch.
        computed = crc32c_unwrapped(memoryview(self.buf)[self.position + CRC_START : end])
        if computed != self.crc:
            raise CorruptRecordError(
                f"record batch at offset {self.base_offset} is corrupt: "
                f"stored crc {self.crc:#010x}, computed {computed:#010x}"
            )

    def __repr__(self) -> str:
        return (
            f"BatchHeader(base_offset={self.base_offset}, last_offset={self.last_offset}, "
            f"count={self.records_count}, size={self.size_bytes}, codec={self.compression})"
        )


def iter_headers(buf: Buffer, start: int = 0, end: int | None = None) -> Iterator[BatchHeader]:
    """Iterate the batches in ``buf[start:end]`` as FileLogInputStream.nextBatch does (KAFKA-FACTS §1.6):
    fewer than 17 bytes left or a batch extending past the end ends iteration silently; a batch length
    below 14 (a zero-filled tail) or a magic other than 2 raises CorruptRecordError. CRCs are not checked.
    """
    end = len(buf) if end is None else end
    pos = start
    while end - pos >= HEADER_SIZE_UP_TO_MAGIC:
        (length,) = _I32.unpack_from(buf, pos + LENGTH)
        if length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"record batch size {length} at position {pos} is below the minimum")
        if pos + LOG_OVERHEAD + length > end:
            return
        magic = buf[pos + MAGIC]
        if magic != MAGIC_V2:
            raise CorruptRecordError(f"unsupported record batch magic {magic} at position {pos}")
        yield BatchHeader(buf, pos)
        pos += LOG_OVERHEAD + length


def set_base_offset(buf: bytearray | memoryview, position: int, base_offset: int) -> None:
    """Rewrite baseOffset; the CRC does not cover it."""
    _I64.pack_into(buf, position + BASE_OFFSET, base_offset)


def header_copy(view: memoryview, position: int, base_offset: int, partition_leader_epoch: int) -> bytearray:
    """A copy of the 61-byte header of the batch at ``position`` with its base offset and partition
    leader epoch set (neither is under the CRC): what the produce path writes before the request's
    body, so a 1 MiB batch is not copied to change them."""
    head = bytearray(view[position : position + BATCH_HEADER_SIZE])
    _I64.pack_into(head, BASE_OFFSET, base_offset)
    _I32.pack_into(head, PARTITION_LEADER_EPOCH, partition_leader_epoch)
    return head


def write_patched(fd: int, buf: Buffer, position: int, size: int, file_position: int, base_offset: int,
                  partition_leader_epoch: int) -> int:
    """Write the ``size``-byte batch at ``position`` of ``buf`` at ``file_position`` of ``fd``, its
    base offset and partition leader epoch set in a copy of its header (:func:`header_copy`) and
    its body as it came; the bytes written (a short write is the caller's to finish). The
    reference of ``_cwalk.write_patched`` (test_write_patched.py holds the two equal)."""
    if position < 0 or size < BATCH_HEADER_SIZE or position > len(buf) - size or file_position < 0:
        raise ValueError(f"no batch of {size} bytes at {position} in a buffer of {len(buf)} bytes")
    view = memoryview(buf)
    return os.pwritev(fd, [header_copy(view, position, base_offset, partition_leader_epoch),
                           view[position + BATCH_HEADER_SIZE : position + size]], file_position)


#: :func:`header_copy` in C (``_cwalk.header_copy``, ~0.1 µs against ~0.4 µs, once per produced
#: batch) when the install step built it; this one otherwise. test_check_batch.py holds them equal.
#: :func:`write_patched` likewise (``_cwalk.write_patched``, ~0.5 µs less per produced batch).
fast_header_copy: Callable[[memoryview, int, int, int], bytearray]
fast_write_patched: Callable[[int, Buffer, int, int, int, int, int], int]
try:
    from tierlog.records import _cwalk
except ImportError:
    fast_header_copy, fast_write_patched = header_copy, write_patched
else:
    fast_header_copy, fast_write_patched = _cwalk.header_copy, _cwalk.write_patched


def set_partition_leader_epoch(buf: bytearray | memoryview, position: int, epoch: int) -> None:
    """Rewrite partitionLeaderEpoch; the CRC does not cover it."""
    _I32.pack_into(buf, position + PARTITION_LEADER_EPOCH, epoch)


def set_max_timestamp(buf: bytearray | memoryview, position: int, timestamp_type: int, max_timestamp: int) -> None:
    """Set the timestamp type and maxTimestamp, then recompute the CRC (DefaultRecordBatch.setMaxTimestamp)."""
    (attributes,) = _I16.unpack_from(buf, position + ATTRIBUTES)
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    else:
        attributes &= ~TIMESTAMP_TYPE_MASK
    _I16.pack_into(buf, position + ATTRIBUTES, attributes)
    _I64.pack_into(buf, position + MAX_TIMESTAMP, max_timestamp)
    (length,) = _I32.unpack_from(buf, position + LENGTH)
    crc = crc32c(memoryview(buf)[position + CRC_START : position + LOG_OVERHEAD + length])
    _U32.pack_into(buf, position + CRC, crc)


def set_create_time_max_timestamp(head: bytearray, body: bytes | bytearray | memoryview, max_timestamp: int) -> None:
    """:func:`set_max_timestamp` (CreateTime) for a batch held as a copy of its 61-byte header
    ``head`` and, elsewhere, the bytes after it: the produce path patches a copy of the header and
    writes the request's body as it came, so the CRC is computed over the two pieces."""
    (attributes,) = _I16.unpack_from(head, ATTRIBUTES)
    _I16.pack_into(head, ATTRIBUTES, attributes & ~TIMESTAMP_TYPE_MASK)
    _I64.pack_into(head, MAX_TIMESTAMP, max_timestamp)
    crc = crc32c(body, crc32c(memoryview(head)[CRC_START:BATCH_HEADER_SIZE]))
    _U32.pack_into(head, CRC, crc)


def set_log_append_time(buf: bytearray | memoryview, position: int, timestamp_ms: int) -> None:
    set_max_timestamp(buf, position, LOG_APPEND_TIME, timestamp_ms)
