"""The snapshot file format, byte by byte (KAFKA-FACTS §6.3/§6.4), and its validation."""

from __future__ import annotations

import itertools
import struct
from pathlib import Path

import pytest

from tests.helpers.metadata_records import topic_id
from tierlog.errors import CorruptSnapshotError
from tierlog.metadata.delta import replay_records
from tierlog.metadata.image import EMPTY_IMAGE, MetadataImage, MetadataProvenance
from tierlog.metadata.records import (
    ConfigRecord,
    FeatureLevelRecord,
    PartitionRecord,
    TopicRecord,
    decode_record,
)
from tierlog.metadata.snapshot import (
    SnapshotId,
    list_snapshots,
    load_snapshot,
    parse_snapshot_file_name,
    read_last_contained_timestamp,
    remove_partial_snapshots,
    write_snapshot,
)
from tierlog.records import BatchHeader, decode_batch, iter_headers

T1 = topic_id(1)


def sample_image(partitions: int = 3, last_offset: int = 41, epoch: int = 7) -> MetadataImage:
    records = [FeatureLevelRecord("metadata.version", 21), TopicRecord("orders", T1),
               ConfigRecord(2, "orders", "retention.ms", "1000")]
    records += [PartitionRecord(p, T1, (1,), (1,), 1, 0, 0) for p in range(partitions)]
    return replay_records(EMPTY_IMAGE, records, MetadataProvenance(last_offset, epoch, 1_700_000_000_123))


def test_file_name_format() -> None:
    assert SnapshotId(12345, 7).file_name() == "00000000000000012345-0000000007.checkpoint"
    assert parse_snapshot_file_name("00000000000000012345-0000000007.checkpoint") == SnapshotId(12345, 7)
    for bad in ("00000000000000012345-0000000007.checkpoint.part", "00000000000000012345-0000000007.checkpoint.deleted",
                "0000000000000012345-0000000007.checkpoint", "00000000000000012345-000000007.checkpoint",
                "00000000000000012345-0000000007-123.checkpoint.part", "00000000000000012345.log"):
        assert parse_snapshot_file_name(bad) is None


def test_snapshot_structure_byte_by_byte(tmp_path: Path) -> None:
    image = sample_image()
    snap = write_snapshot(tmp_path, image, now_ms=1_700_000_009_999)
    assert snap.path.name == "00000000000000000042-0000000007.checkpoint"
    data = snap.path.read_bytes()
    assert snap.size_bytes == len(data)
    headers = list(iter_headers(data))
    assert sum(h.size_bytes for h in headers) == len(data)
    for h in headers:
        h.ensure_valid()
        assert h.partition_leader_epoch == 7
        assert h.compression == 0 and not h.is_transactional
        assert h.producer_id == -1 and h.producer_epoch == -1 and h.base_sequence == -1
    # Offsets inside the file start at 0 and follow on.
    assert headers[0].base_offset == 0
    for prev, nxt in itertools.pairwise(headers):
        assert nxt.base_offset == prev.next_offset

    first = headers[0]
    assert first.is_control
    header_records = decode_batch(first)
    assert header_records[0].key == b"\x00\x00\x00\x03"
    value = header_records[0].value
    assert value is not None and len(value) == 11
    assert struct.unpack(">hq", value[:10]) == (0, 1_700_000_000_123) and value[10:] == b"\x00"

    last = headers[-1]
    assert last.is_control and last.records_count == 1
    footer = decode_batch(last)[0]
    assert footer.key == b"\x00\x00\x00\x04"
    assert footer.value == b"\x00\x00\x00"

    body = [rec for h in headers[1:-1] for rec in decode_batch(h)]
    assert all(not h.is_control for h in headers[1:-1])
    assert all(rec.key is None for rec in body)
    decoded = [decode_record(rec.value) for rec in body]
    assert decoded[0] == FeatureLevelRecord("metadata.version", 21)
    assert len(decoded) == 6


def test_round_trip_and_header_timestamp(tmp_path: Path) -> None:
    image = sample_image()
    snap = write_snapshot(tmp_path, image, now_ms=5)
    loaded = load_snapshot(snap.path)
    assert loaded.image == image
    assert loaded.snapshot_id == SnapshotId(42, 7)
    assert read_last_contained_timestamp(snap.path) == 1_700_000_000_123


def test_large_images_split_into_several_batches(tmp_path: Path) -> None:
    image = sample_image(partitions=500)
    snap = write_snapshot(tmp_path, image, now_ms=5, max_batch_bytes=4096)
    headers = list(iter_headers(snap.path.read_bytes()))
    assert len(headers) > 5
    assert all(h.size_bytes <= 4096 + 100 for h in headers)
    assert load_snapshot(snap.path).image == image


def test_write_is_atomic_and_idempotent(tmp_path: Path) -> None:
    image = sample_image()
    first = write_snapshot(tmp_path, image, now_ms=5)
    again = write_snapshot(tmp_path, image, now_ms=6)
    assert again.path == first.path and again.size_bytes == first.size_bytes
    assert [p.name for p in tmp_path.iterdir()] == [first.path.name]


def test_nothing_to_snapshot_for_an_empty_image(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        write_snapshot(tmp_path, EMPTY_IMAGE, now_ms=5)


def test_partial_and_deleted_files_are_ignored_and_removed(tmp_path: Path) -> None:
    snap = write_snapshot(tmp_path, sample_image(), now_ms=5)
    part = tmp_path / "00000000000000000050-0000000007-1234.checkpoint.part"
    deleted = tmp_path / "00000000000000000010-0000000007.checkpoint.deleted"
    part.write_bytes(b"partial")
    deleted.write_bytes(b"old")
    assert [s.path for s in list_snapshots(tmp_path)] == [snap.path]
    assert set(remove_partial_snapshots(tmp_path)) == {part, deleted}
    assert sorted(p.name for p in tmp_path.iterdir()) == [snap.path.name]


def corrupt(path: Path, edit: bytes | None = None, *, truncate: int | None = None, at: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    if truncate is not None:
        data = data[:truncate]
    if at is not None:
        data[at] ^= 0xFF
    if edit is not None:
        data += edit
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["crc", "missing_footer", "truncated_mid_batch", "trailing_garbage", "no_header"])
def test_corrupt_snapshots_are_detected(tmp_path: Path, how: str) -> None:
    snap = write_snapshot(tmp_path, sample_image(), now_ms=5)
    data = snap.path.read_bytes()
    headers = list(iter_headers(data))
    if how == "crc":
        corrupt(snap.path, at=headers[1].position + 70)
    elif how == "missing_footer":
        corrupt(snap.path, truncate=headers[-1].position)
    elif how == "truncated_mid_batch":
        corrupt(snap.path, truncate=headers[1].position + 30)
    elif how == "trailing_garbage":
        corrupt(snap.path, b"\x00" * 40)
    else:
        snap.path.write_bytes(data[headers[1].position :])
    with pytest.raises(CorruptSnapshotError):
        load_snapshot(snap.path)


def test_snapshot_header_is_first_batch_on_disk(tmp_path: Path) -> None:
    snap = write_snapshot(tmp_path, sample_image(), now_ms=5)
    data = snap.path.read_bytes()
    h = BatchHeader(data, 0)
    assert h.base_offset == 0 and h.is_control
    # The first record's key sits right after its length/attributes/deltas/key-length varints.
    assert data[61 + 5 : 61 + 9] == b"\x00\x00\x00\x03"
