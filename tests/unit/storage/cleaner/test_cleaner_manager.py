"""The cleaner's thread logic over a LogManager: it picks a compacted log dirty enough, checkpoints
how far it cleaned in Kafka's file, writes the status file, and follows a dynamic switch between
``compact`` and ``delete`` as Kafka does (delete stops cleaning and starts retention; compact resumes
from the checkpoint)."""

from __future__ import annotations

import time
from pathlib import Path

from tierlog.config import LogConfig
from tierlog.storage.cleaner.checkpoint import CleanerCheckpoint
from tierlog.storage.cleaner.manager import CleanerSettings, LogCleaner
from tierlog.storage.cleaner.status_file import read_status
from tierlog.storage.log_manager import LogManager
from tierlog.testing import ManualClock

from .helpers import TS, compact_config, put, table


def test_picks_dirty_log_checkpoints_and_follows_policy_switches(tmp_path: Path) -> None:
    configs: dict[str, LogConfig] = {"t": compact_config(retention_ms=1000)}
    clock = ManualClock(TS)
    manager = LogManager([tmp_path / "data"], lambda topic: configs[topic], clock=clock)
    manager.startup_logs()
    ulog = manager.get_or_create_log("t", 0)
    for i in range(200):
        put(ulog, b"k%d" % (i % 5), b"v%d" % i)
    ulog.roll()
    cleaner = LogCleaner(manager, CleanerSettings(dedupe_buffer_size=1 << 20), clock=clock)
    worker = cleaner.new_cleaner()
    assert cleaner.clean_one(worker)
    checkpoint = CleanerCheckpoint(tmp_path / "data").read()[("t", 0)]
    assert checkpoint == ulog.active_segment.base_offset
    assert len(table(ulog)) == 5
    found = read_status(tmp_path / "data")
    assert found is not None and found[1][("t", 0)]["cleanings"] == 1
    assert not cleaner.clean_one(worker)  # nothing dirty any more
    assert cleaner.metrics.max_dirty_percent == 0

    # compact -> delete: the cleaner leaves it alone, retention deletes old segments.
    configs["t"] = LogConfig(cleanup_policy=("delete",), segment_bytes=1024, retention_ms=1000)
    manager.update_topic_config("t")
    for i in range(100):
        put(ulog, b"k%d" % (i % 5), b"w%d" % i)
    ulog.roll()
    assert not cleaner.clean_one(worker)
    # Segments the cleaner emptied have no record timestamp: retention goes by their file's mtime.
    assert ulog.delete_old_segments(int(time.time() * 1000) + 10_000)
    # delete -> compact: cleaning resumes from the checkpoint.
    configs["t"] = compact_config()
    manager.update_topic_config("t")
    for i in range(100):
        put(ulog, b"k%d" % (i % 5), b"x%d" % i, ts=TS + 20_000)
    ulog.roll()
    assert cleaner.clean_one(worker)
    assert table(ulog) == {b"k%d" % k: b"x%d" % (95 + k) for k in range(5)}
    manager.shutdown()
