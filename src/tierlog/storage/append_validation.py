"""The checks a produce request's bytes pass before any of it is written to a log: whole v2 batches,
each deep-validated (CRC, records, control batches only from the coordinator, keys on compacted
topics) and within max.message.bytes and segment.bytes; and the max timestamp a CreateTime batch's
header must carry. Pure functions of the bytes and the topic's config (the log applies them)."""

from __future__ import annotations

import struct

from tierlog._util.crc import crc32c_small
from tierlog.config.definition import INT64_MAX
from tierlog.config.log_config import LogConfig
from tierlog.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from tierlog.records.header import (
    BATCH_HEADER_SIZE,
    CRC_START,
    LENGTH,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_V2,
    NO_TIMESTAMP,
    BatchHeader,
    iter_headers,
)
from tierlog.records.reader import BatchStats, c_check_header, decode_batch, validate_batch

_I32 = struct.Struct(">i")


def parse_and_validate(buf: bytes | bytearray | memoryview, config: LogConfig,
                       from_client: bool = True, topic_partition: str = "",
                       now_ms: int | None = None, checked: tuple[BatchHeader, int, int, int, bool] | None = None,
                       ) -> tuple[list[BatchHeader], list[BatchStats]]:
    """Every batch of a produce request, deep-validated before any byte of it is written, with what
    its records say (their timestamps) in the same order. A batch with keyless records on a compacted
    topic raises :func:`record_validation_error`'s answer (its timestamps judged at ``now_ms`` too).
    ``checked``: what :func:`check_one_batch` already answered for ``buf`` (not asked again)."""
    size = len(buf)
    max_message_bytes, compact = config.max_message_bytes, config.compact
    fast = check_one_batch(buf, config, from_client) if checked is None else checked
    if fast is not None:
        # One whole uncompressed batch, what clients send per partition: every check below in one C
        # call (~1 µs less per batch).
        header = fast[0]
        return [header], [BatchStats(header.records_count, fast[1], fast[2], fast[3], fast[4],
                                     size - BATCH_HEADER_SIZE)]
    if (size >= BATCH_HEADER_SIZE and LOG_OVERHEAD + _I32.unpack_from(buf, LENGTH)[0] == size
            and buf[MAGIC] == MAGIC_V2):
        # One whole batch, what clients send per partition: iter_headers would yield just it.
        headers = [BatchHeader(buf, 0)]
    else:
        headers = list(iter_headers(buf))
        consumed = sum(h.size_bytes for h in headers)
        if not headers or consumed != size:
            raise CorruptRecordError(
                f"the record set of {size} bytes does not hold whole v2 batches ({consumed} bytes parsed)"
            )
        if from_client and len(headers) > 1:
            # Kafka's LogValidator takes one v2 batch per partition from a client (what every client
            # sends), so offsets are assigned and the batch validated as one unit; its message verbatim.
            raise InvalidRecordError("Compressed outer record has more than one batch")
    stats: list[BatchStats] = []
    for h in headers:
        if h.size_bytes > max_message_bytes:
            raise RecordTooLargeError(
                f"record batch of {h.size_bytes} bytes exceeds max.message.bytes {max_message_bytes}"
            )
        # Only clients are refused control batches; the coordinator writes transaction markers.
        st = validate_batch(h, from_client=from_client)
        if st.has_null_key and from_client and compact:
            # Kafka's LogValidator: the cleaner could never decide which null-keyed record is "latest".
            error = record_validation_error(h, config, topic_partition, now_ms)
            raise error or InvalidRecordError("Compacted topic cannot accept message without key")
        stats.append(st)
    if size > config.segment_bytes:
        raise RecordBatchTooLargeError(
            f"record set of {size} bytes is larger than segment.bytes {config.segment_bytes}"
        )
    return headers, stats


def check_one_batch(buf: bytes | bytearray | memoryview, config: LogConfig,
                    from_client: bool) -> tuple[BatchHeader, int, int, int, bool] | None:
    """:func:`parse_and_validate` of a record set that is one whole uncompressed v2 batch within
    max.message.bytes and segment.bytes (what a client sends per partition) in one C call: its header
    and (min timestamp, max timestamp, offsetDelta of the max, has a null key) of its records, once
    every check passed. None for anything else or anything wrong, and without the C extension: then
    :func:`parse_and_validate` runs the Python checks, which raise the exact error (a size over a
    limit, a null key on a compacted topic included), so this only skips work that would succeed."""
    size = len(buf)
    if (c_check_header is None or size < BATCH_HEADER_SIZE or size > config.max_message_bytes
            or size > config.segment_bytes):
        return None
    crc = crc32c_small(memoryview(buf)[CRC_START:])
    fast = c_check_header(buf, crc, from_client)
    if fast is None or (fast[4] and from_client and config.compact):
        return None
    return fast


def timestamp_out_of_range(timestamp: int, now_ms: int, config: LogConfig) -> bool:
    """Whether a CreateTime record's timestamp lies outside message.timestamp.before/after.max.ms of
    ``now_ms`` (a record without one, -1, never does)."""
    before_ms, after_ms = config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms
    return timestamp != NO_TIMESTAMP and (now_ms - timestamp > before_ms or timestamp - now_ms > after_ms)


def record_validation_error(header: BatchHeader, config: LogConfig, topic_partition: str,
                            now_ms: int | None) -> InvalidRecordError | InvalidTimestampError | None:
    """Kafka's LogValidator per-record checks of one produced batch, run once some record is known to
    fail (so the fast path never decodes): each refused record's index in its batch with Kafka's message,
    which ProduceResponse v8+ returns as ``record_errors`` (KIP-467), and the batch's error --
    INVALID_TIMESTAMP when any record's timestamp is out of range, else INVALID_RECORD with the first
    three record errors in its message. A keyless record on a compacted topic is refused for its key
    and not checked further; timestamps are checked only with ``now_ms`` on a CreateTime topic."""
    check_time = (now_ms is not None and not config.log_append_time and header.timestamp_type != LOG_APPEND_TIME
                  and (config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms)
                  != (INT64_MAX, INT64_MAX))
    errors: list[tuple[int, str]] = []
    bad_time = False
    for index, record in enumerate(decode_batch(header)):
        if config.compact and record.key is None:
            errors.append((index, f"Compacted topic cannot accept message without key in topic partition "
                                  f"{topic_partition}"))
        elif check_time and now_ms is not None and timestamp_out_of_range(record.timestamp, now_ms, config):
            bad_time = True
            errors.append((index, f"Timestamp {record.timestamp} of message with offset {record.offset} is out "
                                  f"of range. The timestamp should be within "
                                  f"[{now_ms - config.message_timestamp_before_max_ms}, "
                                  f"{now_ms + config.message_timestamp_after_max_ms}]"))
    if not errors:
        return None
    if bad_time:
        return InvalidTimestampError("One or more records have been rejected due to invalid timestamp", tuple(errors))
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    return InvalidRecordError(f"One or more records have been rejected due to {len(errors)} record errors in "
                              f"total, and only showing the first three errors at most: [{shown}]", tuple(errors))


def header_max_timestamp_fix(header: BatchHeader, stats: BatchStats) -> int | None:
    """The max timestamp a CreateTime batch's header must be given, or None when it already says it.

    Kafka's LogValidator sets the header max timestamp to the records' maximum (-1 when none has a
    timestamp), whatever the producer wrote there: Sarama 1.22 writes -1, and the time index,
    ListOffsets and retention all go by the header. A batch already stamped LogAppendTime keeps its
    header. (The caller skips LogAppendTime topics, which stamp every header, and replication.)"""
    true_max = stats.max_timestamp
    if true_max == header.max_timestamp or header.timestamp_type == LOG_APPEND_TIME:
        return None
    return true_max
