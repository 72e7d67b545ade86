"""Building and decoding whole batches: round trips, timestamps, offsets, and malformed input."""

from __future__ import annotations

import mmap
import random
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.records import raw_batch, raw_record, recrc
from tierlog.errors import CorruptRecordError, InvalidRecordError, UnsupportedCompressionTypeError
from tierlog.records import (
    BatchHeader,
    Record,
    SimpleRecord,
    build_batch,
    decode_batch,
    iter_batches,
    iter_records,
)
from tierlog.records.record import decode_record, encode_record

CODECS = [0, 1, 2, 3, 4]


def _sample_records(n: int, seed: int = 0) -> list[SimpleRecord]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        key = None if i % 7 == 3 else f"key-{i}".encode()
        value = None if i % 11 == 5 else (b"value-%d " % i) * rng.randint(0, 40)
        headers = [("trace", b"abc"), ("empty", b""), ("null", None), ("ünï", b"\x00\xff")][: i % 5]
        out.append(SimpleRecord(key, value, headers=headers, timestamp=1_700_000_000_000 + rng.randint(-5000, 5000)))
    return out


def _same(decoded: list[Record], given: list[SimpleRecord], base_offset: int) -> None:
    assert len(decoded) == len(given)
    for i, (d, g) in enumerate(zip(decoded, given, strict=True)):
        assert d.offset == base_offset + i
        assert d.timestamp == g.timestamp
        assert d.key == g.key
        assert d.value == g.value
        assert d.headers == tuple(g.headers)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("n", [1, 2, 100, 2000])
def test_round_trip(codec: int, n: int) -> None:
    records = _sample_records(n, seed=n)
    batch = build_batch(records, base_offset=42, compression=codec)
    header = BatchHeader(batch)
    header.ensure_valid()
    assert header.compression == codec
    assert header.records_count == n
    assert header.last_offset == 42 + n - 1
    assert header.base_timestamp == records[0].timestamp
    assert header.max_timestamp == max(r.timestamp for r in records if r.timestamp is not None)
    _same(decode_batch(header), records, 42)


@pytest.mark.parametrize("codec", CODECS)
def test_large_values_span_several_compression_blocks(codec: int) -> None:
    # > 64 KiB (lz4 block) and > 32 KiB (xerial chunk) of record data
    records = [SimpleRecord(b"k", bytes(random.Random(i).choices(b"xyz", k=50_000)), timestamp=i) for i in range(4)]
    batch = build_batch(records, compression=codec)
    _same(decode_batch(BatchHeader(batch)), records, 0)


@pytest.mark.parametrize("codec", CODECS)
def test_empty_batch(codec: int) -> None:
    batch = build_batch([], compression=codec, base_offset=7)
    header = BatchHeader(batch)
    header.ensure_valid()
    assert header.records_count == 0
    assert decode_batch(header) == []


def test_null_key_and_value_and_no_timestamp() -> None:
    batch = build_batch([SimpleRecord(None, None)])
    [record] = decode_batch(BatchHeader(batch))
    assert record == Record(0, -1, None, None, ())
    # null key and null value are each the single byte 0x01 (zig-zag -1)
    assert batch[61:] == bytes.fromhex("0c" "00" "00" "00" "01" "01" "00")


def test_log_append_time_reports_max_timestamp_for_every_record() -> None:
    records = [SimpleRecord(b"a", b"1", timestamp=10), SimpleRecord(b"b", b"2", timestamp=20)]
    batch = build_batch(records, log_append_time_ms=5_000)
    header = BatchHeader(batch)
    assert header.timestamp_type == 1
    assert header.base_timestamp == 10  # the records keep their own timestamps on disk
    assert header.max_timestamp == 5_000
    assert [r.timestamp for r in decode_batch(header)] == [5_000, 5_000]


def test_log_append_time_needs_a_time() -> None:
    with pytest.raises(InvalidRecordError, match="log_append_time_ms"):
        build_batch([SimpleRecord(b"a", b"1", timestamp=1)], timestamp_type=1)


def test_delete_horizon_replaces_base_timestamp() -> None:
    records = [SimpleRecord(b"a", b"1", timestamp=1_000), SimpleRecord(b"b", b"2", timestamp=3_000)]
    batch = build_batch(records, delete_horizon_ms=2_000)
    header = BatchHeader(batch)
    assert header.has_delete_horizon and header.base_timestamp == 2_000
    assert header.max_timestamp == 3_000
    assert [r.timestamp for r in decode_batch(header)] == [1_000, 3_000]


def test_records_keep_their_offsets_so_compacted_batches_have_gaps() -> None:
    kept = [Record(103, 5, b"a", b"1"), Record(107, 6, b"b", None)]
    batch = build_batch(kept, base_offset=100, last_offset_delta=9, producer_id=1, producer_epoch=0, base_sequence=50)
    header = BatchHeader(batch)
    assert header.base_offset == 100 and header.last_offset == 109  # preserved for the last sequence
    assert header.last_sequence == 59
    assert decode_batch(header) == kept


def test_emptied_batch_keeps_its_header_fields() -> None:
    batch = build_batch([], base_offset=100, last_offset_delta=4, max_timestamp=777, producer_id=3,
                        producer_epoch=1, base_sequence=10, is_transactional=True)
    header = BatchHeader(batch)
    assert (header.last_offset, header.max_timestamp, header.base_timestamp) == (104, 777, -1)
    assert header.last_sequence == 14


@pytest.mark.parametrize(
    ("records", "kwargs", "message"),
    [
        ([Record(5, 0, None, None), Record(5, 0, None, None)], {}, "Illegal offset 5 following previous offset 5"),
        ([Record(3, 0, None, None)], {"base_offset": 4}, "below the base offset"),
        ([SimpleRecord(None, None, timestamp=-2)], {}, "Invalid negative timestamp -2"),
        ([SimpleRecord(None, None)], {"is_transactional": True}, "without a producer id"),
        ([SimpleRecord(None, None)], {"producer_id": 1, "producer_epoch": -1}, "producer epoch"),
        ([SimpleRecord(None, None)], {"producer_id": 1, "producer_epoch": 0}, "sequence number"),
        ([SimpleRecord(None, None)], {"timestamp_type": 2}, "timestamp type"),
        ([Record(0, 0, None, None), Record(2, 0, None, None)], {"last_offset_delta": 1}, "below the last"),
        ([Record(2**31, 0, None, None)], {}, "int32"),
        ([SimpleRecord(None, None, headers=[("\udcff", None)])], {}, "not valid UTF-8"),
    ],
)
def test_builder_rejects(records: list[SimpleRecord], kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(InvalidRecordError, match=message):
        build_batch(records, **kwargs)  # type: ignore[arg-type]


def test_builder_rejects_unknown_codec() -> None:
    with pytest.raises(UnsupportedCompressionTypeError):
        build_batch([SimpleRecord(None, None)], compression=5)


def test_iter_records_over_several_batches_and_a_torn_tail() -> None:
    first = build_batch([SimpleRecord(b"a", b"1", timestamp=1)], base_offset=0)
    second = build_batch([SimpleRecord(b"b", b"2", timestamp=2), SimpleRecord(b"c", b"3", timestamp=3)],
                         base_offset=1, compression=3)
    third = build_batch([SimpleRecord(b"d", b"4", timestamp=4)], base_offset=3)
    buf = first + second + third[:-1]  # the last batch is torn: iteration stops before it
    assert [(r.offset, r.key) for r in iter_records(buf)] == [(0, b"a"), (1, b"b"), (2, b"c")]
    assert [h.base_offset for h, _ in iter_batches(memoryview(buf))] == [0, 1]
    assert [r.offset for r in iter_records(bytearray(buf), start=len(first))] == [1, 2]


def test_iter_records_can_verify_crcs() -> None:
    buf = bytearray(build_batch([SimpleRecord(b"a", b"1", timestamp=1)]))
    buf[-2] ^= 0x01  # the value byte: still a well-formed record
    assert len(list(iter_records(bytes(buf)))) == 1  # not checked by default, as in Kafka
    with pytest.raises(CorruptRecordError, match="crc"):
        list(iter_records(bytes(buf), verify_crc=True))


# ------------------------------------------------------------------------------------ malformed batches


def test_flipped_byte_fails_the_crc() -> None:
    batch = build_batch(_sample_records(10))
    for position in (21, 30, 61, len(batch) - 1):
        damaged = bytearray(batch)
        damaged[position] ^= 0x40
        with pytest.raises(CorruptRecordError, match="stored crc"):
            BatchHeader(damaged).ensure_valid()
    # partitionLeaderEpoch and baseOffset are outside the CRC
    damaged = bytearray(batch)
    damaged[3] ^= 0x40
    damaged[14] ^= 0x40
    BatchHeader(damaged).ensure_valid()


@pytest.mark.parametrize("codec", CODECS)
def test_declared_count_above_the_records_held(codec: int) -> None:
    batch = raw_batch(raw_record() * 2, count=3, codec=codec)
    with pytest.raises(InvalidRecordError, match="Incorrect declared batch size, premature EOF.*declares 3 records but holds only 2"):
        decode_batch(BatchHeader(batch))


@pytest.mark.parametrize("codec", CODECS)
def test_declared_count_below_the_records_held(codec: int) -> None:
    batch = raw_batch(raw_record() * 3, count=2, codec=codec)
    with pytest.raises(InvalidRecordError, match="Incorrect declared batch size, records still remaining"):
        decode_batch(BatchHeader(batch))


def test_negative_record_count() -> None:
    with pytest.raises(InvalidRecordError, match="Found invalid record count -1"):
        decode_batch(BatchHeader(raw_batch(b"", count=-1, last_offset_delta=0)))


def test_truncated_and_undersized_batches() -> None:
    batch = build_batch([SimpleRecord(b"a", b"1")])
    with pytest.raises(CorruptRecordError, match="remain"):
        decode_batch(BatchHeader(batch[:-2]))
    small = bytearray(batch)
    struct.pack_into(">i", small, 8, 40)  # size 52 < 61
    with pytest.raises(CorruptRecordError, match="smaller than the 61-byte header"):
        decode_batch(BatchHeader(small))


def test_wrong_magic() -> None:
    batch = bytearray(build_batch([SimpleRecord(b"a", b"1")]))
    batch[16] = 1
    with pytest.raises(CorruptRecordError, match="magic 1"):
        decode_batch(BatchHeader(batch))


def test_corrupt_compressed_payload() -> None:
    batch = bytearray(build_batch(_sample_records(20), compression=4))
    batch[70:80] = b"\x00" * 10
    with pytest.raises(CorruptRecordError, match="zstd"):
        decode_batch(BatchHeader(recrc(batch)))


@pytest.mark.parametrize(
    ("record", "message"),
    [
        # length says 30 but only 8 body bytes follow (and it is the last record)
        (raw_record(length=30), "Invalid record size: expected 30 bytes in record payload"),
        (raw_record(length=-3), "Invalid record size: expected -3"),
        # length one byte longer than the fields: 1 unread byte
        (raw_record(b"\x00\x00\x00\x02k\x02v\x00\x00"), "expected to read 9 bytes in record payload, but instead read 8"),
        # header count missing: the last record runs out of bytes
        (raw_record(b"\x00\x00\x00\x02k\x02v"), "runs past the end of the batch"),
        (raw_record(key=None, value=b"v" * 5, headers=b"\x03"), "invalid number of record headers -2"),
        (raw_record(headers=b"\x28"), "invalid number of record headers. 20 is larger"),
        (raw_record(headers=b"\x02\x03ab\x01"), "Invalid negative header key size -2"),
        (raw_record(headers=b"\x02\x10ab\x01"), "header key length 8 runs past"),
        (raw_record(headers=b"\x02\x02a\x10x"), "header value length 8 runs past"),
        (raw_record(b"\x00\x00\x00\x40k\x02v\x00"), "key length 32 runs past"),
        (raw_record(b"\x00\x00\x00\x02k\x40v\x00"), "value length 32 runs past"),
        # offsetDelta encoded in 6 bytes
        (raw_record(b"\x00\x00\x80\x80\x80\x80\x80\x00\x02k\x02v\x00"), "varint is longer than 5 bytes"),
        # timestampDelta encoded in 11 bytes
        (raw_record(b"\x00" + b"\x80" * 10 + b"\x00\x00\x02k\x02v\x00"), "varlong is longer than 10 bytes"),
        (raw_record(b"\x00\x00"), "runs past the end of the batch|expected to read"),
    ],
)
def test_malformed_records(record: bytes, message: str) -> None:
    batch = raw_batch(record, count=1)
    with pytest.raises(InvalidRecordError, match=message):
        decode_batch(BatchHeader(batch))


def test_record_shorter_than_its_fields_reads_into_the_next_one() -> None:
    # The declared length stops before the header count, which is then read from the byte after it.
    batch = raw_batch(raw_record(b"\x00\x00\x00\x01\x02v\x00", length=6) + b"\x00", count=1)
    with pytest.raises(InvalidRecordError, match="expected to read 6 bytes in record payload, but instead read 7"):
        decode_batch(BatchHeader(batch))


def test_malformed_record_error_names_the_record() -> None:
    batch = raw_batch(raw_record() + raw_record(headers=b"\x03"), count=2, base_offset=500)
    with pytest.raises(InvalidRecordError, match="record 1 of the batch at offset 500"):
        decode_batch(BatchHeader(batch))


def test_five_byte_varints_truncate_like_java() -> None:
    # offsetDelta written with a 5th byte carrying bits above 32: Java keeps the low 32 bits.
    record = raw_record(b"\x00\x00" + b"\x82\x80\x80\x80\x70" + b"\x02k\x02v\x00")
    [decoded] = decode_batch(BatchHeader(raw_batch(record, count=1, base_offset=10)))
    assert decoded.offset == 11


def test_negative_key_length_below_minus_one_reads_as_null_like_java() -> None:
    record = raw_record(b"\x00\x00\x00\x03\x02v\x00")  # key length -2
    [decoded] = decode_batch(BatchHeader(raw_batch(record, count=1)))
    assert decoded.key is None and decoded.value == b"v"


def test_invalid_utf8_header_key_is_replaced_like_java() -> None:
    record = raw_record(headers=b"\x02\x02\xff\x02x")
    [decoded] = decode_batch(BatchHeader(raw_batch(record, count=1)))
    assert decoded.headers == (("\ufffd", b"x"),)


# ------------------------------------------------------------------------------------ property tests

_headers = st.lists(
    st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=4
).map(tuple)


@settings(max_examples=200, deadline=None)
@given(
    offset_delta=st.integers(0, 2**31 - 1),
    timestamp_delta=st.integers(-(2**62), 2**62),
    key=st.none() | st.binary(max_size=200),
    value=st.none() | st.binary(max_size=300),
    headers=_headers,
    base_offset=st.integers(0, 2**40),
)
def test_record_encode_decode_round_trip(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: tuple[tuple[str, bytes | None], ...],
    base_offset: int,
) -> None:
    out = bytearray(b"junk")
    encode_record(out, offset_delta, timestamp_delta, key, value, headers)
    buf = bytes(out) + b"tail"
    record, end = decode_record(buf, 4, len(buf), base_offset, 1_000)
    assert end == len(buf) - 4
    assert record == Record(base_offset + offset_delta, 1_000 + timestamp_delta, key, value, headers)


@settings(max_examples=50, deadline=None)
@given(
    records=st.lists(
        st.builds(
            SimpleRecord,
            key=st.none() | st.binary(max_size=50),
            value=st.none() | st.binary(max_size=100),
            headers=_headers,
            timestamp=st.none() | st.integers(0, 2**45),
        ),
        max_size=20,
    ),
    codec=st.sampled_from(CODECS),
    base_offset=st.integers(0, 2**50),
)
def test_batch_round_trip_property(records: list[SimpleRecord], codec: int, base_offset: int) -> None:
    header = BatchHeader(build_batch(records, base_offset=base_offset, compression=codec))
    header.ensure_valid()
    decoded = decode_batch(header)
    assert [(r.offset, r.key, r.value, r.headers) for r in decoded] == [
        (base_offset + i, r.key, r.value, tuple(r.headers)) for i, r in enumerate(records)
    ]
    assert [r.timestamp for r in decoded] == [-1 if r.timestamp is None else r.timestamp for r in records]


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=80), count=st.integers(0, 5))
def test_garbage_records_raise_only_invalid_record(data: bytes, count: int) -> None:
    try:
        decode_batch(BatchHeader(raw_batch(data, count=count, last_offset_delta=0)))
    except InvalidRecordError:
        pass


def test_reads_batches_in_place_from_an_mmap(tmp_path: Path) -> None:
    data = build_batch([SimpleRecord(b"a", b"x" * 500, timestamp=1)], compression=3) + build_batch(
        [SimpleRecord(b"b", None, timestamp=2)], base_offset=1
    )
    path = tmp_path / "segment.log"
    path.write_bytes(data)
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        assert [(r.offset, r.key, r.value) for r in iter_records(mapped, verify_crc=True)] == [
            (0, b"a", b"x" * 500),
            (1, b"b", None),
        ]
