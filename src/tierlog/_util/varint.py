"""Zig-zag varints as Kafka writes them in records (``ByteUtils.writeVarint``/``writeVarlong``),
and the unsigned varints of the flexible protocol encoding."""

from __future__ import annotations

from tierlog.errors import InvalidRecordError

_MAX_VARINT_BYTES = 5
_MAX_VARLONG_BYTES = 10


def zigzag_encode(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def zigzag_decode(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def write_unsigned_varint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def write_varint(out: bytearray, value: int) -> None:
    """Append a zig-zag varint (int32 range) or varlong to ``out``."""
    write_unsigned_varint(out, zigzag_encode(value) & 0xFFFFFFFFFFFFFFFF)


def varint_bytes(value: int) -> bytes:
    out = bytearray()
    write_varint(out, value)
    return bytes(out)


def read_unsigned_varint(buf: bytes | bytearray | memoryview, pos: int, max_bytes: int = _MAX_VARINT_BYTES) -> tuple[int, int]:
    """Read an unsigned varint at ``pos``; return (value, new position)."""
    result = 0
    shift = 0
    for i in range(max_bytes):
        try:
            b = buf[pos + i]
        except IndexError:
            raise InvalidRecordError("varint extends past the end of the buffer") from None
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos + i + 1
        shift += 7
    raise InvalidRecordError(f"varint is longer than {max_bytes} bytes")


def read_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Read a zig-zag varint (at most 5 bytes); return (value, new position)."""
    raw, pos = read_unsigned_varint(buf, pos, _MAX_VARINT_BYTES)
    return zigzag_decode(raw), pos


def read_varlong(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Read a zig-zag varlong (at most 10 bytes); return (value, new position)."""
    raw, pos = read_unsigned_varint(buf, pos, _MAX_VARLONG_BYTES)
    return zigzag_decode(raw), pos
