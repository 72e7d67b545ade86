"""The Produce response, encoded by hand.

Building it as kio dataclasses (``build_response``) and encoding those with kio's generic writer took
about a seventh of the broker's CPU per produce request, more than reading its megabyte did. Here
every field is written as Kafka's generated ProduceResponseData writes it for versions 3-13; the unit
tests check the bytes against kio's encoder for every version. The tagged fields ``current_leader``
(v10+) and ``node_endpoints`` are never written: they go with NOT_LEADER_OR_FOLLOWER, which a
single broker does not answer.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence

from tierlog._util.varint import unsigned_varint_bytes
from tierlog.server.connection import RawResponse
from tierlog.server.partitions import AppendResult

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_V3 = struct.Struct(">ihqq")  # index, error_code, base_offset, log_append_time_ms
_PARTITION_V5 = struct.Struct(">ihqqq")  # ... log_start_offset

MIN_VERSION = 3
MAX_VERSION = 13
FIRST_FLEXIBLE = 9
FIRST_TOPIC_ID = 13
_FIRST_LOG_START_OFFSET = 5
_FIRST_RECORD_ERRORS = 8

#: A topic's key in the response (its name, or its id from v13: None is the zero id) and each of its
#: partitions' index and result.
TopicAnswers = tuple[str | uuid.UUID | None, Sequence[tuple[int, AppendResult]]]


def encode_produce_response(version: int, correlation_id: int, topics: Sequence[TopicAnswers], *,
                            throttle_time_ms: int = 0) -> RawResponse:
    """The whole response frame (size prefix, header, body); its ``throttle_at`` is where the
    throttle time is, for quotas to set it afterwards."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Produce v{version} is not encoded here")
    flexible = version >= FIRST_FLEXIBLE
    buf = bytearray(b"\0\0\0\0")  # size prefix, set once the total is known
    buf += _I32.pack(correlation_id)
    if flexible:
        buf.append(0)  # response header v1: no tagged fields
        buf += unsigned_varint_bytes(len(topics) + 1)
    else:
        buf += _I32.pack(len(topics))
    for key, partitions in topics:
        if version >= FIRST_TOPIC_ID:
            buf += key.bytes if isinstance(key, uuid.UUID) else bytes(16)
        else:
            _string(buf, str(key), flexible)
        buf += unsigned_varint_bytes(len(partitions) + 1) if flexible else _I32.pack(len(partitions))
        for index, r in partitions:
            if version >= _FIRST_LOG_START_OFFSET:
                buf += _PARTITION_V5.pack(index, r.error_code, r.base_offset, r.log_append_time_ms,
                                          r.log_start_offset)
            else:
                buf += _PARTITION_V3.pack(index, r.error_code, r.base_offset, r.log_append_time_ms)
            if version >= _FIRST_RECORD_ERRORS:
                errors = r.record_errors
                buf += unsigned_varint_bytes(len(errors) + 1) if flexible else _I32.pack(len(errors))
                for batch_index, message in errors:
                    buf += _I32.pack(batch_index)
                    _string(buf, message, flexible)
                    if flexible:
                        buf.append(0)
                _string(buf, r.error_message if r.error_code else None, flexible)
            if flexible:
                buf.append(0)  # partition tagged fields
        if flexible:
            buf.append(0)  # topic tagged fields
    throttle_at = len(buf)
    buf += _I32.pack(throttle_time_ms)
    if flexible:
        buf.append(0)  # top-level tagged fields
    _I32.pack_into(buf, 0, len(buf) - 4)
    return RawResponse((bytes(buf),), throttle_at)


def _string(buf: bytearray, value: str | None, flexible: bool) -> None:
    """A (nullable) string: int16 length or, flexible, unsigned varint length + 1; null is -1 / 0."""
    if value is None:
        buf += b"\0" if flexible else b"\xff\xff"
        return
    raw = value.encode("utf-8")
    buf += unsigned_varint_bytes(len(raw) + 1) if flexible else _I16.pack(len(raw))
    buf += raw
