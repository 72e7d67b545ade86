"""Group commit of many files at once: the partitions of one produce share a syncfs of the log dir's
filesystem instead of an fdatasync each (storage/group_commit.py), with the same answers, the same
durable offsets and the same failure handling; faults injected by replacing the call for one site."""

from __future__ import annotations

import errno
import os
import tempfile
from collections import namedtuple
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.storage import batch
from tierlog._util import libc
from tierlog.config import LogConfig
from tierlog.errors import KafkaStorageError
from tierlog.storage import group_commit
from tierlog.storage.log import UnifiedLog
from tierlog.storage.log_manager import LogManager, LogManagerSettings

CFG = LogConfig()
needs_syncfs = pytest.mark.skipif(
    not group_commit.syncfs_stands_in(Path(tempfile.gettempdir())),
    reason="syncfs standing in for fdatasyncs needs Linux 5.8+ and the temp dir on ext4, XFS or Btrfs")


def manager(d: Path, settings: LogManagerSettings | None = None) -> LogManager:
    mgr = LogManager([d], lambda t: CFG, settings or LogManagerSettings())
    mgr.startup_logs()
    return mgr


@pytest.fixture
def mgr(tmp_path: Path) -> Iterator[LogManager]:
    """A log manager of one log dir, ``tmp_path``, with the default settings; shut down afterwards."""
    mgr = manager(tmp_path)
    yield mgr
    mgr.shutdown()


def partitions(mgr: LogManager, count: int) -> list[UnifiedLog]:
    """The logs of partitions 0 to ``count - 1`` of topic ``t``."""
    return [mgr.get_or_create_log("t", p) for p in range(count)]


class Calls:
    """Counts the fdatasyncs and syncfs calls of the group commit, each still done for real."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, syncfs_error: int | None = None) -> None:
        self.fdatasyncs: list[int] = []
        self.syncfs: list[int] = []
        real_fdatasync, real_syncfs = os.fdatasync, group_commit.syncfs

        def fdatasync(fd: int) -> None:
            self.fdatasyncs.append(fd)
            real_fdatasync(fd)

        def syncfs(fd: int, what: str) -> None:
            self.syncfs.append(fd)
            if syncfs_error is not None:
                raise OSError(syncfs_error, os.strerror(syncfs_error))
            real_syncfs(fd, what)

        monkeypatch.setattr(os, "fdatasync", fdatasync)
        monkeypatch.setattr(group_commit, "syncfs", syncfs)


def produce(mgr: LogManager, logs: list[UnifiedLog]) -> list[Future[None]]:
    """One request's appends: each partition's batch, their syncs started together at the end."""
    with mgr.deferred_syncs():
        futures = [mgr.sync_future(ulog, ulog.append_as_leader(batch())) for ulog in logs]
        assert not any(f.done() for f in futures)  # nothing synced before the request's appends end
    return futures


def produce_synced(mgr: LogManager, logs: list[UnifiedLog]) -> None:
    """One request's appends (:func:`produce`), waited for until every one is synced."""
    for f in produce(mgr, logs):
        f.result(30)


@needs_syncfs
def test_the_partitions_of_one_produce_share_one_syncfs(tmp_path: Path, mgr: LogManager,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    logs = partitions(mgr, 6)
    calls = Calls(monkeypatch)
    produce_synced(mgr, logs)
    assert len(calls.syncfs) == 1 and calls.fdatasyncs == []
    stats = mgr.group_commits[tmp_path.resolve()].stats
    assert stats.syncfs_calls == 1 and stats.files_synced == 6 and stats.requests == 6 and stats.pending_bytes == 0
    # Each log learnt its records are durable: the high watermark follows them.
    assert all(ulog.high_watermark == ulog.log_end_offset == 1 for ulog in logs)
    # The next request goes the same way (the files' sync state was cleared).
    produce_synced(mgr, logs)
    assert len(calls.syncfs) == 2 and calls.fdatasyncs == []
    assert all(ulog.high_watermark == 2 for ulog in logs)


@needs_syncfs
def test_a_produce_of_few_partitions_keeps_an_fdatasync_each(mgr: LogManager, monkeypatch: pytest.MonkeyPatch) -> None:
    logs = partitions(mgr, group_commit.SYNCFS_MIN_FILES - 1)
    calls = Calls(monkeypatch)
    produce_synced(mgr, logs)
    assert calls.syncfs == [] and len(calls.fdatasyncs) == len(logs)
    assert all(ulog.high_watermark == 1 for ulog in logs)


@needs_syncfs
def test_a_file_off_the_log_dirs_filesystem_gets_its_own_fdatasync(tmp_path: Path, mgr: LogManager,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    logs = partitions(mgr, 5)
    commit = mgr.group_commits[tmp_path.resolve()]
    real_stat = os.stat
    elsewhere = logs[0].dir  # as if this partition's directory were a mount of another filesystem
    Stat = namedtuple("Stat", "st_dev")

    def stat(path: Any, *args: Any, **kwargs: Any) -> Any:
        if Path(path).parent == elsewhere:
            return Stat(commit._dir_dev + 1)
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    calls = Calls(monkeypatch)
    produce_synced(mgr, logs)
    assert len(calls.syncfs) == 1
    assert calls.fdatasyncs == [logs[0].active_segment.log.fd]
    assert all(ulog.high_watermark == 1 for ulog in logs)
    monkeypatch.undo()  # the real os.stat again before the manager shuts down


@needs_syncfs
def test_a_failed_syncfs_fails_every_waiter_and_takes_the_dir_offline(tmp_path: Path, mgr: LogManager,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    logs = partitions(mgr, 5)
    calls = Calls(monkeypatch, syncfs_error=errno.EIO)
    for f in produce(mgr, logs):
        with pytest.raises(KafkaStorageError):
            f.result(30)
    assert len(calls.syncfs) == 1 and calls.fdatasyncs == []  # never retried, nor by fdatasyncs
    assert "EIO" in (mgr.failure_channel.offline_reason(tmp_path.resolve()) or "")
    assert all(ulog.high_watermark == 0 for ulog in logs)  # nothing counts as durable
    with pytest.raises(KafkaStorageError):
        logs[0].append_as_leader(batch())
    assert len(calls.syncfs) == 1


@needs_syncfs
def test_requests_of_other_threads_during_a_produce_start_with_it(mgr: LogManager,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A request registered (from another thread) while a produce's appends run waits for their end
    and is synced by the same syncfs; it is not lost when the hold ends."""
    import threading

    logs = partitions(mgr, 5)
    calls = Calls(monkeypatch)
    with mgr.deferred_syncs():
        futures = [mgr.sync_future(ulog, ulog.append_as_leader(batch())) for ulog in logs[:4]]
        other: list[Future[None]] = []
        t = threading.Thread(target=lambda: other.append(mgr.sync_future(logs[4], logs[4].append_as_leader(batch()))))
        t.start()
        t.join(30)
        assert other and not other[0].done()
    for f in [*futures, *other]:
        f.result(30)
    assert len(calls.syncfs) == 1 and calls.fdatasyncs == []


def test_syncfs_stands_in_only_where_it_reports_writeback_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    Uname = namedtuple("Uname", "sysname nodename release version machine")
    for release, expected in (("5.4.0-150-generic", False), ("5.7.19", False), ("5.8.0", True),
                              ("6.18.44-fc-v669", True), ("weird", False)):
        monkeypatch.setattr(os, "uname", lambda r=release: Uname("Linux", "h", r, "", "x86_64"))
        assert libc.syncfs_reports_errors() is expected, release


def test_when_all_waits_for_every_future_and_keeps_each_result() -> None:
    from tierlog.storage.group_commit import when_all

    futures: list[Future[None]] = [Future() for _ in range(3)]
    done = when_all(futures)
    futures[1].set_exception(KafkaStorageError("sync failed"))
    assert not done.done()  # an error does not end the wait early: the others are still to come
    futures[0].set_result(None)
    assert not done.done()
    futures[2].set_result(None)
    assert done.result(1) is None
    assert isinstance(futures[1].exception(0), KafkaStorageError)
    assert when_all([]).done()
    # Cancelling the combined future leaves the partitions' own futures alone.
    pending: list[Future[None]] = [Future()]
    assert when_all(pending).cancel() and not pending[0].cancelled()
    pending[0].set_result(None)


@needs_syncfs
def test_files_arriving_while_every_sync_thread_is_busy_start_together(mgr: LogManager,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """One partition per request (librdkafka): with every sync thread busy, the files registering
    one by one wait for a sync to end and then share one syncfs, not a queue of fdatasyncs."""
    import threading

    busy = group_commit.SYNC_THREADS
    logs = partitions(mgr, busy + 5)
    calls = Calls(monkeypatch)
    real_fdatasync = os.fdatasync
    entered, release = threading.Semaphore(0), threading.Event()

    def slow(fd: int) -> None:
        entered.release()
        assert release.wait(30)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", slow)
    first = [mgr.sync_future(ulog, ulog.append_as_leader(batch())) for ulog in logs[:busy]]
    for _ in range(busy):
        assert entered.acquire(timeout=30)  # every sync thread is in an fdatasync
    later = [mgr.sync_future(ulog, ulog.append_as_leader(batch())) for ulog in logs[busy:]]
    assert not any(f.done() for f in later) and calls.syncfs == []
    release.set()
    for f in [*first, *later]:
        f.result(30)
    assert len(calls.syncfs) == 1  # the five waiting files, together
    assert all(ulog.high_watermark == 1 for ulog in logs)


@needs_syncfs
def test_log_dir_syncfs_min_files_0_keeps_an_fdatasync_per_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``log.dir.syncfs.min.files=0``: a log dir on a filesystem others write much to syncs its own
    files only, whatever their number."""
    from tierlog.config import BrokerConfig
    from tierlog.config.settings import build_settings

    settings = build_settings(LogManagerSettings, BrokerConfig({"log.dir.syncfs.min.files": "0"}))
    assert settings.syncfs_min_files == 0
    mgr = manager(tmp_path, settings)
    try:
        logs = partitions(mgr, 6)
        calls = Calls(monkeypatch)
        produce_synced(mgr, logs)
        assert calls.syncfs == [] and len(calls.fdatasyncs) == 6
        assert all(ulog.high_watermark == 1 for ulog in logs)
    finally:
        mgr.shutdown()


@needs_syncfs
def test_a_log_dir_on_a_filesystem_not_known_to_sync_like_fdatasync_keeps_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """FUSE (lazyfs, say) answers syncfs without asking its daemon to sync: a log dir there keeps an
    fdatasync per file, which the daemon does get."""
    fuse_magic = 0x65735546
    monkeypatch.setattr(group_commit, "filesystem_type", lambda fd: fuse_magic)
    assert not group_commit.syncfs_stands_in(tmp_path)
    mgr = manager(tmp_path)  # made after the patch: a group commit learns its dir's filesystem type then
    try:
        calls = Calls(monkeypatch)
        produce_synced(mgr, partitions(mgr, 6))
        assert calls.syncfs == [] and len(calls.fdatasyncs) == 6
    finally:
        mgr.shutdown()
