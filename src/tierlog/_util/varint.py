"""Zig-zag varints as Kafka writes them in records (``ByteUtils.writeVarint``/``writeVarlong``),
and the unsigned varints of the flexible protocol encoding (``ByteUtils.writeUnsignedVarint``), which
the protocol decoder, the metadata and transaction-log records and the fetch response all use from
here. The records layer keeps its own inlined and numba fast paths (records/_fastwalk.py)."""

from __future__ import annotations

from collections.abc import Callable

from tierlog.errors import InvalidRecordError

_MAX_VARINT_BYTES = 5
_MAX_VARLONG_BYTES = 10


def zigzag_encode(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def zigzag_decode(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def write_unsigned_varint(out: bytearray, value: int) -> None:
    """Append an unsigned varint (``value`` >= 0) to ``out``."""
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def unsigned_varint_bytes(value: int) -> bytes:
    """An unsigned varint as bytes (one byte for most lengths and counts, answered at once)."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    write_unsigned_varint(out, value)
    return bytes(out)


def write_varint(out: bytearray, value: int) -> None:
    """Append a zig-zag varint (int32 range) or varlong to ``out``."""
    write_unsigned_varint(out, zigzag_encode(value) & 0xFFFFFFFFFFFFFFFF)


def varint_bytes(value: int) -> bytes:
    out = bytearray()
    write_varint(out, value)
    return bytes(out)


def read_unsigned_varint(buf: bytes | bytearray | memoryview, pos: int, max_bytes: int = _MAX_VARINT_BYTES,
                         end: int | None = None,
                         error: Callable[[str], Exception] = InvalidRecordError) -> tuple[int, int]:
    """The unsigned varint at ``pos`` of at most ``max_bytes`` (Kafka's readUnsignedVarint: 5),
    ending before ``end`` (default: the end of ``buf``): (value, new position). A varint that runs
    past the end or is too long raises ``error(message)``, so each layer answers with its own error."""
    limit = len(buf) if end is None else end
    if pos < limit and buf[pos] < 0x80:  # most lengths and counts: one byte
        return buf[pos], pos + 1
    result = shift = 0
    last_shift = 7 * (max_bytes - 1)
    while pos < limit:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        if shift == last_shift:
            raise error(f"unsigned varint is longer than {max_bytes} bytes")
        shift += 7
    raise error("unsigned varint runs past the end of the buffer")


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
