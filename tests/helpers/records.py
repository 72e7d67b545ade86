"""Helpers for hand-assembling batches, including invalid ones our builder refuses to write."""

from __future__ import annotations

import struct
import zlib

from tierlog._util.crc import crc32c
from tierlog._util.varint import varint_bytes
from tierlog.records import compress

_HEADER = struct.Struct(">qiibIhiqqqhii")


def raw_record(
    body_fields: bytes | None = None,
    *,
    ts_delta: int = 0,
    offset_delta: int = 0,
    key: bytes | None = b"k",
    value: bytes | None = b"v",
    headers: bytes = b"\x00",
    length: int | None = None,
) -> bytes:
    """One record, with every part overridable; ``headers`` is the raw header-count-and-headers bytes."""
    if body_fields is None:
        body = bytearray(b"\x00")
        body += varint_bytes(ts_delta) + varint_bytes(offset_delta)
        body += b"\x01" if key is None else varint_bytes(len(key)) + key
        body += b"\x01" if value is None else varint_bytes(len(value)) + value
        body += headers
        body_fields = bytes(body)
    return varint_bytes(len(body_fields) if length is None else length) + body_fields


def raw_batch(
    records: bytes,
    count: int,
    *,
    last_offset_delta: int | None = None,
    codec: int = 0,
    attributes: int = 0,
    base_offset: int = 0,
    base_timestamp: int = 1_000,
    max_timestamp: int = 1_000,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """A batch around already-encoded record bytes, with a correct CRC."""
    payload = compress(codec, records) if codec else records
    size = 61 + len(payload)
    out = bytearray(size)
    _HEADER.pack_into(
        out, 0, base_offset, size - 12, -1, 2, 0, attributes | codec,
        count - 1 if last_offset_delta is None else last_offset_delta,
        base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, count,
    )
    out[61:] = payload
    return recrc(out)


def recrc(buf: bytearray | bytes) -> bytes:
    out = bytearray(buf)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def legacy_message(offset: int, value: bytes, magic: int = 1, timestamp_ms: int = 1_700_000_000_000) -> bytes:
    """One message of the old format: offset, size, then crc32(magic .. value), magic, attributes,
    [timestamp in v1], a null key and the value."""
    body = bytes([magic, 0]) + (struct.pack(">q", timestamp_ms) if magic == 1 else b"")
    body += struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(message)) + message
