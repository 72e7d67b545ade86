"""Kafka's flexible message encoding (KIP-482) for metadata records: fixed-width big-endian integers,
16-byte UUIDs, compact strings/arrays (unsigned varint length + 1, 0 = null) and a tagged-field section
at the end of every struct.

Hand-written readers and writers rather than a schema interpreter: a snapshot of a large cluster holds
hundreds of thousands of records and a per-field interpretation step would dominate its load time.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from tierlog._util.varint import read_unsigned_varint, unsigned_varint_bytes, write_unsigned_varint
from tierlog.metadata.errors import MetadataReplayError

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")

#: The section an encoder writes when a struct has no tagged field set.
NO_TAGGED_FIELDS = b"\x00"

TaggedFields = dict[int, bytes]


uvarint = unsigned_varint_bytes
#: Metadata records carry unsigned varlongs too (up to 10 bytes).
_MAX_UVARINT_BYTES = 10


def _replay_error(message: str) -> MetadataReplayError:
    return MetadataReplayError(f"metadata record: {message}")


class Writer:
    """Appends flexible-encoded fields to a bytearray."""

    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def uvarint(self, value: int) -> None:
        write_unsigned_varint(self.buf, value)

    def i8(self, value: int) -> None:
        self.buf += _I8.pack(value)

    def bool(self, value: bool) -> None:
        self.buf.append(1 if value else 0)

    def i16(self, value: int) -> None:
        self.buf += _I16.pack(value)

    def u16(self, value: int) -> None:
        self.buf += _U16.pack(value)

    def i32(self, value: int) -> None:
        self.buf += _I32.pack(value)

    def i64(self, value: int) -> None:
        self.buf += _I64.pack(value)

    def f64(self, value: float) -> None:
        self.buf += _F64.pack(value)

    def uuid(self, value: bytes) -> None:
        if len(value) != 16:
            raise ValueError(f"a uuid is 16 bytes, got {len(value)}")
        self.buf += value

    def string(self, value: str) -> None:
        data = value.encode("utf-8")
        self.uvarint(len(data) + 1)
        self.buf += data

    def compact_bytes(self, value: bytes) -> None:
        self.uvarint(len(value) + 1)
        self.buf += value

    def nullable_string(self, value: str | None) -> None:
        if value is None:
            self.buf.append(0)
        else:
            self.string(value)

    def i32_array(self, values: Sequence[int]) -> None:
        self.uvarint(len(values) + 1)
        for v in values:
            self.buf += _I32.pack(v)

    def uuid_array(self, values: Sequence[bytes]) -> None:
        self.uvarint(len(values) + 1)
        for v in values:
            self.uuid(v)

    def array_length(self, count: int) -> None:
        self.uvarint(count + 1)

    def tagged_fields(self, fields: TaggedFields | None = None) -> None:
        if not fields:
            self.buf.append(0)
            return
        self.uvarint(len(fields))
        for tag in sorted(fields):
            data = fields[tag]
            self.uvarint(tag)
            self.uvarint(len(data))
            self.buf += data


class Reader:
    """Reads flexible-encoded fields from ``buf`` starting at ``pos``; any overrun is a replay error."""

    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: bytes, pos: int = 0, end: int | None = None) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end

    def _need(self, n: int) -> int:
        pos = self.pos
        if pos + n > self.end:
            raise MetadataReplayError(f"metadata record truncated: need {n} bytes at position {pos}")
        self.pos = pos + n
        return pos

    def uvarint(self) -> int:
        value, self.pos = read_unsigned_varint(self.buf, self.pos, _MAX_UVARINT_BYTES, self.end, _replay_error)
        return value

    def i8(self) -> int:
        return int(_I8.unpack_from(self.buf, self._need(1))[0])

    def bool(self) -> bool:
        return self.buf[self._need(1)] != 0

    def i16(self) -> int:
        return int(_I16.unpack_from(self.buf, self._need(2))[0])

    def u16(self) -> int:
        return int(_U16.unpack_from(self.buf, self._need(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack_from(self.buf, self._need(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack_from(self.buf, self._need(8))[0])

    def f64(self) -> float:
        return float(_F64.unpack_from(self.buf, self._need(8))[0])

    def uuid(self) -> bytes:
        pos = self._need(16)
        return self.buf[pos : pos + 16]

    def compact_bytes(self) -> bytes:
        n = self.uvarint()
        if n == 0:
            raise MetadataReplayError("null where a metadata record requires bytes")
        pos = self._need(n - 1)
        return bytes(self.buf[pos : pos + n - 1])

    def nullable_string(self) -> str | None:
        n = self.uvarint()
        if n == 0:
            return None
        pos = self._need(n - 1)
        try:
            return self.buf[pos : pos + n - 1].decode("utf-8")
        except UnicodeDecodeError as e:
            raise MetadataReplayError(f"invalid UTF-8 in a metadata record string: {e}") from None

    def string(self) -> str:
        s = self.nullable_string()
        if s is None:
            raise MetadataReplayError("null where a metadata record requires a string")
        return s

    def array_length(self) -> int:
        n = self.uvarint()
        if n == 0:
            raise MetadataReplayError("null where a metadata record requires an array")
        if n - 1 > self.end - self.pos:
            raise MetadataReplayError(f"array of {n - 1} elements is longer than the record")
        return n - 1

    def i32_array(self) -> tuple[int, ...]:
        count = self.array_length()
        pos = self._need(4 * count)
        return struct.unpack_from(f">{count}i", self.buf, pos)

    def uuid_array(self) -> tuple[bytes, ...]:
        count = self.array_length()
        return tuple(self.uuid() for _ in range(count))

    def tagged_fields(self) -> TaggedFields:
        """The tagged section; unknown tags are kept as raw bytes so callers can skip them (forward
        compatibility is the point of tagged fields)."""
        count = self.uvarint()
        if count == 0:
            return {}
        out: TaggedFields = {}
        last = -1
        for _ in range(count):
            tag = self.uvarint()
            if tag <= last:
                raise MetadataReplayError(f"tagged field {tag} out of order (after {last})")
            last = tag
            size = self.uvarint()
            pos = self._need(size)
            out[tag] = self.buf[pos : pos + size]
        return out

    def expect_end(self, what: str) -> None:
        if self.pos != self.end:
            raise MetadataReplayError(f"{self.end - self.pos} unexpected bytes after a {what}")
