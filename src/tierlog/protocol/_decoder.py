"""Decoding of kio entities from untrusted bytes.

kio's own reader (``kio.serial.entity_reader``, native code) is not used on the wire because:

* it allocates an array from its declared length before reading it, so an 11-byte request that
  declares 2**31 elements aborts the whole process with an out-of-memory panic that Python cannot
  catch;
* it raises ``KeyError`` on a tagged field it does not know, where the protocol (KIP-482) requires
  the field to be skipped, so a newer client's optional field would break parsing;
* its errors are a mix of its own types, ``ValueError`` and ``KeyError``.

This reader walks the same kio dataclasses (their field order, ``kafka_type`` and ``tag`` metadata
are the schema) and follows Kafka's generated Java readers instead: an array may not declare more
elements than there are bytes left, unknown tags are skipped, a boolean is any non-zero byte, and
invalid UTF-8 is replaced rather than rejected (Java's ``new String(bytes, UTF_8)``). It raises only
:class:`DecodeError`; the codec turns that into a ``MalformedRequestError``.

The values it produces are the ones kio's reader produces (the property tests check it), so the
entities are interchangeable with kio's.
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
import types
import typing
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from tierlog._util.varint import read_unsigned_varint

Buffer = memoryview
Reader = Callable[[Buffer, int], tuple[Any, int]]


class DecodeError(Exception):
    """Bytes that do not match the schema. Internal: never leaves tierlog.protocol."""


class SchemaError(Exception):
    """A kio class this decoder cannot interpret (a kio upgrade changed its conventions)."""


def _fixed(fmt: str) -> Reader:
    layout = struct.Struct(fmt)
    size = layout.size
    unpack_from = layout.unpack_from

    def read(buf: Buffer, pos: int) -> tuple[Any, int]:
        end = pos + size
        if end > len(buf):
            raise DecodeError(f"needed {size} bytes at offset {pos}, only {len(buf) - pos} left")
        return unpack_from(buf, pos)[0], end

    return read


read_int8 = _fixed(">b")
read_int16 = _fixed(">h")
read_int32 = _fixed(">i")
read_int64 = _fixed(">q")
read_uint8 = _fixed(">B")
read_uint16 = _fixed(">H")
read_uint32 = _fixed(">I")
read_uint64 = _fixed(">Q")
read_float64 = _fixed(">d")


def read_uvarint(buf: Buffer, pos: int) -> tuple[int, int]:
    """Kafka's ByteUtils.readUnsignedVarint (at most five bytes); DecodeError when malformed."""
    return read_unsigned_varint(buf, pos, error=DecodeError)


def _read_bool(buf: Buffer, pos: int) -> tuple[Any, int]:
    if pos >= len(buf):
        raise DecodeError("boolean runs past the end of the buffer")
    return buf[pos] != 0, pos + 1


def _take(buf: Buffer, pos: int, size: int) -> tuple[Buffer, int]:
    end = pos + size
    if end > len(buf):
        raise DecodeError(f"length {size} at offset {pos} runs past the end of the buffer")
    return buf[pos:end], end


def _legacy_string(nullable: bool) -> Reader:
    def read(buf: Buffer, pos: int) -> tuple[Any, int]:
        size, pos = read_int16(buf, pos)
        if size < 0:
            if size == -1 and nullable:
                return None, pos
            raise DecodeError(f"invalid string length {size}")
        raw, pos = _take(buf, pos, size)
        return str(raw, "utf-8", "replace"), pos

    return read


def _compact_string(nullable: bool) -> Reader:
    def read(buf: Buffer, pos: int) -> tuple[Any, int]:
        size, pos = read_uvarint(buf, pos)
        if size == 0:
            if nullable:
                return None, pos
            raise DecodeError("null in a non-nullable string")
        raw, pos = _take(buf, pos, size - 1)
        return str(raw, "utf-8", "replace"), pos

    return read


def _legacy_bytes(nullable: bool, view: bool = False) -> Reader:
    def read(buf: Buffer, pos: int) -> tuple[Any, int]:
        size, pos = read_int32(buf, pos)
        if size < 0:
            if size == -1 and nullable:
                return None, pos
            raise DecodeError(f"invalid bytes length {size}")
        raw, pos = _take(buf, pos, size)
        return (raw if view else bytes(raw)), pos

    return read


def _compact_bytes(nullable: bool, view: bool = False) -> Reader:
    def read(buf: Buffer, pos: int) -> tuple[Any, int]:
        size, pos = read_uvarint(buf, pos)
        if size == 0:
            if nullable:
                return None, pos
            raise DecodeError("null in non-nullable bytes")
        raw, pos = _take(buf, pos, size - 1)
        return (raw if view else bytes(raw)), pos

    return read


def _read_uuid(buf: Buffer, pos: int) -> tuple[Any, int]:
    raw, pos = _take(buf, pos, 16)
    value = uuid.UUID(bytes=bytes(raw))
    # kio models Kafka's Uuid.ZERO_UUID ("no id") as None.
    return (None if value.int == 0 else value), pos


def _read_error_code(buf: Buffer, pos: int) -> tuple[Any, int]:
    code, pos = read_int16(buf, pos)
    try:
        return ErrorCode(code), pos
    except ValueError:
        raise DecodeError(f"unknown error code {code}") from None


def _millis(read_int: Reader) -> Reader:
    def read(buf: Buffer, pos: int) -> tuple[Any, int]:
        millis, pos = read_int(buf, pos)
        try:
            return datetime.timedelta(milliseconds=millis), pos
        except OverflowError:  # an int64 beyond timedelta's ~2.7 million years
            raise DecodeError(f"duration {millis} ms out of range") from None

    return read


def _read_datetime(nullable: bool) -> Reader:
    def read(buf: Buffer, pos: int) -> tuple[Any, int]:
        millis, pos = read_int64(buf, pos)
        if millis == -1 and nullable:
            return None, pos
        try:
            epoch = datetime.datetime.fromtimestamp(0, datetime.UTC)
            return epoch + datetime.timedelta(milliseconds=millis), pos
        except OverflowError:
            raise DecodeError(f"timestamp {millis} out of range") from None

    return read


def _primitive_reader(kafka_type: str, flexible: bool, nullable: bool, record_views: bool = False) -> Reader:
    match kafka_type:
        case "int8":
            return read_int8
        case "int16":
            return read_int16
        case "int32":
            return read_int32
        case "int64":
            return read_int64
        case "uint8":
            return read_uint8
        case "uint16":
            return read_uint16
        case "uint32":
            return read_uint32
        case "uint64":
            return read_uint64
        case "float64":
            return read_float64
        case "bool":
            return _read_bool
        case "uuid":
            return _read_uuid
        case "error_code":
            return _read_error_code
        case "timedelta_i32":
            return _millis(read_int32)
        case "timedelta_i64":
            return _millis(read_int64)
        case "datetime_i64":
            return _read_datetime(nullable)
        case "string":
            return _compact_string(nullable) if flexible else _legacy_string(nullable)
        case "records":
            # Record sets stay opaque bytes: the records layer parses them, never the protocol. With
            # ``record_views`` they are views of the frame (a 1 MiB produce is not copied to parse it).
            return _compact_bytes(nullable, record_views) if flexible else _legacy_bytes(nullable, record_views)
        case "bytes":
            return _compact_bytes(nullable) if flexible else _legacy_bytes(nullable)
    raise SchemaError(f"unknown kafka_type {kafka_type!r}")


def _array(item: Reader, flexible: bool, nullable: bool) -> Reader:
    def read(buf: Buffer, pos: int) -> tuple[Any, int]:
        if flexible:
            count, pos = read_uvarint(buf, pos)
            count -= 1
        else:
            count, pos = read_int32(buf, pos)
        if count < 0:
            if count == -1 and nullable:
                return None, pos
            raise DecodeError(f"invalid array length {count}")
        # Kafka's check: every element takes at least one byte, so a longer array is a lie that
        # would otherwise make us loop (or allocate) for nothing.
        if count > len(buf) - pos:
            raise DecodeError(f"array of {count} elements but only {len(buf) - pos} bytes left")
        items = []
        for _ in range(count):
            value, pos = item(buf, pos)
            items.append(value)
        return tuple(items), pos

    return read


def _nullable_struct(item: Reader) -> Reader:
    # KIP-893: an int8 marker, negative for null.
    def read(buf: Buffer, pos: int) -> tuple[Any, int]:
        marker, pos = read_int8(buf, pos)
        if marker < 0:
            return None, pos
        return item(buf, pos)

    return read


class FieldShape(typing.NamedTuple):
    inner: Any
    nullable: bool
    array: bool


def field_shape(field: dataclasses.Field[Any]) -> FieldShape:
    """Unwrap ``X``, ``X | None``, ``tuple[X, ...]`` and ``tuple[X, ...] | None``."""
    annotation: Any = field.type
    if isinstance(annotation, str):
        raise SchemaError(f"field {field.name} has a string annotation; kio schemas use real types")
    nullable = False
    if typing.get_origin(annotation) in (types.UnionType, typing.Union):
        args = [arg for arg in typing.get_args(annotation) if arg is not types.NoneType]
        if len(args) != 1:
            raise SchemaError(f"field {field.name} has an unsupported union {annotation}")
        annotation = args[0]
        nullable = True
    array = False
    if typing.get_origin(annotation) is tuple:
        args = list(typing.get_args(annotation))
        if len(args) != 2 or args[1] is not Ellipsis:
            raise SchemaError(f"field {field.name} has an unsupported tuple {annotation}")
        annotation = args[0]
        array = True
    return FieldShape(annotation, nullable, array)


def is_entity(annotation: Any) -> bool:
    return isinstance(annotation, type) and dataclasses.is_dataclass(annotation)


def _field_reader(field: dataclasses.Field[Any], flexible: bool, is_request_header: bool,
                  record_views: bool) -> Reader:
    shape = field_shape(field)
    if is_entity(shape.inner):
        item = entity_reader(shape.inner, record_views=record_views)
        if shape.array:
            return _array(item, flexible, shape.nullable)
        return _nullable_struct(item) if shape.nullable else item
    if is_request_header and field.name == "client_id":
        # RequestHeader.json: ClientId keeps the int16-length encoding even in header v2, so that
        # a broker can read it before knowing whether it supports the request version.
        return _legacy_string(nullable=True)
    try:
        kafka_type = field.metadata["kafka_type"]
    except KeyError:
        raise SchemaError(f"field {field.name} has no kafka_type") from None
    if shape.array:
        return _array(_primitive_reader(kafka_type, flexible, False, record_views), flexible, shape.nullable)
    return _primitive_reader(kafka_type, flexible, shape.nullable, record_views)


_READERS: dict[tuple[type[Any], bool], Reader] = {}


def entity_reader(entity_type: type[Any], *, record_views: bool = False) -> Reader:
    """A reader of one kio entity class: ``read(buf, pos) -> (entity, new_pos)`` (cached). With
    ``record_views`` its record sets are memoryviews of the buffer read, not copies."""
    key = (entity_type, record_views)
    reader = _READERS.get(key)
    if reader is None:
        reader = _READERS[key] = _compile(entity_type, record_views)
    return reader


def _compile(entity_type: type[Any], record_views: bool) -> Reader:
    flexible = bool(entity_type.__flexible__)
    is_request_header = entity_type.__name__ == "RequestHeader"
    regular: list[tuple[str, Reader]] = []
    tagged: dict[int, tuple[str, Reader]] = {}
    for field in dataclasses.fields(entity_type):
        reader = _field_reader(field, flexible, is_request_header, record_views)
        tag = field.metadata.get("tag")
        if tag is None:
            regular.append((field.name, reader))
        else:
            tagged[int(tag)] = (field.name, reader)
    if tagged and not flexible:
        raise SchemaError(f"{entity_type.__qualname__} has tagged fields but is not flexible")

    def read(buf: Buffer, pos: int) -> tuple[Any, int]:
        values: dict[str, Any] = {}
        for name, reader in regular:
            values[name], pos = reader(buf, pos)
        if flexible:
            count, pos = read_uvarint(buf, pos)
            if count > len(buf) - pos:
                raise DecodeError(f"{count} tagged fields but only {len(buf) - pos} bytes left")
            for _ in range(count):
                tag, pos = read_uvarint(buf, pos)
                size, pos = read_uvarint(buf, pos)
                end = pos + size
                if end > len(buf):
                    raise DecodeError(f"tagged field {tag} runs past the end of the buffer")
                known = tagged.get(tag)
                # KIP-482: a reader skips the tags it does not know.
                if known is not None:
                    name, reader = known
                    # The slice stops a corrupt value from reading past its declared size.
                    values[name], stop = reader(buf[:end], pos)
                    if stop != end:
                        raise DecodeError(f"tagged field {tag} declared {size} bytes, used {stop - pos}")
                pos = end
        return entity_type(**values), pos

    return read


def decode(entity_type: type[Any], data: bytes | bytearray | memoryview, pos: int = 0, *,
           record_views: bool = False) -> tuple[Any, int]:
    """Decode one ``entity_type`` at ``pos``; return it and the position after it. With
    ``record_views`` its record sets are memoryviews of ``data``, which must then not change."""
    return entity_reader(entity_type, record_views=record_views)(memoryview(data), pos)
