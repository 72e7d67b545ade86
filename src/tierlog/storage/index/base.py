"""What the offset and time indexes share: Kafka's ``AbstractIndex`` over a memory-mapped file, the entry
formats, and the file checks recovery uses (see :mod:`tierlog.storage.index`)."""

from __future__ import annotations

import mmap
import os
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, NamedTuple

from tierlog._util.mapped import FileMap, MappedBuffer
from tierlog.errors import CorruptIndexError, IndexOffsetOverflowError, TierlogError

#: Kafka's default ``segment.index.bytes``.

DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024
OFFSET_ENTRY_SIZE = 8
TIME_ENTRY_SIZE = 12
#: RecordBatch.NO_TIMESTAMP: the time index "last entry" of an empty index.
NO_TIMESTAMP = -1

INT32_MAX = 2**31 - 1
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")


class IndexFullError(TierlogError):
    """An append to an index that has no room left (Kafka: IllegalArgumentException)."""


class TimestampOrderError(TierlogError):
    """A time index append whose timestamp is below the last one (Kafka: IllegalStateException)."""


class OffsetPosition(NamedTuple):
    offset: int
    position: int


class TimestampOffset(NamedTuple):
    timestamp: int
    offset: int


#: Reads the search key of slot n from the map.
_KeyFn = Callable[[MappedBuffer, int], int]


def round_down(value: int, multiple: int) -> int:
    return value // multiple * multiple


#: Bytes written ahead of the entries: one page of the map.
PAGE_BYTES = mmap.PAGESIZE


class AbstractIndex:
    """The shared machinery: file creation and preallocation, the map, resize/trim, binary search."""

    ENTRY_SIZE: ClassVar[int]
    _KIND: ClassVar[str]

    def __init__(self, path: Path, base_offset: int, max_index_size: int, writable: bool) -> None:
        self._path = Path(path)
        self._base_offset = base_offset
        self._max_index_size = max_index_size
        self._writable = writable
        # Reentrant because public operations call each other (reset → resize) under the lock.
        self._lock = threading.RLock()
        self._mm: FileMap | None = None
        self._closed = False
        newly_created = False
        if writable:
            try:
                fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                newly_created = True
            except FileExistsError:
                fd = os.open(self._path, os.O_RDWR)
        else:
            fd = os.open(self._path, os.O_RDONLY)
        try:
            if newly_created:
                if max_index_size < self.ENTRY_SIZE:
                    os.unlink(self._path)
                    raise ValueError(f"invalid max index size {max_index_size} for {self._path}")
                # ftruncate makes a sparse file: preallocation costs no disk until entries are written.
                os.ftruncate(fd, round_down(max_index_size, self.ENTRY_SIZE))
            self._length = os.fstat(fd).st_size
            self._map(fd)
        finally:
            os.close(fd)
        self._max_entries = self._length // self.ENTRY_SIZE
        # Kafka trusts an existing file completely: every whole entry in it counts.
        self._entries = 0 if newly_created else self._max_entries
        #: Bytes from the file's start known to be written, not holes of the sparse preallocation.
        self._written_to = 0 if newly_created else round_down(self._length, PAGE_BYTES)
        self._load_last_entry()

    # -- map management ------------------------------------------------------------------------

    def _map(self, fd: int) -> None:
        if self._length == 0:
            self._mm = None  # mmap cannot map zero bytes; an empty index needs no map.
        else:
            self._mm = FileMap(fd, self._length, writable=self._writable)

    def _unmap(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None

    def _write_ahead(self, position: int, size: int) -> None:
        """Before an entry goes into the map at ``position``: fill the page(s) it lands on with
        zeros through ``pwrite`` if they are still holes of the sparse file. A store into a mapped
        hole makes the filesystem allocate inside the page fault, which on ext4 took milliseconds
        with thousands of indexes mapped (a shutdown of 10,000 partitions: half a minute); through
        ``pwrite`` it takes microseconds. Only bytes past the valid entries are written."""
        end = position + size
        if end <= self._written_to:
            return
        start = max(position, self._written_to)
        stop = min(-(-end // PAGE_BYTES) * PAGE_BYTES, self._length)
        fd = os.open(self._path, os.O_WRONLY)
        try:
            os.pwrite(fd, bytes(stop - start), start)
        finally:
            os.close(fd)
        self._written_to = stop

    def _buf(self) -> MappedBuffer:
        if self._closed:
            raise ValueError(f"index {self._path} is closed")
        mm = self._mm
        if mm is None:  # only when the file is empty, in which case no slot is ever read
            raise IndexError(f"index {self._path} has no entries")
        return mm.buffer

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"index {self._path} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if not self._writable:
            raise ValueError(f"index {self._path} was opened read-only")

    # -- hooks for subclasses ------------------------------------------------------------------

    def _relative_offset_at(self, mm: MappedBuffer, n: int) -> int:
        raise NotImplementedError

    def _load_last_entry(self) -> None:
        raise NotImplementedError

    # -- properties ----------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._path

    @property
    def base_offset(self) -> int:
        return self._base_offset

    @property
    def max_index_size(self) -> int:
        return self._max_index_size

    @property
    def writable(self) -> bool:
        return self._writable

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def max_entries(self) -> int:
        return self._max_entries

    @property
    def is_full(self) -> bool:
        return self._entries >= self._max_entries

    @property
    def length(self) -> int:
        """The file's length in bytes, preallocated space included."""
        return self._length

    @property
    def size_bytes(self) -> int:
        """Bytes of valid entries (Kafka's ``sizeInBytes``); no I/O."""
        return self._entries * self.ENTRY_SIZE

    @property
    def is_closed(self) -> bool:
        return self._closed

    # -- offsets -------------------------------------------------------------------------------

    def relative_offset(self, offset: int) -> int:
        """``offset - base_offset``; IndexOffsetOverflowError unless it fits in [0, int32 max]."""
        relative = offset - self._base_offset
        if relative < 0 or relative > INT32_MAX:
            raise IndexOffsetOverflowError(
                f"integer overflow for offset {offset} (base offset {self._base_offset}) in {self._path}"
            )
        return relative

    def can_append_offset(self, offset: int) -> bool:
        return 0 <= offset - self._base_offset <= INT32_MAX

    # -- binary search -------------------------------------------------------------------------

    def _largest_lower_bound(self, target: int, key_at: _KeyFn) -> int:
        """The last slot whose key is ≤ ``target``, or -1. Keys must be non-decreasing."""
        n = self._entries
        if n == 0:
            return -1
        mm = self._buf()
        if key_at(mm, 0) > target:
            return -1
        lo, hi = 0, n - 1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if key_at(mm, mid) <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _smallest_upper_bound(self, target: int, key_at: _KeyFn) -> int:
        """The first slot whose key is ≥ ``target``, or -1."""
        n = self._entries
        if n == 0:
            return -1
        mm = self._buf()
        if key_at(mm, n - 1) < target:
            return -1
        lo, hi = 0, n - 1
        while lo < hi:
            mid = (lo + hi) >> 1
            if key_at(mm, mid) >= target:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _first_slot_with_offset_at_least(self, offset: int) -> int:
        """The number of entries whose offset is below ``offset``."""
        target = offset - self._base_offset
        slot = self._smallest_upper_bound(target, self._relative_offset_at)
        return self._entries if slot < 0 else slot

    # -- mutation ------------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is ≥ ``offset``; an offset past the last entry does nothing."""
        with self._lock:
            self._check_writable()
            self._truncate_to_entries(self._first_slot_with_offset_at_least(offset))

    def _truncate_to_entries(self, entries: int) -> None:
        self._entries = entries
        self._load_last_entry()

    def truncate(self) -> None:
        """Remove every entry and give the file its full preallocated size back (same as :meth:`reset`)."""
        self.reset()

    def reset(self) -> None:
        """Empty the index and resize the file to ``max_index_size``; used before recovery rebuilds it."""
        with self._lock:
            self._check_writable()
            self._truncate_to_entries(0)
            self.resize(self._max_index_size)

    def resize(self, new_size: int) -> bool:
        """Set the file length to ``roundDown(new_size, entry size)`` and remap it.

        Returns False if the length is already that. Raises ValueError if it would cut off entries.
        """
        with self._lock:
            self._check_writable()
            rounded = round_down(max(new_size, 0), self.ENTRY_SIZE)
            if rounded == self._length:
                return False
            if rounded < self._entries * self.ENTRY_SIZE:
                raise ValueError(
                    f"cannot resize {self._path} to {rounded} bytes: it holds {self._entries} entries"
                )
            # Unmap first: touching a mapped page beyond a shrunken file's end raises SIGBUS.
            self._unmap()
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                os.ftruncate(fd, rounded)
                # Pages past the shorter of the two lengths are holes now (or gone).
                self._written_to = min(self._written_to, round_down(min(self._length, rounded), PAGE_BYTES))
                self._length = rounded
                self._map(fd)
            finally:
                os.close(fd)
            self._max_entries = rounded // self.ENTRY_SIZE
            self._load_last_entry()
            return True

    def trim_to_valid_size(self) -> bool:
        """Shrink the file to exactly its entries (roll and close)."""
        with self._lock:
            return self.resize(self._entries * self.ENTRY_SIZE)

    def flush(self) -> None:
        """Force the mapped entries to disk (msync)."""
        with self._lock:
            if self._mm is not None and self._writable and not self._closed:
                self._mm.flush()

    def close(self) -> None:
        """Trim a writable index to its valid size, then unmap it. Idempotent."""
        with self._lock:
            if self._closed:
                return
            try:
                # A file deleted behind the index's back must not be brought back by the trim.
                if self._writable and self._path.exists():
                    self.trim_to_valid_size()
            finally:
                self._unmap()
                self._closed = True

    def close_handler(self) -> None:
        """Unmap without trimming (the file is about to be deleted or was found corrupt)."""
        with self._lock:
            self._unmap()
            self._closed = True

    def delete_if_exists(self) -> bool:
        """Unmap and delete the file; True if a file was deleted. The index is closed afterwards."""
        with self._lock:
            self.close_handler()
            try:
                self._path.unlink()
                return True
            except FileNotFoundError:
                return False

    def rename_to(self, path: Path) -> None:
        """Rename the file (the map stays valid across a rename). The new path is kept even if the
        rename fails, as Kafka does, so a retry targets the intended name."""
        with self._lock:
            try:
                os.replace(self._path, path)
            finally:
                self._path = Path(path)

    def update_parent_dir(self, parent: Path) -> None:
        with self._lock:
            self._path = Path(parent) / self._path.name

    def _check_length_multiple(self) -> None:
        if self._length % self.ENTRY_SIZE != 0:
            raise CorruptIndexError(
                f"{self._KIND} index file {self._path} is corrupt: found {self._length} bytes, "
                f"which is not a multiple of {self.ENTRY_SIZE}"
            )

    def _valid_bytes(self) -> bytes:
        if self._entries == 0:
            return b""
        with memoryview(self._buf()) as view:
            return view[: self._entries * self.ENTRY_SIZE].tobytes()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({str(self._path)!r}, base_offset={self._base_offset}, "
            f"entries={self._entries}, max_entries={self._max_entries})"
        )


def read_last_entry(path: Path, entry_size: int) -> bytes | None:
    """The last whole ``entry_size``-byte entry of an index file (as the index would count entries:
    ``length // entry_size``), or None if the file is missing or shorter than one entry."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        entries = os.fstat(fd).st_size // entry_size
        if entries == 0:
            return None
        raw = os.pread(fd, entry_size, (entries - 1) * entry_size)
    finally:
        os.close(fd)
    return raw if len(raw) == entry_size else None


def looks_untrimmed(path: Path, entry_size: int, max_index_size: int) -> bool:
    """Seed 003's cheap startup check: does this inactive segment's index look like a preallocated
    file that was never trimmed (the KAFKA-19200 signature)?

    Costs one ``stat`` and a read of the last entry. Kafka preallocates an index to
    ``roundDown(max_index_size, entry_size)`` zero bytes and trims it at roll or close, so a crash in
    between leaves a file whose tail is zeros. Opened as is, every zero slot counts as an entry and
    lookups go wrong; a segment below the recovery point is not rebuilt, so nothing would notice.

    Returns True when the file holds more than one entry and its last entry is all zero bytes. The
    classic case has exactly the preallocated size, but the test does not require it, because
    ``segment.index.bytes`` may have changed since the file was created. A trimmed valid index
    never matches: with two or more entries its last offset (offset index) or last timestamp
    (time index) is strictly above the first, hence non-zero; a single entry may legitimately be
    zeros, so one-entry files are never flagged. A missing or misaligned file returns False: the
    first is handled by the segment's own rules, the second by :meth:`OffsetIndex.sanity_check`.
    ``max_index_size`` is accepted so callers state the configured size; a file of exactly
    that size with a zero tail is the case above.
    """
    del max_index_size  # see the docstring: the decision does not depend on it
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        return False
    if size <= entry_size or size % entry_size != 0:
        return False
    raw = read_last_entry(path, entry_size)
    return raw is not None and raw.count(0) == entry_size
