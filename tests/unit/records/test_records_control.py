"""Control records: keys, end-transaction markers, control batches."""

from __future__ import annotations

import pytest

from tierlog.errors import InvalidRecordError
from tierlog.records import (
    BatchHeader,
    ControlRecordType,
    EndTransactionMarker,
    Record,
    build_control_batch,
    build_end_txn_marker_batch,
    control_record_key,
    decode_batch,
    parse_control_record_type,
    validate_batch,
)


def test_type_ids() -> None:
    assert [(t.name, t.value) for t in ControlRecordType] == [
        ("ABORT", 0), ("COMMIT", 1), ("LEADER_CHANGE", 2), ("SNAPSHOT_HEADER", 3), ("SNAPSHOT_FOOTER", 4),
        ("KRAFT_VERSION", 5), ("KRAFT_VOTERS", 6), ("UNKNOWN", -1),
    ]


def test_key_bytes() -> None:
    assert control_record_key(ControlRecordType.COMMIT) == bytes.fromhex("00000001")
    assert control_record_key(ControlRecordType.SNAPSHOT_FOOTER) == bytes.fromhex("00000004")
    with pytest.raises(InvalidRecordError):
        control_record_key(ControlRecordType.UNKNOWN)


def test_parse_key() -> None:
    assert parse_control_record_type(bytes.fromhex("00000000")) is ControlRecordType.ABORT
    assert parse_control_record_type(bytes.fromhex("00000006")) is ControlRecordType.KRAFT_VOTERS
    assert parse_control_record_type(bytes.fromhex("00000063")) is ControlRecordType.UNKNOWN
    # a newer key version with extra bytes still parses
    assert parse_control_record_type(bytes.fromhex("0001000100ff")) is ControlRecordType.COMMIT


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (None, "at least 4 bytes, but found only 0"),
        (b"\x00\x00\x01", "at least 4 bytes, but found only 3"),
        (bytes.fromhex("ffff0001"), "Invalid version found for control record: -1"),
    ],
)
def test_parse_bad_keys(key: bytes | None, message: str) -> None:
    with pytest.raises(InvalidRecordError, match=message):
        parse_control_record_type(key)


def test_end_txn_marker_value_bytes() -> None:
    marker = EndTransactionMarker(ControlRecordType.COMMIT, coordinator_epoch=0x01020304)
    assert marker.value() == bytes.fromhex("0000" "01020304")
    assert marker.key() == bytes.fromhex("00000001")
    assert marker.is_commit


def test_end_txn_marker_only_for_commit_or_abort() -> None:
    with pytest.raises(InvalidRecordError, match="LEADER_CHANGE"):
        EndTransactionMarker(ControlRecordType.LEADER_CHANGE, 1)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "at least 6 bytes, but found only 0"),
        (b"\x00\x00\x00\x00\x01", "at least 6 bytes, but found only 5"),
        (bytes.fromhex("ffff00000001"), "Invalid version found for end transaction marker: -1"),
    ],
)
def test_end_txn_marker_bad_values(value: bytes | None, message: str) -> None:
    with pytest.raises(InvalidRecordError, match=message):
        EndTransactionMarker.from_record(Record(0, 0, bytes.fromhex("00000000"), value))


def test_end_txn_marker_from_a_newer_version_keeps_reading() -> None:
    marker = EndTransactionMarker.from_record(Record(0, 0, bytes.fromhex("00000000"), bytes.fromhex("0001000000090000")))
    assert marker == EndTransactionMarker(ControlRecordType.ABORT, 9)


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_marker_batch(commit: bool) -> None:
    kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    marker = EndTransactionMarker(kind, coordinator_epoch=5)
    batch = build_end_txn_marker_batch(marker, producer_id=1234, producer_epoch=3, timestamp_ms=1_700_000_000_000,
                                       base_offset=77, partition_leader_epoch=2)
    header = BatchHeader(batch)
    header.ensure_valid()
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (1234, 3, -1)
    assert (header.base_offset, header.records_count, header.partition_leader_epoch) == (77, 1, 2)
    assert header.compression == 0 and header.timestamp_type == 0
    [record] = decode_batch(header)
    assert record.timestamp == 1_700_000_000_000
    assert parse_control_record_type(record.key) is kind
    assert EndTransactionMarker.from_record(record) == marker
    # written by the broker, not a client
    validate_batch(header, from_client=False)
    with pytest.raises(InvalidRecordError, match="control records"):
        validate_batch(header)


def test_generic_control_batch_for_snapshot_header_and_footer() -> None:
    batch = build_control_batch(
        [(ControlRecordType.SNAPSHOT_HEADER, b"\x00\x00hdr"), (ControlRecordType.SNAPSHOT_FOOTER, b"\x00\x00")],
        timestamp_ms=123, base_offset=10, partition_leader_epoch=4,
    )
    header = BatchHeader(batch)
    header.ensure_valid()
    assert header.is_control and not header.is_transactional and header.producer_id == -1
    records = decode_batch(header)
    assert [parse_control_record_type(r.key) for r in records] == [
        ControlRecordType.SNAPSHOT_HEADER, ControlRecordType.SNAPSHOT_FOOTER,
    ]
    assert [r.value for r in records] == [b"\x00\x00hdr", b"\x00\x00"]
    assert [r.offset for r in records] == [10, 11]
