"""``LogSegments.last`` is remembered between appends (issue 22, fifth round) and follows every
change of the set: a segment added after it or before it, the last one removed, base offsets
added from a listing (materialised on first use), the set emptied."""

from __future__ import annotations

from tierlog.storage.segments import LogSegments


class _Segment:
    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset


def test_the_last_segment_follows_every_change() -> None:
    made: list[int] = []

    def factory(base: int) -> _Segment:
        made.append(base)
        return _Segment(base)

    segments = LogSegments(factory)  # type: ignore[arg-type]
    assert segments.last is None
    segments.add(_Segment(0))  # type: ignore[arg-type]
    first = segments.last
    assert first is not None and first.base_offset == 0 and segments.last is first
    segments.add(_Segment(10))  # type: ignore[arg-type]
    assert segments.last is not None and segments.last.base_offset == 10
    segments.add(_Segment(5))  # type: ignore[arg-type]  # before the last: the last stays
    assert segments.last is not None and segments.last.base_offset == 10
    replacement = _Segment(10)
    segments.add(replacement)  # type: ignore[arg-type]  # the same base offset, a new object
    assert segments.last is replacement
    segments.remove(10)
    assert segments.last is not None and segments.last.base_offset == 5
    segments.add_base_offsets([20, 30])
    last = segments.last
    assert last is not None and last.base_offset == 30 and made == [30] and segments.last is last
    for base in (30, 20, 5, 0):
        segments.remove(base)
    assert segments.last is None
