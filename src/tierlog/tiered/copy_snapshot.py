"""Seed 001: the producer snapshot uploaded with a segment holds the producer state at the
segment's end. The one on disk is uploaded only when it is known to hold that state; otherwise it is
rebuilt by replaying the segments within ``producer.id.expiration.ms`` before the segment's end and
installed in the log directory through the log's own method."""

from __future__ import annotations

import logging
from pathlib import Path

from tierlog.errors import TierlogError
from tierlog.storage.index import TimeIndex
from tierlog.storage.log import UnifiedLog
from tierlog.storage.producer_rebuild import (
    iter_segment_headers,
    rebuild_snapshot_for_range,
    replay_window_start,
)
from tierlog.storage.producer_state import read_snapshot
from tierlog.storage.producer_state_horizon import snapshot_known_complete
from tierlog.tiered.context import PartitionState
from tierlog.tiered.index_cache import CACHE_DIR_NAME

log = logging.getLogger(__name__)


def producer_snapshot(state: PartitionState, ulog: UnifiedLog, base: int, next_base: int,
                      producer_id_expiration_ms: int) -> Path:
    """The producer snapshot at the segment's end (seed 001). The one on disk is uploaded only when
    it is known to hold the producer state: written from a state with no recorded horizon, or one
    whose horizon lies below every producer that can be live at the segment's end. Otherwise, or
    when it is missing or unreadable, it is rebuilt by replaying the segments within
    ``producer.id.expiration.ms`` before the segment's end -- so an empty file goes up only when
    that replay finds no producer."""
    existing = ulog.producer_state.snapshot_file_for(next_base)
    bases = [b for b in ulog.segments.base_offsets if b <= base]
    stamps = [(b, _max_timestamp(state, ulog, b)) for b in bases]
    start = replay_window_start(stamps, stamps[-1][1], producer_id_expiration_ms, ulog.log_start_offset)
    why = _distrust(existing, ulog, base, start)
    if why is None:
        assert existing is not None
        return existing
    # Only the segments holding offsets in [start, next_base) are opened and replayed.
    window = [ulog.segments.get(b) for i, b in enumerate(bases)
              if (bases[i + 1] if i + 1 < len(bases) else next_base) > start]
    # Written beside the log dir first (the log manager skips the cache dir), then moved in under
    # the log's lock, so the producer state never lists a half-written snapshot.
    scratch = ulog.dir.parent / CACHE_DIR_NAME / "snapshot-rebuild" / ulog.dir.name
    scratch.mkdir(parents=True, exist_ok=True)
    built = rebuild_snapshot_for_range(window, start, next_base, next_base, scratch)
    target = ulog.install_producer_snapshot(built, next_base)
    state.producer_snapshots_rebuilt += 1
    log.info("rebuilt the producer snapshot %s for segment %d of %s-%d from offset %d (seed 001): %s",
             target.name, base, state.tp[0], state.tp[1], start, why)
    return target


def _distrust(existing: Path | None, ulog: UnifiedLog, base: int, window_start: int) -> str | None:
    """Why the snapshot on disk cannot be uploaded as the segment's producer state, or None."""
    if existing is None or not existing.exists():
        return "it was missing"
    try:
        entries = read_snapshot(existing)
    except TierlogError as e:
        return f"it was unreadable ({e})"
    horizon = ulog.producer_state_horizon()
    if not snapshot_known_complete(horizon, window_start):
        return (f"it was taken from a producer state that knows no producer below offset {horizon} "
                f"(its snapshots were lost), and producers from offset {window_start} on can be live")
    if not entries and horizon is None and _legacy_placeholder(ulog, base):
        return "it was an empty placeholder while the segment holds idempotent batches"
    return None


def _legacy_placeholder(ulog: UnifiedLog, base: int) -> bool:
    """An empty snapshot at the end of a segment that holds idempotent batches cannot be the true
    state. Data dirs whose loader wrote placeholders before horizons were recorded have nothing else
    to tell them by."""
    seg = ulog.segments.get(base)
    return any(h.producer_id >= 0 for h in iter_segment_headers(seg, base))


def _max_timestamp(state: PartitionState, ulog: UnifiedLog, base: int) -> int:
    cached = state.max_timestamps.get(base)
    if cached is None:
        seg = ulog.segments.get(base)
        # Closed segments' time indexes are trimmed; reading the last entry opens nothing else.
        ts = TimeIndex.last_timestamp_from_file(seg.time_index_path) if not seg.indexes_loaded else None
        cached = seg.largest_timestamp if ts is None else ts
        state.max_timestamps[base] = cached
    return cached
