"""The Fetch response, encoded by hand so log data can go from the segment file to the socket with
``sendfile`` instead of through a Python ``bytes`` object.

kio encodes a record set as one ``bytes`` value in the middle of the message; here the message is
split into byte strings around each record set, and a large record set stays a file slice. Every
other field is written as Kafka's generated FetchResponseData writes it for versions 4-18; the unit
tests check the bytes against kio's encoder for every version.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from tierlog._util.varint import unsigned_varint_bytes
from tierlog.server.connection import FileSlice, RawResponse

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_PARTITION_V4 = struct.Struct(">ihqq")  # partition_index, error_code, high_watermark, last_stable_offset
_PARTITION_V5 = struct.Struct(">ihqqq")  # ... log_start_offset

MIN_VERSION = 4
MAX_VERSION = 18
FIRST_FLEXIBLE = 12
FIRST_TOPIC_ID = 13


@dataclass(slots=True)
class PartitionData:
    partition_index: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    #: (producer_id, first_offset) of aborted transactions; None is Kafka's null (read_uncommitted).
    aborted_transactions: Sequence[tuple[int, int]] | None = None
    preferred_read_replica: int = -1
    records: bytes | FileSlice = b""


@dataclass(slots=True)
class TopicData:
    #: The topic name (v4-12) or its 16-byte id (v13+).
    topic: str | bytes
    partitions: list[PartitionData] = field(default_factory=list)


class _Writer:
    """Accumulates bytes; a file slice ends the current chunk."""

    __slots__ = ("buf", "parts")

    def __init__(self) -> None:
        self.parts: list[bytes | FileSlice] = []
        self.buf = bytearray()

    def slice(self, part: FileSlice) -> None:
        self.parts.append(bytes(self.buf))
        self.parts.append(part)
        self.buf = bytearray()

    def finish(self) -> list[bytes | FileSlice]:
        if self.buf or not self.parts:
            self.parts.append(bytes(self.buf))
        return self.parts


def encode_fetch_response(version: int, correlation_id: int, topics: Sequence[TopicData], *,
                          throttle_time_ms: int = 0, error_code: int = 0, session_id: int = 0) -> RawResponse:
    """The whole response frame (size prefix, header, body) as parts."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Fetch v{version} is not encoded here")
    flexible = version >= FIRST_FLEXIBLE
    w = _Writer()
    buf = w.buf
    buf += b"\0\0\0\0"  # size prefix, patched once the total is known
    buf += _I32.pack(correlation_id)
    if flexible:
        buf.append(0)  # response header v1: no tagged fields

    def array_len(n: int) -> bytes:
        return unsigned_varint_bytes(n + 1) if flexible else _I32.pack(n)

    buf += _I32.pack(throttle_time_ms)
    if version >= 7:
        buf += _I16.pack(error_code)
        buf += _I32.pack(session_id)
    buf += array_len(len(topics))
    for topic in topics:
        buf = w.buf
        if version >= FIRST_TOPIC_ID:
            assert isinstance(topic.topic, bytes) and len(topic.topic) == 16
            buf += topic.topic
        else:
            assert isinstance(topic.topic, str)
            name = topic.topic.encode("utf-8")
            buf += unsigned_varint_bytes(len(name) + 1) if flexible else _I16.pack(len(name))
            buf += name
        buf += array_len(len(topic.partitions))
        for p in topic.partitions:
            buf = w.buf
            if version >= 5:
                buf += _PARTITION_V5.pack(p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset,
                                          p.log_start_offset)
            else:
                buf += _PARTITION_V4.pack(p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset)
            aborted = p.aborted_transactions
            if aborted is None:
                buf += b"\0" if flexible else _I32.pack(-1)
            else:
                buf += array_len(len(aborted))
                for producer_id, first_offset in aborted:
                    buf += _I64.pack(producer_id)
                    buf += _I64.pack(first_offset)
                    if flexible:
                        buf.append(0)
            if version >= 11:
                buf += _I32.pack(p.preferred_read_replica)
            records = p.records
            size = len(records) if isinstance(records, bytes) else records.size
            buf += unsigned_varint_bytes(size + 1) if flexible else _I32.pack(size)
            if isinstance(records, bytes):
                buf += records
            else:
                w.slice(records)
                buf = w.buf
            if flexible:
                buf.append(0)  # partition tagged fields (no diverging epoch, leader or snapshot id)
        if flexible:
            w.buf.append(0)  # topic tagged fields
    if flexible:
        w.buf.append(0)  # top-level tagged fields (no node endpoints: the client knows this broker)
    parts = w.finish()
    total = sum(len(part) if isinstance(part, bytes) else part.size for part in parts)
    first = parts[0]
    assert isinstance(first, bytes)
    parts[0] = _I32.pack(total - 4) + first[4:]
    return RawResponse(tuple(parts))
