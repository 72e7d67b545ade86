"""The cleaner's key → latest offset map, bounded like Kafka's SkimpyOffsetMap: keys are kept as
16-byte digests, and the map takes at most ``slots`` keys (``log.cleaner.dedupe.buffer.size`` split
among the threads, 24 bytes per entry, times the load factor). When a dirty range has more keys than
that, the cleaning covers the part that fit and the next cleaning goes on from there.

:class:`OffsetMap` is one preallocated open-addressing table of ``capacity`` 24-byte entries (see
:mod:`._fastclean`), so its memory is the buffer's, whatever the keys; :class:`DictOffsetMap` is the
Python reference (a dict of MD5 digests, ~110 bytes a key) the property test holds it equal to."""

from __future__ import annotations

import hashlib
import math
from typing import TYPE_CHECKING

import numpy as np

from tierlog._util.lazy import LazyModule

if TYPE_CHECKING:
    from tierlog.storage.cleaner import _fastclean
else:
    # numba takes ~0.5 s of CPU to import: commands that import the cleaner only on the way
    # (``tierlog tier status``, through the remote log manager) must not pay it.
    _fastclean = LazyModule("tierlog.storage.cleaner._fastclean", globals(), "_fastclean")


#: Bytes per entry Kafka budgets for: the digest and the offset.
ENTRY_BYTES = 24
#: Capacity for a map given only its slots: Kafka's default log.cleaner.io.buffer.load.factor.
DEFAULT_LOAD_FACTOR = 0.9


def key_digest(key: bytes) -> bytes:
    return hashlib.md5(key, usedforsecurity=False).digest()


class OffsetMap:
    """``slots``: the keys the map takes before it counts as full; ``capacity``: its entries (the
    dedupe buffer's share / 24), at least one more than ``slots`` so probing always ends."""

    compiled = True

    def __init__(self, slots: int, capacity: int | None = None) -> None:
        if slots < 1:
            raise ValueError(f"an offset map needs at least one slot, not {slots}")
        self.slots = slots
        wanted = capacity if capacity is not None else math.ceil(slots / DEFAULT_LOAD_FACTOR)
        self.capacity = max(wanted, slots + 1)
        self.h1 = np.zeros(self.capacity, np.uint64)
        self.h2 = np.zeros(self.capacity, np.uint64)
        #: Offset + 1 per entry, 0 when empty: zero-filled arrays cost no memory until written.
        self.offsets = np.zeros(self.capacity, np.int64)
        self.size = 0
        #: The highest offset put, -1 when empty.
        self.latest_offset = -1

    def __len__(self) -> int:
        return self.size

    def fits(self, keys: int) -> bool:
        """Whether ``keys`` more keys (at worst all new) fit."""
        return self.size + keys <= self.slots

    def put(self, key: bytes, offset: int) -> None:
        if self.size + 1 >= self.capacity and self.get(key) < 0:
            raise OverflowError(f"the offset map is full ({self.size} of {self.capacity} entries)")
        if _fastclean.map_put(self.h1, self.h2, self.offsets, np.frombuffer(key, np.uint8), offset):
            self.size += 1
        if offset > self.latest_offset:
            self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The latest offset of ``key``, or -1 when the map does not hold it."""
        return int(_fastclean.map_get(self.h1, self.h2, self.offsets, np.frombuffer(key, np.uint8)))

    def clear(self) -> None:
        if self.size:
            # Fresh zeroed arrays rather than a fill: untouched pages of a large table stay unmapped.
            self.h1 = np.zeros(self.capacity, np.uint64)
            self.h2 = np.zeros(self.capacity, np.uint64)
            self.offsets = np.zeros(self.capacity, np.int64)
        self.size = 0
        self.latest_offset = -1

    @property
    def nominal_bytes(self) -> int:
        """The memory bound Kafka would account for this map: slots × 24 bytes."""
        return self.slots * ENTRY_BYTES

    @property
    def table_bytes(self) -> int:
        """What the table really holds: its three arrays."""
        return int(self.h1.nbytes + self.h2.nbytes + self.offsets.nbytes)


class DictOffsetMap:
    """The Python reference: the same contract over a dict."""

    compiled = False

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"an offset map needs at least one slot, not {slots}")
        self.slots = slots
        self._offsets: dict[bytes, int] = {}
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._offsets)

    def fits(self, keys: int) -> bool:
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
        self.put_digest(key_digest(key), offset)

    def get(self, key: bytes) -> int:
        return self._offsets.get(key_digest(key), -1)

    def clear(self) -> None:
        self._offsets.clear()
        self.latest_offset = -1

    @property
    def nominal_bytes(self) -> int:
        return self.slots * ENTRY_BYTES


AnyOffsetMap = OffsetMap | DictOffsetMap
