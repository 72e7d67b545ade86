"""The contract suite on every backend (local directory, S3 through obstore against moto, and the
in-memory fake), plus what is particular to each."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.tiered import MotoServer, s3_props
from tierlog.testing.remote import InMemoryRemoteStorageManager
from tierlog.tiered.api import (
    IndexType,
    RemoteStorageError,
    RemoteStorageManager,
    load_remote_storage_manager,
    plugin_properties,
)
from tierlog.tiered.backends.local import LocalDirectoryRemoteStorageManager
from tierlog.tiered.backends.s3 import (
    S3RemoteStorageManager,
    decode_custom_metadata,
    encode_custom_metadata,
)

from .rsm_contract import RemoteStorageManagerContract, SegmentFiles, finished, make_metadata


class TestLocalDirectory(RemoteStorageManagerContract):
    @pytest.fixture
    def rsm(self, tmp_path: Path) -> RemoteStorageManager:
        return load_remote_storage_manager("tierlog.tiered.backends.local.LocalDirectoryRemoteStorageManager",
                                           {"dir": str(tmp_path / "remote"), "broker.id": "1"})

    def test_layout_is_kafkas_local_tiered_storage(self, rsm: RemoteStorageManager, tmp_path: Path) -> None:
        md, _ = self.copy(rsm, tmp_path)
        assert isinstance(rsm, LocalDirectoryRemoteStorageManager)
        names = sorted(p.relative_to(rsm.root).as_posix() for p in rsm.list_files())
        prefix = f"orders-3-BwcHBwcHBwcHBwcHBwcHBw/00000000000000000100-{md.segment_id.id_str}"
        assert names == sorted(prefix + s for s in (".log", ".index", ".timeindex", ".txnindex",
                                                      ".leader_epoch_checkpoint", ".snapshot"))
        rsm.delete_log_segment_data(md)
        assert rsm.list_files() == []

    def test_delete_disabled_keeps_data(self, tmp_path: Path) -> None:
        rsm = LocalDirectoryRemoteStorageManager()
        rsm.configure({"dir": str(tmp_path / "remote"), "delete.enable": "false"})
        md, _ = self.copy(rsm, tmp_path)
        rsm.delete_log_segment_data(md)
        with rsm.fetch_index(md, IndexType.OFFSET):
            pass

    def test_failed_copy_leaves_nothing(self, tmp_path: Path) -> None:
        rsm = LocalDirectoryRemoteStorageManager()
        rsm.configure({"dir": str(tmp_path / "remote")})
        files = SegmentFiles(tmp_path / "src")
        files.paths["snapshot"].unlink()  # the copy fails after the log and indexes were written
        with pytest.raises(RemoteStorageError):
            rsm.copy_log_segment_data(make_metadata(), files.data())
        assert rsm.list_files() == []

    def test_needs_a_dir(self) -> None:
        with pytest.raises(RemoteStorageError, match=r"rsm\.config\.dir"):
            LocalDirectoryRemoteStorageManager().configure({})


class TestInMemory(RemoteStorageManagerContract):
    @pytest.fixture
    def rsm(self) -> RemoteStorageManager:
        return InMemoryRemoteStorageManager()


class TestS3(RemoteStorageManagerContract):
    @pytest.fixture
    def rsm(self, moto_server: MotoServer, s3_bucket: str) -> RemoteStorageManager:
        return load_remote_storage_manager("tierlog.tiered.backends.s3.S3RemoteStorageManager",
                                           s3_props(moto_server, s3_bucket))

    def test_custom_metadata_holds_size_and_key(self, rsm: RemoteStorageManager, tmp_path: Path) -> None:
        md, files = self.copy(rsm, tmp_path)
        assert md.custom_metadata is not None
        size, key = decode_custom_metadata(md.custom_metadata)
        assert size == sum(len(v) for v in files.contents.values()) + len(files.epochs)
        assert key == f"tiered/BwcHBwcHBwcHBwcHBwcHBw-3/00000000000000000100-{md.segment_id.id_str}"
        assert isinstance(rsm, S3RemoteStorageManager)
        assert sorted(rsm.list_keys()) == sorted(key + s for s in (".log", ".index", ".timeindex", ".txnindex",
                                                                  ".leader_epoch_checkpoint", ".snapshot"))
        assert S3RemoteStorageManager.uploaded_size_bytes(md.custom_metadata) == size

    def test_changing_the_prefix_does_not_break_older_segments(
            self, moto_server: MotoServer, s3_bucket: str, tmp_path: Path) -> None:
        old = S3RemoteStorageManager()
        old.configure(s3_props(moto_server, s3_bucket, prefix="before"))
        md, files = self.copy(old, tmp_path)
        new = S3RemoteStorageManager()
        new.configure(s3_props(moto_server, s3_bucket, prefix="after/x"))
        with new.fetch_log_segment(md, 10) as f:
            assert f.read() == files.contents["log"][10:]
        with new.fetch_index(md, IndexType.PRODUCER_SNAPSHOT) as f:
            assert f.read() == files.contents["snapshot"]
        new.delete_log_segment_data(md)
        assert old.list_keys() == []

    def test_upload_to_a_stopped_server_fails_and_leaves_nothing(
            self, moto_server: MotoServer, s3_bucket: str, tmp_path: Path) -> None:
        props = s3_props(moto_server, s3_bucket)
        props["s3.endpoint"] = "http://127.0.0.1:9"  # nothing listens on the discard port
        rsm = S3RemoteStorageManager()
        rsm.configure(props)
        with pytest.raises(RemoteStorageError):
            rsm.copy_log_segment_data(make_metadata(), SegmentFiles(tmp_path / "src").data())

    def test_plain_http_only_for_loopback(self, moto_server: MotoServer) -> None:
        rsm = S3RemoteStorageManager()
        rsm.configure({"s3.bucket": "b", "s3.endpoint": "http://example.com:9000"})
        assert rsm.store.client_options is not None
        assert str(rsm.store.client_options.get("allow_http")).lower() == "false"
        rsm.configure({"s3.bucket": "b", "s3.endpoint": "http://127.0.0.1:9000"})
        assert rsm.store.client_options is not None
        assert str(rsm.store.client_options.get("allow_http")).lower() == "true"


def test_custom_metadata_round_trip_and_rejects_foreign_bytes() -> None:
    data = encode_custom_metadata(123456789, "p/k")
    assert decode_custom_metadata(data) == (123456789, "p/k")
    for bad in (b"", b"\x09abc", data + b"x"):
        with pytest.raises(RemoteStorageError):
            decode_custom_metadata(bad)


def test_plugins_load_by_dotted_path_with_prefixed_properties(tmp_path: Path) -> None:
    props = plugin_properties({"rsm.config.dir": str(tmp_path), "rsm.config.fsync": "false", "other": "x"},
                              "rsm.config.", broker_id=7)
    assert props == {"dir": str(tmp_path), "fsync": "false", "broker.id": "7"}
    rsm = load_remote_storage_manager("tierlog.testing.remote.InMemoryRemoteStorageManager", props)
    assert isinstance(rsm, InMemoryRemoteStorageManager)
    assert rsm.props == props
    with pytest.raises(RemoteStorageError):
        load_remote_storage_manager("tierlog.nope.Missing", {})
    with pytest.raises(RemoteStorageError):
        load_remote_storage_manager("pathlib.PurePath", {})


def test_finished_metadata_keeps_custom_metadata() -> None:
    md = finished(make_metadata(), b"abc")
    assert md.custom_metadata == b"abc"
