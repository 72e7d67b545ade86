"""The behaviour every RemoteStorageManager backend must have (KAFKA-FACTS §5.1, §5.10 and Kafka's
LocalTieredStorageTest). A backend's test module subclasses :class:`RemoteStorageManagerContract` and
provides the ``rsm`` fixture; every test here then runs against it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tierlog.ids import random_uuid
from tierlog.tiered.api import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteResourceNotFoundError,
    RemoteStorageManager,
    TopicIdPartition,
)

TIP = TopicIdPartition(b"\x07" * 16, "orders", 3)


def make_metadata(start: int = 100, size: int = 0, tip: TopicIdPartition = TIP) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip, random_uuid()), start_offset=start, end_offset=start + 99,
        max_timestamp_ms=1_700_000_000_000, broker_id=1, event_timestamp_ms=1_700_000_000_000,
        segment_size_in_bytes=size, segment_leader_epochs=((0, start),))


class SegmentFiles:
    """A segment's files with distinct random contents, so any mix-up shows."""

    def __init__(self, directory: Path, *, log_size: int = 200_000, with_txn: bool = True, empty: bool = False) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.contents: dict[str, bytes] = {
            "log": b"" if empty else os.urandom(log_size),
            "index": b"" if empty else os.urandom(800),
            "timeindex": b"" if empty else os.urandom(1200),
            "snapshot": os.urandom(64),
            "txnindex": os.urandom(340),
        }
        self.paths = {}
        for kind, data in self.contents.items():
            path = directory / f"00000000000000000100.{kind}"
            path.write_bytes(data)
            self.paths[kind] = path
        self.epochs = b"0\n1\n0 100\n"
        self.with_txn = with_txn

    def data(self) -> LogSegmentData:
        return LogSegmentData(
            log_segment=self.paths["log"], offset_index=self.paths["index"], time_index=self.paths["timeindex"],
            transaction_index=self.paths["txnindex"] if self.with_txn else None,
            producer_snapshot_index=self.paths["snapshot"], leader_epoch_index=self.epochs)


def finished(md: RemoteLogSegmentMetadata, custom: bytes | None) -> RemoteLogSegmentMetadata:
    return md.create_with_updates(RemoteLogSegmentMetadataUpdate(
        md.segment_id, md.event_timestamp_ms + 1, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1, custom))


class RemoteStorageManagerContract:
    @pytest.fixture
    def rsm(self) -> RemoteStorageManager:  # pragma: no cover - every backend overrides it
        raise NotImplementedError

    def copy(self, rsm: RemoteStorageManager, tmp_path: Path, **kwargs: object) -> tuple[RemoteLogSegmentMetadata, SegmentFiles]:
        files = SegmentFiles(tmp_path / "src", **kwargs)  # type: ignore[arg-type]
        md = make_metadata(size=len(files.contents["log"]))
        custom = rsm.copy_log_segment_data(md, files.data())
        assert custom is None or isinstance(custom, bytes)
        return finished(md, custom), files

    def test_copy_then_fetch_the_whole_segment(self, rsm: RemoteStorageManager, tmp_path: Path) -> None:
        md, files = self.copy(rsm, tmp_path)
        with rsm.fetch_log_segment(md, 0) as f:
            assert f.read() == files.contents["log"]

    def test_fetch_from_a_start_position(self, rsm: RemoteStorageManager, tmp_path: Path) -> None:
        md, files = self.copy(rsm, tmp_path)
        with rsm.fetch_log_segment(md, 12345) as f:
            assert f.read() == files.contents["log"][12345:]

    def test_end_position_is_inclusive(self, rsm: RemoteStorageManager, tmp_path: Path) -> None:
        md, files = self.copy(rsm, tmp_path)
        with rsm.fetch_log_segment(md, 100, 199) as f:
            assert f.read() == files.contents["log"][100:200]
        with rsm.fetch_log_segment(md, 7, 7) as f:
            assert f.read() == files.contents["log"][7:8]

    def test_stream_reads_in_pieces(self, rsm: RemoteStorageManager, tmp_path: Path) -> None:
        md, files = self.copy(rsm, tmp_path)
        with rsm.fetch_log_segment(md, 0) as f:
            parts = [f.read(61), f.read(1000), f.read()]
        assert b"".join(parts) == files.contents["log"]

    @pytest.mark.parametrize(("index_type", "kind"), [
        (IndexType.OFFSET, "index"), (IndexType.TIMESTAMP, "timeindex"),
        (IndexType.PRODUCER_SNAPSHOT, "snapshot"), (IndexType.TRANSACTION, "txnindex")])
    def test_fetch_each_index(self, rsm: RemoteStorageManager, tmp_path: Path, index_type: IndexType, kind: str) -> None:
        md, files = self.copy(rsm, tmp_path)
        with rsm.fetch_index(md, index_type) as f:
            assert f.read() == files.contents[kind]

    def test_fetch_leader_epoch_checkpoint(self, rsm: RemoteStorageManager, tmp_path: Path) -> None:
        md, files = self.copy(rsm, tmp_path)
        with rsm.fetch_index(md, IndexType.LEADER_EPOCH) as f:
            assert f.read() == files.epochs

    def test_missing_transaction_index_raises_not_found(self, rsm: RemoteStorageManager, tmp_path: Path) -> None:
        md, files = self.copy(rsm, tmp_path, with_txn=False)
        with pytest.raises(RemoteResourceNotFoundError):
            rsm.fetch_index(md, IndexType.TRANSACTION)
        with rsm.fetch_index(md, IndexType.OFFSET) as f:
            assert f.read() == files.contents["index"]

    def test_copy_an_empty_segment(self, rsm: RemoteStorageManager, tmp_path: Path) -> None:
        md, _ = self.copy(rsm, tmp_path, empty=True)
        with rsm.fetch_log_segment(md, 0) as f:
            assert f.read() == b""
        with rsm.fetch_index(md, IndexType.OFFSET) as f:
            assert f.read() == b""

    @pytest.mark.parametrize("index_type", list(IndexType))
    def test_fetch_of_unknown_data_raises_not_found(self, rsm: RemoteStorageManager, index_type: IndexType) -> None:
        md = make_metadata(size=1000)
        with pytest.raises(RemoteResourceNotFoundError):
            rsm.fetch_index(md, index_type)
        with pytest.raises(RemoteResourceNotFoundError):
            rsm.fetch_log_segment(md, 0).read()

    def test_delete_removes_everything_and_is_idempotent(self, rsm: RemoteStorageManager, tmp_path: Path) -> None:
        md, _ = self.copy(rsm, tmp_path)
        rsm.delete_log_segment_data(md)
        for index_type in IndexType:
            with pytest.raises(RemoteResourceNotFoundError):
                rsm.fetch_index(md, index_type)
        with pytest.raises(RemoteResourceNotFoundError):
            rsm.fetch_log_segment(md, 0).read()
        rsm.delete_log_segment_data(md)  # already gone: no error
        rsm.delete_log_segment_data(make_metadata())  # never existed: no error

    def test_copy_is_idempotent(self, rsm: RemoteStorageManager, tmp_path: Path) -> None:
        files = SegmentFiles(tmp_path / "a")
        md = make_metadata(size=len(files.contents["log"]))
        rsm.copy_log_segment_data(md, files.data())
        other = SegmentFiles(tmp_path / "b")
        custom = rsm.copy_log_segment_data(md, other.data())
        with rsm.fetch_log_segment(finished(md, custom), 0) as f:
            assert f.read() == other.contents["log"]

    def test_segments_do_not_mix(self, rsm: RemoteStorageManager, tmp_path: Path) -> None:
        a, _fa = self.copy(rsm, tmp_path / "one")
        b, fb = self.copy(rsm, tmp_path / "two")
        rsm.delete_log_segment_data(a)
        with rsm.fetch_log_segment(b, 0) as f:
            assert f.read() == fb.contents["log"]

    def test_invalid_positions_are_refused(self, rsm: RemoteStorageManager, tmp_path: Path) -> None:
        md, _ = self.copy(rsm, tmp_path)
        with pytest.raises(ValueError):
            rsm.fetch_log_segment(md, -1)
        with pytest.raises(ValueError):
            rsm.fetch_log_segment(md, 10, 9)

    def test_custom_metadata_fits_the_default_limit(self, rsm: RemoteStorageManager, tmp_path: Path) -> None:
        md, _ = self.copy(rsm, tmp_path)
        assert md.custom_metadata is None or len(md.custom_metadata) <= 128
