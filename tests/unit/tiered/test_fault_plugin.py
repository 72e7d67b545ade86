"""The fault-injecting plugin the reliability scenarios load into a real broker: without faults it is
its delegate (the whole backend contract holds), with them it fails the way it says it does."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.testing.remote import (
    FaultControl,
    FaultInjectingRemoteStorageManager,
    FaultRates,
    write_fault_control,
)
from tierlog.tiered.api import (
    IndexType,
    RemoteStorageError,
    RemoteStorageManager,
    load_remote_storage_manager,
)
from tierlog.tiered.backends.local import LocalDirectoryRemoteStorageManager

from .rsm_contract import RemoteStorageManagerContract, SegmentFiles, make_metadata

PLUGIN = "tierlog.testing.remote.FaultInjectingRemoteStorageManager"


def _plugin(tmp_path: Path) -> FaultInjectingRemoteStorageManager:
    rsm = load_remote_storage_manager(PLUGIN, {
        "dir": str(tmp_path / "remote"), "fsync": "false", "faults.control.file": str(tmp_path / "faults.json"),
        "faults.log.file": str(tmp_path / "faults.log"), "faults.seed": "7"})
    assert isinstance(rsm, FaultInjectingRemoteStorageManager)
    return rsm


def _files(rsm: FaultInjectingRemoteStorageManager) -> dict[str, int]:
    inner = rsm.inner
    assert isinstance(inner, LocalDirectoryRemoteStorageManager)
    return {p.name: p.stat().st_size for p in inner.list_files()}


def _always(tmp_path: Path, op: str, kind: str) -> None:
    write_fault_control(tmp_path / "faults.json", FaultControl(
        enabled=True, rates={op: FaultRates(**{kind: 1.0})}, deadline_ms=10, slow_ms=1))


class TestWithoutFaults(RemoteStorageManagerContract):
    @pytest.fixture
    def rsm(self, tmp_path: Path) -> RemoteStorageManager:
        return _plugin(tmp_path)


def test_an_error_writes_nothing_and_is_logged(tmp_path: Path) -> None:
    rsm = _plugin(tmp_path)
    _always(tmp_path, "copy", "error")
    with pytest.raises(RemoteStorageError, match="injected"):
        rsm.copy_log_segment_data(make_metadata(), SegmentFiles(tmp_path / "src").data())
    assert _files(rsm) == {}
    assert (tmp_path / "faults.log").read_text() == "copy error\n"


def test_a_partial_copy_fails_with_the_segment_written_short_or_not_at_all(tmp_path: Path) -> None:
    rsm = _plugin(tmp_path)
    _always(tmp_path, "copy", "partial")
    files = SegmentFiles(tmp_path / "src", log_size=10_000)
    shapes = set()
    for _ in range(12):
        md = make_metadata()
        with pytest.raises(RemoteStorageError):
            rsm.copy_log_segment_data(md, files.data())
        written = {name: size for name, size in _files(rsm).items() if md.segment_id.id_str in name}
        shapes.add(tuple(sorted((name.rsplit(".", 1)[1], size) for name, size in written.items()
                                if name.endswith(".log"))))
    # Either the delegate's own cleanup left nothing, or the log went up with half its bytes.
    assert shapes == {(), (("log", 5000),)}


def test_a_partial_fetch_breaks_mid_body(tmp_path: Path) -> None:
    rsm = _plugin(tmp_path)
    files = SegmentFiles(tmp_path / "src", log_size=10_000)
    md = make_metadata(size=10_000)
    rsm.copy_log_segment_data(md, files.data())
    _always(tmp_path, "fetch", "partial")
    with rsm.fetch_log_segment(md, 0) as stream, pytest.raises(RemoteStorageError, match="mid-body"):
        stream.read()
    with rsm.fetch_index(md, IndexType.OFFSET) as stream, pytest.raises(RemoteStorageError, match="mid-body"):
        stream.read()


def test_a_delete_that_reports_failure_may_have_deleted(tmp_path: Path) -> None:
    rsm = _plugin(tmp_path)
    md = make_metadata()
    rsm.copy_log_segment_data(md, SegmentFiles(tmp_path / "src").data())
    _always(tmp_path, "delete", "partial")
    with pytest.raises(RemoteStorageError):
        rsm.delete_log_segment_data(md)
    assert _files(rsm) == {}
    # Faults off again: the retry of the delete succeeds on nothing.
    write_fault_control(tmp_path / "faults.json", FaultControl())
    rsm.delete_log_segment_data(md)
