"""The one unsigned varint reader and writer (#23): Kafka's byte layout, the length limits, and each
layer's own error for a malformed varint (the protocol decoder, metadata replay, the transaction log)."""

from __future__ import annotations

import pytest

from tierlog._util.varint import read_unsigned_varint, unsigned_varint_bytes, write_unsigned_varint
from tierlog.errors import InvalidRecordError
from tierlog.metadata._codec import Reader
from tierlog.metadata.errors import MetadataReplayError
from tierlog.protocol._decoder import DecodeError, read_uvarint


@pytest.mark.parametrize(("value", "encoded"), [
    (0, "00"), (1, "01"), (127, "7f"), (128, "8001"), (150, "9601"), (16383, "ff7f"), (16384, "808001"),
    (2**31 - 1, "ffffffff07"), (2**32 - 1, "ffffffff0f"), (2**63 - 1, "ffffffffffffffff7f"),
])
def test_kafkas_layout_round_trips(value: int, encoded: str) -> None:
    raw = bytes.fromhex(encoded)
    assert unsigned_varint_bytes(value) == raw
    out = bytearray(b"\xaa")
    write_unsigned_varint(out, value)
    assert bytes(out) == b"\xaa" + raw
    assert read_unsigned_varint(b"\xaa" + raw + b"\xbb", 1, 10) == (value, 1 + len(raw))


def test_limits_and_errors() -> None:
    assert read_unsigned_varint(bytes.fromhex("ffffffff0f"), 0) == (2**32 - 1, 5)
    with pytest.raises(InvalidRecordError, match="longer than 5 bytes"):
        read_unsigned_varint(bytes.fromhex("ffffffffff01"), 0)
    with pytest.raises(InvalidRecordError, match="past the end"):
        read_unsigned_varint(b"\x80\x80", 0)
    with pytest.raises(ValueError, match="past the end"):
        read_unsigned_varint(b"\x05\x05", 1, end=1, error=ValueError)  # ``end`` bounds it, not the buffer
    with pytest.raises(InvalidRecordError):
        read_unsigned_varint(b"", 0)


def test_each_layer_raises_its_own_error() -> None:
    assert read_uvarint(b"\x96\x01", 0) == (150, 2)
    with pytest.raises(DecodeError):
        read_uvarint(b"\x96", 0)
    with pytest.raises(DecodeError):
        read_uvarint(bytes.fromhex("ffffffffff01"), 0)
    r = Reader(b"\x96\x01\x80", 0)
    assert r.uvarint() == 150 and r.pos == 2
    with pytest.raises(MetadataReplayError):
        r.uvarint()
    with pytest.raises(MetadataReplayError):
        Reader(b"\xff" * 10 + b"\x01").uvarint()  # an unsigned varlong is at most 10 bytes
    assert Reader(bytes.fromhex("ffffffffffffffff7f")).uvarint() == 2**63 - 1
