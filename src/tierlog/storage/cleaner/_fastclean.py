"""The cleaner's hot loops, compiled with numba: walking a batch's record keys, their 128-bit digests,
the key -> offset map as one preallocated open-addressing table, and rewriting the kept records of a
batch into one output buffer.

A Python loop over records costs microseconds each; the cleaner reads every record twice (the map
pass and the rewrite), so these loops decide its throughput (bench/compaction.py). The Python
reference (``batches.batch_keys``/``filter_batch`` over ``offset_map.DictOffsetMap``) stays, and a
property test holds the two equal (tests/unit/storage/cleaner/test_fastclean.py).

The table is three arrays of ``capacity`` entries -- digest high and low halves and the offset plus
one (0: empty, so a new table is all zeros and its pages are only touched as keys arrive) -- so 24
bytes an entry, the budget Kafka's SkimpyOffsetMap takes from
``log.cleaner.dedupe.buffer.size``; linear probing, and the map counts as full at the load factor.

The digest is MurmurHash3 x64-128 (the published algorithm) over the key bytes: 128 bits, as Kafka's
MD5 digest, so two keys share an entry (and one is lost to cleaning) with negligible probability.
Walk functions return a status instead of raising: on anything malformed the caller re-runs the
Python walk, which raises the exact error.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

OK = 0
#: The batch's new keys would take the map past its limit; the map is as before the batch.
FULL = 1
#: The records do not parse; the Python walk raises the exact error.
MALFORMED = 2
#: An empty map cannot hold even this one batch's keys.
OVERFLOW = 3

_C1 = np.uint64(0x87C37B91114253D5)
_C2 = np.uint64(0x4CF5AD432745937F)


@njit(cache=True, nogil=True, inline="always")  # type: ignore[untyped-decorator,misc,unused-ignore]
def _rotl(x: Any, r: int) -> Any:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@njit(cache=True, nogil=True, inline="always")  # type: ignore[untyped-decorator,misc,unused-ignore]
def _fmix(k: Any) -> Any:
    k ^= k >> np.uint64(33)
    k *= np.uint64(0xFF51AFD7ED558CCD)
    k ^= k >> np.uint64(33)
    k *= np.uint64(0xC4CEB9FE1A85EC53)
    k ^= k >> np.uint64(33)
    return k


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator,misc,unused-ignore]
def murmur3_128(buf: np.ndarray, start: int, n: int) -> tuple[Any, Any]:
    h1 = np.uint64(0)
    h2 = np.uint64(0)
    blocks = n // 16
    for i in range(blocks):
        p = start + i * 16
        k1 = np.uint64(0)
        k2 = np.uint64(0)
        for j in range(8):
            k1 |= np.uint64(buf[p + j]) << np.uint64(8 * j)
            k2 |= np.uint64(buf[p + 8 + j]) << np.uint64(8 * j)
        k1 *= _C1
        k1 = _rotl(k1, 31)
        k1 *= _C2
        h1 ^= k1
        h1 = _rotl(h1, 27)
        h1 += h2
        h1 = h1 * np.uint64(5) + np.uint64(0x52DCE729)
        k2 *= _C2
        k2 = _rotl(k2, 33)
        k2 *= _C1
        h2 ^= k2
        h2 = _rotl(h2, 31)
        h2 += h1
        h2 = h2 * np.uint64(5) + np.uint64(0x38495AB5)
    tail = start + blocks * 16
    rest = n & 15
    k1 = np.uint64(0)
    k2 = np.uint64(0)
    if rest > 8:
        for j in range(8, rest):
            k2 |= np.uint64(buf[tail + j]) << np.uint64(8 * (j - 8))
        k2 *= _C2
        k2 = _rotl(k2, 33)
        k2 *= _C1
        h2 ^= k2
    if rest > 0:
        for j in range(min(rest, 8)):
            k1 |= np.uint64(buf[tail + j]) << np.uint64(8 * j)
        k1 *= _C1
        k1 = _rotl(k1, 31)
        k1 *= _C2
        h1 ^= k1
    h1 ^= np.uint64(n)
    h2 ^= np.uint64(n)
    h1 += h2
    h2 += h1
    h1 = _fmix(h1)
    h2 = _fmix(h2)
    h1 += h2
    h2 += h1
    return h1, h2


@njit(cache=True, nogil=True, inline="always")  # type: ignore[untyped-decorator,misc,unused-ignore]
def _varint(buf: np.ndarray, pos: int, end: int, max_bytes: int) -> tuple[Any, int, bool]:
    """A zig-zag varint (varlong with ``max_bytes`` 10): (value, position after it, ok)."""
    raw = np.uint64(0)
    shift = np.uint64(0)
    for i in range(max_bytes):
        if pos + i >= end:
            return np.int64(0), pos, False
        b = np.uint64(buf[pos + i])
        raw |= (b & np.uint64(0x7F)) << shift
        if b < np.uint64(0x80):
            if max_bytes == 5:
                raw &= np.uint64(0xFFFFFFFF)
                v32 = np.int64(raw >> np.uint64(1)) ^ -np.int64(raw & np.uint64(1))
                return v32, pos + i + 1, True
            return np.int64(raw >> np.uint64(1)) ^ -np.int64(raw & np.uint64(1)), pos + i + 1, True
        shift += np.uint64(7)
    return np.int64(0), pos, False


@njit(cache=True, nogil=True, inline="always")  # type: ignore[untyped-decorator,misc,unused-ignore]
def _slot(h1s: np.ndarray, h2s: np.ndarray, offs: np.ndarray, a: Any, b: Any) -> tuple[Any, bool]:
    """The slot of digest (a, b): where it is, or the empty slot where it would go."""
    cap = offs.shape[0]
    i: Any = np.int64(a % np.uint64(cap))
    while True:
        if offs[i] == 0:
            return i, False
        if h1s[i] == a and h2s[i] == b:
            return i, True
        i += 1
        if i == cap:
            i = 0


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator,misc,unused-ignore]
def map_get(h1s: np.ndarray, h2s: np.ndarray, offs: np.ndarray, key: np.ndarray) -> int:
    a, b = murmur3_128(key, 0, key.shape[0])
    i, found = _slot(h1s, h2s, offs, a, b)
    return int(offs[i]) - 1 if found else -1


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator,misc,unused-ignore]
def map_put(h1s: np.ndarray, h2s: np.ndarray, offs: np.ndarray, key: np.ndarray, offset: int) -> bool:
    """Put one key; True when it was new."""
    a, b = murmur3_128(key, 0, key.shape[0])
    i, found = _slot(h1s, h2s, offs, a, b)
    h1s[i] = a
    h2s[i] = b
    offs[i] = offset + 1
    return not found


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator,misc,unused-ignore]
def map_batch(buf: np.ndarray, pos: int, end: int, count: int, base_offset: int, h1s: np.ndarray,
              h2s: np.ndarray, offs: np.ndarray, size: int, limit: int) -> tuple[int, int, int, int]:
    """Put the keys of one uncompressed batch's records [pos, end) into the map.

    (status, new size, highest offset put or -1, keyed records). With a non-empty map, a batch whose
    new keys would take it past ``limit`` is undone (FULL), so the map ends where the last batch that
    fit ended, as the Python reference's ``fits_digests`` check does."""
    undo_slot = np.empty(count, np.int64)
    undo_off = np.empty(count, np.int64)
    status, size, highest, keyed, _ = _map_records(buf, pos, end, count, base_offset, h1s, h2s, offs, size, limit,
                                                   undo_slot, undo_off)
    return status, size, highest, keyed


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator,misc,unused-ignore]
def _map_records(buf: np.ndarray, pos: int, end: int, count: int, base_offset: int, h1s: np.ndarray,
                 h2s: np.ndarray, offs: np.ndarray, size: int, limit: int, undo_slot: np.ndarray,
                 undo_off: np.ndarray) -> tuple[int, int, int, int, int]:
    """:func:`map_batch` with the caller's undo arrays (at least ``count`` long), which it leaves
    holding, for each key put, its entry and that entry's offset + 1 before (0: the key was new).
    (status, new size, highest offset put or -1, keyed records, keys put)."""
    cap = offs.shape[0]
    undone = 0
    start_size = size
    highest = -1
    keyed = 0
    for _ in range(count):
        length, pos, ok = _varint(buf, pos, end, 5)
        if not ok or length < 0 or length > end - pos:
            return MALFORMED, start_size, -1, 0, 0
        record_end = pos + length
        p = pos + 1  # attributes
        _ts, p, ok = _varint(buf, p, record_end, 10)
        if not ok:
            return MALFORMED, start_size, -1, 0, 0
        delta, p, ok = _varint(buf, p, record_end, 5)
        if not ok:
            return MALFORMED, start_size, -1, 0, 0
        key_length, p, ok = _varint(buf, p, record_end, 5)
        if not ok or key_length > record_end - p:
            return MALFORMED, start_size, -1, 0, 0
        pos = record_end
        if key_length < 0:
            continue
        offset = base_offset + delta
        a, b = murmur3_128(buf, p, key_length)
        i, found = _slot(h1s, h2s, offs, a, b)
        undo_slot[undone] = i
        undo_off[undone] = offs[i]
        undone += 1
        if not found:
            size += 1
            if size >= cap:  # keep one slot empty, or probing would never end
                for u in range(undone - 1, -1, -1):
                    offs[undo_slot[u]] = undo_off[u]
                return OVERFLOW if start_size == 0 else FULL, start_size, -1, 0, 0
        h1s[i] = a
        h2s[i] = b
        offs[i] = offset + 1
        keyed += 1
        if offset > highest:
            highest = offset
    if pos != end:
        for u in range(undone - 1, -1, -1):
            offs[undo_slot[u]] = undo_off[u]
        return MALFORMED, start_size, -1, 0, 0
    if start_size > 0 and size > limit:
        # Undone newest first: each entry goes back to what it was, the new ones to empty, and
        # since no later entry remains, every probe chain is as it was before the batch.
        for u in range(undone - 1, -1, -1):
            offs[undo_slot[u]] = undo_off[u]
        return FULL, start_size, -1, 0, 0
    return OK, size, highest, keyed, undone


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator,misc,unused-ignore]
def retain(buf: np.ndarray, pos: int, end: int, count: int, base_offset: int, base_timestamp: int,
           h1s: np.ndarray, h2s: np.ndarray, offs: np.ndarray, keep_deletes: bool, attr_at: np.ndarray,
           rest_at: np.ndarray, end_at: np.ndarray, timestamps: np.ndarray) -> tuple[int, int, int, bool]:
    """Which records of one uncompressed data batch the cleaned log keeps (the rules of
    ``batches.filter_batch``): a keyed record that is the latest of its key in the map, a tombstone
    only while ``keep_deletes``. Fills, per kept record, where its attributes byte, its fields after
    the timestamp delta, and its end are, and its timestamp. (status, kept, records, has tombstone)."""
    kept = 0
    records = 0
    has_tombstone = False
    for _ in range(count):
        length, pos, ok = _varint(buf, pos, end, 5)
        if not ok or length < 0 or length > end - pos:
            return MALFORMED, 0, 0, False
        record_end = pos + length
        attr = pos
        ts_delta, p, ok = _varint(buf, pos + 1, record_end, 10)
        if not ok:
            return MALFORMED, 0, 0, False
        rest = p
        delta, p, ok = _varint(buf, p, record_end, 5)
        if not ok:
            return MALFORMED, 0, 0, False
        key_length, p, ok = _varint(buf, p, record_end, 5)
        if not ok or key_length > record_end - p:
            return MALFORMED, 0, 0, False
        key_at = p
        p += max(key_length, 0)
        value_length, p, ok = _varint(buf, p, record_end, 5)
        if not ok:
            return MALFORMED, 0, 0, False
        pos = record_end
        records += 1
        if key_length < 0:
            continue  # a null key cannot be compacted: dropped
        a, b = murmur3_128(buf, key_at, key_length)
        i, found = _slot(h1s, h2s, offs, a, b)
        latest = offs[i] - 1 if found else -1
        if base_offset + delta < latest:
            continue
        if value_length < 0:
            if not keep_deletes:
                continue
            has_tombstone = True
        attr_at[kept] = attr
        rest_at[kept] = rest
        end_at[kept] = record_end
        timestamps[kept] = base_timestamp + ts_delta
        kept += 1
    if pos != end:
        return MALFORMED, 0, 0, False
    return OK, kept, records, has_tombstone


@njit(cache=True, nogil=True, inline="always")  # type: ignore[untyped-decorator,misc,unused-ignore]
def _put_varint(out: np.ndarray, pos: int, zz: Any) -> int:
    while zz >= np.uint64(0x80):
        out[pos] = np.uint8((zz & np.uint64(0x7F)) | np.uint64(0x80))
        zz >>= np.uint64(7)
        pos += 1
    out[pos] = np.uint8(zz)
    return pos + 1


@njit(cache=True, nogil=True, inline="always")  # type: ignore[untyped-decorator,misc,unused-ignore]
def _varint_size(zz: Any) -> int:
    n = 1
    while zz >= np.uint64(0x80):
        zz >>= np.uint64(7)
        n += 1
    return n


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator,misc,unused-ignore]
def write_kept(buf: np.ndarray, kept: int, attr_at: np.ndarray, rest_at: np.ndarray, end_at: np.ndarray,
               timestamps: np.ndarray, base_timestamp: int, out: np.ndarray, out_pos: int) -> int:
    """Write the kept records into ``out`` from ``out_pos``, their timestamp deltas against the new
    ``base_timestamp`` and everything else as it was; returns the end position."""
    for k in range(kept):
        d = np.int64(timestamps[k] - base_timestamp)
        zz_ts = np.uint64((d << np.int64(1)) ^ (d >> np.int64(63)))
        rest_bytes = end_at[k] - rest_at[k]
        length = 1 + _varint_size(zz_ts) + rest_bytes
        out_pos = _put_varint(out, out_pos, np.uint64(length) << np.uint64(1))
        out[out_pos] = buf[attr_at[k]]
        out_pos = _put_varint(out, out_pos + 1, zz_ts)
        out[out_pos:out_pos + rest_bytes] = buf[rest_at[k]:end_at[k]]
        out_pos += rest_bytes
    return out_pos


# -- a run of plain batches of a read chunk, in one call (the map pass and the rewrite) -----------------


@njit(cache=True, nogil=True, inline="always")  # type: ignore[untyped-decorator,misc,unused-ignore]
def _be(buf: np.ndarray, pos: int, n: int) -> Any:
    """A signed big-endian integer of ``n`` bytes (8 wraps to int64 by itself)."""
    v = np.int64(0)
    for i in range(n):
        v = (v << np.int64(8)) | np.int64(buf[pos + i])
    if n < 8 and v >= np.int64(1) << np.int64(8 * n - 1):
        v -= np.int64(1) << np.int64(8 * n)
    return v


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator,misc,unused-ignore]
def scan_chunk(buf: np.ndarray, pos: int, end: int, previous_last: int, end_offset: int, starts: np.ndarray,
               ends: np.ndarray, crcs: np.ndarray) -> int:
    """The run of plain batches (magic 2, uncompressed, neither transactional nor control) a read
    chunk holds whole from ``pos``, with offsets increasing from ``previous_last`` and below
    ``end_offset``: fills their [start, end) and stored CRC, returns how many (at most the arrays'
    size). The caller checks the CRCs (the C library is far faster than a compiled table)."""
    n = 0
    while pos + 12 <= end and n < starts.shape[0]:
        length = _be(buf, pos + 8, 4)
        if length < 49 or pos + 12 + length > end:
            break
        attributes = _be(buf, pos + 21, 2)
        if buf[pos + 16] != 2 or (attributes & 0x37) != 0:
            break
        base = _be(buf, pos, 8)
        if base <= previous_last or base >= end_offset:
            break
        starts[n] = pos
        ends[n] = pos + 12 + length
        crcs[n] = _be(buf, pos + 17, 4) & 0xFFFFFFFF
        previous_last = base + _be(buf, pos + 23, 4)
        pos = ends[n]
        n += 1
    return n


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator,misc,unused-ignore]
def map_run(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, n: int, start_offset: int, h1s: np.ndarray,
            h2s: np.ndarray, offs: np.ndarray, size: int, limit: int, bases: np.ndarray, lasts: np.ndarray,
            live: np.ndarray, positions: np.ndarray, sizes: np.ndarray, counts: np.ndarray, tracked: int,
            chunk_position: int) -> tuple[int, int, int, int, int, int]:
    """The map pass over the first ``n`` batches :func:`scan_chunk` found (their CRCs checked): stops
    before one whose keys do not fit or whose records do not parse.

    It also keeps the batch table (``bases``, ``lasts``, ``live``, and where the batch is in its file
    (``chunk_position`` is the chunk's) and its records, for :func:`superseded_runs`: ``tracked`` rows
    so far, in offset order; a batch past the arrays' end is not tracked): for each batch mapped, how many map
    entries hold one of its offsets. A key put moves its entry from the batch of its previous offset
    (found by offset in the table, if tracked) to the batch being mapped, so once the map is complete
    a batch whose count is 0 has no record the cleaned log keeps (see :func:`filter_run`). (batches
    taken, their last offset or -1, map size, highest offset put or -1, keyed records, rows tracked)."""
    highest = -1
    keyed = 0
    last = -1
    most = 0
    for i in range(n):
        count = _be(buf, starts[i] + 57, 4)
        if count > most:
            most = count
    undo_slot = np.empty(max(most, 1), np.int64)
    undo_off = np.empty(max(most, 1), np.int64)
    for i in range(n):
        pos = starts[i]
        base = _be(buf, pos, 8)
        batch_last = base + _be(buf, pos + 23, 4)
        if batch_last >= start_offset:
            count = _be(buf, pos + 57, 4)
            status, new_size, top, k, put = _map_records(buf, pos + 61, ends[i], count, base, h1s, h2s, offs, size,
                                                         limit, undo_slot, undo_off)
            if status != OK:
                return i, last, size, highest, keyed, tracked
            size = new_size
            keyed += k
            if top > highest:
                highest = top
            if tracked < bases.shape[0]:
                bases[tracked] = base
                lasts[tracked] = batch_last
                live[tracked] = put
                positions[tracked] = chunk_position + pos
                sizes[tracked] = ends[i] - pos
                counts[tracked] = count
                tracked += 1
            for u in range(put):
                previous = undo_off[u] - 1
                if previous >= 0:
                    j = np.searchsorted(bases[:tracked], previous, side="right") - 1
                    if j >= 0 and previous <= lasts[j]:
                        live[j] -= 1
        last = batch_last
    return n, last, size, highest, keyed, tracked


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator,misc,unused-ignore]
def superseded_runs(bases: np.ndarray, lasts: np.ndarray, live: np.ndarray, positions: np.ndarray,
                    sizes: np.ndarray, counts: np.ndarray, tracked: int,
                    producer_lasts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """From a complete map pass's batch table: the base offsets of the superseded batches (no map
    entry in them), and the runs the rewrite may skip unread -- for each superseded batch that is not
    possibly its producer's last (its last offset not in the sorted ``producer_lasts``), where the run
    of such batches lying back to back in the file from it ends, the run's last offset and records.
    (superseded bases, skippable bases, their positions, run end positions, run last offsets and
    run records as one (2, n) array)."""
    superseded = np.empty(tracked, np.int64)
    n_sup = 0
    skippable = np.zeros(tracked, np.bool_)
    for j in range(tracked):
        if live[j] == 0:
            superseded[n_sup] = bases[j]
            n_sup += 1
            k = np.searchsorted(producer_lasts, lasts[j])
            skippable[j] = not (k < producer_lasts.shape[0] and producer_lasts[k] == lasts[j])
    n_skip = 0
    for j in range(tracked):
        if skippable[j]:
            n_skip += 1
    skip_bases = np.empty(n_skip, np.int64)
    skip_positions = np.empty(n_skip, np.int64)
    run_ends = np.empty(n_skip, np.int64)
    run_tail = np.empty((2, n_skip), np.int64)
    k = n_skip
    end = -1
    last = -1
    records = 0
    next_position = -1
    for j in range(tracked - 1, -1, -1):
        if not skippable[j]:
            end = -1
            continue
        if end < 0 or positions[j] + sizes[j] != next_position:
            end = positions[j] + sizes[j]
            last = lasts[j]
            records = 0
        records += counts[j]
        next_position = positions[j]
        k -= 1
        skip_bases[k] = bases[j]
        skip_positions[k] = positions[j]
        run_ends[k] = end
        run_tail[0, k] = last
        run_tail[1, k] = records
    return superseded[:n_sup].copy(), skip_bases, skip_positions, run_ends, run_tail


@njit(cache=True, nogil=True, inline="always")  # type: ignore[untyped-decorator,misc,unused-ignore]
def _put_be(out: np.ndarray, pos: int, value: int, n: int) -> None:
    v = np.int64(value)
    for i in range(n - 1, -1, -1):
        out[pos + i] = np.uint8(v & np.int64(0xFF))
        v >>= np.int64(8)


@njit(cache=True, nogil=True)  # type: ignore[untyped-decorator,misc,unused-ignore]
def filter_run(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, n: int, h1s: np.ndarray, h2s: np.ndarray,
               offs: np.ndarray, now_ms: int, delete_retention_ms: int, keep_deletes: bool, last_pids: np.ndarray,
               last_offsets: np.ndarray, superseded: np.ndarray, dropped_superseded: np.ndarray, out: np.ndarray,
               out_ends: np.ndarray, rewritten: np.ndarray, attr_at: np.ndarray, rest_at: np.ndarray,
               end_at: np.ndarray, timestamps: np.ndarray) -> tuple[int, int, int, int, int]:
    """The rewrite of the first ``n`` batches :func:`scan_chunk` found (CRCs checked) into ``out``, by
    the rules of ``batches.filter_batch`` and the same bytes as ``fast_path.rewrite_data_batch``: a
    batch kept whole is copied, one emptied is dropped, the others rewritten with their kept records
    (CRC left 0 and flagged in ``rewritten``: the caller fills it). Stops before a LogAppendTime batch,
    one whose records do not parse, and an emptied batch that may be its producer's last (sorted
    ``last_pids`` with their last data offsets): the per-batch path decides those. A batch whose base
    offset is in the sorted ``superseded`` (the map pass's batch table found no map entry in it) is
    emptied without reading its records, and flagged in ``dropped_superseded`` (one flag per batch of
    the run).
    (batches taken, output bytes, output batches, records read, records kept)."""
    out_pos = 0
    out_n = 0
    records_read = 0
    records_kept = 0
    for i in range(n):
        pos = starts[i]
        attributes = _be(buf, pos + 21, 2)
        if attributes & 0x08:
            return i, out_pos, out_n, records_read, records_kept
        base = _be(buf, pos, 8)
        base_timestamp = _be(buf, pos + 27, 8)
        count = _be(buf, pos + 57, 4)
        if count < 0 or count > attr_at.shape[0]:
            return i, out_pos, out_n, records_read, records_kept
        has_horizon = (attributes & 0x40) != 0
        s = np.searchsorted(superseded, base)
        dropped_superseded[i] = 0
        if s < superseded.shape[0] and superseded[s] == base:
            kept, records, has_tombstone = 0, count, False
            dropped_superseded[i] = 1
        else:
            keep = keep_deletes or not has_horizon or now_ms < base_timestamp
            status, kept, records, has_tombstone = retain(buf, pos + 61, ends[i], count, base, base_timestamp, h1s,
                                                           h2s, offs, keep, attr_at, rest_at, end_at, timestamps)
            if status != OK:
                return i, out_pos, out_n, records_read, records_kept
        new_horizon = has_horizon or has_tombstone
        horizon = base_timestamp if has_horizon else now_ms + delete_retention_ms
        if kept == 0:
            producer_id = _be(buf, pos + 43, 8)
            if producer_id >= 0:
                j = np.searchsorted(last_pids, producer_id)
                if j < last_pids.shape[0] and last_pids[j] == producer_id and \
                        last_offsets[j] == base + _be(buf, pos + 23, 4):
                    return i, out_pos, out_n, records_read, records_kept
            records_read += count
            continue
        records_read += count
        records_kept += kept
        if kept == records and new_horizon == has_horizon:
            size = ends[i] - pos
            out[out_pos:out_pos + size] = buf[pos:ends[i]]
            rewritten[out_n] = 0
        else:
            new_base_ts = horizon if new_horizon else timestamps[0]
            end = write_kept(buf, kept, attr_at, rest_at, end_at, timestamps, new_base_ts, out, out_pos + 61)
            size = end - out_pos
            out[out_pos:out_pos + 21] = buf[pos:pos + 21]  # base offset, leader epoch, magic (length below)
            _put_be(out, out_pos + 8, size - 12, 4)
            _put_be(out, out_pos + 17, 0, 4)
            new_attributes = (attributes & ~0x40) | (0x40 if new_horizon else 0)
            _put_be(out, out_pos + 21, new_attributes, 2)
            out[out_pos + 23:out_pos + 27] = buf[pos + 23:pos + 27]  # last offset delta
            _put_be(out, out_pos + 27, new_base_ts, 8)
            largest = timestamps[0]
            for k in range(1, kept):
                if timestamps[k] > largest:
                    largest = timestamps[k]
            _put_be(out, out_pos + 35, largest, 8)
            out[out_pos + 43:out_pos + 57] = buf[pos + 43:pos + 57]  # producer id, epoch, base sequence
            _put_be(out, out_pos + 57, kept, 4)
            rewritten[out_n] = 1
        out_pos += size
        out_ends[out_n] = out_pos
        out_n += 1
    return n, out_pos, out_n, records_read, records_kept
