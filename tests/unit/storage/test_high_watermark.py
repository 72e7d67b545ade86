"""The high watermark under durable acknowledgements: it follows the fsynced offset (``all``, ``1``)
or the log end offset (``none``), and what consumers read, the LSO and the wake-ups follow it.
fsyncs are held by replacing os.fdatasync, as test_durability.py does."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

from tests.helpers.storage import batch, build_batch
from tierlog.config import LogConfig
from tierlog.storage.high_watermark import DurableOffset, follows_durable_offset, high_watermark_of
from tierlog.storage.log import UnifiedLog
from tierlog.storage.log_manager import LogManager, LogManagerSettings
from tierlog.storage.producer_state import AppendOrigin
from tierlog.testing.clock import ManualClock, ManualScheduler

CFG = LogConfig()


def manager(path: Path, durable_acks: str = "all") -> LogManager:
    mgr = LogManager([path], lambda t: CFG, LogManagerSettings(durable_acks=durable_acks))
    mgr.startup_logs()
    return mgr


class HeldSyncs:
    """os.fdatasync replaced: after :meth:`hold` every sync waits until :meth:`release`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._open = threading.Event()
        self._open.set()
        self.entered = threading.Event()
        real = os.fdatasync

        def held(fd: int) -> None:
            self.entered.set()
            assert self._open.wait(30)
            real(fd)

        monkeypatch.setattr(os, "fdatasync", held)

    def hold(self) -> None:
        self._open.clear()
        self.entered.clear()

    def release(self) -> None:
        self._open.set()


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[HeldSyncs]:
    held = HeldSyncs(monkeypatch)
    yield held
    held.release()


def test_the_decision() -> None:
    assert [follows_durable_offset(s) for s in ("all", "1", "none")] == [True, True, False]
    # Followed: the durable offset, never past the log end (a truncation may cut below it).
    assert high_watermark_of(log_end_offset=10, durable_offset=7, follows_durable=True) == 7
    assert high_watermark_of(log_end_offset=10, durable_offset=12, follows_durable=True) == 10
    # Kafka's single node: everything appended is committed.
    assert high_watermark_of(log_end_offset=10, durable_offset=7, follows_durable=False) == 10


def test_a_segments_sync_counts_only_once_everything_below_its_base_is_durable() -> None:
    d = DurableOffset(0)
    # The segment a roll started (base 100) is synced before the one it closed (base 0).
    assert not d.synced(100, 150)
    assert d.offset == 0
    assert d.synced(0, 60) and d.offset == 60
    assert d.synced(0, 100) and d.offset == 150  # the old segment's rest, then the new one's sync
    assert not d.synced(100, 120)  # an older sync of the new segment: nothing moves back
    assert d.offset == 150
    # A full flush covers everything below its target; syncs ahead of it fold in.
    assert not d.synced(200, 260)
    assert d.flushed(200) and d.offset == 260
    # A truncation takes back what it cut, and what was synced past it.
    d.truncated(230)
    assert d.offset == 230
    assert not d.synced(0, 10)
    d.reset(5)
    assert d.offset == 5


def test_records_are_readable_only_after_their_fsync_and_the_listener_runs_before_the_answer(
        tmp_path: Path, syncs: HeldSyncs) -> None:
    mgr = manager(tmp_path)
    ulog = mgr.get_or_create_log("t", 0)
    assert ulog.hw_follows_durable
    events: list[str] = []
    answer: list[Future[None]] = []
    mgr.set_high_watermark_listener(
        lambda log: events.append(f"hw={log.high_watermark} answered={answer[0].done()}"))
    syncs.hold()
    info = ulog.append_as_leader(batch(3))
    answer.append(mgr.sync_future(ulog, info))
    assert syncs.entered.wait(30)
    assert (ulog.log_end_offset, ulog.high_watermark, ulog.last_stable_offset) == (3, 0, 0)
    assert ulog.read(0, 1 << 20).records is None  # consumers read below the high watermark
    assert not events
    syncs.release()
    answer[0].result(30)
    assert ulog.high_watermark == 3
    assert events == ["hw=3 answered=False"]  # moved before the produce is answered
    assert ulog.read(0, 1 << 20).records is not None
    mgr.shutdown()


def test_an_append_acknowledged_before_its_fsync_still_moves_the_high_watermark_at_the_fsync(
        tmp_path: Path, syncs: HeldSyncs) -> None:
    mgr = manager(tmp_path)
    ulog = mgr.get_or_create_log("t", 0)
    syncs.hold()
    done = mgr.sync_future(ulog, ulog.append_as_leader(batch(2)), answered=False)
    assert syncs.entered.wait(30)
    commit = mgr.group_commits[tmp_path.resolve()]
    assert commit.stats.pending_bytes == 0  # only answered produces count against the bound
    assert ulog.high_watermark == 0
    syncs.release()
    done.result(30)
    assert ulog.high_watermark == 2
    mgr.shutdown()


def test_an_answer_right_after_a_roll_waits_for_the_closed_segments_records(tmp_path: Path) -> None:
    clock = ManualClock()
    mgr = LogManager([tmp_path], lambda t: CFG, LogManagerSettings(durable_acks="all"), clock=clock,
                     scheduler=ManualScheduler(clock))
    mgr.startup_logs()
    ulog = mgr.get_or_create_log("t", 0)
    ulog.append_as_leader(batch(2))  # offsets 0-1, answered on append (no sync asked yet)
    ulog.roll()  # its flush of the closed segment is scheduled, not run
    assert ulog.high_watermark == 0
    done = mgr.sync_future(ulog, ulog.append_as_leader(batch(1)))  # offset 2, in the new segment
    done.result(30)
    # Acknowledged means readable: the closed segment's records were synced before the answer too.
    assert ulog.high_watermark == 3
    mgr.shutdown()


def test_without_durable_acks_the_high_watermark_is_the_log_end(tmp_path: Path, syncs: HeldSyncs) -> None:
    mgr = manager(tmp_path, "none")
    ulog = mgr.get_or_create_log("t", 0)
    assert not ulog.hw_follows_durable
    syncs.hold()
    ulog.append_as_leader(batch(2))
    assert ulog.high_watermark == ulog.log_end_offset == 2
    syncs.release()
    mgr.shutdown()


def test_a_fetch_past_the_high_watermark_in_a_later_segment_gets_nothing(tmp_path: Path) -> None:
    mgr = manager(tmp_path)
    ulog = mgr.get_or_create_log("t", 0)
    ulog.append_as_leader(batch(2))
    mgr.sync_future(ulog, ulog.append_as_leader(batch(1))).result(30)
    assert ulog.high_watermark == 3
    ulog.roll()
    ulog.append_as_leader(batch(2))  # offsets 3-4 in a new segment, never synced
    assert ulog.high_watermark == 3 and ulog.log_end_offset == 5
    assert ulog.read(4, 1 << 20).records is None
    assert ulog.read(3, 1 << 20).records is None
    mgr.shutdown()


def test_a_flush_moves_the_high_watermark(tmp_path: Path) -> None:
    mgr = manager(tmp_path)
    ulog = mgr.get_or_create_log("t", 0)
    moved: list[int] = []
    ulog.on_high_watermark_advanced = lambda log: moved.append(log.high_watermark)
    ulog.append_as_leader(batch(4))
    assert ulog.high_watermark == 0
    ulog.flush()
    assert ulog.high_watermark == 4 and moved == [4]
    mgr.shutdown()


def test_a_commit_marker_ends_the_transaction_for_read_committed_only_once_fsynced(
        tmp_path: Path, syncs: HeldSyncs) -> None:
    mgr = manager(tmp_path)
    ulog = mgr.get_or_create_log("t", 0)
    txn = build_batch(producer_id=7, epoch=0, base_seq=0, count=2, transactional=True)
    mgr.sync_future(ulog, ulog.append_as_leader(txn)).result(30)
    assert (ulog.high_watermark, ulog.last_stable_offset) == (2, 0)  # open: bounded at its first offset
    syncs.hold()
    marker = build_batch(producer_id=7, epoch=0, control=1)  # COMMIT
    done = mgr.sync_future(ulog, ulog.append_as_leader(marker, origin=AppendOrigin.COORDINATOR))
    assert syncs.entered.wait(30)
    # The marker is appended, not durable: the LSO never passes the high watermark.
    assert (ulog.log_end_offset, ulog.high_watermark, ulog.last_stable_offset) == (3, 2, 0)
    syncs.release()
    done.result(30)
    assert (ulog.high_watermark, ulog.last_stable_offset) == (3, 3)
    mgr.shutdown()


def test_a_log_recovered_after_a_crash_is_fsynced_to_its_end_before_it_is_served(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mgr = manager(tmp_path)
    ulog = mgr.get_or_create_log("t", 0)
    ulog.append_as_leader(batch(5))
    assert ulog.recovery_point == 0
    # A crash: no clean shutdown, nothing synced. The next start loads (and recovers) the log.
    del mgr
    synced: list[int] = []
    real: Callable[[int], None] = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    again = manager(tmp_path)
    loaded = again.get_log("t", 0)
    assert isinstance(loaded, UnifiedLog)
    assert loaded.recovery_point == loaded.log_end_offset == loaded.high_watermark == 5
    assert synced  # the flush that moved the recovery point
    again.shutdown()
