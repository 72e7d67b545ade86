"""A compiled walk over the records of one batch, for the produce path.

``validate_batch`` must check every record's structure (Kafka does, and a malformed record would
otherwise break every consumer), but a Python loop costs microseconds per record. This walk does
the same checks as :func:`tierlog.records.record.skip_record` in a numba-compiled loop; when it
finds a problem, the caller re-runs the Python walk to raise the exact error message.
"""

from __future__ import annotations

import numpy as np
from numba import njit

NO_TIMESTAMP = -1


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator,misc,unused-ignore]
def _varint(buf: np.ndarray, pos: int, end: int, max_bytes: int) -> tuple[int, int, bool]:
    raw = 0
    shift = 0
    for i in range(max_bytes):
        if pos + i >= end:
            return 0, pos, False
        b = int(buf[pos + i])
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            if max_bytes == 5:
                raw &= 0xFFFFFFFF
                value = (raw >> 1) ^ -(raw & 1)
                return value, pos + i + 1, True
            # 64-bit zig-zag on a value that may use all 64 bits
            u = np.uint64(raw)
            signed = np.int64(u >> np.uint64(1)) ^ -np.int64(u & np.uint64(1))
            return int(signed), pos + i + 1, True
        shift += 7
    return 0, pos, False


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator,misc,unused-ignore]
def walk_records(
    buf: np.ndarray, pos: int, end: int, count: int, base_timestamp: int, from_client: bool
) -> tuple[bool, int, int, int, int, int, bool, int]:
    """(ok, found, end position, min ts, max ts, offsetDelta of max ts, has null key, last offsetDelta)."""
    min_ts = NO_TIMESTAMP
    max_ts = NO_TIMESTAMP
    max_ts_delta = -1
    has_null_key = False
    previous = -1
    found = 0
    for index in range(count):
        if pos >= end:
            break
        length, pos, ok = _varint(buf, pos, end, 5)
        if not ok or length < 0 or length > end - pos:
            return False, found, pos, min_ts, max_ts, max_ts_delta, has_null_key, previous
        start = pos
        record_end = pos + length
        pos += 1  # attributes
        ts_delta, pos, ok = _varint(buf, pos, record_end, 10)
        if not ok:
            return False, found, pos, min_ts, max_ts, max_ts_delta, has_null_key, previous
        offset_delta, pos, ok = _varint(buf, pos, record_end, 5)
        if not ok:
            return False, found, pos, min_ts, max_ts, max_ts_delta, has_null_key, previous
        if from_client:
            if offset_delta != index:
                return False, found, pos, min_ts, max_ts, max_ts_delta, has_null_key, previous
        elif offset_delta <= previous:
            return False, found, pos, min_ts, max_ts, max_ts_delta, has_null_key, previous
        previous = offset_delta
        key_length, pos, ok = _varint(buf, pos, record_end, 5)
        if not ok:
            return False, found, pos, min_ts, max_ts, max_ts_delta, has_null_key, previous
        if key_length > 0:
            if key_length > record_end - pos:
                return False, found, pos, min_ts, max_ts, max_ts_delta, has_null_key, previous
            pos += key_length
        else:
            # A negative length (Java reads anything below 0 as null) or zero.
            has_null_key = has_null_key or key_length < 0
        value_length, pos, ok = _varint(buf, pos, record_end, 5)
        if not ok:
            return False, found, pos, min_ts, max_ts, max_ts_delta, has_null_key, previous
        if value_length > 0:
            if value_length > record_end - pos:
                return False, found, pos, min_ts, max_ts, max_ts_delta, has_null_key, previous
            pos += value_length
        header_count, pos, ok = _varint(buf, pos, record_end, 5)
        if not ok or header_count < 0 or header_count > record_end - pos:
            return False, found, pos, min_ts, max_ts, max_ts_delta, has_null_key, previous
        for _ in range(header_count):
            hk, pos, ok = _varint(buf, pos, record_end, 5)
            if not ok or hk < 0 or hk > record_end - pos:
                return False, found, pos, min_ts, max_ts, max_ts_delta, has_null_key, previous
            pos += hk
            hv, pos, ok = _varint(buf, pos, record_end, 5)
            if not ok:
                return False, found, pos, min_ts, max_ts, max_ts_delta, has_null_key, previous
            if hv > 0:
                if hv > record_end - pos:
                    return False, found, pos, min_ts, max_ts, max_ts_delta, has_null_key, previous
                pos += hv
        if pos - start != length:
            return False, found, pos, min_ts, max_ts, max_ts_delta, has_null_key, previous
        ts = base_timestamp + ts_delta
        if ts != NO_TIMESTAMP:
            if ts > max_ts:
                max_ts = ts
                max_ts_delta = offset_delta
            if min_ts == NO_TIMESTAMP or ts < min_ts:
                min_ts = ts
        found += 1
    return True, found, pos, min_ts, max_ts, max_ts_delta, has_null_key, previous
