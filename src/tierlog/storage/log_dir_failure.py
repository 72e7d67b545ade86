"""Log directories taken offline by disk errors (Kafka's LogDirFailureChannel).

A write, an fsync or a file creation that fails with EIO, ENOSPC, EDQUOT or EROFS says the disk
under a log dir can no longer be trusted. After a failed fsync the kernel may already have dropped
the dirty pages and marked them clean, so a second fsync "succeeds" without the data on disk (the
PostgreSQL "fsyncgate" lesson): the only safe answer is to stop writing there at once. From then on
the dir's partitions answer KAFKA_STORAGE_ERROR, nothing more is appended, flushed or checkpointed
in it, and its recovery points stay where the last successful fsync left them; the next start of
the broker lets recovery decide what is really on disk. Other dirs keep serving; when every dir is
offline the broker stops (``on_all_offline``).
"""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from tierlog.errors import KafkaStorageError

log = logging.getLogger(__name__)

#: Errors that say the disk (not the caller) failed: the dir goes offline for them.
DISK_ERRNOS = frozenset({errno.EIO, errno.ENOSPC, errno.EDQUOT, errno.EROFS})


def disk_error_of(e: BaseException) -> OSError | None:
    """The disk error behind ``e`` (itself, or a cause of a wrapping storage error), else None."""
    seen: BaseException | None = e
    for _ in range(4):
        if seen is None:
            return None
        if isinstance(seen, OSError) and seen.errno in DISK_ERRNOS:
            return seen
        seen = seen.__cause__
    return None


class LogDirFailureChannel:
    def __init__(self, log_dirs: list[Path]) -> None:
        self.log_dirs = list(log_dirs)
        self._offline: dict[Path, str] = {}
        self._lock = threading.Lock()
        #: Called once, with the last reason, when the last online dir goes offline.
        self.on_all_offline: Callable[[str], None] | None = None

    def offline_reason(self, log_dir: Path) -> str | None:
        return self._offline.get(log_dir)

    @property
    def any_offline(self) -> bool:
        """Whether some dir is offline: the append path asks this before it works out its dir."""
        return bool(self._offline)

    @property
    def offline_dirs(self) -> dict[Path, str]:
        return dict(self._offline)

    def check(self, log_dir: Path) -> None:
        reason = self._offline.get(log_dir)
        if reason is not None:
            raise KafkaStorageError(f"log dir {log_dir} is offline: {reason}")

    def maybe_fail(self, log_dir: Path, e: BaseException, action: str) -> bool:
        """Take ``log_dir`` offline if ``e`` is a disk error of ``action``; whether it is."""
        disk = disk_error_of(e)
        if disk is None:
            return False
        self.fail(log_dir, f"{action} failed: {errno.errorcode.get(disk.errno or 0, disk.errno)} "
                           f"({disk.strerror or disk})")
        return True

    def fail(self, log_dir: Path, reason: str) -> None:
        with self._lock:
            if log_dir in self._offline:
                return
            self._offline[log_dir] = reason
            all_offline = all(d in self._offline for d in self.log_dirs)
        log.error("log dir offline dir=%s reason=%s: its partitions answer KAFKA_STORAGE_ERROR and nothing more is "
                  "written there; restart the broker once the disk is fixed (recovery then decides what is on disk)",
                  log_dir, reason)
        if all_offline:
            log.error("every log dir is offline; the broker stops")
            if self.on_all_offline is not None:
                self.on_all_offline(reason)

    def raise_offline(self, log_dir: Path, e: OSError, action: str) -> KafkaStorageError:
        """The storage error to raise for ``e``, after taking the dir offline if it is a disk error."""
        self.maybe_fail(log_dir, e, action)
        return KafkaStorageError(f"{action} in {log_dir} failed: {e}")
