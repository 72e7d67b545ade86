"""The ``.index`` file: relative offset → file position (KAFKA-FACTS §2.3)."""

from __future__ import annotations

import sys
from array import array
from operator import le, lt
from pathlib import Path

from tierlog._util.mapped import MappedBuffer
from tierlog.errors import CorruptIndexError, InvalidOffsetError

#: Kafka's default ``segment.index.bytes``.
from tierlog.storage.index.base import (
    DEFAULT_MAX_INDEX_SIZE,
    I32,
    INT32_MAX,
    OFFSET_ENTRY,
    OFFSET_ENTRY_SIZE,
    AbstractIndex,
    IndexFullError,
    OffsetPosition,
)


class OffsetIndex(AbstractIndex):
    """Sparse map from offset to byte position in the ``.log``: 8-byte entries, int32 offset relative
    to the base offset, then int32 position."""

    ENTRY_SIZE = OFFSET_ENTRY_SIZE
    _KIND = "offset"

    def __init__(
        self,
        path: Path,
        base_offset: int,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
        writable: bool = True,
    ) -> None:
        self._last_offset = base_offset
        super().__init__(path, base_offset, max_index_size, writable)

    def _relative_offset_at(self, mm: MappedBuffer, n: int) -> int:
        return int(I32.unpack_from(mm, n * OFFSET_ENTRY_SIZE)[0])

    def _position_at(self, mm: MappedBuffer, n: int) -> int:
        return int(I32.unpack_from(mm, n * OFFSET_ENTRY_SIZE + 4)[0])

    def _parse(self, mm: MappedBuffer, n: int) -> OffsetPosition:
        rel, pos = OFFSET_ENTRY.unpack_from(mm, n * OFFSET_ENTRY_SIZE)
        return OffsetPosition(self._base_offset + rel, pos)

    def _load_last_entry(self) -> None:
        if self._entries == 0:
            self._last_offset = self._base_offset
        else:
            self._last_offset = self._base_offset + self._relative_offset_at(self._buf(), self._entries - 1)

    @property
    def last_offset(self) -> int:
        """The last indexed offset, or the base offset when empty."""
        return self._last_offset

    def last_entry(self) -> OffsetPosition:
        """The last entry, or ``(base_offset, 0)`` when empty."""
        with self._lock:
            if self._entries == 0:
                return OffsetPosition(self._base_offset, 0)
            return self._parse(self._buf(), self._entries - 1)

    def last_entry_position(self) -> OffsetPosition:
        """Same as :meth:`last_entry`; the name reads better where only the position is wanted."""
        return self.last_entry()

    def entry(self, n: int) -> OffsetPosition:
        with self._lock:
            if n < 0 or n >= self._entries:
                raise IndexError(f"attempt to fetch entry {n} from {self._path}, which has {self._entries} entries")
            return self._parse(self._buf(), n)

    def append(self, offset: int, position: int) -> None:
        """Index ``offset`` at byte ``position``. Offsets must strictly increase.

        Without this index's lock (~0.2 µs per entry): its only writer is the log that owns it, under
        the log's lock -- the append, and the roll, truncation, recovery and close that also resize,
        trim or close the index; and every reader of a log's active segment (reads, the fetch upper
        bound, ListOffsets by timestamp) holds that lock too. An append only fills a slot past the entries and
        then counts it, so a reader under this lock alone still sees whole entries."""
        # Once per index.interval.bytes of appends (every 16 KiB batch): every check in one
        # condition over fields; :meth:`_refuse_append` raises the exact error when one fails.
        entries = self._entries
        relative = offset - self._base_offset
        if (self._closed or not self._writable or entries >= self._max_entries
                or (entries != 0 and offset <= self._last_offset) or relative < 0 or relative > INT32_MAX
                or position < 0 or position > INT32_MAX):
            self._refuse_append(offset, position)
        at = entries * OFFSET_ENTRY_SIZE
        if at + OFFSET_ENTRY_SIZE > self._written_to:
            self._write_ahead(at, OFFSET_ENTRY_SIZE)
        mm = self._mm
        OFFSET_ENTRY.pack_into(self._buf() if mm is None else mm.buffer, at, relative, position)
        self._entries = entries + 1
        self._last_offset = offset

    def _refuse_append(self, offset: int, position: int) -> None:
        """Raise what :meth:`append` refuses ``(offset, position)`` for, checked in Kafka's order."""
        self._check_writable()
        entries = self._entries
        if entries >= self._max_entries:
            raise IndexFullError(f"attempt to append to a full index {self._path} (size = {entries})")
        if entries != 0 and offset <= self._last_offset:
            raise InvalidOffsetError(
                f"attempt to append an offset {offset} to position {entries} no larger than the "
                f"last offset appended ({self._last_offset}) to {self._path}"
            )
        self.relative_offset(offset)  # raises, naming the index, if it does not fit
        raise ValueError(f"position {position} does not fit an int32 in {self._path}")

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The entry with the largest offset ≤ ``target_offset``, or ``(base_offset, 0)``."""
        with self._lock:
            self._check_open()
            slot = self._largest_lower_bound(target_offset - self._base_offset, self._relative_offset_at)
            if slot < 0:
                return OffsetPosition(self._base_offset, 0)
            return self._parse(self._buf(), slot)

    def fetch_upper_bound_offset(self, fetch_position: int, fetch_size: int) -> OffsetPosition | None:
        """The first entry whose position is ≥ ``fetch_position + fetch_size``, or None: the offset
        a fetch of ``fetch_size`` bytes starting at ``fetch_position`` cannot reach."""
        with self._lock:
            self._check_open()
            slot = self._smallest_upper_bound(fetch_position + fetch_size, self._position_at)
            if slot < 0:
                return None
            return self._parse(self._buf(), slot)

    def sanity_check(self) -> None:
        """Raise CorruptIndexError naming the file if it cannot be a valid offset index: Kafka's two
        checks plus every entry in order (relative offsets ≥ 0 and strictly increasing, positions
        ≥ 0 and non-decreasing), which is what catches a zero-filled preallocated tail."""
        with self._lock:
            self._check_open()
            if self._entries != 0 and self._last_offset < self._base_offset:
                raise CorruptIndexError(
                    f"corrupt offset index {self._path}: it has non-zero size but the last offset is "
                    f"{self._last_offset}, which is less than the base offset {self._base_offset}"
                )
            self._check_length_multiple()
            if self._entries == 0:
                return
            ints = array("i", self._valid_bytes())
            if sys.byteorder == "little":
                ints.byteswap()
            offsets, positions = ints[0::2], ints[1::2]
            if offsets[0] < 0 or positions[0] < 0:
                raise CorruptIndexError(
                    f"corrupt offset index {self._path}: entry 0 is negative ({offsets[0]}, {positions[0]})"
                )
            # map over C comparisons keeps a full scan of a large index in the milliseconds; the
            # slow loop only runs to name the first bad entry.
            if not all(map(lt, offsets, offsets[1:])):
                n = next(i for i in range(1, len(offsets)) if offsets[i] <= offsets[i - 1])
                raise CorruptIndexError(
                    f"corrupt offset index {self._path}: entry {n} has offset "
                    f"{self._base_offset + offsets[n]}, not above entry {n - 1}'s "
                    f"{self._base_offset + offsets[n - 1]}"
                )
            if not all(map(le, positions, positions[1:])):
                n = next(i for i in range(1, len(positions)) if positions[i] < positions[i - 1])
                raise CorruptIndexError(
                    f"corrupt offset index {self._path}: entry {n} has position {positions[n]}, "
                    f"below entry {n - 1}'s {positions[n - 1]}"
                )
