"""validate_batch: the produce-path checks, each failure with its own message."""

from __future__ import annotations

import struct

import pytest

from tests.helpers.records import raw_batch, raw_record, recrc
from tierlog.errors import CorruptRecordError, InvalidRecordError
from tierlog.records import (
    BatchHeader,
    BatchStats,
    Record,
    SimpleRecord,
    build_batch,
    records_max_timestamp,
    validate_batch,
    walk_batch,
)

CODECS = [0, 1, 2, 3, 4]


@pytest.mark.parametrize("codec", CODECS)
def test_stats_of_a_valid_batch(codec: int) -> None:
    records = [
        SimpleRecord(b"a", b"x" * 100, timestamp=500),
        SimpleRecord(None, b"y" * 100, timestamp=900),
        SimpleRecord(b"c", None, timestamp=900),
        SimpleRecord(b"d", b"z", timestamp=None),
        SimpleRecord(b"e", b"w", timestamp=100),
    ]
    batch = build_batch(records, compression=codec, producer_id=1, producer_epoch=0, base_sequence=0)
    stats = validate_batch(BatchHeader(batch))
    assert stats == BatchStats(
        record_count=5,
        min_timestamp=100,
        max_timestamp=900,
        max_timestamp_offset_delta=1,
        has_null_key=True,
        uncompressed_size_bytes=len(build_batch(records)) - 61,
    )


def test_no_timestamps_at_all() -> None:
    stats = validate_batch(BatchHeader(build_batch([SimpleRecord(b"k", b"v")])))
    assert (stats.min_timestamp, stats.max_timestamp, stats.max_timestamp_offset_delta) == (-1, -1, -1)
    assert not stats.has_null_key


def test_crc_mismatch_is_corrupt() -> None:
    batch = bytearray(build_batch([SimpleRecord(b"k", b"v")]))
    batch[-2] ^= 0x01
    with pytest.raises(CorruptRecordError, match="stored crc .* computed"):
        validate_batch(BatchHeader(batch))


def test_undersized_batch_is_corrupt() -> None:
    batch = bytearray(build_batch([SimpleRecord(b"k", b"v")]))
    struct.pack_into(">i", batch, 8, 30)
    with pytest.raises(CorruptRecordError, match="smaller than the 61-byte header"):
        validate_batch(BatchHeader(batch))


def test_magic_other_than_2() -> None:
    batch = bytearray(build_batch([SimpleRecord(b"k", b"v")]))
    batch[16] = 1
    with pytest.raises(InvalidRecordError, match="unsupported magic 1"):
        validate_batch(BatchHeader(batch))


def test_control_batch_from_a_client() -> None:
    batch = build_batch([SimpleRecord(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05")], is_control=True)
    with pytest.raises(InvalidRecordError, match="Clients are not allowed to write control records"):
        validate_batch(BatchHeader(batch))
    assert validate_batch(BatchHeader(batch), from_client=False).record_count == 1


def test_empty_batch_from_a_client() -> None:
    with pytest.raises(InvalidRecordError, match="Invalid reported count for record batch: 0"):
        validate_batch(BatchHeader(build_batch([])))
    assert validate_batch(BatchHeader(build_batch([])), from_client=False).record_count == 0


def test_negative_count() -> None:
    with pytest.raises(InvalidRecordError, match="Found invalid record count -2"):
        validate_batch(BatchHeader(raw_batch(b"", count=-2, last_offset_delta=0)))


def test_last_offset_delta_must_match_the_count() -> None:
    batch = raw_batch(raw_record() + raw_record(offset_delta=1), count=2, last_offset_delta=2)
    with pytest.raises(InvalidRecordError, match="Inconsistent batch offset range .* count of records 2"):
        validate_batch(BatchHeader(batch))


def test_negative_last_offset_delta() -> None:
    batch = raw_batch(raw_record(), count=1, last_offset_delta=-1)
    with pytest.raises(InvalidRecordError, match="invalid offset range"):
        validate_batch(BatchHeader(batch))


@pytest.mark.parametrize("codec", CODECS)
def test_offset_deltas_must_be_contiguous(codec: int) -> None:
    batch = raw_batch(raw_record(offset_delta=0) + raw_record(offset_delta=2), count=2, codec=codec)
    with pytest.raises(InvalidRecordError, match="record 1 .*offsetDelta 2 where 1 was expected"):
        validate_batch(BatchHeader(batch))


def test_gaps_are_fine_for_replicated_or_compacted_batches() -> None:
    batch = build_batch([Record(10, 1, b"a", b"1"), Record(13, 2, b"b", b"2")], base_offset=10, last_offset_delta=5)
    assert validate_batch(BatchHeader(batch), from_client=False).record_count == 2
    decreasing = raw_batch(raw_record(offset_delta=3) + raw_record(offset_delta=1), count=2, last_offset_delta=3)
    with pytest.raises(InvalidRecordError, match="does not increase"):
        validate_batch(BatchHeader(decreasing), from_client=False)
    beyond = raw_batch(raw_record(offset_delta=0) + raw_record(offset_delta=4), count=2, last_offset_delta=3)
    with pytest.raises(InvalidRecordError, match="exceeds the batch lastOffsetDelta"):
        validate_batch(BatchHeader(beyond), from_client=False)


def test_producer_id_without_sequence() -> None:
    batch = raw_batch(raw_record(), count=1, producer_id=7, producer_epoch=0, base_sequence=-1)
    with pytest.raises(InvalidRecordError, match="Invalid sequence number -1 in record batch with producerId 7"):
        validate_batch(BatchHeader(batch))


@pytest.mark.parametrize("codec", CODECS)
def test_count_mismatches(codec: int) -> None:
    too_many = raw_batch(raw_record() + raw_record(offset_delta=1), count=3, codec=codec)
    with pytest.raises(InvalidRecordError, match="premature EOF.*declares 3 records but holds only 2"):
        validate_batch(BatchHeader(too_many))
    too_few = raw_batch(raw_record() + raw_record(offset_delta=1), count=1, codec=codec)
    with pytest.raises(InvalidRecordError, match="records still remaining"):
        validate_batch(BatchHeader(too_few))


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (raw_record(length=40), "Invalid record size"),
        (raw_record(headers=b"\x01"), "invalid number of record headers -1"),
        (raw_record(headers=b"\x02\x01\x01"), "Invalid negative header key size -1"),
        (raw_record(headers=b"\x02\x02a\x10x"), "runs past the end of the record"),
        (raw_record(b"\x00\x00\x00\x02k\x02v\x00\x00"), "expected to read 9 bytes"),
        (raw_record(b"\x00\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x00\x00\x02k\x02v\x00"), "varlong is longer"),
    ],
)
def test_malformed_records_are_caught_without_decoding(record: bytes, message: str) -> None:
    with pytest.raises(InvalidRecordError, match=message):
        validate_batch(BatchHeader(raw_batch(record, count=1)))


def test_corrupt_compressed_payload_with_a_valid_crc() -> None:
    batch = bytearray(build_batch([SimpleRecord(b"k", b"v" * 1000)], compression=3))
    batch[-10] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="lz4"):
        validate_batch(BatchHeader(recrc(batch)))


def test_position_inside_a_larger_buffer() -> None:
    first = build_batch([SimpleRecord(b"a", b"1")])
    second = build_batch([SimpleRecord(b"b", b"2"), SimpleRecord(None, b"3")], base_offset=1)
    buf = bytearray(first + second)
    stats = validate_batch(BatchHeader(buf, len(first)))
    assert stats.record_count == 2 and stats.has_null_key


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("header_max", [-1, 5, 10**13])
def test_records_max_timestamp_is_the_records_not_the_header(codec: int, header_max: int) -> None:
    records = [SimpleRecord(None, b"v", timestamp=ts) for ts in (1000, 3000, 2000)]
    header = BatchHeader(build_batch(records, compression=codec, max_timestamp=header_max))
    assert header.max_timestamp == header_max
    assert records_max_timestamp(header) == 3000
    stats = walk_batch(header)
    assert (stats.min_timestamp, stats.max_timestamp, stats.max_timestamp_offset_delta) == (1000, 3000, 1)


def test_records_max_timestamp_keeps_the_header_where_it_is_the_truth_or_the_records_are_unreadable() -> None:
    records = [SimpleRecord(None, b"v", timestamp=1000)]
    assert records_max_timestamp(BatchHeader(build_batch(records, log_append_time_ms=5000))) == 5000
    damaged = bytearray(build_batch(records, max_timestamp=7))
    struct.pack_into(">i", damaged, 57, 2)  # two records declared, one there
    assert records_max_timestamp(BatchHeader(bytes(damaged))) == 7
