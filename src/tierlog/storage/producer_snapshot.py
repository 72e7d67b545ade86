"""The producer state snapshot file (``<20-digit offset>.snapshot``), byte for byte as Kafka writes it.

Layout (KAFKA-FACTS §2.6, Kafka's ``ProducerSnapshot.json`` version 1 behind a version prefix)::

    int16  version = 1
    uint32 crc     CRC-32C over bytes [6, EOF)
    int32  count
    count × 46-byte entries:
        int64 producerId, int16 epoch, int32 lastSequence, int64 lastOffset, int32 offsetDelta,
        int64 timestamp, int32 coordinatorEpoch, int64 currentTxnFirstOffset (-1 = none)

This module knows only the bytes and the file names; turning entries into in-memory producer state is
``producer_state``'s job, so the format can be tested (and reused by tools) without the state machine.
"""

from __future__ import annotations

import logging
import os
import struct
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from tierlog._util.crc import crc32c
from tierlog._util.files import fsync_dir, write_atomic
from tierlog.errors import CorruptSnapshotError
from tierlog.storage import files

log = logging.getLogger(__name__)

SNAPSHOT_VERSION = 1
SNAPSHOT_SUFFIX = files.SNAPSHOT_SUFFIX
DELETED_SUFFIX = ".deleted"
TMP_SUFFIX = ".tmp"

VERSION_OFFSET = 0
CRC_OFFSET = 2
ENTRIES_OFFSET = 6  # the CRC covers everything from the entry count to the end of the file
COUNT_OFFSET = 6
FIRST_ENTRY_OFFSET = 10
ENTRY_SIZE = 46

_PREFIX = struct.Struct(">hIi")
_ENTRY = struct.Struct(">qhiqiqiq")
_U32 = struct.Struct(">I")
assert _ENTRY.size == ENTRY_SIZE


class SnapshotEntry(NamedTuple):
    """One producer as stored on disk: the newest batch only (Kafka drops the other four)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int  # -1 when the producer has no batch metadata
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int  # -1 when no transaction is open


def encode_snapshot(entries: Sequence[SnapshotEntry]) -> bytes:
    """The file's bytes. The CRC is filled in last, as Kafka patches it after serialising the message."""
    buf = bytearray(FIRST_ENTRY_OFFSET + ENTRY_SIZE * len(entries))
    _PREFIX.pack_into(buf, 0, SNAPSHOT_VERSION, 0, len(entries))
    pos = FIRST_ENTRY_OFFSET
    for entry in entries:
        _ENTRY.pack_into(buf, pos, *entry)
        pos += ENTRY_SIZE
    _U32.pack_into(buf, CRC_OFFSET, crc32c(memoryview(buf)[ENTRIES_OFFSET:]))
    return bytes(buf)


def decode_snapshot(data: bytes | bytearray | memoryview, source: object = "snapshot") -> list[SnapshotEntry]:
    """Parse a snapshot; anything but a well-formed version-1 file with a matching CRC is corrupt.

    Kafka also treats an empty or truncated file as corrupt, so that the loader falls back to an older
    snapshot instead of starting from a state that silently lost producers.
    """
    if len(data) < FIRST_ENTRY_OFFSET:
        raise CorruptSnapshotError(f"{source}: {len(data)} bytes is shorter than the {FIRST_ENTRY_OFFSET}-byte header")
    version, stored_crc, count = _PREFIX.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"{source}: unknown snapshot version {version}")
    computed = crc32c(memoryview(data)[ENTRIES_OFFSET:])
    if stored_crc != computed:
        raise CorruptSnapshotError(
            f"{source}: crc mismatch (stored {stored_crc:#010x}, computed {computed:#010x})"
        )
    # A matching CRC over a wrong length only happens if a writer put the wrong count in, but then the
    # entries cannot be trusted either.
    if count < 0 or FIRST_ENTRY_OFFSET + count * ENTRY_SIZE != len(data):
        raise CorruptSnapshotError(f"{source}: entry count {count} does not match the file size {len(data)}")
    return [SnapshotEntry._make(_ENTRY.unpack_from(data, FIRST_ENTRY_OFFSET + i * ENTRY_SIZE)) for i in range(count)]


def read_snapshot_entries(path: Path) -> list[SnapshotEntry]:
    try:
        data = path.read_bytes()
    except FileNotFoundError as e:
        raise CorruptSnapshotError(f"{path}: missing") from e
    return decode_snapshot(data, path)


def write_snapshot_entries(path: Path, entries: Sequence[SnapshotEntry], *, sync: bool = True) -> None:
    """Write atomically so a crash leaves the old snapshot or the new one, never a torn file that would
    cost a fallback to an older snapshot and a longer replay."""
    write_atomic(path, encode_snapshot(entries), sync=sync)


# -- file names ------------------------------------------------------------------------------------


def snapshot_file_name(offset: int) -> str:
    return files.producer_snapshot_file(Path(), offset).name


def snapshot_path(log_dir: Path, offset: int) -> Path:
    return log_dir / snapshot_file_name(offset)


def list_snapshot_names(log_dir: Path, names: Iterable[str] | None = None) -> dict[int, str]:
    """Every live snapshot in ``log_dir`` by offset (``.deleted`` and ``.tmp`` files are not live).
    ``names`` is a listing the caller already has (the loader lists each partition once)."""
    found: dict[int, str] = {}
    if names is None:
        try:
            names = os.listdir(log_dir)
        except FileNotFoundError:
            return found
    for name in names:
        if name.endswith(SNAPSHOT_SUFFIX):
            try:
                found[files.offset_from_file_name(name)] = name
            except ValueError:
                continue  # not named after an offset: not a producer snapshot
    return found


def list_snapshot_files(log_dir: Path) -> dict[int, Path]:
    return {o: log_dir / n for o, n in list_snapshot_names(log_dir).items()}


def remove_temp_snapshots(log_dir: Path, names: Iterable[str] | None = None) -> None:
    """Delete ``*.snapshot.tmp`` left by a crash inside ``write_atomic``; they were never renamed into
    place, so nothing refers to them."""
    if names is None:
        try:
            names = os.listdir(log_dir)
        except FileNotFoundError:
            return
    for name in names:
        if name.endswith(SNAPSHOT_SUFFIX + TMP_SUFFIX):
            try:
                (log_dir / name).unlink()
            except FileNotFoundError:
                pass


def flush_snapshot_file(path: Path) -> None:
    """fsync a snapshot written with ``sync=False`` (the roll path defers this to the scheduler,
    Kafka's ``flushProducerStateSnapshot``). A snapshot deleted in between is fine."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(path.parent)


# -- the snapshot files of one partition ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SnapshotFile:
    offset: int
    path: Path


class SnapshotFiles:
    """The live snapshot files of one partition directory by offset (Kafka keeps the same index in a
    skip-list map), so lookups on the append and copy paths never list the directory.

    With ``log_dir=None`` the index stays empty and never touches a disk.
    """

    def __init__(self, log_dir: Path | None, names: Iterable[str] | None = None,
                 offsets: Iterable[int] | None = None) -> None:
        self.log_dir = log_dir
        self._offsets: list[int] = []
        # Only names that are not the canonical ``<20 digits>.snapshot`` are stored: a log with
        # thousands of segments has as many snapshots, and building a name or a Path for each at
        # startup would cost more than everything else the load does (seed 003).
        self._odd_names: dict[int, str] = {}
        # written with sync=False (the roll path) and not yet fsynced
        self._unflushed: set[Path] = set()
        self.refresh(names, offsets)

    def refresh(self, names: Iterable[str] | None = None, offsets: Iterable[int] | None = None) -> None:
        """Re-list the directory, e.g. after another component wrote a snapshot into it. ``offsets``
        is a listing already known to be current (the clean-shutdown listing manifest)."""
        if self.log_dir is None:
            return
        if offsets is not None:
            self._offsets = sorted(offsets)
            self._odd_names = {}
            return
        found = list_snapshot_names(self.log_dir, names)
        self._offsets = sorted(found)
        self._odd_names = {o: n for o, n in found.items() if n != snapshot_file_name(o)}

    def _contains(self, offset: int) -> bool:
        i = bisect_left(self._offsets, offset)
        return i < len(self._offsets) and self._offsets[i] == offset

    def _path(self, offset: int) -> Path:
        assert self.log_dir is not None
        return self.log_dir / self._odd_names.get(offset, snapshot_file_name(offset))

    def add(self, offset: int, path: Path, *, synced: bool) -> None:
        if not self._contains(offset):
            insort(self._offsets, offset)
        if path.name != snapshot_file_name(offset):
            self._odd_names[offset] = path.name
        if not synced:
            self._unflushed.add(path)

    def flush(self) -> None:
        pending, self._unflushed = self._unflushed, set()
        for path in sorted(pending):
            flush_snapshot_file(path)

    def __len__(self) -> int:
        return len(self._offsets)

    def offsets(self) -> list[int]:
        return list(self._offsets)

    def files(self) -> list[SnapshotFile]:
        return [SnapshotFile(o, self._path(o)) for o in self._offsets]

    @property
    def latest(self) -> int | None:
        return self._offsets[-1] if self._offsets else None

    @property
    def oldest(self) -> int | None:
        return self._offsets[0] if self._offsets else None

    def get(self, offset: int) -> Path | None:
        return self._path(offset) if self._contains(offset) else None

    def forget(self, offset: int) -> Path | None:
        path = self.get(offset)
        self._odd_names.pop(offset, None)
        if path is not None:
            self._unflushed.discard(path)
            del self._offsets[bisect_right(self._offsets, offset) - 1]
        return path

    def delete(self, offset: int) -> bool:
        path = self.forget(offset)
        if path is None:
            return False
        path.unlink(missing_ok=True)
        return True

    def mark_for_deletion(self, offset: int) -> Path | None:
        """Rename to ``.snapshot.deleted`` and return the new path, or None if there was no such file."""
        path = self.forget(offset)
        if path is None:
            return None
        target = path.with_name(path.name + DELETED_SUFFIX)
        try:
            path.rename(target)
        except FileNotFoundError:
            log.info("producer snapshot %s was already gone when it was to be deleted", path)
            return None
        return target

    def delete_below(self, offset: int) -> None:
        for o in self._offsets[: bisect_left(self._offsets, offset)]:
            self.delete(o)

    def delete_outside(self, low_exclusive: int, high_inclusive: int) -> None:
        for o in list(self._offsets):
            if o > high_inclusive or o <= low_exclusive:
                self.delete(o)

    def delete_all(self) -> None:
        for o in list(self._offsets):
            self.delete(o)

    def remove_strays(self, segment_base_offsets: Iterable[int], names: Iterable[str] | None = None,
                      offsets: Iterable[int] | None = None) -> None:
        """Keep the snapshots at segment bases, plus the single newest other one if it lies above every
        base (the log-end snapshot of a clean shutdown); delete the rest (KAFKA-FACTS §2.12 step 7)."""
        bases = set(segment_base_offsets)
        if self.log_dir is not None and offsets is None:
            # load time is when a crash's half-written temp files are known to be orphans
            names = list(names) if names is not None else None
            remove_temp_snapshots(self.log_dir, names)
        self.refresh(names, offsets)
        strays = [o for o in self._offsets if o not in bases]
        keep = strays[-1] if strays and (not bases or strays[-1] > max(bases)) else None
        for o in strays:
            if o != keep:
                self.delete(o)
