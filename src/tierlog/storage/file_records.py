"""A segment's ``.log`` file: positioned appends, reads, and file regions for zero-copy sends.

The file descriptor is opened on first use so that opening a log with many inactive segments
touches no segment file (seed 003); appends go straight to the kernel with ``pwrite`` so an
acknowledged append survives a crash of the process.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tierlog.errors import CorruptRecordError
from tierlog.records.header import (
    BATCH_HEADER_SIZE,
    HEADER_SIZE_UP_TO_MAGIC,
    LENGTH,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    BatchHeader,
    fast_header_copy,
    fast_write_patched,
)
from tierlog.records.reader import records_min_timestamp
from tierlog.storage.io_errors import disk_errors

_I32 = struct.Struct(">i")
#: Buffers one pwritev may take (Linux's UIO_MAXIOV).
_IOV_MAX = 1024


@dataclass(frozen=True)
class FileRegion:
    """``size`` bytes of a segment file from ``position``: what the broker sends with sendfile."""

    path: Path
    fd: int
    position: int
    size: int

    @disk_errors
    def read_bytes(self) -> bytes:
        return os.pread(self.fd, self.size, self.position)

    @disk_errors
    def duplicate(self) -> FileRegion:
        """The same region on a duplicate descriptor, readable after this file is closed or deleted
        (the caller closes it)."""
        return FileRegion(self.path, os.dup(self.fd), self.position, self.size)


class FileRecords:
    def __init__(self, path: Path, *, preallocate_bytes: int = 0, create: bool = False) -> None:
        self.path = path
        self._fd: int | None = None
        self._size: int | None = None
        self._lock = threading.Lock()
        #: A file this object created: its directory entry is not known to be on disk yet (group_commit).
        self.needs_dir_sync = False
        if create:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            self._fd = fd
            self.needs_dir_sync = True
            if preallocate_bytes > 0 and os.fstat(fd).st_size == 0:
                os.posix_fallocate(fd, 0, preallocate_bytes)
                # A preallocated file's valid bytes end where the data ends, not at EOF.
                self._size = 0

    @property
    def fd(self) -> int:
        fd = self._fd
        if fd is None:
            with self._lock:
                if self._fd is None:
                    self._fd = os.open(self.path, os.O_RDWR)
                fd = self._fd
        return fd

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    @property
    def size_bytes(self) -> int:
        size = self._size
        if size is None:
            size = os.fstat(self._fd).st_size if self._fd is not None else os.stat(self.path).st_size
            self._size = size
        return size

    def set_size(self, size: int) -> None:
        """Set the valid length after recovery found where the data ends (e.g. a preallocated tail)."""
        self._size = size

    def append(self, data: bytes | bytearray | memoryview | Sequence[bytes | bytearray | memoryview]) -> int:
        """Write ``data`` (one buffer, or several written in order with ``pwritev``) at the end."""
        position = self._size
        if position is None:
            position = self.size_bytes
        # A list is the produce path's pieces (a patched header copy and the body): checked first.
        buffers = data if type(data) is list else [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
        total = sum(map(len, buffers))  # byte buffers: a memoryview's len is its bytes here
        written = 0
        if len(buffers) <= _IOV_MAX:
            # Nearly always one call writes it all (a produced batch: its patched header and body).
            fd = self._fd
            written = os.pwritev(self.fd if fd is None else fd, buffers, position)
            if written == total:
                self._size = position + written
                return written
        written = self._write_rest([memoryview(d) for d in buffers], position, written)
        self._size = position + written
        return written

    def append_patched(self, buf: bytes | bytearray | memoryview, position: int, size: int, base_offset: int,
                       partition_leader_epoch: int) -> int:
        """Write the ``size``-byte batch at ``position`` of ``buf`` at the end, its base offset and
        partition leader epoch set in a copy of its header: what :meth:`append` of
        ``[header_copy(...), body]`` writes, in one C call when the install step built it (the
        produce path's write of each batch a client sends)."""
        file_position = self._size
        if file_position is None:
            file_position = self.size_bytes
        fd = self._fd
        written = fast_write_patched(self.fd if fd is None else fd, buf, position, size, file_position, base_offset,
                                     partition_leader_epoch)
        if written != size:
            view = memoryview(buf)
            pieces = [memoryview(fast_header_copy(view, position, base_offset, partition_leader_epoch)),
                      view[position + BATCH_HEADER_SIZE : position + size]]
            written = self._write_rest(pieces, file_position, written)
        self._size = file_position + written
        return written

    def _write_rest(self, views: list[memoryview], position: int, written: int) -> int:
        """Write what is left of ``views`` after ``written`` of their bytes, from ``position +
        written``; the total written."""
        n = written
        while views and n >= len(views[0]):
            n -= len(views.pop(0))
        if views and n:
            views[0] = views[0][n:]
        while views:
            n = os.pwritev(self.fd, views[:_IOV_MAX], position + written)
            written += n
            # A short write leaves the rest for the next call, from where it stopped.
            while views and n >= len(views[0]):
                n -= len(views.pop(0))
            if views and n:
                views[0] = views[0][n:]
        return written

    def read(self, position: int, size: int) -> bytes:
        return os.pread(self.fd, size, position)

    def region(self, position: int, size: int) -> FileRegion:
        return FileRegion(self.path, self.fd, position, size)

    def iter_headers_from(self, start_position: int = 0, end_position: int | None = None) -> Iterator[BatchHeader]:
        """Batch headers from ``start_position``, reading only each batch's 61 header bytes.

        End-of-data rules are Kafka's FileLogInputStream (KAFKA-FACTS §1.6): fewer than 17 bytes
        left or a batch reaching past the end stops silently (a torn tail); a length below 14
        (zero-filled preallocation) or a wrong magic raises CorruptRecordError. The yielded header's
        ``position`` is the file position; its ``buf`` holds only the header bytes.
        """
        end = self.size_bytes if end_position is None else min(end_position, self.size_bytes)
        pos = start_position
        fd = self.fd
        while end - pos >= HEADER_SIZE_UP_TO_MAGIC:
            head = os.pread(fd, BATCH_HEADER_SIZE, pos)
            (length,) = _I32.unpack_from(head, LENGTH)
            if length < MIN_BATCH_LENGTH:
                raise CorruptRecordError(f"{self.path}: record batch size {length} at position {pos} is below the minimum")
            if pos + LOG_OVERHEAD + length > end:
                return
            if head[MAGIC] != MAGIC_V2:
                raise CorruptRecordError(f"{self.path}: unsupported record batch magic {head[MAGIC]} at position {pos}")
            if len(head) < BATCH_HEADER_SIZE or LOG_OVERHEAD + length < BATCH_HEADER_SIZE:
                raise CorruptRecordError(f"{self.path}: record batch at position {pos} is smaller than its header")
            header = BatchHeader(head, 0)
            header.position = pos
            yield header
            pos += LOG_OVERHEAD + length

    def min_record_timestamp(self) -> int | None:
        """The smallest timestamp a reader gets from the file's data records (``records_min_timestamp``
        per batch, LogAppendTime batches from their header alone; control and empty batches are never
        rows), -1 when a record has none; None when the file holds no data record or a batch whose
        records cannot be walked. Reads every CreateTime batch: the tiering copy calls it once per
        segment, beside reading it for the upload."""
        smallest: int | None = None
        for header in self.iter_headers_from(0):
            if header.is_control or header.records_count == 0:
                continue
            if header.timestamp_type == LOG_APPEND_TIME:
                found: int | None = header.max_timestamp
            else:
                found = records_min_timestamp(BatchHeader(self.read(header.position, header.size_bytes), 0))
            if found is None:
                return None
            smallest = found if smallest is None else min(smallest, found)
        return smallest

    def flush(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def sync_data(self) -> None:
        """fdatasync: the data and the size, not the timestamps. Under the lock so that a concurrent
        close cannot hand the descriptor's number to another file in between. A closed file was
        deleted (retention) or closed after a flush (shutdown): nothing is left to sync."""
        with self._lock:
            if self._fd is not None:
                # fdatasync where the platform has it (Linux); looked up per call for fault injection.
                getattr(os, "fdatasync", os.fsync)(self._fd)

    def truncate_to(self, size: int) -> int:
        """Cut the file to ``size`` bytes; return how many were removed."""
        old = self.size_bytes
        os.ftruncate(self.fd, size)
        self._size = size
        return max(0, old - size)

    def trim(self) -> None:
        """Drop a preallocated tail beyond the valid bytes."""
        if self._fd is not None or self.path.exists():
            size = self.size_bytes
            if os.fstat(self.fd).st_size != size:
                os.ftruncate(self.fd, size)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def rename_to(self, path: Path) -> None:
        os.replace(self.path, path)
        self.path = path
