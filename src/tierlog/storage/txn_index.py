"""The ``.txnindex`` file: the aborted transactions whose ABORT marker landed in a segment
(KAFKA-FACTS §2.5).

Entries are 34 bytes (int16 version 0, int64 producer id, first offset, last offset, last stable
offset), appended in order of strictly increasing last offset. Unlike the offset and time indexes
the file is neither preallocated nor mapped: it is created on the first append, because almost no
segment ever holds an aborted transaction, and it is read with plain reads, because it is small
and read front to back.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from tierlog.errors import CorruptIndexError

log = logging.getLogger(__name__)

ABORTED_TXN_VERSION = 0
ABORTED_TXN_SIZE = 34
_ENTRY = struct.Struct(">hqqqq")


@dataclass(frozen=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def to_bytes(self) -> bytes:
        return _ENTRY.pack(
            ABORTED_TXN_VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview, offset: int = 0) -> AbortedTxn:
        """Decode one entry. Like Kafka, only the first byte is taken as the version (the int16 is
        always 0); a higher version is rejected with ValueError."""
        if len(data) - offset < ABORTED_TXN_SIZE:
            raise ValueError(f"an aborted transaction entry needs {ABORTED_TXN_SIZE} bytes")
        version = data[offset]
        if version > ABORTED_TXN_VERSION:
            raise ValueError(f"unexpected aborted transaction version {version}")
        _, producer_id, first, last, lso = _ENTRY.unpack_from(data, offset)
        return cls(producer_id, first, last, lso)


class TxnIndexSearchResult(NamedTuple):
    """Aborted transactions overlapping a fetch; ``is_complete`` is True when this segment already
    holds every one that can matter (an entry's LSO reached the upper bound), so later segments
    need not be searched."""

    aborted_transactions: list[AbortedTxn]
    is_complete: bool


class TransactionIndex:
    def __init__(self, path: Path, start_offset: int) -> None:
        self._path = Path(path)
        self.start_offset = start_offset
        self._lock = threading.RLock()
        self._fd: int | None = None
        #: Write position: the end of the last whole entry.
        self._end = 0
        #: Last offset of the last entry, once known; None means "read it from the file if needed".
        self._last_offset: int | None = None
        self._last_offset_known = False
        #: The file was found missing and has not been created since. Only this object creates it
        #: (:meth:`_open_for_write`; a live segment's index is written through its segment alone),
        #: so a read_committed fetch -- librdkafka's default -- need not try to open it again every
        #: time: a failed open and its exception cost ~7 µs per fetch of a log with no aborted
        #: transaction. Renames and deletion forget it (the next read looks again).
        self._absent = False

    @property
    def path(self) -> Path:
        return self._path

    # -- file handling -------------------------------------------------------------------------

    def _open_for_write(self) -> int:
        """Open (creating) the file and position appends after its last whole entry."""
        if self._fd is None:
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
            size = os.fstat(fd).st_size
            whole = size - size % ABORTED_TXN_SIZE
            if whole != size:
                # A torn tail would shift every later entry; drop it (sanity_check reports such a file
                # before anyone appends, so this is reached only by a caller that chose to continue).
                log.warning("dropping %d torn trailing bytes of %s", size - whole, self._path)
                os.ftruncate(fd, whole)
            self._fd = fd
            self._end = whole
            self._absent = False
        return self._fd

    def _read_all(self) -> bytes:
        if self._fd is not None:
            size = os.fstat(self._fd).st_size
            return os.pread(self._fd, size, 0) if size else b""
        if self._absent:
            return b""
        try:
            return self._path.read_bytes()
        except FileNotFoundError:
            self._absent = True
            return b""

    def _iter(self) -> list[tuple[int, AbortedTxn]]:
        """(position, entry) for every whole entry; a partial trailing entry is ignored, as Kafka does."""
        data = self._read_all()
        out: list[tuple[int, AbortedTxn]] = []
        for pos in range(0, len(data) - ABORTED_TXN_SIZE + 1, ABORTED_TXN_SIZE):
            try:
                out.append((pos, AbortedTxn.from_bytes(data, pos)))
            except ValueError as e:
                raise CorruptIndexError(f"transaction index {self._path}: {e} at byte {pos}") from None
        return out

    # -- operations ----------------------------------------------------------------------------

    def append(self, aborted_txn: AbortedTxn) -> None:
        """Append an entry; its last offset must be above the previous entry's."""
        with self._lock:
            if not self._last_offset_known:
                entries = self._iter()
                self._last_offset = entries[-1][1].last_offset if entries else None
                self._last_offset_known = True
            if self._last_offset is not None and self._last_offset >= aborted_txn.last_offset:
                raise ValueError(
                    f"the last offset of appended transactions must increase sequentially, but "
                    f"{aborted_txn.last_offset} is not greater than current last offset {self._last_offset} "
                    f"of index {self._path}"
                )
            fd = self._open_for_write()
            data = aborted_txn.to_bytes()
            written = os.pwrite(fd, data, self._end)
            if written != len(data):  # pragma: no cover - regular files do not short-write
                raise OSError(f"short write to {self._path}")
            self._end += len(data)
            self._last_offset = aborted_txn.last_offset

    def all_entries(self) -> list[AbortedTxn]:
        with self._lock:
            return [txn for _, txn in self._iter()]

    def is_empty(self) -> bool:
        with self._lock:
            return not self._iter()

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """Entries with last offset ≥ ``fetch_offset`` and first offset < ``upper_bound_offset``;
        complete once an entry's last stable offset reaches the upper bound."""
        with self._lock:
            found: list[AbortedTxn] = []
            for _, txn in self._iter():
                if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                    found.append(txn)
                if txn.last_stable_offset >= upper_bound_offset:
                    return TxnIndexSearchResult(found, True)
            return TxnIndexSearchResult(found, False)

    def truncate_to(self, offset: int) -> None:
        """Cut the file at the first entry whose last offset is ≥ ``offset``."""
        with self._lock:
            new_last: int | None = None
            for pos, txn in self._iter():
                if txn.last_offset >= offset:
                    fd = self._open_for_write()
                    os.ftruncate(fd, pos)
                    self._end = pos
                    self._last_offset = new_last
                    self._last_offset_known = True
                    return
                new_last = txn.last_offset

    def reset(self) -> None:
        """Empty the file (recovery rebuilds it). A missing file stays missing."""
        with self._lock:
            if self._fd is not None:
                os.ftruncate(self._fd, 0)
            elif self._path.exists():
                os.truncate(self._path, 0)
            self._end = 0
            self._last_offset = None
            self._last_offset_known = True

    def sanity_check(self) -> None:
        """CorruptIndexError naming the file if an entry ends before the segment's start offset, an
        entry has an unknown version, or the file is not a whole number of entries (Kafka checks only
        the first; the others make sure a torn file is rebuilt rather than appended to)."""
        with self._lock:
            for _, txn in self._iter():
                if txn.last_offset < self.start_offset:
                    raise CorruptIndexError(
                        f"last offset of aborted transaction {txn} in index {self._path} is less than "
                        f"start offset {self.start_offset}"
                    )
            size = os.fstat(self._fd).st_size if self._fd is not None else _size_or_zero(self._path)
            if size % ABORTED_TXN_SIZE != 0:
                raise CorruptIndexError(
                    f"transaction index {self._path} is corrupt: {size} bytes is not a multiple of {ABORTED_TXN_SIZE}"
                )

    def flush(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.fsync(self._fd)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self._last_offset_known = False

    def delete_if_exists(self) -> bool:
        with self._lock:
            self.close()
            self._absent = False
            try:
                self._path.unlink()
                return True
            except FileNotFoundError:
                return False

    def rename_to(self, path: Path) -> None:
        """Rename the file if it exists (it may never have been created); the open descriptor, if
        any, follows the file."""
        with self._lock:
            try:
                os.replace(self._path, path)
            except FileNotFoundError:
                pass
            self._path = Path(path)
            self._absent = False

    def update_parent_dir(self, parent: Path) -> None:
        with self._lock:
            self._path = Path(parent) / self._path.name
            self._absent = False

    def __repr__(self) -> str:
        return f"TransactionIndex({str(self._path)!r}, start_offset={self.start_offset})"


def _size_or_zero(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0
