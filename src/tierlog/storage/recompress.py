"""Topic-level ``compression.type``: batches the producer compressed differently are rewritten with
the topic's codec before they are written (Kafka's LogValidator, the recompression path).

``producer`` (the default) keeps every batch as it came, so the common case costs one comparison.
A batch already in the target codec, and control batches, are kept byte for byte. A rewritten batch
keeps everything a client or the producer state can see: offsets (relative, assigned later),
timestamps and timestamp type, keys, values, headers, producer id, epoch, base sequence and the
transactional bit, so idempotent retries of a recompressed batch are still recognised.
"""

from __future__ import annotations

from tierlog.records import BatchHeader, build_batch, decode_batch, iter_headers
from tierlog.records.compression import CompressionType, compression_type_for_name
from tierlog.records.header import LOG_APPEND_TIME

PRODUCER = "producer"


def target_codec(compression_type: str) -> CompressionType | None:
    """The codec a topic's ``compression.type`` imposes, or None for ``producer``."""
    if compression_type.strip().lower() == PRODUCER:
        return None
    return compression_type_for_name(compression_type)


def maybe_recompress(buf: bytes | bytearray | memoryview, headers: list[BatchHeader],
                     compression_type: str) -> tuple[bytes | bytearray | memoryview, list[BatchHeader]]:
    """``(buf, headers)`` unchanged, or a new buffer whose batches all use the topic's codec."""
    target = target_codec(compression_type)
    if target is None or all(h.compression == target or h.is_control for h in headers):
        return buf, headers
    out = bytearray()
    for h in headers:
        if h.compression == target or h.is_control:
            out += buf[h.position:h.position + h.size_bytes]
            continue
        append_time = h.max_timestamp if h.timestamp_type == LOG_APPEND_TIME else None
        out += build_batch(
            decode_batch(h), base_offset=h.base_offset, compression=target,
            producer_id=h.producer_id, producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
            is_transactional=h.is_transactional, partition_leader_epoch=h.partition_leader_epoch,
            log_append_time_ms=append_time, last_offset_delta=h.last_offset_delta,
        )
    return out, list(iter_headers(out))
