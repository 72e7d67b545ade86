"""The Produce request (versions 3-13) and every request's header, decoded by hand.

The generic reader (``_decoder``) walks a kio class field by field through a closure per field and
builds a dict per struct: ~12 µs for a one-partition Produce, paid by every produce request whatever
its size. This module reads the same bytes with the same rules (Kafka's generated
ProduceRequestData.read: bounds checked before every read, an array may not declare more elements
than bytes remain, null only where the schema allows it, unknown tagged fields skipped, invalid
UTF-8 replaced) into the same kio dataclasses, and raises :class:`DecodeError` wherever the generic
reader does. ``tests/unit/protocol/test_produce_request.py`` holds the two equal: random requests
of every version, with and without tagged fields and nulls, and mangled bytes.

No version of ProduceRequest.json or RequestHeader.json declares a tagged field, so every tagged
field is an unknown one here and is skipped.
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
import uuid
from typing import Any

from tierlog._util.varint import read_unsigned_varint
from tierlog.protocol._decoder import DecodeError, field_shape
from tierlog.protocol.apis import request_type

MIN_VERSION = 3
MAX_VERSION = 13
_FIRST_FLEXIBLE = 9
_FIRST_TOPIC_ID = 13

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
_I32_I32 = struct.Struct(">ii")  # partition index, then a legacy records length

#: Per version: the kio classes of the request, its topics and their partitions.
_CLASSES: dict[int, tuple[type[Any], type[Any], type[Any]]] = {}


def _classes(version: int) -> tuple[type[Any], type[Any], type[Any]]:
    found = _CLASSES.get(version)
    if found is None:
        request = request_type(0, version)
        topic = _element_type(request, "topic_data")
        found = _CLASSES[version] = (request, topic, _element_type(topic, "partition_data"))
    return found


def _element_type(entity: type[Any], name: str) -> type[Any]:
    """The kio class of the elements of ``entity``'s array field ``name``."""
    inner: type[Any] = next(field_shape(f) for f in dataclasses.fields(entity) if f.name == name).inner
    return inner


def _uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    if pos < len(buf):
        first = buf[pos]
        if first < 0x80:
            return first, pos + 1  # nearly every varint of a produce request is one byte
    return read_unsigned_varint(buf, pos, error=DecodeError)


def _short(needed: int, pos: int, size: int) -> DecodeError:
    return DecodeError(f"needed {needed} bytes at offset {pos}, only {size - pos} left")


def _skip_tagged_fields(buf: memoryview, pos: int, size: int) -> int:
    """The position after a tagged-field section, every field skipped (none is known here)."""
    if pos < size and buf[pos] == 0:
        return pos + 1  # the usual case: no tagged fields
    count, pos = _uvarint(buf, pos)
    if count > size - pos:
        raise DecodeError(f"{count} tagged fields but only {size - pos} bytes left")
    for _ in range(count):
        tag, pos = _uvarint(buf, pos)
        length, pos = _uvarint(buf, pos)
        pos += length
        if pos > size:
            raise DecodeError(f"tagged field {tag} runs past the end of the buffer")
    return pos


def _string(buf: memoryview, pos: int, size: int, flexible: bool, nullable: bool) -> tuple[str | None, int]:
    if flexible:
        length, pos = _uvarint(buf, pos)
        if length == 0:
            if nullable:
                return None, pos
            raise DecodeError("null in a non-nullable string")
        length -= 1
    else:
        if pos + 2 > size:
            raise _short(2, pos, size)
        length = _I16.unpack_from(buf, pos)[0]
        pos += 2
        if length < 0:
            if length == -1 and nullable:
                return None, pos
            raise DecodeError(f"invalid string length {length}")
    end = pos + length
    if end > size:
        raise DecodeError(f"length {length} at offset {pos} runs past the end of the buffer")
    return str(buf[pos:end], "utf-8", "replace"), end


def _array_length(buf: memoryview, pos: int, size: int, flexible: bool) -> tuple[int, int]:
    """An array's element count (never null in a Produce request)."""
    if flexible:
        count, pos = _uvarint(buf, pos)
        count -= 1
    else:
        if pos + 4 > size:
            raise _short(4, pos, size)
        count = _I32.unpack_from(buf, pos)[0]
        pos += 4
    if count < 0:
        raise DecodeError(f"invalid array length {count}")
    if count > size - pos:
        raise DecodeError(f"array of {count} elements but only {size - pos} bytes left")
    return count, pos


def decode_request_header(buf: memoryview, header_version: int) -> tuple[str | None, int]:
    """The client id of a request header v1 or v2 (its fixed prefix already read) and where the
    body starts. The client id keeps its int16 length in v2 too (RequestHeader.json)."""
    size = len(buf)
    client_id, pos = _string(buf, 8, size, False, True)
    if header_version >= 2:
        pos = _skip_tagged_fields(buf, pos, size)
    return client_id, pos


def decode_produce_request(version: int, buf: memoryview, pos: int) -> Any:
    """The kio ProduceRequest of ``version`` at ``pos``; its record sets are views of ``buf``."""
    request_cls, topic_cls, partition_cls = _classes(version)
    flexible = version >= _FIRST_FLEXIBLE
    by_id = version >= _FIRST_TOPIC_ID
    size = len(buf)
    transactional_id, pos = _string(buf, pos, size, flexible, True)
    if pos + 6 > size:
        raise _short(6, pos, size)
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(buf, pos)
    pos += 6
    topic_count, pos = _array_length(buf, pos, size, flexible)
    topics = []
    for _ in range(topic_count):
        if by_id:
            end = pos + 16
            if end > size:
                raise DecodeError(f"length 16 at offset {pos} runs past the end of the buffer")
            topic_id: uuid.UUID | None = uuid.UUID(bytes=bytes(buf[pos:end]))
            pos = end
            if topic_id is not None and topic_id.int == 0:
                topic_id = None  # kio's Uuid.ZERO_UUID
        else:
            name, pos = _string(buf, pos, size, flexible, False)
        partition_count, pos = _array_length(buf, pos, size, flexible)
        partitions = []
        for _ in range(partition_count):
            records: memoryview | None
            if flexible:
                if pos + 4 > size:
                    raise _short(4, pos, size)
                index = _I32.unpack_from(buf, pos)[0]
                length, pos = _uvarint(buf, pos + 4)
                if length == 0:
                    records = None
                else:
                    end = pos + length - 1
                    if end > size:
                        raise DecodeError(f"length {length - 1} at offset {pos} runs past the end of the buffer")
                    records, pos = buf[pos:end], end
                if pos < size and buf[pos] == 0:
                    pos += 1  # no tagged fields
                else:
                    pos = _skip_tagged_fields(buf, pos, size)
            else:
                if pos + 4 > size:
                    raise _short(4, pos, size)
                index = _I32.unpack_from(buf, pos)[0]
                pos += 4
                if pos + 4 > size:
                    raise _short(4, pos, size)
                length = _I32.unpack_from(buf, pos)[0]
                pos += 4
                if length < 0:
                    if length != -1:
                        raise DecodeError(f"invalid bytes length {length}")
                    records = None
                else:
                    end = pos + length
                    if end > size:
                        raise DecodeError(f"length {length} at offset {pos} runs past the end of the buffer")
                    records, pos = buf[pos:end], end
            partitions.append(partition_cls(index=index, records=records))
        if flexible:
            pos = _skip_tagged_fields(buf, pos, size)
        if by_id:
            topics.append(topic_cls(topic_id=topic_id, partition_data=tuple(partitions)))
        else:
            topics.append(topic_cls(name=name, partition_data=tuple(partitions)))
    if flexible:
        pos = _skip_tagged_fields(buf, pos, size)
    return request_cls(transactional_id=transactional_id, acks=acks,
                       timeout=datetime.timedelta(milliseconds=timeout_ms), topic_data=tuple(topics)), pos
