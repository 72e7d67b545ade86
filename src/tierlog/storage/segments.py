"""The ordered set of a log's segments, materialised on demand.

Only base offsets are kept for segments nobody has touched, so opening a log with thousands of
inactive segments costs one directory listing, not thousands of objects (seed 003).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator

from tierlog.storage.segment import LogSegment


class LogSegments:
    def __init__(self, factory: Callable[[int], LogSegment]) -> None:
        self._factory = factory
        self._bases: list[int] = []
        self._segments: dict[int, LogSegment] = {}
        #: :attr:`last`, read by every append; forgotten by every change of the set (only the
        #: three methods below change it).
        self._last: LogSegment | None = None

    def add_base_offsets(self, bases: Iterable[int]) -> None:
        self._last = None
        self._bases = sorted(set(self._bases).union(bases))

    def add(self, segment: LogSegment) -> None:
        self._last = None
        base = segment.base_offset
        if base not in self._segments:
            i = bisect.bisect_left(self._bases, base)
            if i == len(self._bases) or self._bases[i] != base:
                self._bases.insert(i, base)
        self._segments[base] = segment

    def remove(self, base_offset: int) -> LogSegment | None:
        self._last = None
        i = bisect.bisect_left(self._bases, base_offset)
        if i < len(self._bases) and self._bases[i] == base_offset:
            del self._bases[i]
        return self._segments.pop(base_offset, None)

    def get(self, base_offset: int) -> LogSegment:
        seg = self._segments.get(base_offset)
        if seg is None:
            seg = self._factory(base_offset)
            self._segments[base_offset] = seg
        return seg

    def materialized(self) -> list[LogSegment]:
        return [self._segments[b] for b in self._bases if b in self._segments]

    def is_materialized(self, base_offset: int) -> bool:
        return base_offset in self._segments

    @property
    def base_offsets(self) -> list[int]:
        return list(self._bases)

    def __len__(self) -> int:
        return len(self._bases)

    def __bool__(self) -> bool:
        return bool(self._bases)

    def __iter__(self) -> Iterator[LogSegment]:
        for b in list(self._bases):
            yield self.get(b)

    @property
    def first(self) -> LogSegment | None:
        return self.get(self._bases[0]) if self._bases else None

    @property
    def last(self) -> LogSegment | None:
        seg = self._last
        if seg is None and self._bases:
            seg = self._last = self.get(self._bases[-1])
        return seg

    def floor(self, offset: int) -> LogSegment | None:
        """The segment whose base offset is the largest ≤ ``offset``."""
        i = bisect.bisect_right(self._bases, offset)
        return self.get(self._bases[i - 1]) if i > 0 else None

    def higher(self, base_offset: int) -> LogSegment | None:
        i = bisect.bisect_right(self._bases, base_offset)
        return self.get(self._bases[i]) if i < len(self._bases) else None

    def lower(self, base_offset: int) -> list[LogSegment]:
        """Every segment with a base offset below ``base_offset``, oldest first."""
        i = bisect.bisect_left(self._bases, base_offset)
        return [self.get(b) for b in self._bases[:i]]

    def next_base_offset(self, base_offset: int) -> int | None:
        i = bisect.bisect_right(self._bases, base_offset)
        return self._bases[i] if i < len(self._bases) else None

    def from_offset(self, offset: int) -> list[LogSegment]:
        """Segments from the one containing ``offset`` to the end."""
        i = max(0, bisect.bisect_right(self._bases, offset) - 1)
        return [self.get(b) for b in self._bases[i:]]
