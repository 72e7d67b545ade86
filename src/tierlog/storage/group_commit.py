"""Group commit: every produce waiting on a segment file shares that file's next fdatasync.

A produce that must be durable before it is answered registers the segment file its bytes went to
(after writing them) and waits on a future. A file with waiters and no fdatasync under way gets one
at once, from a pool of ``SYNC_THREADS`` threads; the requests that register while it runs wait for
the next one, issued as soon as it ends. So under load each fdatasync covers many requests and
throughput grows with load instead of being one fsync per request, while each partition is
answered as soon as its own file is on disk: a slow fdatasync of one file does not hold the others
(earlier, one round synced every waiting file and answered nobody before the slowest returned,
and a request that arrived during a round waited for that round and the next -- a partition with
one request in flight, as librdkafka's idempotent producer keeps, waited ~1.5 syncs, now ~1).
Concurrent fdatasyncs of files of one filesystem still share its journal commits. Only data is
synced here (and the directory entries of a new segment file and its partition dir): indexes and
checkpoints are rebuilt by recovery from the recovery point, which this does not move --
:meth:`UnifiedLog.flush` still does, after fsyncing everything.

Backpressure: the bytes appended by the requests waiting for a sync (``pending_bytes``) are
bounded by ``log.dir.unflushed.max.bytes``. A produce asks :meth:`room` before it appends; while
the bound is passed it waits (its connection stops being read once its deferred replies are many,
so the client waits on the socket) until syncs bring the bytes under it. A slow disk so slows
producers instead of letting them fill the page cache and the broker's queues.

Many files at once: when a produce of many partitions (Java's producer puts a 16 KiB batch of each
ready partition into one request) registers ``log.dir.syncfs.min.files`` files (4) or more whose syncs are not
under way, one ``syncfs`` of the log dir's filesystem replaces their fdatasyncs: every dirty page and
inode of that filesystem is written and its journal committed once, where an fdatasync per file
costs a journal commit and a cache flush each (measured on this project's ext4 VM: 100 files of
16 KiB ~2.5-5 ms by syncfs against 10-20 ms by fdatasyncs eight at a time). It covers more than the
files (so it weakens nothing) on the local filesystems it is used on (ext4, XFS, Btrfs: not FUSE,
whose syncfs does not ask the daemon to sync); it is used only where it reports the filesystem's
writeback errors (Linux 5.8+), through a descriptor of the log dir opened when the group commit is made, so that no
error after that is missed; a file not on the log dir's filesystem gets its own fdatasync. The
appends of one request register under :meth:`GroupCommit.deferred`, which starts their syncs
together when the request's appends are done. Files whose first request comes while all
``SYNC_THREADS`` are busy (librdkafka sends one partition per request, so many producers' requests
arrive one file at a time) wait for a sync to end and then start together the same way.

A failed fdatasync is never retried: the dir goes offline (log_dir_failure) and every waiter, now
and later, gets a storage error -- also a waiter whose own file synced after the dir went offline.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tierlog._util.files import fsync_dir
from tierlog._util.libc import SYNCFS_FILESYSTEMS, filesystem_type, syncfs, syncfs_reports_errors
from tierlog.clock import SYSTEM_CLOCK, Clock, monotonic_s
from tierlog.config.keys import BROKER_DEF
from tierlog.errors import KafkaStorageError
from tierlog.storage.file_records import FileRecords
from tierlog.storage.log_dir_failure import LogDirFailureChannel

log = logging.getLogger(__name__)

#: Threads fdatasyncing the files of one round at once.
SYNC_THREADS = 8
#: Files whose syncs start together from which one syncfs replaces their fdatasyncs (a syncfs costs
#: about one fdatasync: below this, the fdatasyncs run side by side at about the same cost):
#: ``log.dir.syncfs.min.files``'s default; 0 for never.
SYNCFS_MIN_FILES = int(str(BROKER_DEF.require("log.dir.syncfs.min.files").default))


@dataclass
class GroupCommitStats:
    #: fdatasyncs that answered requests (each covers every request of its file that registered
    #: before it began); ``files_synced`` counts the same, kept for the metric's name.
    rounds: int = 0
    files_synced: int = 0
    requests: int = 0
    sync_seconds: float = 0.0
    #: Bytes appended by the requests waiting for a sync, the most there ever were, and how often
    #: a produce had to wait for room (log.dir.unflushed.max.bytes).
    pending_bytes: int = 0
    peak_pending_bytes: int = 0
    room_waits: int = 0
    #: syncfs calls that stood in for the fdatasyncs of several files (each file still counts in
    #: ``rounds`` and ``files_synced``).
    syncfs_calls: int = 0


class _FileSyncs:
    """One file's requests: those waiting for its next fdatasync, and whether one is under way."""

    __slots__ = ("on_synced", "pending_bytes", "records", "syncing", "waiters")

    def __init__(self, records: FileRecords) -> None:
        self.records = records
        self.waiters: list[Future[None]] = []
        #: Called after the next successful fdatasync, before its waiters are answered: how the log
        #: learns its records are durable (its high watermark follows them).
        self.on_synced: list[Callable[[], None]] = []
        self.pending_bytes = 0
        self.syncing = False


def open_for_syncfs(log_dir: Path) -> tuple[int, int] | None:
    """``log_dir`` opened (a descriptor to syncfs through) and its device, or None where a syncfs
    cannot stand in for fdatasyncs: no syncfs reporting writeback errors (before Linux 5.8), or a
    filesystem not known to sync like an fdatasync of each file (libc.SYNCFS_FILESYSTEMS)."""
    if not syncfs_reports_errors():
        return None
    try:
        fd = os.open(log_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        if filesystem_type(fd) in SYNCFS_FILESYSTEMS:
            return fd, os.fstat(fd).st_dev
    except OSError:
        pass
    os.close(fd)
    return None


def syncfs_stands_in(log_dir: Path) -> bool:
    """Whether a group commit of ``log_dir`` would use syncfs for many files at once."""
    opened = open_for_syncfs(log_dir)
    if opened is None:
        return False
    os.close(opened[0])
    return True


@dataclass
class _Taken:
    """What one sync answers for a file: the waiters and callbacks registered before it began."""

    file: _FileSyncs
    waiters: list[Future[None]]
    callbacks: list[Callable[[], None]]
    covered_bytes: int


class GroupCommit:
    def __init__(self, log_dir: Path, channel: LogDirFailureChannel, max_pending_bytes: int = 1 << 62,
                 clock: Clock = SYSTEM_CLOCK, syncfs_min_files: int = SYNCFS_MIN_FILES) -> None:
        self.log_dir = log_dir
        self._clock = clock
        self.max_pending_bytes = max_pending_bytes
        self._room_waiters: list[Future[None]] = []
        self._channel = channel
        self._cond = threading.Condition()
        #: Files with requests waiting or an fdatasync under way, by id of their FileRecords.
        self._files: dict[int, _FileSyncs] = {}
        self._syncs_running = 0
        self._closed = False
        self._pool: ThreadPoolExecutor | None = None
        self.stats = GroupCommitStats()
        #: Callers inside :meth:`deferred`: while any is, new requests wait to start together.
        self._holds = 0
        self.syncfs_min_files = syncfs_min_files
        #: The log dir, open from now on for syncfs (its writeback errors are reported to the
        #: descriptors opened before them), and its filesystem's device; None where syncfs cannot
        #: stand in for fdatasyncs.
        self._dir_fd: int | None = None
        self._dir_dev = -1
        if syncfs_min_files > 0:
            opened = open_for_syncfs(log_dir)
            if opened is not None:
                self._dir_fd, self._dir_dev = opened

    def room(self) -> Future[None] | None:
        """None when an append may go ahead now, else a future completed once syncs have brought
        the pending bytes under the bound (or the dir went offline: the append then fails itself)."""
        with self._cond:
            if self.stats.pending_bytes < self.max_pending_bytes or self._closed:
                return None
            fut: Future[None] = Future()
            self._room_waiters.append(fut)
            self.stats.room_waits += 1
            return fut

    def has_room(self) -> bool:
        """Whether appends may go ahead now without asking :meth:`room` (read without the lock: the
        bound may be passed by the requests let in at once anyway)."""
        return self.stats.pending_bytes < self.max_pending_bytes or self._closed

    def request(self, records: FileRecords, appended_bytes: int = 0,
                on_synced: Callable[[], None] | None = None) -> Future[None]:
        """A future completed once everything written to ``records`` so far is on disk;
        ``appended_bytes`` (what the request appended) count against the bound until then.
        ``on_synced`` is called on the sync thread once that sync succeeded, before the future is
        completed (so a client that saw its acknowledgement can read the records: the high watermark
        moved first)."""
        fut: Future[None] = Future()
        reason = self._channel.offline_reason(self.log_dir)
        if reason is not None:
            fut.set_exception(KafkaStorageError(f"log dir {self.log_dir} is offline: {reason}"))
            return fut
        with self._cond:
            if self._closed:
                fut.set_exception(KafkaStorageError(f"the flusher of {self.log_dir} is closed"))
                return fut
            file = self._files.get(id(records))
            if file is None:
                file = self._files[id(records)] = _FileSyncs(records)
            file.waiters.append(fut)
            if on_synced is not None:
                file.on_synced.append(on_synced)
            file.pending_bytes += appended_bytes
            self.stats.requests += 1
            self.stats.pending_bytes += appended_bytes
            self.stats.peak_pending_bytes = max(self.stats.peak_pending_bytes, self.stats.pending_bytes)
            if not file.syncing and not self._holds:
                self._start([file])
        return fut

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Requests made meanwhile (from any thread) start their syncs when the last caller inside
        leaves, together: the partitions of one produce request share one syncfs."""
        with self._cond:
            self._holds += 1
        try:
            yield
        finally:
            with self._cond:
                self._holds -= 1
                if not self._holds:
                    self._start([f for f in self._files.values() if f.waiters and not f.syncing])

    def _start(self, files: list[_FileSyncs]) -> None:
        """Hand the files' waiters to new syncs: one syncfs for all of them when they are many, else
        an fdatasync each (called holding the condition's lock)."""
        if not files:
            return
        if self._closed and not self._syncs_running:
            # close() has seen the last sync end (its pool may be shut down): nothing starts now.
            for file in files:
                taken = self._take(file)
                file.syncing = False
                del self._files[id(file.records)]
                for fut in taken.waiters:
                    _settle(fut, KafkaStorageError(f"the flusher of {self.log_dir} is closed"))
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix=f"tierlog-sync-{self.log_dir.name}")
        if self._dir_fd is not None and len(files) >= self.syncfs_min_files:
            self._syncs_running += 1
            self._pool.submit(self._sync_and_answer, [self._take(file) for file in files])
            return
        for file in files:
            if self._syncs_running >= SYNC_THREADS:
                # Every sync thread is busy: the rest would only queue behind them one by one. They
                # wait instead, and start together when a sync ends (one syncfs when many).
                break
            self._syncs_running += 1
            self._pool.submit(self._sync_and_answer, [self._take(file)])

    @staticmethod
    def _take(file: _FileSyncs) -> _Taken:
        file.syncing = True
        taken = _Taken(file, file.waiters, file.on_synced, file.pending_bytes)
        file.waiters, file.on_synced, file.pending_bytes = [], [], 0
        return taken

    def close(self) -> None:
        """Finish the syncs under way and the ones already asked for, then stop."""
        with self._cond:
            self._closed = True
            room, self._room_waiters = self._room_waiters, []
        for fut in room:
            _settle(fut, None)
        with self._cond:
            while self._syncs_running:
                self._cond.wait()
            pool = self._pool
        if pool is not None:
            pool.shutdown()
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None

    def _sync_and_answer(self, taken: list[_Taken]) -> None:
        if len(taken) == 1:
            errors = [self._sync(taken[0].file.records)]
        else:
            errors = self._sync_together([t.file.records for t in taken])
        with self._cond:
            for t in taken:
                self.stats.pending_bytes -= t.covered_bytes
                t.file.syncing = False
                if not t.file.waiters:  # (else the requests that came meanwhile: their syncs start now)
                    del self._files[id(t.file.records)]
            if not self._holds:
                # Those and the files left waiting while every sync thread was busy (else the last
                # caller leaving deferred() starts them).
                self._start([f for f in self._files.values() if f.waiters and not f.syncing])
            room: list[Future[None]] = []
            if self.stats.pending_bytes < self.max_pending_bytes or any(e is not None for e in errors):
                room, self._room_waiters = self._room_waiters, []
            self._syncs_running -= 1
            self._cond.notify_all()
        for t, error in zip(taken, errors, strict=True):
            for callback in t.callbacks if error is None else ():
                try:
                    callback()
                except Exception:
                    log.exception("a callback after the fdatasync of %s failed", t.file.records.path)
        for fut in room:
            _settle(fut, None)
        for t, error in zip(taken, errors, strict=True):
            for fut in t.waiters:
                _settle(fut, error)

    def _sync_together(self, files: list[FileRecords]) -> list[KafkaStorageError | None]:
        """One syncfs for every file on the log dir's filesystem, an fdatasync for any other; then
        each file as :meth:`_sync` finishes it (its new directory entries, the dir's state)."""
        reason = self._channel.offline_reason(self.log_dir)
        if reason is not None:
            return [KafkaStorageError(f"log dir {self.log_dir} is offline: {reason}")] * len(files)
        assert self._dir_fd is not None
        started = monotonic_s(self._clock)
        try:
            syncfs(self._dir_fd, f"syncfs of {self.log_dir}")
        except OSError as e:
            action = f"syncfs of {self.log_dir}"
            self._channel.maybe_fail(self.log_dir, e, action)
            if self._channel.offline_reason(self.log_dir) is None:
                self._channel.fail(self.log_dir, f"{action} failed: {e}")
            return [KafkaStorageError(f"{action} failed: {e}")] * len(files)
        with self._cond:
            self.stats.syncfs_calls += 1
            self.stats.sync_seconds += monotonic_s(self._clock) - started
        return [self._sync(records, data_synced=self._on_dir_filesystem(records)) for records in files]

    def _on_dir_filesystem(self, records: FileRecords) -> bool:
        try:
            return os.stat(records.path).st_dev == self._dir_dev
        except OSError:
            return False  # moved or deleted meanwhile: its own fdatasync says what is left to do

    def _sync(self, records: FileRecords, data_synced: bool = False) -> KafkaStorageError | None:
        """fdatasync the file (unless ``data_synced``: a syncfs just covered it) and, when new, its
        directory entries; a failure takes the dir offline."""
        reason = self._channel.offline_reason(self.log_dir)
        if reason is not None:
            return KafkaStorageError(f"log dir {self.log_dir} is offline: {reason}")
        started = monotonic_s(self._clock)
        failed: tuple[OSError, str] | None = None
        needs_dir_sync = records.needs_dir_sync
        try:
            if not data_synced:
                records.sync_data()
        except OSError as e:
            failed = e, f"fdatasync of {records.path}"
        if failed is None and needs_dir_sync:
            # A new segment file is reachable after a power cut only once its directory entry is on
            # disk (and a new partition dir's entry in the log dir).
            for d in (records.path.parent, records.path.parent.parent):
                try:
                    fsync_dir(d)
                except OSError as dir_error:
                    failed = (dir_error, f"fsync of directory {d}")
                    break
            else:
                records.needs_dir_sync = False
        if failed is not None:
            error, action = failed
            self._channel.maybe_fail(self.log_dir, error, action)
            if self._channel.offline_reason(self.log_dir) is None:
                # Not a disk error (say the file was deleted meanwhile): trust nothing anyway.
                self._channel.fail(self.log_dir, f"{action} failed: {error}")
            return KafkaStorageError(f"{action} failed: {error}")
        reason = self._channel.offline_reason(self.log_dir)
        if reason is not None:
            # Another file's sync failed meanwhile: this dir answers nothing as durable any more.
            return KafkaStorageError(f"log dir {self.log_dir} is offline: {reason}")
        elapsed_s = monotonic_s(self._clock) - started
        with self._cond:
            self.stats.rounds += 1
            self.stats.files_synced += 1
            self.stats.sync_seconds += elapsed_s
        return None


def _settle(fut: Future[None], error: BaseException | None) -> None:
    """Complete a waiter's future, unless its waiter gave up: a produce whose client disconnected
    cancels it (asyncio.wrap_future passes the cancel on), and setting a cancelled future raises --
    which stopped the answering of every waiter after it (before the per-file syncs, it killed the
    group-commit thread and no durable append was answered again)."""
    try:
        if error is None:
            fut.set_result(None)
        else:
            fut.set_exception(error)
    except InvalidStateError:
        pass  # cancelled between the sync's start and now: nobody is waiting


def all_done(futures: list[Future[None]]) -> Future[None]:
    """A future completed once every one of ``futures`` is, with the first error among them."""
    if len(futures) == 1:
        return futures[0]
    out: Future[None] = Future()
    lock = threading.Lock()
    left = [len(futures)]

    def one_done(fut: Future[None]) -> None:
        error = None if fut.cancelled() else fut.exception()
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if error is not None:
            _settle(out, error)
        elif last:
            _settle(out, None)

    for fut in futures:
        fut.add_done_callback(one_done)
    return out


def when_all(futures: list[Future[None]]) -> Future[None]:
    """A future completed (with None) once every one of ``futures`` is done, each with its own result
    left to read: a produce of many partitions waits for one future, woken once from the sync
    thread, not one per partition. Cancelling it cancels none of ``futures``."""
    out: Future[None] = Future()
    lock = threading.Lock()
    left = [len(futures)]

    def one_done(_: Future[None]) -> None:
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            _settle(out, None)

    if not futures:
        out.set_result(None)
    for fut in futures:
        fut.add_done_callback(one_done)
    return out
