"""Group commit: one fdatasync round per log dir shared by every produce waiting in it.

A produce that must be durable before it is answered registers the segment file its bytes went to
(after writing them) and waits on a future. The dir's flusher thread takes every file registered so
far, fdatasyncs each once and completes all their futures, then at once starts the next round with
whatever registered meanwhile: under load each round covers many requests, so throughput grows
with load instead of being one fsync per request. Only data is synced here (and the directory
entry of a new segment file): indexes and checkpoints are rebuilt by recovery from the recovery
point, which this does not move -- :meth:`UnifiedLog.flush` still does, after fsyncing everything.

A failed fdatasync is never retried: the dir goes offline (log_dir_failure) and every waiter, now
and later, gets a storage error.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from tierlog._util.files import fsync_dir
from tierlog.clock import SYSTEM_CLOCK, Clock, monotonic_s
from tierlog.errors import KafkaStorageError
from tierlog.storage.file_records import FileRecords
from tierlog.storage.log_dir_failure import LogDirFailureChannel

log = logging.getLogger(__name__)


@dataclass
class GroupCommitStats:
    rounds: int = 0
    files_synced: int = 0
    requests: int = 0
    sync_seconds: float = 0.0


class GroupCommit:
    def __init__(self, log_dir: Path, channel: LogDirFailureChannel, clock: Clock = SYSTEM_CLOCK) -> None:
        self.log_dir = log_dir
        self._clock = clock
        self._channel = channel
        self._cond = threading.Condition()
        self._files: dict[int, FileRecords] = {}
        self._waiters: list[Future[None]] = []
        self._closed = False
        self._thread: threading.Thread | None = None
        self.stats = GroupCommitStats()

    def request(self, records: FileRecords) -> Future[None]:
        """A future completed once everything written to ``records`` so far is on disk."""
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
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._waiters and not self._closed:
                    self._cond.wait()
                if not self._waiters:
                    return
                batch, self._files = list(self._files.values()), {}
                waiters, self._waiters = self._waiters, []
            error = self._sync(batch)
            for fut in waiters:
                if error is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(error)

    def _sync(self, batch: list[FileRecords]) -> KafkaStorageError | None:
        reason = self._channel.offline_reason(self.log_dir)
        if reason is not None:
            return KafkaStorageError(f"log dir {self.log_dir} is offline: {reason}")
        started = monotonic_s(self._clock)
        try:
            for records in batch:
                records.sync_data()
                if records.needs_dir_sync:
                    # A new segment file is reachable after a power cut only once its directory
                    # entry is on disk (and a new partition dir's entry in the log dir).
                    fsync_dir(records.path.parent)
                    fsync_dir(records.path.parent.parent)
                    records.needs_dir_sync = False
        except OSError as e:
            self._channel.maybe_fail(self.log_dir, e, f"fdatasync of {records.path}")
            if self._channel.offline_reason(self.log_dir) is None:
                # Not a disk error (say the file was deleted meanwhile): trust nothing anyway.
                self._channel.fail(self.log_dir, f"fdatasync of {records.path} failed: {e}")
            return KafkaStorageError(f"fdatasync of {records.path} failed: {e}")
        stats = self.stats
        stats.rounds += 1
        stats.files_synced += len(batch)
        stats.sync_seconds += monotonic_s(self._clock) - started
        return None
