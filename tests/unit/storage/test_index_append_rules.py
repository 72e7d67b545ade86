"""The index appends of every produced batch check everything in one condition (issue 22, fifth
round) and raise from a slow path: random sequences of appends -- in order, repeated, going back,
out of the int32 range, into a full index, with the time index's reserved slot -- against a model
of Kafka's rules in their order (OffsetIndex.append, TimeIndex.maybeAppend): the same error class
for each refused append, nothing written by it, and the same entries after each step."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.errors import IndexOffsetOverflowError, InvalidOffsetError
from tierlog.storage.index import IndexFullError, OffsetIndex, TimeIndex, TimestampOrderError

BASE = 1000
INT32_MAX = (1 << 31) - 1
#: Offsets around the base and the int32 limit above it, positions around their limits.
OFFSETS = st.one_of(st.integers(BASE - 3, BASE + 40), st.sampled_from([BASE + INT32_MAX, BASE + INT32_MAX + 1]))
POSITIONS = st.one_of(st.integers(-2, 5000), st.sampled_from([INT32_MAX, INT32_MAX + 1]))


def _offset_error(entries: list[tuple[int, int]], max_entries: int, offset: int, position: int) -> type | None:
    if len(entries) >= max_entries:
        return IndexFullError
    if entries and offset <= entries[-1][0]:
        return InvalidOffsetError
    if not 0 <= offset - BASE <= INT32_MAX:
        return IndexOffsetOverflowError
    if not 0 <= position <= INT32_MAX:
        return ValueError
    return None


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6), st.lists(st.tuples(OFFSETS, POSITIONS), max_size=25))
def test_offset_index_appends_follow_the_rules(max_entries: int, appends: list[tuple[int, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        index = OffsetIndex(Path(tmp) / f"{BASE:020d}.index", BASE, max_entries * 8)
        model: list[tuple[int, int]] = []
        try:
            for offset, position in appends:
                error = _offset_error(model, max_entries, offset, position)
                if error is None:
                    index.append(offset, position)
                    model.append((offset, position))
                else:
                    with pytest.raises(error):
                        index.append(offset, position)
                assert [tuple(index.entry(i)) for i in range(index.entries)] == model
        finally:
            index.close()
            with pytest.raises(ValueError):  # closed
                index.append(BASE + 100, 0)


def _time_step(entries: list[tuple[int, int]], max_entries: int, timestamp: int, offset: int,
               skip_full_check: bool) -> type | bool:
    """The error class, or whether the entry is written."""
    last_ts, last_offset = entries[-1] if entries else (-1, BASE)
    if not skip_full_check and len(entries) >= max_entries - 1:
        return IndexFullError
    if entries and offset < last_offset:
        return InvalidOffsetError
    if entries and timestamp < last_ts:
        return TimestampOrderError
    if timestamp <= last_ts:
        return False
    if not 0 <= offset - BASE <= INT32_MAX:
        return IndexOffsetOverflowError
    if len(entries) >= max_entries:
        return IndexFullError
    return True


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6), st.lists(st.tuples(st.integers(-1, 30), OFFSETS, st.booleans()), max_size=25))
def test_time_index_appends_follow_the_rules(max_entries: int, appends: list[tuple[int, int, bool]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        index = TimeIndex(Path(tmp) / f"{BASE:020d}.timeindex", BASE, max_entries * 12)
        model: list[tuple[int, int]] = []
        try:
            for timestamp, offset, skip in appends:
                step = _time_step(model, max_entries, timestamp, offset, skip)
                if isinstance(step, bool):
                    index.maybe_append(timestamp, offset, skip_full_check=skip)
                    if step:
                        model.append((timestamp, offset))
                else:
                    with pytest.raises(step):
                        index.maybe_append(timestamp, offset, skip_full_check=skip)
                assert [tuple(index.entry(i)) for i in range(index.entries)] == model
        finally:
            index.close()
            with pytest.raises(ValueError):  # closed
                index.maybe_append(100, BASE + 100)
