"""Golden bytes from KAFKA-FACTS.md: vectors that do not depend on our own encoder being right."""

from __future__ import annotations

import struct

import pytest

from tierlog._util.crc import crc32c
from tierlog._util.varint import read_varint, read_varlong, varint_bytes
from tierlog.records import (
    BatchHeader,
    SimpleRecord,
    build_batch,
    compress,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from tierlog.records._xxhash import xxh32
from tierlog.records.compression import LZ4_FRAME_HEADER, XERIAL_HEADER

INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)

# ByteUtilsTest's zig-zag vectors (KAFKA-FACTS §1.3).
ZIGZAG_VECTORS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (-65, "8101"),
    (8191, "fe7f"),
    (8192, "808001"),
    (INT32_MAX, "feffffff0f"),
    (INT32_MIN, "ffffffff0f"),
]


@pytest.mark.parametrize(("value", "encoded"), ZIGZAG_VECTORS)
def test_zigzag_varint_vectors(value: int, encoded: str) -> None:
    assert varint_bytes(value).hex() == encoded
    raw = bytes.fromhex(encoded)
    assert read_varint(raw, 0) == (value, len(raw))
    assert read_varlong(raw, 0) == (value, len(raw))


def test_crc32c_check_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283


def test_xxh32_reference_values() -> None:
    # The published xxHash32 value of the empty input with seed 0.
    assert xxh32(b"") == 0x02CC5D05
    # The LZ4 header checksum byte of Kafka's descriptor (FLG 0x60, BD 0x40) is 0x82 (KAFKA-FACTS §1.5).
    assert (xxh32(bytes([0x60, 0x40])) >> 8) & 0xFF == 0x82


def test_lz4_frame_header_is_kafkas() -> None:
    expected = bytes.fromhex("04224d18604082")
    assert expected == LZ4_FRAME_HEADER
    assert compress(3, b"x" * 100)[:7] == expected
    # An empty input is the header plus the end mark, nothing else.
    assert compress(3, b"") == expected + b"\x00\x00\x00\x00"


def test_xerial_header() -> None:
    expected = bytes([0x82, 0x53, 0x4E, 0x41, 0x50, 0x50, 0x59, 0x00, 0, 0, 0, 1, 0, 0, 0, 1])
    assert expected == XERIAL_HEADER
    assert compress(2, b"abc" * 100)[:16] == expected


def _golden_batch() -> bytes:
    return build_batch(
        [
            SimpleRecord(b"k", b"v", timestamp=1_000),
            SimpleRecord(None, b"vv", headers=[("h", b"x")], timestamp=1_500),
        ],
        base_offset=0x0102030405,
        producer_id=0x0A0B0C0D0E,
        producer_epoch=7,
        base_sequence=11,
        is_transactional=True,
        partition_leader_epoch=9,
    )


def test_hand_checked_batch_fields_at_their_byte_offsets() -> None:
    b = _golden_batch()
    # Records, written out by hand from the §1.3 table:
    # 1st: attrs 00, tsDelta 0 → 00, offDelta 0 → 00, keyLen 1 → 02 'k', valLen 1 → 02 'v', 0 headers → 00
    rec1 = bytes.fromhex("00" "00" "00" "02") + b"k" + bytes.fromhex("02") + b"v" + bytes.fromhex("00")
    # 2nd: tsDelta 500 → zigzag 1000 → e8 07, offDelta 1 → 02, null key → 01, valLen 2 → 04 "vv",
    # 1 header → 02, key len 1 → 02 'h', value len 1 → 02 'x'
    rec2 = (
        bytes.fromhex("00" "e807" "02" "01" "04") + b"vv" + bytes.fromhex("02" "02") + b"h" + bytes.fromhex("02") + b"x"
    )
    records = bytes([len(rec1) * 2]) + rec1 + bytes([len(rec2) * 2]) + rec2
    assert b[61:] == records
    assert len(b) == 61 + len(records)

    assert b[0:8] == bytes.fromhex("0000000102030405")  # baseOffset
    assert b[8:12] == struct.pack(">i", len(b) - 12)  # batchLength
    assert b[12:16] == bytes.fromhex("00000009")  # partitionLeaderEpoch
    assert b[16] == 2  # magic
    assert b[21:23] == bytes.fromhex("0010")  # attributes: transactional, CreateTime, no codec
    assert b[23:27] == bytes.fromhex("00000001")  # lastOffsetDelta
    assert b[27:35] == struct.pack(">q", 1_000)  # baseTimestamp = first record's
    assert b[35:43] == struct.pack(">q", 1_500)  # maxTimestamp
    assert b[43:51] == bytes.fromhex("0000000a0b0c0d0e")  # producerId
    assert b[51:53] == bytes.fromhex("0007")  # producerEpoch
    assert b[53:57] == bytes.fromhex("0000000b")  # baseSequence
    assert b[57:61] == bytes.fromhex("00000002")  # recordsCount
    assert b[17:21] == struct.pack(">I", crc32c(b[21:]))  # CRC over attributes..end

    h = BatchHeader(b)
    assert (h.base_offset, h.last_offset, h.records_count, h.magic) == (0x0102030405, 0x0102030406, 2, 2)
    assert h.is_transactional and not h.is_control
    assert h.last_sequence == 12


def test_empty_batch_header() -> None:
    b = build_batch([], base_offset=10)
    assert len(b) == 61
    h = BatchHeader(b)
    assert h.records_count == 0
    assert h.base_timestamp == -1 and h.max_timestamp == -1
    assert h.last_offset_delta == 0
    h.ensure_valid()


def test_base_offset_and_leader_epoch_edits_leave_the_crc_valid_and_unchanged() -> None:
    buf = bytearray(_golden_batch())
    crc_before = bytes(buf[17:21])
    set_base_offset(buf, 0, 123_456)
    set_partition_leader_epoch(buf, 0, 77)
    assert buf[17:21] == crc_before
    h = BatchHeader(buf)
    assert (h.base_offset, h.partition_leader_epoch) == (123_456, 77)
    h.ensure_valid()


def test_set_log_append_time_recomputes_the_crc() -> None:
    buf = bytearray(_golden_batch())
    crc_before = bytes(buf[17:21])
    set_log_append_time(buf, 0, 99_999)
    h = BatchHeader(buf)
    assert h.timestamp_type == 1 and h.max_timestamp == 99_999
    assert buf[21:23] == bytes.fromhex("0018")  # the timestamp-type bit joins the transactional bit
    assert buf[17:21] != crc_before
    assert buf[17:21] == struct.pack(">I", crc32c(bytes(buf[21:])))
    h.ensure_valid()
