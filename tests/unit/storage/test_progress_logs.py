"""Log lines of significant storage events (key=value fields) and the progress lines of long work:
startup loading and recovery, seed 003's lazy checker."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from tests.helpers.storage import batch
from tierlog.config import LogConfig
from tierlog.storage.checkpoints import CLEAN_SHUTDOWN
from tierlog.storage.log_manager import LogManager, LogManagerSettings, Progress
from tierlog.testing import ManualClock, ManualScheduler

CFG = LogConfig(segment_bytes=1200, index_interval_bytes=100)
LOGS = 12


def messages(caplog: pytest.LogCaptureFixture, prefix: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(prefix)]


def fields(message: str) -> dict[str, str]:
    return dict(re.findall(r"(\w+)=(\S+)", message))


def populate(root: Path, clock: ManualClock, *, logs: int = LOGS, batches: int = 12) -> None:
    mgr = LogManager([root], lambda t: CFG, LogManagerSettings(), clock=clock)
    mgr.startup_logs()
    for p in range(logs):
        ulog = mgr.get_or_create_log("many", p)
        for _ in range(batches):
            ulog.append_as_leader(batch(2, value_size=40))
    mgr.shutdown()


def test_startup_announces_the_total_and_reports_progress(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    populate(tmp_path, clock)
    caplog.set_level(logging.INFO, logger="tierlog.storage")
    settings = LogManagerSettings(progress_interval_ms=0)
    mgr = LogManager([tmp_path], lambda t: CFG, settings, clock=clock)
    report = mgr.startup_logs()
    assert report.logs == LOGS
    [announce] = messages(caplog, "loading logs total=")
    assert fields(announce) == {"total": str(LOGS), "log_dirs": "1", "clean_shutdown_dirs": "1"}
    progress = [fields(m) for m in messages(caplog, "loading logs progress")]
    # With no minimum interval every loaded log reports; the last line says all of them are done.
    assert [int(p["done"]) for p in progress] == list(range(1, LOGS + 1))
    assert progress[-1]["total"] == str(LOGS) and progress[-1]["percent"] == "100"
    assert int(progress[-1]["segments"]) == report.segments
    # A clean start recovers nothing.
    assert messages(caplog, "log recovered") == []
    mgr.shutdown()


def test_progress_is_rate_limited(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    populate(tmp_path, clock)
    caplog.set_level(logging.INFO, logger="tierlog.storage")
    mgr = LogManager([tmp_path], lambda t: CFG, LogManagerSettings(progress_interval_ms=3_600_000), clock=clock)
    mgr.startup_logs()
    assert len(messages(caplog, "loading logs total=")) == 1
    assert messages(caplog, "loading logs progress") == []
    mgr.shutdown()
    gate = Progress(0)
    assert gate.due() and gate.due()


def test_unclean_start_logs_each_recovered_log(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    populate(tmp_path, clock, logs=3)
    (tmp_path / CLEAN_SHUTDOWN).unlink()
    caplog.set_level(logging.INFO, logger="tierlog.storage")
    settings = LogManagerSettings(recovery_threads_per_data_dir=2, progress_interval_ms=0)
    mgr = LogManager([tmp_path], lambda t: CFG, settings, clock=clock)
    report = mgr.startup_logs()
    recovered = {int(f["partition"]): f for f in map(fields, messages(caplog, "log recovered"))}
    assert sorted(recovered) == [0, 1, 2]
    assert all(f["topic"] == "many" and int(f["recovered_segments"]) >= 1 for f in recovered.values())
    assert sum(int(f["recovered_segments"]) for f in recovered.values()) == report.recovered_segments
    assert fields(messages(caplog, "loading logs total=")[0])["clean_shutdown_dirs"] == "0"
    mgr.shutdown()


def test_lazy_checker_reports_progress_and_its_end(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    populate(tmp_path, clock, logs=2, batches=30)
    caplog.set_level(logging.INFO, logger="tierlog.storage")
    sched = ManualScheduler(clock)
    settings = LogManagerSettings(sanity_check_all_logs=False, lazy_check_interval_ms=100, lazy_check_batch=3,
                                  progress_interval_ms=0)
    mgr = LogManager([tmp_path], lambda t: CFG, settings, clock=clock, scheduler=sched)
    mgr.startup_logs()
    unchecked = mgr.unchecked_segments()
    assert unchecked > 6
    mgr.start_background_tasks()
    for _ in range(unchecked):
        clock.advance(100)
    assert mgr.unchecked_segments() == 0
    progress = [fields(m) for m in messages(caplog, "lazy segment check progress")]
    assert [int(p["checked_segments"]) + int(p["remaining_segments"]) for p in progress] == [unchecked] * len(progress)
    assert progress[-1]["remaining_segments"] == "0"
    [finished] = messages(caplog, "lazy segment check finished")
    assert fields(finished)["checked_segments"] == str(unchecked) == str(mgr.lazy_checked_segments)
    mgr.shutdown()


def test_roll_deletion_and_producer_snapshot_lines(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock(1_700_000_000_000)
    caplog.set_level(logging.INFO, logger="tierlog.storage")
    cfg = LogConfig(segment_bytes=1200, index_interval_bytes=100, retention_min_timestamp_ms=1_700_000_000_400,
                    file_delete_delay_ms=0)
    mgr = LogManager([tmp_path], lambda t: cfg, LogManagerSettings(), clock=clock)
    mgr.startup_logs()
    ulog = mgr.get_or_create_log("ev", 0)
    for i in range(24):
        ulog.append_as_leader(batch(2, value_size=40, ts=1_700_000_000_000 + 20 * i, producer_id=7,
                                    producer_epoch=0, base_sequence=2 * i))
    rolled = [fields(m) for m in messages(caplog, "segment rolled")]
    assert rolled and all(f["topic"] == "ev" and f["partition"] == "0" for f in rolled)
    assert [int(f["base_offset"]) for f in rolled] == ulog.segments.base_offsets[1:]
    snapshots = [fields(m) for m in messages(caplog, "producer snapshot written")]
    assert [int(f["offset"]) for f in snapshots] == ulog.segments.base_offsets[1:]
    assert all(f["producers"] == "1" for f in snapshots)
    assert mgr.cleanup_logs() >= 1
    deleted = [fields(m) for m in messages(caplog, "segment deleted")]
    assert deleted and {f["reason"] for f in deleted} == {"timestamp_floor"}
    assert [int(f["base_offset"]) for f in deleted] == [int(f["previous_base_offset"]) for f in rolled][:len(deleted)]
    assert mgr.deletions["timestamp_floor"] == len(deleted)
    mgr.shutdown()
