"""Packing segment ranges into Spark input partitions, as Spark packs files."""

from __future__ import annotations

import os
from collections.abc import Sequence

from tierlog.pipeline.options import ReadOptions
from tierlog.pipeline.reader import ScanRange

#: Spark's defaults for packing files into input partitions (spark.sql.files.maxPartitionBytes, and
#: spark.sql.files.openCostInBytes as the smallest target), used the same way for segments.
MAX_PARTITION_BYTES = 128 << 20
OPEN_COST_BYTES = 4 << 20


def _range_bytes(r: ScanRange) -> int | None:
    """An upper bound of the bytes ``r`` reads (its whole segment), or None where unknown."""
    if r.remote is not None:
        return int(r.remote.segment_size_in_bytes)
    if r.log_path is not None:
        try:
            return os.path.getsize(r.log_path)
        except OSError:
            return None
    return None  # read through the broker: no size to plan with


def pack_ranges(ranges: Sequence[ScanRange], opts: ReadOptions, parallelism: int | None) -> list[tuple[ScanRange, ...]]:
    """Consecutive ranges packed into Spark input partitions, as Spark packs files: up to
    ``maxBytesPerPartition`` each, by default min(128 MiB, max(4 MiB, total bytes / ``parallelism``)),
    each range counted as its whole segment (an upper bound for a partial one). A task has a fixed
    cost on both sides of Spark's Python data source (tens of ms); segments far smaller than the
    share of a core are cheaper read together. ``minPartitions`` asks for splitting, so it turns
    packing off; a pack never spans more than ``maxRecordsPerPartition`` offsets; a range of
    unknown size (read through the broker) stays alone."""
    if opts.min_partitions or not ranges:
        return [(r,) for r in ranges]
    sizes = [_range_bytes(r) for r in ranges]
    target = opts.max_bytes_per_partition
    if target is None:
        total = sum(s for s in sizes if s is not None)
        target = min(MAX_PARTITION_BYTES, max(OPEN_COST_BYTES, total // max(1, parallelism or 1)))
    packs: list[tuple[ScanRange, ...]] = []
    current: list[ScanRange] = []
    current_bytes = current_records = 0
    for r, size in zip(ranges, sizes, strict=True):
        records = r.end_offset - r.start_offset
        fits = (size is not None and current_bytes + size <= target
                and (opts.max_records_per_partition is None
                     or current_records + records <= opts.max_records_per_partition))
        if current and not fits:
            packs.append(tuple(current))
            current, current_bytes, current_records = [], 0, 0
        if size is None:
            packs.append((r,))
            continue
        current.append(r)
        current_bytes += size
        current_records += records
    if current:
        packs.append(tuple(current))
    return packs
