"""A broker with thousands of partitions: creating one costs the same whatever the count, and an
idle partition holds one descriptor (its active segment's .log)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tierlog.config.log_config import LogConfig
from tierlog.storage.group_commit import syncfs_stands_in
from tierlog.storage.log_manager import LogManager

CFG = LogConfig.from_props({})


class _NoWalking(dict[Any, Any]):
    """The logs map of a manager that must not walk it to create a log."""

    def values(self) -> Any:
        raise AssertionError("creating a log walked every existing log")


def test_with_one_log_dir_creating_a_log_does_not_walk_the_others(tmp_path: Path) -> None:
    manager = LogManager([tmp_path], lambda t: CFG)
    manager.get_or_create_log("t", 0)
    walled = _NoWalking(manager._logs)
    manager._logs = walled
    for p in range(1, 4):
        manager.get_or_create_log("t", p)
    assert sorted(walled) == [("t", 0), ("t", 1), ("t", 2), ("t", 3)]
    manager._logs = dict(walled)
    manager.shutdown()


def test_an_idle_partition_holds_one_descriptor(tmp_path: Path) -> None:
    before = len(os.listdir("/proc/self/fd"))
    manager = LogManager([tmp_path], lambda t: CFG)
    # The log dir itself, held open by its group commit for syncfs (where syncfs is used).
    held = len(os.listdir("/proc/self/fd")) - before
    assert held == (1 if syncfs_stands_in(tmp_path) else 0)
    for p in range(300):
        manager.get_or_create_log("many", p)
    assert len(os.listdir("/proc/self/fd")) - before == 300 + held
    manager.shutdown()
    assert len(os.listdir("/proc/self/fd")) == before


def _fill(manager: LogManager, partitions: int) -> None:
    from tierlog.records import SimpleRecord, build_batch

    batch = build_batch([SimpleRecord(b"k", b"v" * 100, timestamp=1_700_000_000_000)])
    for p in range(partitions):
        manager.get_or_create_log("many", p).append_as_leader(batch)


def test_clean_shutdown_syncs_each_directory_once_not_each_file(tmp_path: Path, monkeypatch: Any) -> None:
    """Thousands of partitions must not mean thousands of fsyncs (each one a journal commit): the
    logs are written out without one, then one syncfs per directory, then the marker."""
    import tierlog.storage.log_manager as log_manager_module
    from tierlog.storage.checkpoints import CLEAN_SHUTDOWN, RECOVERY_POINT_CHECKPOINT, OffsetCheckpointFile

    manager = LogManager([tmp_path], lambda t: CFG)
    _fill(manager, 200)
    fsyncs: list[int] = []
    synced: list[Path] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd))[1])
    real_sync = log_manager_module.sync_filesystem
    monkeypatch.setattr(log_manager_module, "sync_filesystem", lambda d: (synced.append(d), real_sync(d))[1])
    manager.shutdown()
    assert synced == [tmp_path.resolve()]
    assert len(fsyncs) < 20, f"{len(fsyncs)} fsyncs for 200 partitions"
    assert (tmp_path / CLEAN_SHUTDOWN).exists()
    points = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT).read()
    assert len(points) == 200 and set(points.values()) == {1}


def test_a_failed_sync_leaves_no_clean_shutdown_marker(tmp_path: Path, monkeypatch: Any) -> None:
    """Without the sync nothing says the data is on disk: no marker, recovery points not advanced,
    so the next start recovers the logs."""
    import tierlog.storage.log_manager as log_manager_module
    from tierlog.storage.checkpoints import CLEAN_SHUTDOWN, RECOVERY_POINT_CHECKPOINT, OffsetCheckpointFile

    manager = LogManager([tmp_path], lambda t: CFG)
    _fill(manager, 5)

    def failing(d: Path) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(log_manager_module, "sync_filesystem", failing)
    manager.shutdown()
    assert not (tmp_path / CLEAN_SHUTDOWN).exists()
    path = tmp_path / RECOVERY_POINT_CHECKPOINT
    assert not path.exists() or set(OffsetCheckpointFile(path).read().values()) <= {0}
    monkeypatch.undo()
    again = LogManager([tmp_path], lambda t: CFG)
    report = again.startup_logs()
    assert report.clean_shutdown_dirs == 0 and report.recovered_segments == 5
    assert all(again.get_log("many", p).log_end_offset == 1 for p in range(5))  # type: ignore[union-attr]
    again.shutdown()
