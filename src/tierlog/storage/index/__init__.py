"""The ``.index`` and ``.timeindex`` files of a segment (KAFKA-FACTS §2.3, §2.4).

Both are arrays of fixed-size big-endian entries in a memory-mapped file, with the semantics of
Kafka's ``AbstractIndex``/``OffsetIndex``/``TimeIndex``:

* A file created here is preallocated to ``roundDown(max_index_size, entry size)`` bytes, so the
  active segment appends by writing into the map without growing the file.
* An existing file is trusted: it holds ``length // entry size`` entries and is "full" until
  :meth:`resize` gives it room again. A preallocated file that was never trimmed therefore looks
  like a file full of zero entries; recovery, :meth:`sanity_check` and :func:`looks_untrimmed`
  exist to catch that.
* Roll and close trim the file to ``entries × entry size``.

The map is used (rather than reads and writes on a file object) because lookups are binary
searches over the whole file and appends happen on every ``index.interval.bytes`` of produce:
both become a ``struct`` call on memory instead of a system call. Kafka's "warm section" search
(trying the last 8 KiB first to keep page-cache misses down) is not reproduced: it is a page-cache
heuristic whose benefit is lost in Python's per-step cost, and results are identical without it.

An open index holds no file descriptor (:mod:`tierlog._util.mapped`: Python's mmap would keep one
per map), but it does hold address space, so callers open indexes lazily as Kafka's ``LazyIndex`` does.
"""

from __future__ import annotations

from tierlog.storage.index.base import (
    DEFAULT_MAX_INDEX_SIZE,
    NO_TIMESTAMP,
    OFFSET_ENTRY,
    OFFSET_ENTRY_SIZE,
    PAGE_BYTES,
    TIME_ENTRY,
    TIME_ENTRY_SIZE,
    AbstractIndex,
    IndexFullError,
    OffsetPosition,
    TimestampOffset,
    TimestampOrderError,
    looks_untrimmed,
    read_last_entry,
    round_down,
)
from tierlog.storage.index.offset_index import OffsetIndex
from tierlog.storage.index.time_index import TimeIndex

__all__ = [
    "DEFAULT_MAX_INDEX_SIZE",
    "NO_TIMESTAMP",
    "OFFSET_ENTRY",
    "OFFSET_ENTRY_SIZE",
    "PAGE_BYTES",
    "TIME_ENTRY",
    "TIME_ENTRY_SIZE",
    "AbstractIndex",
    "IndexFullError",
    "OffsetIndex",
    "OffsetPosition",
    "TimeIndex",
    "TimestampOffset",
    "TimestampOrderError",
    "looks_untrimmed",
    "read_last_entry",
    "round_down",
]
