"""Compiled kernels that turn a run of v2 record batches into column buffers.

A Spark scan touches every record, so a Python loop per record (microseconds each) would be the
whole cost of a scan. Two numba loops do the per-batch and per-record work instead:

* :func:`count_batches` / :func:`scan_batches` walk the batch headers of a byte window (the same
  rules as :func:`tierlog.records.header.iter_headers`: a batch running past the window ends the walk,
  a length below 14 or a magic other than 2 is corruption) and return the header fields as arrays, so
  choosing batches by offset and type is a numpy mask rather than a loop;
* :func:`decode_records` walks the records of the chosen batches and writes offsets, timestamps and
  the key/value/header bytes straight into preallocated Arrow-layout buffers (int32 offsets, a
  validity byte per value, contiguous data), from which :mod:`tierlog.pipeline.arrow` builds arrays
  without another copy.

Varints are read as Java reads them (a 5-byte varint keeps its low 32 bits), like
:mod:`tierlog.records.record`, so both decoders agree on every batch Kafka accepts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

# Column order of the header table returned by scan_batches.
F_POSITION = 0
F_SIZE = 1
F_BASE_OFFSET = 2
F_LAST_OFFSET_DELTA = 3
F_ATTRIBUTES = 4
F_BASE_TIMESTAMP = 5
F_MAX_TIMESTAMP = 6
F_PRODUCER_ID = 7
F_RECORDS_COUNT = 8
F_CRC = 9
N_FIELDS = 10

# Status codes shared by the kernels and their Python callers.
OK = 0
SHORT_BATCH = 1  # batch length below Kafka's minimum: a zero-filled tail or damage
BAD_MAGIC = 2
BAD_RECORD = 3  # a record's fields run past its length, or a negative length where none is allowed
COUNT_MISMATCH = 4  # the batch holds fewer records, or more bytes, than its header declares

_MIN_BATCH_LENGTH = 14
_HEADER_UP_TO_MAGIC = 17
_LOG_OVERHEAD = 12


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator,misc,unused-ignore]
def _u32(buf: np.ndarray, pos: int) -> int:
    return int((np.int64(buf[pos]) << 24) | (np.int64(buf[pos + 1]) << 16)
               | (np.int64(buf[pos + 2]) << 8) | np.int64(buf[pos + 3]))


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator,misc,unused-ignore]
def _be(buf: np.ndarray, pos: int, width: int) -> int:
    """A signed big-endian integer of ``width`` bytes (2, 4 or 8), in int64 arithmetic only: mixing
    numba's unsigned and signed integers would silently promote to float."""
    if width == 2:
        short = int((np.int64(buf[pos]) << 8) | np.int64(buf[pos + 1]))
        return short - 65536 if short >= 32768 else short
    if width == 4:
        word = _u32(buf, pos)
        return word - 4294967296 if word >= 2147483648 else word
    hi = _u32(buf, pos)
    lo = _u32(buf, pos + 4)
    return int(np.int64(np.uint64(hi) << np.uint64(32) | np.uint64(lo)))


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator,misc,unused-ignore]
def _varint(buf: np.ndarray, pos: int, end: int) -> tuple[int, int, bool]:
    raw = 0
    shift = 0
    for i in range(5):
        if pos + i >= end:
            return 0, pos, False
        b = int(buf[pos + i])
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            raw &= 0xFFFFFFFF
            return (raw >> 1) ^ -(raw & 1), pos + i + 1, True
        shift += 7
    return 0, pos, False


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator,misc,unused-ignore]
def _varlong(buf: np.ndarray, pos: int, end: int) -> tuple[int, int, bool]:
    raw = np.uint64(0)
    shift = np.uint64(0)
    for i in range(10):
        if pos + i >= end:
            return 0, pos, False
        b = np.uint64(buf[pos + i])
        raw |= (b & np.uint64(0x7F)) << shift
        if b < np.uint64(0x80):
            signed = np.int64(raw >> np.uint64(1)) ^ -np.int64(raw & np.uint64(1))
            return int(signed), pos + i + 1, True
        shift += np.uint64(7)
    return 0, pos, False


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator,misc,unused-ignore]
def count_batches(buf: np.ndarray, start: int, end: int) -> tuple[int, int, int, int]:
    """(batches, end of the last whole batch, status, bytes the next batch needs past ``end``).

    The last value is 0 when the window ends on a batch boundary; a reader with more data behind the
    window grows the window by it rather than treating the partial batch as the end of the log."""
    pos = start
    n = 0
    while True:
        if end - pos < _HEADER_UP_TO_MAGIC:
            need = 0 if pos == end else _HEADER_UP_TO_MAGIC - (end - pos)
            return n, pos, OK, need
        length = _be(buf, pos + 8, 4)
        if length < _MIN_BATCH_LENGTH:
            return n, pos, SHORT_BATCH, 0
        if pos + _LOG_OVERHEAD + length > end:
            return n, pos, OK, pos + _LOG_OVERHEAD + length - end
        if buf[pos + 16] != 2:
            return n, pos, BAD_MAGIC, 0
        n += 1
        pos += _LOG_OVERHEAD + length


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator,misc,unused-ignore]
def scan_batches(buf: np.ndarray, start: int, n: int) -> np.ndarray:
    """The header fields of the ``n`` batches from ``start`` (counted by :func:`count_batches`).

    Batches shorter than the 61-byte header get a records count of -1: the caller reports them."""
    out = np.empty((n, N_FIELDS), dtype=np.int64)
    pos = start
    for i in range(n):
        length = _be(buf, pos + 8, 4)
        size = _LOG_OVERHEAD + length
        out[i, F_POSITION] = pos
        out[i, F_SIZE] = size
        out[i, F_BASE_OFFSET] = _be(buf, pos, 8)
        if size < 61:
            out[i, F_LAST_OFFSET_DELTA] = 0
            out[i, F_ATTRIBUTES] = 0
            out[i, F_BASE_TIMESTAMP] = -1
            out[i, F_MAX_TIMESTAMP] = -1
            out[i, F_PRODUCER_ID] = -1
            out[i, F_RECORDS_COUNT] = -1
            out[i, F_CRC] = 0
        else:
            out[i, F_CRC] = _be(buf, pos + 17, 4) & 0xFFFFFFFF
            out[i, F_ATTRIBUTES] = _be(buf, pos + 21, 2)
            out[i, F_LAST_OFFSET_DELTA] = _be(buf, pos + 23, 4)
            out[i, F_BASE_TIMESTAMP] = _be(buf, pos + 27, 8)
            out[i, F_MAX_TIMESTAMP] = _be(buf, pos + 35, 8)
            out[i, F_PRODUCER_ID] = _be(buf, pos + 43, 8)
            out[i, F_RECORDS_COUNT] = _be(buf, pos + 57, 4)
        pos += size
    return out


@intrinsic  # type: ignore[untyped-decorator,misc,unused-ignore]
def _memcpy(typingctx: Any, dst: Any, dst_at: Any, src: Any, src_at: Any, n: Any) -> Any:
    """``dst[dst_at:dst_at + n] = src[src_at:src_at + n]`` as LLVM's memcpy intrinsic.

    Keys and values are copied one at a time at data-dependent positions; a numba loop or slice
    assignment costs 60-80 ns for a 100-byte value there (four times the whole parse), the
    intrinsic a few ns. An intrinsic, unlike a ctypes call to libc, keeps the kernel cacheable."""
    sig = types.void(dst, types.intp, src, types.intp, types.intp)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        d, d_at, s, s_at, count = args
        dst_array = context.make_array(signature.args[0])(context, builder, d)
        src_array = context.make_array(signature.args[2])(context, builder, s)
        cgutils.raw_memcpy(builder, builder.gep(dst_array.data, [d_at]),  # type: ignore[no-untyped-call,unused-ignore]
                           builder.gep(src_array.data, [s_at]), count, 1)
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, nogil=True, inline="always")  # type: ignore[untyped-decorator,misc,unused-ignore]
def _copy(src: np.ndarray, pos: int, n: int, dst: np.ndarray, at: int) -> None:
    if n > 0:
        # Called from compiled code, where the typing context argument is implicit.
        _memcpy(dst, at, src, pos, n)  # type: ignore[call-arg,unused-ignore]


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator,misc,unused-ignore]
def decode_records(
    raw: np.ndarray, inflated: np.ndarray,
    b_inflated: np.ndarray, b_start: np.ndarray, b_end: np.ndarray, b_base_offset: np.ndarray,
    b_base_timestamp: np.ndarray, b_append_time: np.ndarray, b_count: np.ndarray,
    start_offset: int, end_offset: int, with_headers: bool,
    o_offset: np.ndarray, o_timestamp_us: np.ndarray, o_timestamp_type: np.ndarray,
    k_off: np.ndarray, k_valid: np.ndarray, k_data: np.ndarray,
    v_off: np.ndarray, v_valid: np.ndarray, v_data: np.ndarray,
    h_off: np.ndarray, hk_off: np.ndarray, hk_data: np.ndarray,
    hv_off: np.ndarray, hv_valid: np.ndarray, hv_data: np.ndarray,
) -> tuple[int, int, int, int, int, int, int, int]:
    """Decode the records of the given batches that fall in [start_offset, end_offset).

    ``b_inflated[i]`` says whether batch i's records are in ``inflated`` (decompressed) or in
    ``raw``; ``b_append_time[i]`` is the LogAppendTime every record of the batch reports, or -2 for a
    CreateTime batch (whose records carry their own). Returns (status, failing batch, rows, key
    bytes, value bytes, headers, header key bytes, header value bytes)."""
    rows = 0
    kb = 0
    vb = 0
    nh = 0
    hkb = 0
    hvb = 0
    k_off[0] = 0
    v_off[0] = 0
    h_off[0] = 0
    hk_off[0] = 0
    hv_off[0] = 0
    for bi in range(b_start.shape[0]):
        buf = inflated if b_inflated[bi] else raw
        pos = b_start[bi]
        end = b_end[bi]
        base_offset = b_base_offset[bi]
        base_ts = b_base_timestamp[bi]
        append_time = b_append_time[bi]
        ts_type = 0 if append_time == -2 else 1
        found = 0
        for _ in range(b_count[bi]):
            if pos >= end:
                break
            length, pos, ok = _varint(buf, pos, end)
            if not ok or length < 0 or length > end - pos:
                return BAD_RECORD, bi, rows, kb, vb, nh, hkb, hvb
            record_end = pos + length
            pos += 1  # attributes: unused in v2
            ts_delta, pos, ok = _varlong(buf, pos, record_end)
            if not ok:
                return BAD_RECORD, bi, rows, kb, vb, nh, hkb, hvb
            offset_delta, pos, ok = _varint(buf, pos, record_end)
            if not ok:
                return BAD_RECORD, bi, rows, kb, vb, nh, hkb, hvb
            offset = base_offset + offset_delta
            keep = start_offset <= offset < end_offset
            key_len, pos, ok = _varint(buf, pos, record_end)
            if not ok or key_len > record_end - pos:
                return BAD_RECORD, bi, rows, kb, vb, nh, hkb, hvb
            key_pos = pos
            if key_len > 0:
                pos += key_len
            value_len, pos, ok = _varint(buf, pos, record_end)
            if not ok or value_len > record_end - pos:
                return BAD_RECORD, bi, rows, kb, vb, nh, hkb, hvb
            value_pos = pos
            if value_len > 0:
                pos += value_len
            header_count, pos, ok = _varint(buf, pos, record_end)
            if not ok or header_count < 0 or header_count > record_end - pos:
                return BAD_RECORD, bi, rows, kb, vb, nh, hkb, hvb
            for _h in range(header_count):
                hk_len, pos, ok = _varint(buf, pos, record_end)
                if not ok or hk_len < 0 or hk_len > record_end - pos:
                    return BAD_RECORD, bi, rows, kb, vb, nh, hkb, hvb
                if keep and with_headers:
                    _copy(buf, pos, hk_len, hk_data, hkb)
                    hkb += hk_len
                    hk_off[nh + 1] = hkb
                pos += hk_len
                hv_len, pos, ok = _varint(buf, pos, record_end)
                if not ok or hv_len > record_end - pos:
                    return BAD_RECORD, bi, rows, kb, vb, nh, hkb, hvb
                if keep and with_headers:
                    if hv_len >= 0:
                        _copy(buf, pos, hv_len, hv_data, hvb)
                        hvb += hv_len
                        hv_valid[nh] = 1
                    else:
                        hv_valid[nh] = 0
                    hv_off[nh + 1] = hvb
                    nh += 1
                if hv_len > 0:
                    pos += hv_len
            if pos != record_end:
                return BAD_RECORD, bi, rows, kb, vb, nh, hkb, hvb
            found += 1
            if not keep:
                continue
            o_offset[rows] = offset
            ts = append_time if ts_type == 1 else base_ts + ts_delta
            o_timestamp_us[rows] = ts * 1000
            o_timestamp_type[rows] = ts_type
            if key_len >= 0:
                _copy(buf, key_pos, key_len, k_data, kb)
                kb += key_len
                k_valid[rows] = 1
            else:
                k_valid[rows] = 0
            k_off[rows + 1] = kb
            if value_len >= 0:
                _copy(buf, value_pos, value_len, v_data, vb)
                vb += value_len
                v_valid[rows] = 1
            else:
                v_valid[rows] = 0
            v_off[rows + 1] = vb
            h_off[rows + 1] = nh
            rows += 1
        if found != b_count[bi] or pos != end:
            return COUNT_MISMATCH, bi, rows, kb, vb, nh, hkb, hvb
    return OK, -1, rows, kb, vb, nh, hkb, hvb
