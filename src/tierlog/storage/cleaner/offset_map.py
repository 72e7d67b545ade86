"""The cleaner's key → latest offset map, bounded like Kafka's SkimpyOffsetMap: keys are kept as
16-byte MD5 digests, and the map takes at most ``slots`` keys (``log.cleaner.dedupe.buffer.size``
split among the threads, 24 bytes per entry, times the load factor). When a dirty range has more
keys than that, the cleaning covers the part that fit and the next cleaning goes on from there."""

from __future__ import annotations

import hashlib

#: Bytes per entry Kafka budgets for: the digest and the offset.
ENTRY_BYTES = 24


def key_digest(key: bytes) -> bytes:
    return hashlib.md5(key, usedforsecurity=False).digest()


class OffsetMap:
    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"an offset map needs at least one slot, not {slots}")
        self.slots = slots
        self._offsets: dict[bytes, int] = {}
        #: The highest offset put, -1 when empty.
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._offsets)

    def fits(self, keys: int) -> bool:
        """Whether ``keys`` more keys (at worst all new) fit."""
        return len(self._offsets) + keys <= self.slots

    def fits_digests(self, digests: list[bytes]) -> bool:
        """Whether keys with these digests fit, counting only the ones the map does not hold yet."""
        if self.fits(len(digests)):
            return True
        new = set(digests) - self._offsets.keys()
        return len(self._offsets) + len(new) <= self.slots

    def put_digest(self, digest: bytes, offset: int) -> None:
        self._offsets[digest] = offset
        if offset > self.latest_offset:
            self.latest_offset = offset

    def put(self, key: bytes, offset: int) -> None:
        self._offsets[key_digest(key)] = offset
        if offset > self.latest_offset:
            self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The latest offset of ``key``, or -1 when the map does not hold it."""
        return self._offsets.get(key_digest(key), -1)

    def clear(self) -> None:
        self._offsets.clear()
        self.latest_offset = -1

    @property
    def nominal_bytes(self) -> int:
        """The memory bound Kafka would account for this map: slots × 24 bytes."""
        return self.slots * ENTRY_BYTES
