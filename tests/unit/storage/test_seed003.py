"""Seed 003 (KIP-263): sanity.check.all.logs.enabled and lazy checking of inactive segments."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.storage import OpenLog, batch, read_all
from tierlog.config import LogConfig
from tierlog.storage import files

CFG = LogConfig(segment_bytes=1200, index_interval_bytes=100)


def make_log(open_log: OpenLog) -> list[int]:
    log = open_log(CFG)
    for _ in range(30):
        log.append_as_leader(batch(2, value_size=40))
    bases = log.segments.base_offsets
    log.close()
    assert len(bases) >= 5
    return bases


def corrupt_index(d: Path, base: int) -> None:
    p = files.index_file(d, base)
    raw = bytearray(p.read_bytes())
    assert len(raw) >= 16
    # Make the entries non-monotonic: the second entry points before the first.
    raw[0:4], raw[8:12] = raw[8:12], raw[0:4]
    p.write_bytes(bytes(raw))


def test_check_all_true_rebuilds_a_corrupt_inactive_index_at_startup(open_log: OpenLog, tmp_path: Path) -> None:
    bases = make_log(open_log)
    corrupt_index(tmp_path / "t-0", bases[1])
    log = open_log(CFG, clean=True, sanity_check_all=True)
    assert log.unchecked_segments() == 0
    log.segments.get(bases[1]).offset_index.sanity_check()
    assert read_all(log) == list(range(60))


def test_check_all_false_opens_only_the_active_segment(open_log: OpenLog, tmp_path: Path) -> None:
    bases = make_log(open_log)
    log = open_log(CFG, clean=True, sanity_check_all=False)
    assert log.unchecked_segments() == len(bases) - 1
    # Inactive segments are not even materialised, let alone their index files opened.
    for b in bases[:-1]:
        assert not log.segments.is_materialized(b) or not log.segments.get(b).indexes_loaded
    assert log.check_some_segments(2) == 2
    assert log.unchecked_segments() == len(bases) - 3


def test_lazy_check_finds_corruption_and_checks_every_earlier_segment(open_log: OpenLog, tmp_path: Path) -> None:
    bases = make_log(open_log)
    corrupt_index(tmp_path / "t-0", bases[3])
    log = open_log(CFG, clean=True, sanity_check_all=False)
    seen: list[int] = []
    log.on_corrupt_segment = lambda seg, err: seen.append(seg.base_offset)
    # The first read that touches segment 3 checks it, finds the corruption, rebuilds it, and
    # checks segments 0..2 before the read goes on.
    data = log.read(bases[3], 1 << 20)
    assert data.records is not None
    assert seen == [bases[3]]
    for b in bases[:4]:
        assert log.segments.get(b).checked
    assert not any(log.segments.get(b).checked for b in bases[4:-1])
    log.segments.get(bases[3]).offset_index.sanity_check()
    assert read_all(log) == list(range(60))


def test_untrimmed_time_index_is_caught_cheaply(open_log: OpenLog, tmp_path: Path) -> None:
    bases = make_log(open_log)
    d = tmp_path / "t-0"
    # KAFKA-19200: the newest inactive segment's time index left at its preallocated size.
    p = files.time_index_file(d, bases[-2])
    with open(p, "r+b") as f:
        f.truncate(CFG.segment_index_bytes // 12 * 12)
    log = open_log(CFG, clean=True, sanity_check_all=False)
    seg = log.segments.get(bases[-2])
    assert seg.checked
    assert p.stat().st_size < CFG.segment_index_bytes // 12 * 12
    assert read_all(log) == list(range(60))


def test_background_checker_through_log_manager(tmp_path: Path) -> None:
    from tierlog.storage.log_manager import LogManager, LogManagerSettings
    from tierlog.testing import ManualClock, ManualScheduler

    clock = ManualClock()
    sched = ManualScheduler(clock)
    settings = LogManagerSettings(sanity_check_all_logs=False, lazy_check_interval_ms=100, lazy_check_batch=3)
    mgr = LogManager([tmp_path], lambda t: CFG, settings, clock=clock, scheduler=sched)
    mgr.startup_logs()
    log = mgr.get_or_create_log("t", 0)
    for _ in range(30):
        log.append_as_leader(batch(2, value_size=40))
    n = log.num_segments
    mgr.shutdown()
    mgr2 = LogManager([tmp_path], lambda t: CFG, settings, clock=clock, scheduler=sched)
    mgr2.startup_logs()
    assert mgr2.unchecked_segments() == n - 1
    mgr2.start_background_tasks()
    clock.advance(100)
    assert mgr2.unchecked_segments() == n - 1 - 3
    for _ in range(n):
        clock.advance(100)
    assert mgr2.unchecked_segments() == 0
