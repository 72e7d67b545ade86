"""The compiled record walk agrees with the Python walk (skip_record) on valid and damaged records."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.errors import InvalidRecordError
from tierlog.records._fastwalk import NO_TIMESTAMP, walk_records
from tierlog.records.record import encode_record, skip_record

BASE_TS = 1_700_000_000_000


def python_walk(buf: bytes, pos: int, end: int, count: int, from_client: bool) -> tuple[object, ...] | None:
    """What the compiled walk must return for records that are valid, or None where it must refuse."""
    min_ts = max_ts = NO_TIMESTAMP
    max_ts_delta, has_null_key, previous, found = -1, False, -1, 0
    try:
        for index in range(count):
            if pos >= end:
                break
            ts_delta, offset_delta, has_key, pos = skip_record(buf, pos, end)
            if (from_client and offset_delta != index) or (not from_client and offset_delta <= previous):
                return None
            previous = offset_delta
            has_null_key = has_null_key or not has_key
            ts = BASE_TS + ts_delta
            if ts != NO_TIMESTAMP:
                if ts > max_ts:
                    max_ts, max_ts_delta = ts, offset_delta
                if min_ts == NO_TIMESTAMP or ts < min_ts:
                    min_ts = ts
            found += 1
    except (InvalidRecordError, IndexError):
        return None
    return True, found, pos, min_ts, max_ts, max_ts_delta, has_null_key, previous


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
