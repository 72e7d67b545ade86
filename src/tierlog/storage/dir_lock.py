"""The ``.lock`` file of a log directory: one process owns a data directory at a time.

Kafka takes an exclusive ``FileChannel.tryLock`` on ``<log dir>/.lock`` at startup and refuses to
start when another process holds it. tierlog does the same with ``flock``; the kernel drops the lock
when the process exits, SIGKILL included, so a crash never leaves a directory locked. Offline tools
that rewrite files (``tierlog metadata restore``) check it, so they cannot run under a live broker.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from tierlog.errors import KafkaStorageError

LOCK_FILE_NAME = ".lock"


class LogDirInUseError(KafkaStorageError):
    """Another process (a running broker) holds the directory's lock."""


class DirLock:
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_FILE_NAME
        self._fd: int | None = None

    def acquire(self) -> DirLock:
        """Take the lock or raise :class:`LogDirInUseError` at once (never waits)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LogDirInUseError(
                f"{self.directory} is in use by another process (a running broker holds {self.path})") from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the descriptor drops the flock

    def __enter__(self) -> DirLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def is_locked(directory: Path) -> bool:
    """Whether a live process holds the directory's lock (a missing directory is not locked)."""
    if not (Path(directory) / LOCK_FILE_NAME).exists():
        return False
    try:
        with DirLock(directory):
            return False
    except LogDirInUseError:
        return True
