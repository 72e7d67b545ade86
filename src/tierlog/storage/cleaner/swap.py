"""Kafka's crash-safe replacement of cleaned segments (LocalLog.replaceSegments) and what recovery
needs to finish it: the cleaned segment is written as ``.cleaned`` files, renamed to ``.swap``, added
to the log in place of the old segments, whose files are renamed ``.deleted``, and finally loses the
``.swap`` suffix. Recovery deletes ``.cleaned`` files (the old log stays) and completes ``.swap``
files, deleting every old segment the swapped one covers (the new log)."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path

from tierlog._util.files import fsync_dir
from tierlog.records.header import LOG_OVERHEAD

_HEAD = struct.Struct(">qi")  # baseOffset, batchLength
_LAST_OFFSET_DELTA_AT = 23

#: Test seam: called with the name of each step of a swap ("cleaned-written", "swap-renamed",
#: "old-renamed", "done"), so a test can crash the cleaner between any two of them.
SwapHook = Callable[[str], None]


def next_offset_of_log_file(path: Path) -> int | None:
    """The offset after the last whole batch of a ``.log`` file (headers only), None when empty."""
    size = path.stat().st_size
    next_offset: int | None = None
    with path.open("rb") as f:
        fd = f.fileno()
        position = 0
        while position + 27 <= size:
            head = os.pread(fd, 27, position)
            base, length = _HEAD.unpack_from(head, 0)
            if length <= 0 or position + LOG_OVERHEAD + length > size:
                break
            delta = int.from_bytes(head[_LAST_OFFSET_DELTA_AT:27], "big", signed=True)
            next_offset = base + delta + 1
            position += LOG_OVERHEAD + length
    return next_offset


def sync_dir(path: Path) -> None:
    fsync_dir(path)
