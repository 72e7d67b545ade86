"""Reading the log manager's map of logs never waits for a log being created: creation holds the
manager's lock across the new files' fsyncs, and on a slow disk a metrics scrape or a background
task (retention, checkpoints) would otherwise stall behind it."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tierlog.config import LogConfig
from tierlog.storage.log import UnifiedLog
from tierlog.storage.log_manager import LogManager, LogManagerSettings
from tierlog.testing import ManualClock


def test_all_logs_answers_while_a_creation_waits_on_its_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mgr = LogManager([tmp_path], lambda t: LogConfig(), LogManagerSettings(), clock=ManualClock())
    mgr.startup_logs()
    first = mgr.get_or_create_log("t", 0, topic_id=b"\x01" * 16)
    in_fsync, release = threading.Event(), threading.Event()
    write = UnifiedLog.write_partition_metadata

    def slow_write(self: UnifiedLog, topic_id: bytes) -> None:  # the partition.metadata file's fsync, held
        in_fsync.set()
        assert release.wait(30)
        write(self, topic_id)

    monkeypatch.setattr(UnifiedLog, "write_partition_metadata", slow_write)
    creator = threading.Thread(target=mgr.get_or_create_log, args=("t", 1, b"\x01" * 16))
    creator.start()
    try:
        assert in_fsync.wait(30)
        seen: list[dict[tuple[str, int], UnifiedLog]] = []
        reader = threading.Thread(target=lambda: seen.append(mgr.all_logs()))
        reader.start()
        reader.join(5)
        assert not reader.is_alive(), "all_logs waited for the creation's fsync"
        assert seen == [{("t", 0): first}]  # the map as it was: the new log is not in it yet
    finally:
        release.set()
        creator.join(30)
    assert set(mgr.all_logs()) == {("t", 0), ("t", 1)}
    mgr.shutdown()
