"""Group commit: one fdatasync round per log dir shared by every produce waiting in it.

A produce that must be durable before it is answered registers the segment file its bytes went to
(after writing them) and waits on a future. The dir's flusher thread takes every file registered so
far, fdatasyncs each once and completes all their futures, then at once starts the next round with
whatever registered meanwhile: under load each round covers many requests, so throughput grows
with load instead of being one fsync per request. Only data is synced here (and the directory
entry of a new segment file): indexes and checkpoints are rebuilt by recovery from the recovery
point, which this does not move -- :meth:`UnifiedLog.flush` still does, after fsyncing everything.

The files of one round are fdatasynced from up to ``SYNC_THREADS`` threads at once: the disk then
sees the writes of all of them together (bench/durability.py measured one round of 100 files with
16 KiB new each at ~300 ms one after the other and ~16 ms from 8 threads; a syncfs of the whole
filesystem was faster still but also writes every other process's dirty data and reports errors
less precisely).

Backpressure: the bytes appended by the requests waiting for a round (``pending_bytes``) are
bounded by ``log.dir.unflushed.max.bytes``. A produce asks :meth:`room` before it appends; while
the bound is passed it waits (its connection stops being read once its deferred replies are many,
so the client waits on the socket) until a round brings the bytes under it. A slow disk so slows
producers instead of letting them fill the page cache and the broker's queues.

A failed fdatasync is never retried: the dir goes offline (log_dir_failure) and every waiter, now
and later, gets a storage error.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tierlog._util.files import fsync_dir
from tierlog.clock import SYSTEM_CLOCK, Clock, monotonic_s
from tierlog.errors import KafkaStorageError
from tierlog.storage.file_records import FileRecords
from tierlog.storage.log_dir_failure import LogDirFailureChannel

log = logging.getLogger(__name__)

#: Threads fdatasyncing the files of one round at once.
SYNC_THREADS = 8


@dataclass
class GroupCommitStats:
    rounds: int = 0
    files_synced: int = 0
    requests: int = 0
    sync_seconds: float = 0.0
    #: Bytes appended by the requests waiting for a round, the most there ever were, and how often
    #: a produce had to wait for room (log.dir.unflushed.max.bytes).
    pending_bytes: int = 0
    peak_pending_bytes: int = 0
    room_waits: int = 0


class GroupCommit:
    def __init__(self, log_dir: Path, channel: LogDirFailureChannel, max_pending_bytes: int = 1 << 62,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.log_dir = log_dir
        self._clock = clock
        self.max_pending_bytes = max_pending_bytes
        self._round_bytes = 0
        self._room_waiters: list[Future[None]] = []
        self._channel = channel
        self._cond = threading.Condition()
        self._files: dict[int, FileRecords] = {}
        self._waiters: list[Future[None]] = []
        self._closed = False
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self.stats = GroupCommitStats()

    def room(self) -> Future[None] | None:
        """None when an append may go ahead now, else a future completed once a round has brought
        the pending bytes under the bound (or the dir went offline: the append then fails itself)."""
        with self._cond:
            if self.stats.pending_bytes < self.max_pending_bytes or self._closed:
                return None
            fut: Future[None] = Future()
            self._room_waiters.append(fut)
            self.stats.room_waits += 1
            return fut

    def request(self, records: FileRecords, appended_bytes: int = 0) -> Future[None]:
        """A future completed once everything written to ``records`` so far is on disk;
        ``appended_bytes`` (what the request appended) count against the bound until then."""
        fut: Future[None] = Future()
        reason = self._channel.offline_reason(self.log_dir)
        if reason is not None:
            fut.set_exception(KafkaStorageError(f"log dir {self.log_dir} is offline: {reason}"))
            return fut
        with self._cond:
            if self._closed:
                fut.set_exception(KafkaStorageError(f"the flusher of {self.log_dir} is closed"))
                return fut
            self._files[id(records)] = records
            self._waiters.append(fut)
            self.stats.requests += 1
            self._round_bytes += appended_bytes
            self.stats.pending_bytes += appended_bytes
            self.stats.peak_pending_bytes = max(self.stats.peak_pending_bytes, self.stats.pending_bytes)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"tierlog-group-commit-{self.log_dir.name}",
                                                daemon=True)
                self._thread.start()
            self._cond.notify()
        return fut

    def close(self) -> None:
        """Finish the round under way and the ones already asked for, then stop."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
            room, self._room_waiters = self._room_waiters, []
        for fut in room:
            _settle(fut, None)
        if thread is not None:
            thread.join()
        if self._pool is not None:
            self._pool.shutdown()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._waiters and not self._closed:
                    self._cond.wait()
                if not self._waiters:
                    return
                batch, self._files = list(self._files.values()), {}
                waiters, self._waiters = self._waiters, []
                round_bytes, self._round_bytes = self._round_bytes, 0
            error = self._sync(batch)
            with self._cond:
                self.stats.pending_bytes -= round_bytes
                room: list[Future[None]] = []
                if self.stats.pending_bytes < self.max_pending_bytes or error is not None:
                    room, self._room_waiters = self._room_waiters, []
            for fut in room:
                _settle(fut, None)
            for fut in waiters:
                _settle(fut, error)

    def _sync(self, batch: list[FileRecords]) -> KafkaStorageError | None:
        reason = self._channel.offline_reason(self.log_dir)
        if reason is not None:
            return KafkaStorageError(f"log dir {self.log_dir} is offline: {reason}")
        started = monotonic_s(self._clock)
        if len(batch) == 1:
            failed = self._sync_one(batch[0])
        else:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix=f"tierlog-sync-{self.log_dir.name}")
            failed = next((f for f in self._pool.map(self._sync_one, batch) if f is not None), None)
        if failed is None:
            # A new segment file is reachable after a power cut only once its directory entry is on
            # disk (and a new partition dir's entry in the log dir).
            new = [r for r in batch if r.needs_dir_sync]
            dirs = {r.path.parent for r in new} | {r.path.parent.parent for r in new}
            for d in sorted(dirs, key=lambda d: len(d.parts), reverse=True):
                try:
                    fsync_dir(d)
                except OSError as dir_error:
                    failed = (dir_error, f"fsync of directory {d}")
                    break
            else:
                for r in new:
                    r.needs_dir_sync = False
        if failed is not None:
            error, action = failed
            self._channel.maybe_fail(self.log_dir, error, action)
            if self._channel.offline_reason(self.log_dir) is None:
                # Not a disk error (say the file was deleted meanwhile): trust nothing anyway.
                self._channel.fail(self.log_dir, f"{action} failed: {error}")
            return KafkaStorageError(f"{action} failed: {error}")
        stats = self.stats
        stats.rounds += 1
        stats.files_synced += len(batch)
        stats.sync_seconds += monotonic_s(self._clock) - started
        return None

    @staticmethod
    def _sync_one(records: FileRecords) -> tuple[OSError, str] | None:
        try:
            records.sync_data()
        except OSError as e:
            return e, f"fdatasync of {records.path}"
        return None


def _settle(fut: Future[None], error: BaseException | None) -> None:
    """Complete a waiter's future, unless its waiter gave up: a produce whose client disconnected
    cancels it (asyncio.wrap_future passes the cancel on), and setting a cancelled future raises --
    which killed this thread and left every later durable append waiting for ever."""
    try:
        if error is None:
            fut.set_result(None)
        else:
            fut.set_exception(error)
    except InvalidStateError:
        pass  # cancelled between the round's start and now: nobody is waiting
