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
    """A zig-zag varint of at most 5 bytes at ``pos``, truncated to int32 like Java: (value, new position).
    IndexError past the end (the record decoders turn it into their own error). The one-byte case is
    answered inline, because it is most of what the record path reads."""
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    return _read_zigzag_tail(buf, pos, 28, 0xFFFFFFFF, "varint is longer than 5 bytes")


def read_varlong(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """A zig-zag varlong of at most 10 bytes, truncated to int64 like Java; IndexError past the end."""
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    return _read_zigzag_tail(buf, pos, 63, 0xFFFFFFFFFFFFFFFF, "varlong is longer than 10 bytes")


def _read_zigzag_tail(buf: bytes | bytearray | memoryview, pos: int, max_shift: int, mask: int,
                      too_long: str) -> tuple[int, int]:
    """The multi-byte case of :func:`read_varint`/:func:`read_varlong`, from the first byte at ``pos``."""
    raw = buf[pos] & 0x7F
    shift = 7
    pos += 1
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > max_shift:
            raise InvalidRecordError(too_long)
    raw &= mask
    return (raw >> 1) ^ -(raw & 1), pos
