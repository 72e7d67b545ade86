"""What the log cleaner shows while it works and when it fails (issue 18, "Visible" and "Bad input"):
rate-limited progress lines inside the offset-map pass and inside one large group; DeadThreadCount
counts a cleaner thread that died; max-clean-time-secs is the last cleaning's time as Kafka's; a
corrupt batch in the dirty range logs an ERROR, raises the uncleanable metrics of its log dir, leaves
the partition alone while it keeps serving, and the metrics fall back once the partition is gone; any
other failure of a cleaning marks the partition uncleanable too, as Kafka's LogCleaningException does."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from tierlog.config import LogConfig
from tierlog.storage.cleaner.manager import CleanerSettings, LogCleaner
from tierlog.storage.log import UnifiedLog
from tierlog.storage.log_manager import LogManager
from tierlog.testing import ManualClock

from .helpers import TS, compact_config, put

MANAGER_LOGGER = "tierlog.storage.cleaner.manager"


def _manager(tmp_path: Path, clock: ManualClock, config: LogConfig | None = None) -> tuple[LogManager, UnifiedLog]:
    manager = LogManager([tmp_path / "data"], lambda topic: config or compact_config(), clock=clock)
    manager.startup_logs()
    return manager, manager.get_or_create_log("t", 0)


def test_progress_lines_in_the_map_pass_and_inside_one_group_are_rate_limited(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock(TS)
    # One segment of 300 batches: one group, one long map pass.
    manager, ulog = _manager(tmp_path, clock, compact_config(segment_bytes=1 << 20))
    for i in range(300):
        put(ulog, b"k%d" % (i % 7), b"v%d" % i)
    ulog.roll()
    caplog.set_level(logging.INFO, logger=MANAGER_LOGGER)
    quiet = LogCleaner(manager, CleanerSettings(dedupe_buffer_size=1 << 20, progress_interval_ms=60_000), clock=clock)
    assert quiet.clean_one(quiet.new_cleaner())
    assert not [r for r in caplog.records if "offset map at offset" in r.message or "segment group at" in r.message]

    for i in range(300):
        put(ulog, b"k%d" % (i % 7), b"w%d" % i)
    ulog.roll()
    caplog.clear()
    chatty = LogCleaner(manager, CleanerSettings(dedupe_buffer_size=1 << 20, progress_interval_ms=0), clock=clock)
    assert chatty.clean_one(chatty.new_cleaner())
    lines = [r.message for r in caplog.records]
    assert any("cleaning t-0: offset map at offset" in m for m in lines), lines
    assert any("cleaning t-0: segment group at" in m for m in lines), lines
    manager.shutdown()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the death under test
def test_a_cleaner_thread_that_dies_is_counted(tmp_path: Path) -> None:
    clock = ManualClock(TS)
    manager, _ = _manager(tmp_path, clock)
    cleaner = LogCleaner(manager, CleanerSettings(threads=2, dedupe_buffer_size=1 << 20), clock=clock)

    def broken() -> object:
        raise MemoryError("no memory for the offset map")

    cleaner.new_cleaner = broken  # type: ignore[assignment,method-assign]
    cleaner.start()
    deadline = time.monotonic() + 30
    while cleaner.metrics.dead_thread_count < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cleaner.metrics.dead_thread_count == 2
    cleaner.shutdown()
    assert cleaner.metrics.dead_thread_count == 2  # a shutdown is not a death
    manager.shutdown()


def test_max_clean_time_is_the_last_cleaning_as_kafka(tmp_path: Path) -> None:
    clock = ManualClock(TS)
    manager, ulog = _manager(tmp_path, clock)
    slow = [True]

    def hook(step: str) -> None:
        if step == "cleaned-written" and slow[0]:
            clock.advance(7_000)

    cleaner = LogCleaner(manager, CleanerSettings(dedupe_buffer_size=1 << 20), clock=clock, swap_hook=hook)
    worker = cleaner.new_cleaner()
    for i in range(100):
        put(ulog, b"k%d" % (i % 5), b"v%d" % i)
    ulog.roll()
    assert cleaner.clean_one(worker)
    assert cleaner.metrics.max_clean_time_secs >= 7.0
    slow[0] = False
    for i in range(100):
        put(ulog, b"k%d" % (i % 5), b"w%d" % i, ts=clock.wall_ms())
    ulog.roll()
    assert cleaner.clean_one(worker)
    assert cleaner.metrics.max_clean_time_secs == 0.0  # the last run's, not the longest ever
    manager.shutdown()


def _corrupt_second_segment(ulog: UnifiedLog) -> None:
    seg = ulog.segments.get(ulog.segments.base_offsets[1])
    with open(seg.log.path, "r+b") as f:
        f.seek(70)
        f.write(b"\xff\xff")


def test_a_corrupt_batch_marks_the_partition_uncleanable_and_it_keeps_serving(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock(TS)
    manager, ulog = _manager(tmp_path, clock)
    for i in range(60):
        put(ulog, b"k%d" % (i % 4), b"v%d" % i)
    ulog.roll()
    _corrupt_second_segment(ulog)
    files_before = sorted(p.name for p in ulog.dir.iterdir())
    cleaner = LogCleaner(manager, CleanerSettings(dedupe_buffer_size=1 << 20), clock=clock)
    worker = cleaner.new_cleaner()
    caplog.set_level(logging.INFO, logger=MANAGER_LOGGER)
    assert cleaner.clean_one(worker)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert errors and "log cleaner stopped cleaning t-0" in errors[0].message and "damaged batch" in errors[0].message
    data_dir = str(tmp_path / "data")
    m = cleaner.metrics
    assert (m.uncleanable_partitions_count, m.uncleanable_partitions_by_dir) == (1, {data_dir: 1})
    assert m.uncleanable_bytes > 0 and m.uncleanable_bytes_by_dir[data_dir] == m.uncleanable_bytes
    assert cleaner.states[("t", 0)].uncleanable_reason is not None
    # Skipped from now on, nothing deleted, and it keeps serving what is not damaged.
    assert not cleaner.clean_one(worker)
    assert sorted(p.name for p in ulog.dir.iterdir()) == files_before
    assert ulog.read_bytes(ulog.segments.base_offsets[2])
    # More appended: its dirty bytes follow; the partition gone: the metrics fall back.
    before = m.uncleanable_bytes
    for i in range(40):
        put(ulog, b"k%d" % (i % 4), b"x%d" % i)
    ulog.roll()
    assert not cleaner.clean_one(worker)
    assert m.uncleanable_bytes > before
    manager.delete_log("t", 0)
    assert not cleaner.clean_one(worker)
    assert (m.uncleanable_partitions_count, m.uncleanable_bytes) == (0, 0)
    assert m.uncleanable_partitions_by_dir == {} and m.uncleanable_bytes_by_dir == {}
    manager.shutdown()


def test_any_failed_cleaning_marks_the_partition_uncleanable(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock(TS)
    manager, ulog = _manager(tmp_path, clock)
    for i in range(60):
        put(ulog, b"k%d" % (i % 4), b"v%d" % i)
    ulog.roll()
    cleaner = LogCleaner(manager, CleanerSettings(dedupe_buffer_size=1 << 20), clock=clock)
    worker = cleaner.new_cleaner()

    def failing(*args: object, **kwargs: object) -> object:
        raise OSError(28, "No space left on device")

    worker.clean = failing  # type: ignore[method-assign,assignment]
    caplog.set_level(logging.INFO, logger=MANAGER_LOGGER)
    assert cleaner.clean_one(worker)
    assert cleaner.metrics.uncleanable_partitions_count == 1
    reason = cleaner.states[("t", 0)].uncleanable_reason
    assert reason is not None and reason.startswith("OSError")
    assert any(r.levelno == logging.ERROR and "stopped cleaning t-0" in r.message for r in caplog.records)
    assert not cleaner.clean_one(worker)  # not tried again
    assert ulog.read_bytes(0)
    manager.shutdown()
