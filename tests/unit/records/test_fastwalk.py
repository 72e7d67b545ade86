"""The compiled record walks (numba, and C when the install step built it) agree with the Python walk
validate_batch falls back to, on valid and damaged records."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.errors import InvalidRecordError
from tierlog.records import reader
from tierlog.records._fastwalk import walk_records
from tierlog.records.reader import walk_records_python
from tierlog.records.record import encode_record

BASE_TS = 1_700_000_000_000


def python_walk(buf: bytes, pos: int, end: int, count: int, from_client: bool) -> tuple[object, ...] | None:
    """What the compiled walk must return for records that are valid, or None where it must refuse."""
    try:
        return (True, *walk_records_python(buf, pos, end, count, BASE_TS, from_client, 0))
    except InvalidRecordError:
        return None


Walk = Callable[[bytes, int, int, int, int, bool], tuple[object, ...]]


def numba_walk(buf: bytes, pos: int, end: int, count: int, base_ts: int, from_client: bool) -> tuple[object, ...]:
    return tuple(walk_records(np.frombuffer(buf, dtype=np.uint8), pos, end, count, base_ts, from_client))


def c_walk(buf: bytes, pos: int, end: int, count: int, base_ts: int, from_client: bool) -> tuple[object, ...]:
    if reader.c_walk_records is None:
        pytest.skip("tierlog.records._cwalk is not built (the install step found no C compiler)")
    return tuple(reader.c_walk_records(buf, pos, end, count, base_ts, from_client))


WALKS = pytest.mark.parametrize("walk", [numba_walk, c_walk], ids=["numba", "c"])


records = st.lists(
    st.tuples(
        st.integers(-(1 << 40), 1 << 40),  # timestamp delta: varlong, often several bytes
        st.one_of(st.none(), st.binary(max_size=300)),
        st.one_of(st.none(), st.binary(max_size=300)),
        st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=20))), max_size=3),
    ),
    min_size=1,
    max_size=20,
)


@WALKS
@settings(max_examples=300, deadline=None)
@given(records, st.booleans(), st.lists(st.tuples(st.integers(0), st.integers(0, 255)), max_size=3),
       st.integers(-2, 2))
def test_compiled_walk_matches_python_walk(
    walk: Walk, recs: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    from_client: bool, damage: list[tuple[int, int]], count_skew: int,
) -> None:
    out = bytearray(b"\xee" * 7)  # records start inside a larger buffer, as in a request
    for i, (ts_delta, key, value, headers) in enumerate(recs):
        encode_record(out, i if from_client else 2 * i, ts_delta, key, value, headers)
    for where, byte in damage:
        out[7 + where % (len(out) - 7)] = byte
    buf = bytes(out)
    count = max(0, len(recs) + count_skew)
    fast = walk(buf, 7, len(buf), count, BASE_TS, from_client)
    expected = python_walk(buf, 7, len(buf), count, from_client)
    if expected is None:
        assert not fast[0]
    else:
        assert tuple(fast) == expected


@WALKS
@pytest.mark.parametrize("value_size", [0, 63, 64, 8191, 8192, 20_000])
def test_walks_agree_on_long_records_and_many_of_them(walk: Walk, value_size: int) -> None:
    """Lengths that take one, two and three varint bytes (the C walk inlines one and two), and enough
    records that the C walk releases the GIL for them."""
    out = bytearray()
    count = 600 if value_size < 8192 else 3
    for i in range(count):
        encode_record(out, i, i % 3 - 1, None if i % 2 else b"k", b"v" * value_size, [("h", b"x")] if i % 5 == 0 else [])
    buf = bytes(out)
    expected = python_walk(buf, 0, len(buf), count, True)
    assert expected is not None and expected[1] == count
    assert walk(buf, 0, len(buf), count, BASE_TS, True) == expected
    # The same records one byte short: every walk refuses them.
    assert not walk(buf, 0, len(buf) - 1, count, BASE_TS, True)[0]


def test_c_walk_reads_every_kind_of_buffer_and_no_byte_outside_it() -> None:
    if reader.c_walk_records is None:
        pytest.skip("tierlog.records._cwalk is not built (the install step found no C compiler)")
    out = bytearray(b"\x00" * 3)
    for i in range(4):
        encode_record(out, i, 0, b"key", b"value")
    expected = python_walk(bytes(out), 3, len(out), 4, True)
    for buf in (bytes(out), out, memoryview(out)):
        assert reader.c_walk_records(buf, 3, len(out), 4, BASE_TS, True) == expected
    for pos, end in ((3, len(out) + 1), (-1, len(out)), (5, 4)):
        with pytest.raises(ValueError, match="not inside a buffer"):
            reader.c_walk_records(out, pos, end, 4, BASE_TS, True)
