from __future__ import annotations

import pytest

from tierlog.errors import CorruptRecordError
from tierlog.server.groups.records import (
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    java_string_hash,
    partition_for_group,
)


def test_java_string_hash_and_partition() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE
    assert partition_for_group("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) == 0
    assert partition_for_group("hello", 50) == 99162322 % 50
    assert java_string_hash("é€") == (31 * 0xE9 + 0x20AC)


def test_offset_records_round_trip_in_kafka_layout() -> None:
    key = OffsetKey("group", "topic", 3)
    raw = encode_offset_key(key)
    # version 1, then three Kafka strings/ints
    assert raw == b"\x00\x01\x00\x05group\x00\x05topic\x00\x00\x00\x03"
    assert decode_key(raw) == key
    value = OffsetValue(1234, 7, "meta", 1_700_000_000_000)
    raw_value = encode_offset_value(value)
    assert raw_value[:2] == b"\x00\x03"
    assert decode_offset_value(raw_value) == value


def test_older_offset_value_versions() -> None:
    v1 = b"\x00\x01" + (99).to_bytes(8, "big") + b"\x00\x02md" + (5).to_bytes(8, "big") + (6).to_bytes(8, "big")
    assert decode_offset_value(v1) == OffsetValue(99, -1, "md", 5)
    v0 = b"\x00\x00" + (1).to_bytes(8, "big") + b"\x00\x00" + (2).to_bytes(8, "big")
    assert decode_offset_value(v0) == OffsetValue(1, -1, "", 2)


def test_group_records_round_trip() -> None:
    assert decode_key(encode_group_key(GroupKey("g1"))) == GroupKey("g1")
    value = GroupValue("consumer", 4, "range", "m1", 123, (
        MemberValue("m1", None, "client", "/10.0.0.1", 30000, 10000, b"sub", b"assign"),))
    assert decode_group_value(encode_group_value(value)) == value


def test_garbage_is_a_corrupt_record() -> None:
    with pytest.raises(CorruptRecordError):
        decode_key(b"\x00\x09")
    with pytest.raises(CorruptRecordError):
        decode_offset_value(b"\x00\x03\x00")
