"""The ``.timeindex`` file: timestamp → relative offset (KAFKA-FACTS §2.4)."""

from __future__ import annotations

from operator import le, lt
from pathlib import Path

from tierlog._util.mapped import MappedBuffer
from tierlog.errors import CorruptIndexError, InvalidOffsetError

#: Kafka's default ``segment.index.bytes``.
from tierlog.storage.index.base import (
    DEFAULT_MAX_INDEX_SIZE,
    I32,
    I64,
    INT32_MAX,
    NO_TIMESTAMP,
    TIME_ENTRY,
    TIME_ENTRY_SIZE,
    AbstractIndex,
    IndexFullError,
    TimestampOffset,
    TimestampOrderError,
    read_last_entry,
)

#: A NamedTuple built without its Python-level ``__new__`` on the append path.
_new_tuple = tuple.__new__


class TimeIndex(AbstractIndex):
    """Map from timestamp to offset: 12-byte entries, int64 timestamp then int32 relative offset.

    An entry (t, o) means: the largest timestamp seen before offset o is t.
    """

    ENTRY_SIZE = TIME_ENTRY_SIZE
    _KIND = "time"

    def __init__(
        self,
        path: Path,
        base_offset: int,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
        writable: bool = True,
    ) -> None:
        self._last = TimestampOffset(NO_TIMESTAMP, base_offset)
        super().__init__(path, base_offset, max_index_size, writable)

    def _timestamp_at(self, mm: MappedBuffer, n: int) -> int:
        return int(I64.unpack_from(mm, n * TIME_ENTRY_SIZE)[0])

    def _relative_offset_at(self, mm: MappedBuffer, n: int) -> int:
        return int(I32.unpack_from(mm, n * TIME_ENTRY_SIZE + 8)[0])

    def _parse(self, mm: MappedBuffer, n: int) -> TimestampOffset:
        ts, rel = TIME_ENTRY.unpack_from(mm, n * TIME_ENTRY_SIZE)
        return TimestampOffset(ts, self._base_offset + rel)

    def _load_last_entry(self) -> None:
        if self._entries == 0:
            self._last = TimestampOffset(NO_TIMESTAMP, self._base_offset)
        else:
            self._last = self._parse(self._buf(), self._entries - 1)

    @property
    def is_full(self) -> bool:
        # One slot stays free for the final entry written at roll or close (skip_full_check=True).
        return self._entries >= self._max_entries - 1

    def last_entry(self) -> TimestampOffset:
        """The last entry, or ``(-1, base_offset)`` when empty."""
        return self._last

    def entry(self, n: int) -> TimestampOffset:
        with self._lock:
            if n < 0 or n >= self._entries:
                raise IndexError(f"attempt to fetch entry {n} from {self._path}, which has {self._entries} entries")
            return self._parse(self._buf(), n)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append ``(timestamp, offset)`` if the timestamp is above the last one.

        An offset below the last entry's raises InvalidOffsetError; a timestamp below the last one
        raises TimestampOrderError; a repeat of the last timestamp is ignored (roll and close append
        the segment's max timestamp, which usually is already the last entry).
        """
        # Once per index.interval.bytes of appends (every 16 KiB batch): every check in one
        # condition over fields; :meth:`_refuse_append` raises the exact error when one fails.
        # Without this index's lock, as OffsetIndex.append: the owning log's lock orders it with
        # every other writer and every reader of an active segment's index.
        entries = self._entries
        last_timestamp, last_offset = last = self._last
        relative = offset - self._base_offset
        if (self._closed or not self._writable or entries >= self._max_entries - 1
                or (entries != 0 and (offset < last_offset or timestamp < last_timestamp))
                or relative < 0 or relative > INT32_MAX):
            self._refuse_append(timestamp, offset, skip_full_check, last)
        if timestamp <= last_timestamp:
            return
        at = entries * TIME_ENTRY_SIZE
        if at + TIME_ENTRY_SIZE > self._written_to:
            self._write_ahead(at, TIME_ENTRY_SIZE)
        mm = self._mm
        TIME_ENTRY.pack_into(self._buf() if mm is None else mm.buffer, at, timestamp, relative)
        self._entries = entries + 1
        # The NamedTuple built without its Python-level __new__ (~0.1 µs).
        self._last = _new_tuple(TimestampOffset, (timestamp, offset))

    def _refuse_append(self, timestamp: int, offset: int, skip_full_check: bool, last: TimestampOffset) -> None:
        """Raise what :meth:`maybe_append` refuses ``(timestamp, offset)`` for, checked in its order;
        return when nothing is wrong after all (a full index with the check skipped, or a repeat of
        the last timestamp whose offset does not fit: neither is an error)."""
        self._check_writable()
        entries = self._entries
        if not skip_full_check and entries >= self._max_entries - 1:  # is_full
            raise IndexFullError(f"attempt to append to a full time index {self._path} (size = {entries})")
        if entries != 0 and offset < last.offset:
            raise InvalidOffsetError(
                f"attempt to append an offset ({offset}) to slot {entries} no larger than the last "
                f"offset appended ({last.offset}) to {self._path}"
            )
        if entries != 0 and timestamp < last.timestamp:
            raise TimestampOrderError(
                f"attempt to append a timestamp ({timestamp}) to slot {entries} no larger than the "
                f"last timestamp appended ({last.timestamp}) to {self._path}"
            )
        if timestamp <= last.timestamp:
            return
        self.relative_offset(offset)  # raises, naming the index, if it does not fit
        if entries >= self._max_entries:
            raise IndexFullError(f"no room for a time index entry in {self._path} (size = {entries})")

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the largest timestamp ≤ ``target_timestamp``, or ``(-1, base_offset)``."""
        with self._lock:
            self._check_open()
            slot = self._largest_lower_bound(target_timestamp, self._timestamp_at)
            if slot < 0:
                return TimestampOffset(NO_TIMESTAMP, self._base_offset)
            return self._parse(self._buf(), slot)

    def sanity_check(self) -> None:
        """Raise CorruptIndexError naming the file if it cannot be a valid time index: Kafka's three
        checks plus every entry in order (timestamps strictly increasing, relative offsets ≥ 0 and
        non-decreasing), which is what catches a zero-filled preallocated tail."""
        with self._lock:
            self._check_open()
            if self._entries != 0:
                first_ts = self._timestamp_at(self._buf(), 0)
                if self._last.timestamp < first_ts:
                    raise CorruptIndexError(
                        f"corrupt time index {self._path}: it has non-zero size but the last timestamp is "
                        f"{self._last.timestamp}, which is less than the first timestamp {first_ts}"
                    )
                if self._last.offset < self._base_offset:
                    raise CorruptIndexError(
                        f"corrupt time index {self._path}: it has non-zero size but the last offset is "
                        f"{self._last.offset}, which is less than the base offset {self._base_offset}"
                    )
            self._check_length_multiple()
            if self._entries == 0:
                return
            pairs = TIME_ENTRY.iter_unpack(self._valid_bytes())
            timestamps, rels = (list(column) for column in zip(*pairs, strict=True))
            if rels[0] < 0:
                raise CorruptIndexError(f"corrupt time index {self._path}: entry 0 has a negative offset")
            if not all(map(lt, timestamps, timestamps[1:])):
                n = next(i for i in range(1, len(timestamps)) if timestamps[i] <= timestamps[i - 1])
                raise CorruptIndexError(
                    f"corrupt time index {self._path}: entry {n} has timestamp {timestamps[n]}, not above "
                    f"entry {n - 1}'s {timestamps[n - 1]}"
                )
            if not all(map(le, rels, rels[1:])):
                n = next(i for i in range(1, len(rels)) if rels[i] < rels[i - 1])
                raise CorruptIndexError(
                    f"corrupt time index {self._path}: entry {n} has offset {self._base_offset + rels[n]}, "
                    f"below entry {n - 1}'s {self._base_offset + rels[n - 1]}"
                )

    @staticmethod
    def last_entry_from_file(path: Path, base_offset: int) -> TimestampOffset | None:
        """The last whole entry of a time index file, reading only those 12 bytes; None if the file
        is missing or holds no entry. A preallocated, never-trimmed file yields its zero tail, so
        check :func:`looks_untrimmed` first where that matters."""
        raw = read_last_entry(path, TIME_ENTRY_SIZE)
        if raw is None:
            return None
        ts, rel = TIME_ENTRY.unpack(raw)
        return TimestampOffset(ts, base_offset + rel)

    @staticmethod
    def last_timestamp_from_file(path: Path) -> int | None:
        """The segment's largest timestamp as the time index records it, without mapping the file.
        Same caveats as :meth:`last_entry_from_file`."""
        raw = read_last_entry(path, TIME_ENTRY_SIZE)
        return None if raw is None else int(I64.unpack_from(raw)[0])
