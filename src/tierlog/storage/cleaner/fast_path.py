"""The Python side of the cleaner's compiled loops (:mod:`._fastclean`): one call per batch for the
map pass and one for the rewrite, with the batch header packed here. Anything the compiled loops do
not cover (control batches, compressed or LogAppendTime batches, a batch emptied but kept for its
producer, malformed records) goes back to the Python reference in :mod:`.batches`."""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tierlog._util.crc import crc32c
from tierlog._util.lazy import LazyModule
from tierlog.errors import CorruptRecordError
from tierlog.records.header import (
    BATCH_HEADER_SIZE,
    CRC,
    CRC_START,
    CREATE_TIME,
    DELETE_HORIZON_MASK,
    LOG_OVERHEAD,
    MAGIC_V2,
    BatchHeader,
)
from tierlog.records.reader import _records_region
from tierlog.storage.cleaner.offset_map import OffsetMap

if TYPE_CHECKING:
    from tierlog.storage.cleaner import _fastclean
    from tierlog.storage.cleaner.batches import FilterContext
else:
    # numba takes ~0.5 s of CPU to import: commands that import the cleaner only on the way
    # (``tierlog tier status``, through the remote log manager) must not pay it.
    _fastclean = LazyModule("tierlog.storage.cleaner._fastclean", globals(), "_fastclean")

_HEADER = struct.Struct(">qiibIhiqqqhii")
_U32 = struct.Struct(">I")
#: Most a record can grow when its timestamp delta is re-encoded: a 10-byte varlong where there was
#: one byte, and one more byte of length.
_GROWTH_PER_RECORD = 10


class MapFullError(CorruptRecordError):
    """An empty offset map cannot hold one batch's keys (log.cleaner.dedupe.buffer.size too small)."""


class _Arrays(threading.local):
    """numpy views of the last buffer seen (a read chunk holds many batches), and scratch arrays;
    one set per thread (each cleaner thread has its own)."""

    def __init__(self) -> None:
        self._buf: object = None
        self._arr = np.empty(0, np.uint8)
        self.scratch = np.empty((4, 0), np.int64)
        self._runs: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._outs: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def of(self, buf: bytes) -> np.ndarray:
        if buf is not self._buf:
            self._buf = buf
            self._arr = np.frombuffer(buf, np.uint8)
        return self._arr

    def outs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Scratch arrays for a rewritten run: its output batches' ends, which source batches it
        dropped as superseded, and which output batches need their CRC."""
        if self._outs is None:
            self._outs = (np.empty(4096, np.int64), np.empty(4096, np.uint8), np.empty(4096, np.uint8))
        return self._outs

    def runs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Scratch arrays for one chunk's run of batches (a run longer than them takes more calls)."""
        if self._runs is None:
            self._runs = (np.empty(4096, np.int64), np.empty(4096, np.int64), np.empty(4096, np.int64))
        return self._runs

    def ensure(self, records: int) -> np.ndarray:
        if self.scratch.shape[1] < records:
            self.scratch = np.empty((4, max(records, 2 * self.scratch.shape[1])), np.int64)
        return self.scratch


_ARRAYS = _Arrays()


def map_batch(m: OffsetMap, h: BatchHeader) -> tuple[bool, int]:
    """Put the keys of data batch ``h`` into ``m``: (fitted, keyed records). When they do not fit
    (``m`` not empty) the map is left as before. Raises CorruptRecordError on malformed records."""
    from tierlog.storage.cleaner.batches import batch_keys

    buf, start, end = _records_region(h)
    status, size, highest, keyed = _fastclean.map_batch(
        _ARRAYS.of(buf), start, end, h.records_count, h.base_offset, m.h1, m.h2, m.offsets, m.size, m.slots)
    if status == _fastclean.MALFORMED:
        batch_keys(h)  # raises the exact error
        raise CorruptRecordError(f"batch at offset {h.base_offset}: malformed records")
    if status == _fastclean.OVERFLOW:
        raise MapFullError(f"the cleaner's offset map ({m.capacity} entries) cannot hold the keys of the batch at "
                           f"offset {h.base_offset}: raise log.cleaner.dedupe.buffer.size")
    if status == _fastclean.FULL:
        return False, 0
    m.size = int(size)
    if highest > m.latest_offset:
        m.latest_offset = int(highest)
    return True, int(keyed)


class BatchTable:
    """The map pass's table of the batches it mapped (see ``_fastclean.map_run``): each batch's base
    and last offset, how many map entries hold one of its offsets, where it lies in its file and its
    records. Once the map is complete, the batches with no entry are superseded (every key of theirs
    has a later offset in the map): the rewrite drops them without reading their records again, and
    skips reading runs of them (:class:`Drops`). At most ``max_rows`` batches (48 bytes each) are
    tracked, the first ones of the dirty range; the rest are decided record by record."""

    COLUMNS = ("bases", "lasts", "live", "positions", "sizes", "counts")
    ROW_BYTES = 8 * len(COLUMNS)

    def __init__(self, max_rows: int) -> None:
        self.max_rows = max(0, max_rows)
        self.bases = self.lasts = self.live = self.positions = self.sizes = self.counts = np.empty(0, np.int64)
        self.tracked = 0

    def room_for(self, rows: int) -> None:
        """Grow the arrays (up to ``max_rows``) so ``rows`` more batches fit."""
        wanted = min(self.max_rows, self.tracked + rows)
        if wanted > len(self.bases):
            size = min(self.max_rows, max(wanted, 2 * len(self.bases), 1024))
            for name in self.COLUMNS:
                grown = np.empty(size, np.int64)
                grown[: self.tracked] = getattr(self, name)[: self.tracked]
                setattr(self, name, grown)

    def drops(self, producer_lasts: list[int]) -> Drops:
        """What the rewrite drops unread; ``producer_lasts``: each producer's last data offset (a
        batch ending there may be kept, emptied, for its producer: it is not skipped unread)."""
        superseded, bases, positions, ends, tail = _fastclean.superseded_runs(
            self.bases, self.lasts, self.live, self.positions, self.sizes, self.counts, self.tracked,
            np.array(sorted(producer_lasts), np.int64))
        return Drops(superseded, bases, positions, ends, tail[0], tail[1])

    def superseded(self) -> np.ndarray:
        """Base offsets (sorted) of the batches no map entry points into."""
        return self.drops([]).superseded


@dataclass(frozen=True)
class Drops:
    """The rewrite's share of a map pass (:meth:`BatchTable.drops`): the superseded batches' base
    offsets, and for each one that may be skipped unread, its file position, and where the run of
    such batches from it ends (file position, last offset, records)."""

    superseded: np.ndarray
    skip_bases: np.ndarray
    skip_positions: np.ndarray
    run_ends: np.ndarray
    run_lasts: np.ndarray
    run_records: np.ndarray

    def run_at(self, base_offset: int, file_position: int) -> tuple[int, int, int] | None:
        """(end position, last offset, records) of the run starting with the batch at
        ``file_position`` whose base offset is ``base_offset``, or None when it is not skippable."""
        j = int(np.searchsorted(self.skip_bases, base_offset))
        if j < len(self.skip_bases) and self.skip_bases[j] == base_offset and self.skip_positions[j] == file_position:
            return int(self.run_ends[j]), int(self.run_lasts[j]), int(self.run_records[j])
        return None


_NO_DROPS = Drops(*(np.empty(0, np.int64) for _ in range(6)))


class MapWalk:
    """The map pass's compiled walk over a read chunk's plain batches (``batches.ChunkWalk``): their
    keys go into ``m`` for offsets in [start, end), the batches into ``table``; ``covered`` and
    ``keyed`` follow what it took."""

    def __init__(self, m: OffsetMap, start: int, end: int, table: BatchTable | None = None) -> None:
        self.m = m
        self.start = start
        self.end = end
        self.table = table if table is not None else BatchTable(0)
        self.covered = start
        self.keyed = 0

    def __call__(self, buf: bytes, position: int, previous_last: int, chunk_position: int = 0) -> tuple[int, int]:
        m = self.m
        arr = _ARRAYS.of(buf)
        starts, ends, crcs = _ARRAYS.runs()
        n = int(_fastclean.scan_chunk(arr, position, len(buf), previous_last, self.end, starts, ends, crcs))
        if n == 0:
            return position, previous_last
        view = memoryview(buf)
        for i, (s, e, stored) in enumerate(zip(starts[:n].tolist(), ends[:n].tolist(), crcs[:n].tolist(),
                                               strict=True)):
            if crc32c(view[s + CRC_START:e]) != stored:
                n = i  # the per-batch path reports it
                break
        table = self.table
        table.room_for(n)
        taken, last, size, highest, keyed, table.tracked = _fastclean.map_run(
            arr, starts, ends, n, self.start, m.h1, m.h2, m.offsets, m.size, m.slots, table.bases, table.lasts,
            table.live, table.positions, table.sizes, table.counts, table.tracked, chunk_position)
        if taken == 0:
            return position, previous_last
        m.size = int(size)
        if highest > m.latest_offset:
            m.latest_offset = int(highest)
        self.keyed += int(keyed)
        self.covered = max(self.covered, int(last) + 1)
        return int(ends[taken - 1]), int(last)


class FilterWalk:
    """The rewrite's compiled walk over a read chunk's plain batches (``batches.ChunkWalk``): the
    cleaned bytes of the batches it takes go to ``emit`` (one buffer and its batch headers, CRCs
    filled), the counters to ``ctx``; the batches it leaves go through ``filter_batch``.

    Every batch's CRC is checked before its run is emitted, except a batch dropped as ``superseded``:
    the map pass checked that one, in a closed segment nothing else writes, and none of its bytes go
    to the cleaned segment (one check a batch instead of two; see docs/operations.md)."""

    #: Records a batch may hold for the walk (a bigger one goes the per-batch way).
    MAX_RECORDS = 1 << 16

    def __init__(self, ctx: FilterContext, emit: Callable[[bytes, list[BatchHeader]], None],
                 drops: Drops | None = None) -> None:
        assert isinstance(ctx.offset_map, OffsetMap)
        self.ctx = ctx
        self.emit = emit
        last = sorted((pid, r.last_data_offset) for pid, r in ctx.last_records.items()
                      if r.last_data_offset is not None)
        self.last_pids = np.array([p for p, _ in last], np.int64)
        self.last_offsets = np.array([o for _, o in last], np.int64)
        self.drops = drops if drops is not None else _NO_DROPS
        #: Bytes of skipped runs past the chunks read (the cleaning counts them as read: processed).
        self.bytes_skipped = 0
        self.scratch = np.empty((4, self.MAX_RECORDS), np.int64)
        self.out = np.empty(0, np.uint8)

    def __call__(self, buf: bytes, position: int, previous_last: int, chunk_position: int = 0) -> tuple[int, int]:
        if position + 8 <= len(buf):
            run = self.drops.run_at(int.from_bytes(buf[position:position + 8], "big", signed=True),
                                    chunk_position + position)
            if run is not None and run[1] > previous_last:
                # A run of superseded batches back to back: not read (the position may pass the chunk).
                end, last, records = run
                self.ctx.records_read += records
                self.bytes_skipped += max(0, end - chunk_position - len(buf))  # the chunk's own were read
                return end - chunk_position, last
        arr = _ARRAYS.of(buf)
        starts, ends, crcs = _ARRAYS.runs()
        n = int(_fastclean.scan_chunk(arr, position, len(buf), previous_last, 1 << 62, starts, ends, crcs))
        if n == 0:
            return position, previous_last
        span = int(ends[n - 1]) - position
        if len(self.out) < 3 * span + BATCH_HEADER_SIZE:  # a kept record grows by at most 10 of its >= 7 bytes
            self.out = np.empty(3 * span + BATCH_HEADER_SIZE, np.uint8)
        taken, size, out_n, read, kept = self._filter(arr, starts, ends, n)
        damaged = self._first_damaged(buf, starts, ends, crcs, taken)
        if damaged is not None:  # the run up to it is taken; the per-batch path reports it
            taken, size, out_n, read, kept = self._filter(arr, starts, ends, damaged)
        if taken == 0:
            return position, previous_last
        ctx = self.ctx
        ctx.records_read += int(read)
        ctx.records_kept += int(kept)
        if out_n:
            out_ends, _, rewritten = _ARRAYS.outs()
            data = self.out.data[:size]
            batch_starts = [0, *out_ends[: out_n - 1].tolist()]
            for j in np.flatnonzero(rewritten[:out_n]).tolist():
                s, e = batch_starts[j], int(out_ends[j])
                _U32.pack_into(data, s + CRC, crc32c(data[s + CRC_START:e]))
            raw = data.tobytes()
            self.emit(raw, [BatchHeader(raw, s) for s in batch_starts])
        last = int(ends[taken - 1])
        header = BatchHeader(buf, int(starts[taken - 1]))
        return last, header.last_offset

    def _filter(self, arr: np.ndarray, starts: np.ndarray, ends: np.ndarray, n: int) -> tuple[int, int, int, int, int]:
        ctx = self.ctx
        m = ctx.offset_map
        assert isinstance(m, OffsetMap)
        out_ends, dropped_superseded, rewritten = _ARRAYS.outs()
        sc = self.scratch
        taken, size, out_n, read, kept = _fastclean.filter_run(
            arr, starts, ends, n, m.h1, m.h2, m.offsets, ctx.now_ms, ctx.delete_retention_ms, ctx.keep_deletes,
            self.last_pids, self.last_offsets, self.drops.superseded, dropped_superseded, self.out, out_ends, rewritten,
            sc[0], sc[1], sc[2], sc[3])
        return int(taken), int(size), int(out_n), int(read), int(kept)

    @staticmethod
    def _first_damaged(buf: bytes, starts: np.ndarray, ends: np.ndarray, crcs: np.ndarray, taken: int) -> int | None:
        """The run index of the first of the ``taken`` batches whose CRC fails, or None; batches
        dropped as superseded are not checked again."""
        view = memoryview(buf)
        _, dropped_superseded, _ = _ARRAYS.outs()
        for i in np.flatnonzero(dropped_superseded[:taken] == 0).tolist():
            if crc32c(view[int(starts[i]) + CRC_START:int(ends[i])]) != int(crcs[i]):
                return int(i)
        return None


def rewrite_data_batch(h: BatchHeader, m: OffsetMap, now_ms: int, delete_retention_ms: int, keep_deletes: bool,
                       horizon: int | None, drop_if_empty: bool) -> tuple[bytes | None, int] | None:
    """The cleaned form of uncompressed CreateTime data batch ``h`` and the records it keeps, or
    None when the Python reference must decide (an emptied batch kept for its producer, malformed
    records). Same bytes as ``batches.filter_batch``."""
    if h.compression or h.timestamp_type != CREATE_TIME or h.is_control:
        return None
    buf, start, end = _records_region(h)
    arr = _ARRAYS.of(buf)
    scratch = _ARRAYS.ensure(h.records_count)
    attr_at, rest_at, end_at, timestamps = scratch[0], scratch[1], scratch[2], scratch[3]
    status, kept, records, has_tombstone = _fastclean.retain(
        arr, start, end, h.records_count, h.base_offset, h.base_timestamp, m.h1, m.h2, m.offsets, keep_deletes,
        attr_at, rest_at, end_at, timestamps)
    if status != _fastclean.OK:
        return None
    new_horizon = horizon
    if horizon is None and has_tombstone:
        new_horizon = now_ms + delete_retention_ms
    if kept == records and new_horizon == horizon:
        return bytes(h.raw()), kept
    if kept == 0:
        return (None, 0) if drop_if_empty else None
    base_timestamp = new_horizon if new_horizon is not None else int(timestamps[0])
    out = np.empty(BATCH_HEADER_SIZE + (end - start) + kept * _GROWTH_PER_RECORD, np.uint8)
    size = int(_fastclean.write_kept(arr, kept, attr_at, rest_at, end_at, timestamps, base_timestamp, out,
                                     BATCH_HEADER_SIZE))
    attributes = h.attributes & ~DELETE_HORIZON_MASK
    if new_horizon is not None:
        attributes |= DELETE_HORIZON_MASK
    view = out.data[:size]
    _HEADER.pack_into(view, 0, h.base_offset, size - LOG_OVERHEAD, h.partition_leader_epoch, MAGIC_V2, 0, attributes,
                      h.last_offset_delta, base_timestamp, int(timestamps[:kept].max()), h.producer_id,
                      h.producer_epoch, h.base_sequence, kept)
    _U32.pack_into(view, CRC, crc32c(view[CRC_START:]))
    return bytes(view), kept
