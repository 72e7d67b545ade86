"""Batches whose header max timestamp lies about their records (Sarama 1.22 writes -1), and the
segments an older tierlog stored from them: the bytes as the producer sent them, with offset and time
indexes built from the headers as its append path built them (seed 004)."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from tierlog.records import BatchHeader, SimpleRecord, build_batch, iter_headers
from tierlog.storage.index import OffsetIndex, TimeIndex

DAY_MS = 86_400_000
NOW_MS = 1_700_000_000_000  # the storage tests' clock
T0 = NOW_MS - 10 * DAY_MS
PER_BATCH = 10
#: What a producer may write as the header's max timestamp, given the records' true maximum.
LIES: dict[str, Callable[[int], int]] = {
    "minus_one": lambda true_max: -1,
    "older": lambda true_max: true_max - 5 * DAY_MS,
    "newer": lambda true_max: true_max + 5 * DAY_MS,
}


def batch_timestamps(i: int) -> list[int]:
    """Batch i holds records one day apart from batch i-1; within a batch the newest is in the middle,
    so the max is neither the first nor the last record."""
    base = T0 + i * DAY_MS
    return [base + (j if j <= PER_BATCH // 2 else PER_BATCH - j) * 1000 for j in range(PER_BATCH)]


def make_batch(i: int, codec: int, lie: str | None, *, base_offset: int = 0) -> bytes:
    timestamps = batch_timestamps(i)
    # Incompressible values: every codec gives batches of about the same size, two to a segment.
    records = [SimpleRecord(b"k%d" % j, random.Random(i * PER_BATCH + j).randbytes(40), timestamp=ts)
               for j, ts in enumerate(timestamps)]
    header_max = None if lie is None else LIES[lie](max(timestamps))
    data = build_batch(records, compression=codec, max_timestamp=header_max, base_offset=base_offset)
    assert BatchHeader(data).max_timestamp == (max(timestamps) if lie is None else header_max)
    return data


def write_indexes_from_headers(directory: Path, base: int, data: bytes) -> None:
    """The offset and time index an older tierlog's append built for ``data``: one entry per batch,
    the time index following the headers' running max (skipping -1)."""
    offsets = OffsetIndex(directory / f"{base:020d}.index", base)
    times = TimeIndex(directory / f"{base:020d}.timeindex", base)
    running = -1
    for h in iter_headers(data):
        offsets.append(h.last_offset, h.position)
        if h.max_timestamp > running:
            running = h.max_timestamp
            times.maybe_append(running, h.last_offset)
    offsets.trim_to_valid_size()
    times.trim_to_valid_size()
    offsets.close()
    times.close()


def write_mixed_segments(directory: Path, codec: int, lie: str, *, batches: int = 6) -> None:
    """Segment k holds batch 2k stored with an honest header and batch 2k+1 with a lying one, plus the
    indexes an older tierlog built from those headers: with ``minus_one`` or ``older`` the time
    index's last entry names the honest batch, so it checks out although the segment's newest
    records are a day later."""
    directory.mkdir(parents=True)
    for first in range(0, batches, 2):
        base = first * PER_BATCH
        data = make_batch(first, codec, None, base_offset=base) + make_batch(first + 1, codec, lie,
                                                                             base_offset=base + PER_BATCH)
        (directory / f"{base:020d}.log").write_bytes(data)
        write_indexes_from_headers(directory, base, data)
        if lie != "newer":
            times = TimeIndex(directory / f"{base:020d}.timeindex", base)
            assert times.last_entry() == (max(batch_timestamps(first)), base + PER_BATCH - 1)
            times.close()
