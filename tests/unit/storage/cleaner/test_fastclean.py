"""The compiled cleaner (offset_map.OffsetMap over _fastclean) against its Python reference
(offset_map.DictOffsetMap, batches.batch_keys/filter_batch): on random logs -- multi-record batches
of random keys, values, tombstones and null keys, idempotent producers, random timestamps, maps small
enough to clean in parts -- both cleanings leave the same bytes in every segment and report the same
counts; and the compiled map keeps its contract (latest offset per key, full at its slots, memory
fixed at 24 bytes an entry)."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierlog.records import SimpleRecord, build_batch
from tierlog.storage.cleaner.cleaner import Cleaner
from tierlog.storage.cleaner.manager import clean_log
from tierlog.storage.cleaner.offset_map import DictOffsetMap, OffsetMap
from tierlog.storage.loader import LoadOptions, load_log
from tierlog.testing import ManualClock

from .helpers import TS, compact_config

_dirs = itertools.count()

record = st.tuples(st.one_of(st.none(), st.integers(0, 20)), st.one_of(st.none(), st.binary(max_size=30)),
                   st.integers(0, 10_000))
batch = st.tuples(st.lists(record, min_size=1, max_size=12), st.sampled_from([None, 7, 8]))


def _segments(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.log"))}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batches=st.lists(batch, min_size=1, max_size=40), slots=st.sampled_from([12, 30, 10_000]),
       cleanings=st.lists(st.integers(0, 20_000), min_size=1, max_size=3))
def test_compiled_cleaning_equals_the_python_reference(tmp_path: Path, batches: list[tuple[list[tuple[int | None,
                                                       bytes | None, int]], int | None]], slots: int,
                                                       cleanings: list[int]) -> None:
    root = tmp_path / f"r{next(_dirs)}"
    config = compact_config(segment_bytes=700, delete_retention_ms=3_000)
    # Written as a delete topic, so null keys get in (as in a topic switched to compact later).
    ulog = load_log(root / "t-0", compact_config(segment_bytes=700, cleanup_policy=("delete",)),
                    LoadOptions(had_clean_shutdown=True), clock=ManualClock(TS))
    sequences: dict[int, int] = {}
    for recs, producer in batches:
        simple = [SimpleRecord(None if k is None else b"key-%d" % k, v, timestamp=TS + ts) for k, v, ts in recs]
        if any(r.key is None for r in simple) and producer is not None:
            producer = None
        if producer is None:
            ulog.append_as_leader(build_batch(simple))
        else:
            seq = sequences.get(producer, 0)
            ulog.append_as_leader(build_batch(simple, producer_id=producer, producer_epoch=0, base_sequence=seq))
            sequences[producer] = seq + len(simple)
    ulog.roll()
    ulog.close()
    shutil.copytree(root / "t-0", root / "t-1")
    outcomes = []
    for name, offset_map in (("t-0", OffsetMap(slots)), ("t-1", DictOffsetMap(slots))):
        log_ = load_log(root / name, config, LoadOptions(had_clean_shutdown=True), clock=ManualClock(TS))
        cleaner = Cleaner(offset_map, io_buffer_bytes=300)
        checkpoint = None
        results = []
        now = TS
        for step in cleanings:
            now += step
            r = clean_log(log_, cleaner, checkpoint, now)
            checkpoint = r.end_offset if not r.aborted else checkpoint
            results.append((r.end_offset, r.map_records, r.records_read, r.records_written, r.bytes_written,
                            r.next_delete_horizon_ms))
        log_.close()
        outcomes.append((results, _segments(root / name)))
    assert outcomes[0][0] == outcomes[1][0]
    assert outcomes[0][1] == outcomes[1][1]


@settings(deadline=None)
@given(puts=st.lists(st.tuples(st.binary(max_size=40), st.integers(0, 2**62)), max_size=200))
def test_the_compiled_map_holds_the_latest_offset_of_each_key(puts: list[tuple[bytes, int]]) -> None:
    compiled = OffsetMap(len(puts) + 1)
    reference = DictOffsetMap(len(puts) + 1)
    for key, offset in puts:
        compiled.put(key, offset)
        reference.put(key, offset)
    assert len(compiled) == len(reference)
    for key, _ in puts:
        assert compiled.get(key) == reference.get(key)
    assert compiled.get(b"\xff" * 41) == -1
    assert compiled.latest_offset == reference.latest_offset
    compiled.clear()
    assert len(compiled) == 0 and all(compiled.get(k) == -1 for k, _ in puts)


def test_the_compiled_map_memory_is_its_table() -> None:
    m = OffsetMap(900, capacity=1000)
    assert m.table_bytes == 1000 * 24
    for i in range(899):
        m.put(b"k%d" % i, i)
    assert m.table_bytes == 1000 * 24 and m.fits(1) and not m.fits(2)




def test_the_map_walk_takes_a_chunk_of_plain_batches_and_stops_at_the_others(tmp_path: Path) -> None:
    """The compiled walk over a read chunk maps what the per-batch path maps, and leaves a
    transactional batch, a damaged one and one at the end offset to the per-batch path."""
    from tierlog.storage.cleaner.fast_path import MapWalk

    plain = [build_batch([SimpleRecord(b"key-%d" % (i % 7), b"v", timestamp=TS)], base_offset=i) for i in range(20)]
    txn = build_batch([SimpleRecord(b"key-1", b"v", timestamp=TS)], base_offset=20, producer_id=5, producer_epoch=0,
                      base_sequence=0, is_transactional=True)
    more = [build_batch([SimpleRecord(b"key-%d" % i, b"v", timestamp=TS)], base_offset=21 + i) for i in range(5)]
    buf = b"".join(plain) + txn + b"".join(more)
    m = OffsetMap(100)
    walk = MapWalk(m, 0, 1000)
    position, last = walk(buf, 0, -1)
    assert (position, last) == (sum(map(len, plain)), 19) and walk.keyed == 20 and walk.covered == 20
    assert {k: m.get(b"key-%d" % k) for k in range(7)} == {k: max(i for i in range(20) if i % 7 == k) for k in range(7)}
    after_txn = position + len(txn)
    assert walk(buf, after_txn, 20) == (len(buf), 25) and walk.keyed == 25
    # A damaged byte in a later batch: the walk stops before it.
    damaged = bytearray(buf)
    damaged[after_txn + len(more[0]) + 70] ^= 0xFF
    m2 = OffsetMap(100)
    assert MapWalk(m2, 0, 1000)(bytes(damaged), after_txn, 20) == (after_txn + len(more[0]), 21)
    # The end offset: batches at or past it are left alone.
    assert MapWalk(OffsetMap(100), 0, 10)(buf, 0, -1) == (sum(map(len, plain[:10])), 9)
