"""The high watermark of a single-node log: the offset consumers read up to.

Kafka's high watermark is the offset below which every record is *committed* -- held by every
in-sync replica -- and consumers (Fetch with replica id -1) read only below it, so no consumer sees a
record that a failure could still take away. tierlog has one replica, so what can take a record away
is a power cut before its fsync: with durable acknowledgements (``log.durable.acks`` all or 1) a
record is committed once it is fsynced, and the high watermark follows the durable offset. With
``none`` (Kafka's acknowledge-on-append on one node, where the leader is the whole ISR) it follows
the log end offset, as before.

:class:`DurableOffset` tracks the durable offset from the group commit's fdatasyncs, which sync one
segment file each and may finish out of order (the segment a roll closed and the new active one
sync on different threads): a sync of a segment counts only once everything below that segment's
base offset is durable too (or a full flush covered it)."""

from __future__ import annotations

import threading


def follows_durable_offset(durable_acks: str) -> bool:
    """Whether the high watermark waits for the fsync under ``log.durable.acks``: every setting but
    ``none`` acknowledges after an fsync, so only fsynced records count as committed."""
    return durable_acks != "none"


def high_watermark_of(log_end_offset: int, durable_offset: int, follows_durable: bool) -> int:
    """The high watermark: the durable offset (never past the log end) when it is followed, else the
    log end offset."""
    return min(durable_offset, log_end_offset) if follows_durable else log_end_offset


class DurableOffset:
    """The offset below which a log's records are known to be on disk. Thread-safe: the group
    commit's sync threads report syncs while appends, flushes and truncations run."""

    def __init__(self, offset: int) -> None:
        self._lock = threading.Lock()
        self._offset = offset
        #: Segment base offset -> end offset of the synced records in it, waiting for the offsets
        #: below the base to become durable.
        self._synced_ahead: dict[int, int] = {}

    @property
    def offset(self) -> int:
        return self._offset

    def synced(self, segment_base_offset: int, end_offset: int) -> bool:
        """The records of the segment at ``segment_base_offset`` below ``end_offset`` were fsynced
        (with the segment's directory entry). True when the durable offset moved."""
        with self._lock:
            if end_offset <= self._offset:
                return False
            known = self._synced_ahead.get(segment_base_offset, 0)
            self._synced_ahead[segment_base_offset] = max(known, end_offset)
            return self._advance()

    def flushed(self, offset: int) -> bool:
        """Every record below ``offset`` was fsynced (a full flush). True when the offset moved."""
        with self._lock:
            if offset <= self._offset:
                return False
            self._offset = offset
            self._advance()
            return True

    def truncated(self, offset: int) -> None:
        """The log was cut back to end at ``offset``: nothing at or past it is durable any more."""
        with self._lock:
            self._offset = min(self._offset, offset)
            self._synced_ahead = {base: min(end, offset) for base, end in self._synced_ahead.items()
                                  if base < offset and min(end, offset) > self._offset}

    def reset(self, offset: int) -> None:
        """The log starts again, empty, at ``offset``."""
        with self._lock:
            self._offset = offset
            self._synced_ahead = {}

    def _advance(self) -> bool:
        """Fold in every synced segment whose base the durable offset has reached (holding the lock)."""
        before = self._offset
        moved = True
        while moved and self._synced_ahead:
            moved = False
            for base, end in list(self._synced_ahead.items()):
                if base <= self._offset:
                    del self._synced_ahead[base]
                    if end > self._offset:
                        self._offset = end
                        moved = True
        return self._offset > before
