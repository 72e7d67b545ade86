"""The checks a produce request's bytes pass before any of it is written to a log: whole v2 batches,
each deep-validated (CRC, records, control batches only from the coordinator, keys on compacted
topics) and within max.message.bytes and segment.bytes; and the max timestamp a CreateTime batch's
header must carry. Pure functions of the bytes and the topic's config (the log applies them)."""

from __future__ import annotations

from tierlog.config.log_config import LogConfig
from tierlog.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from tierlog.records.header import LOG_APPEND_TIME, BatchHeader, iter_headers
from tierlog.records.reader import BatchStats, validate_batch


def parse_and_validate(buf: bytes | bytearray | memoryview, config: LogConfig,
                       from_client: bool = True) -> tuple[list[BatchHeader], list[BatchStats]]:
    """Every batch of a produce request, deep-validated before any byte of it is written, with what
    its records say (their timestamps) in the same order."""
    headers = list(iter_headers(buf))
    consumed = sum(h.size_bytes for h in headers)
    if not headers or consumed != len(buf):
        raise CorruptRecordError(
            f"the record set of {len(buf)} bytes does not hold whole v2 batches ({consumed} bytes parsed)"
        )
    stats: list[BatchStats] = []
    for h in headers:
        if h.size_bytes > config.max_message_bytes:
            raise RecordTooLargeError(
                f"record batch of {h.size_bytes} bytes exceeds max.message.bytes {config.max_message_bytes}"
            )
        # Only clients are refused control batches; the coordinator writes transaction markers.
        st = validate_batch(h, from_client=from_client)
        if st.has_null_key and from_client and config.compact:
            # Kafka's LogValidator: the cleaner could never decide which null-keyed record is "latest".
            raise InvalidRecordError("Compacted topic cannot accept message without key")
        stats.append(st)
    if len(buf) > config.segment_bytes:
        raise RecordBatchTooLargeError(
            f"record set of {len(buf)} bytes is larger than segment.bytes {config.segment_bytes}"
        )
    return headers, stats


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
