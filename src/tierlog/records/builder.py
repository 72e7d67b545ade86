"""Build a v2 record batch byte for byte as Kafka's MemoryRecordsBuilder does (KAFKA-FACTS §1.1-1.3).

Offsets: a :class:`SimpleRecord` takes the next offset (the first one takes ``base_offset``); a
:class:`~tierlog.records.record.Record` keeps its own offset, which is how the log cleaner writes
batches with gaps. Timestamps: a record without one is written as NO_TIMESTAMP (-1), which Kafka
allows; the codec has no clock, so callers that want "now" pass it.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from tierlog._util.crc import crc32c
from tierlog.errors import InvalidRecordError
from tierlog.records.compression import CompressionType, as_compression_type, compress
from tierlog.records.header import (
    BATCH_HEADER_SIZE,
    CONTROL_MASK,
    CRC,
    CRC_START,
    CREATE_TIME,
    DELETE_HORIZON_MASK,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
)
from tierlog.records.record import Header, Record, encode_record

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_U32 = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class SimpleRecord:
    """A record to append: no offset (it takes the next one); ``timestamp=None`` means NO_TIMESTAMP."""

    key: bytes | None
    value: bytes | None
    headers: Sequence[Header] = ()
    timestamp: int | None = None


RecordInput = SimpleRecord | Record


def build_batch(
    records: Sequence[RecordInput],
    *,
    base_offset: int = 0,
    compression: int = CompressionType.NONE,
    compression_level: int | None = None,
    timestamp_type: int = CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    log_append_time_ms: int | None = None,
    delete_horizon_ms: int | None = None,
    last_offset_delta: int | None = None,
    max_timestamp: int | None = None,
) -> bytes:
    """Encode ``records`` as one v2 batch.

    * ``log_append_time_ms`` makes the batch LogAppendTime with that maxTimestamp (the records keep
      their own timestamps, as in Kafka); ``timestamp_type=LOG_APPEND_TIME`` alone requires it.
    * ``delete_horizon_ms`` sets the delete-horizon bit; the field then replaces baseTimestamp and
      the timestamp deltas are relative to it (as the log cleaner writes them).
    * ``last_offset_delta`` keeps a larger lastOffsetDelta than the last record's, as the cleaner does
      to preserve the producer's last sequence; ``max_timestamp`` overrides the CreateTime maximum
      (used for an emptied batch that keeps its header).
    """
    codec = as_compression_type(compression)
    if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
        raise InvalidRecordError(f"invalid timestamp type {timestamp_type} for a v2 batch")
    if log_append_time_ms is not None:
        if max_timestamp is not None:
            raise InvalidRecordError("give either log_append_time_ms or max_timestamp, not both")
        timestamp_type = LOG_APPEND_TIME
    elif timestamp_type == LOG_APPEND_TIME and max_timestamp is None:
        raise InvalidRecordError("a LogAppendTime batch needs log_append_time_ms")
    # MemoryRecordsBuilder's own argument checks.
    if is_transactional and producer_id == NO_PRODUCER_ID:
        raise InvalidRecordError("cannot write transactional records without a producer id")
    if producer_id != NO_PRODUCER_ID:
        if producer_epoch < 0:
            raise InvalidRecordError(f"invalid negative producer epoch {producer_epoch}")
        if base_sequence < 0 and not is_control:
            raise InvalidRecordError(f"invalid negative sequence number {base_sequence}")

    # First pass: absolute offsets and timestamps, so the deltas and maxima are known up front.
    offsets: list[int] = []
    timestamps: list[int] = []
    next_offset = base_offset
    for i, rec in enumerate(records):
        offset = rec.offset if isinstance(rec, Record) else next_offset
        if offsets and offset <= offsets[-1]:
            raise InvalidRecordError(
                f"Illegal offset {offset} following previous offset {offsets[-1]} "
                "(offsets must increase monotonically)"
            )
        if offset < base_offset:
            raise InvalidRecordError(f"record {i} has offset {offset} below the base offset {base_offset}")
        ts = NO_TIMESTAMP if rec.timestamp is None else rec.timestamp
        if ts < 0 and ts != NO_TIMESTAMP:
            raise InvalidRecordError(f"Invalid negative timestamp {ts} in record {i}")
        offsets.append(offset)
        timestamps.append(ts)
        next_offset = offset + 1

    if delete_horizon_ms is not None:
        base_timestamp = delete_horizon_ms
    else:
        base_timestamp = timestamps[0] if timestamps else NO_TIMESTAMP
    computed_max = max(timestamps, default=NO_TIMESTAMP)
    if log_append_time_ms is not None:
        batch_max_timestamp = log_append_time_ms
    elif max_timestamp is not None:
        batch_max_timestamp = max_timestamp
    else:
        batch_max_timestamp = computed_max

    last_delta = offsets[-1] - base_offset if offsets else 0
    if last_offset_delta is not None:
        if last_offset_delta < last_delta:
            raise InvalidRecordError(
                f"last_offset_delta {last_offset_delta} is below the last record's delta {last_delta}"
            )
        last_delta = last_offset_delta
    if last_delta > INT32_MAX:
        raise InvalidRecordError(f"offset delta {last_delta} does not fit in an int32")

    body = bytearray()
    for rec, offset, ts in zip(records, offsets, timestamps, strict=True):
        encode_record(body, offset - base_offset, ts - base_timestamp, rec.key, rec.value, rec.headers)

    attributes = 0
    if codec != CompressionType.NONE:
        attributes |= int(codec)
        payload: bytes | bytearray = compress(codec, body, compression_level)
    else:
        payload = body
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK

    size = BATCH_HEADER_SIZE + len(payload)
    out = bytearray(size)
    _HEADER.pack_into(
        out, 0,
        base_offset, size - LOG_OVERHEAD, partition_leader_epoch, MAGIC_V2, 0, attributes, last_delta,
        base_timestamp, batch_max_timestamp, producer_id, producer_epoch, base_sequence, len(offsets),
    )
    out[BATCH_HEADER_SIZE:] = payload
    # The CRC covers attributes onward, so it is computed last (DefaultRecordBatch.writeHeader).
    _U32.pack_into(out, CRC, crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)
