"""The compiled record walk agrees with the Python walk validate_batch falls back to, on valid and damaged records."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.errors import InvalidRecordError
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


@settings(max_examples=300, deadline=None)
@given(records, st.booleans(), st.lists(st.tuples(st.integers(0), st.integers(0, 255)), max_size=3),
       st.integers(-2, 2))
def test_compiled_walk_matches_python_walk(
    recs: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    from_client: bool, damage: list[tuple[int, int]], count_skew: int,
) -> None:
    out = bytearray(b"\xee" * 7)  # records start inside a larger buffer, as in a request
    for i, (ts_delta, key, value, headers) in enumerate(recs):
        encode_record(out, i if from_client else 2 * i, ts_delta, key, value, headers)
    for where, byte in damage:
        out[7 + where % (len(out) - 7)] = byte
    buf = bytes(out)
    count = max(0, len(recs) + count_skew)
    fast = walk_records(np.frombuffer(buf, dtype=np.uint8), 7, len(buf), count, BASE_TS, from_client)
    expected = python_walk(buf, 7, len(buf), count, from_client)
    if expected is None:
        assert not fast[0]
    else:
        assert tuple(fast) == expected
