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

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierlog.records import SimpleRecord, build_batch
from tierlog.records.header import iter_headers
from tierlog.storage.cleaner.cleaner import Cleaner
from tierlog.storage.cleaner.manager import clean_log
from tierlog.storage.cleaner.offset_map import DictOffsetMap, OffsetMap
from tierlog.storage.loader import LoadOptions, load_log
from tierlog.storage.log import UnifiedLog
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


def _keyed_log(directory: Path, batches_of_keys: list[list[int]]) -> UnifiedLog:
    ulog = load_log(directory, compact_config(segment_bytes=600), LoadOptions(had_clean_shutdown=True),
                    clock=ManualClock(TS))
    for keys in batches_of_keys:
        ulog.append_as_leader(build_batch([SimpleRecord(b"key-%d" % k, b"v" * 20, timestamp=TS) for k in keys]))
    ulog.roll()
    return ulog


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batches_of_keys=st.lists(st.lists(st.integers(0, 12), min_size=1, max_size=6), min_size=1, max_size=40),
       rows=st.sampled_from([1, 5, 1024]))
def test_the_batch_table_finds_exactly_the_batches_with_no_latest_record(
        tmp_path: Path, batches_of_keys: list[list[int]], rows: int) -> None:
    """After the map pass, the batches the table calls superseded are exactly the tracked batches
    none of whose records is the latest of its key (what the rewrite would empty record by record);
    with fewer rows than batches, only the first ones are tracked."""
    from tierlog.storage.cleaner.batches import batch_keys
    from tierlog.storage.cleaner.cleaner import CleanResult

    ulog = _keyed_log(tmp_path / f"b{next(_dirs)}" / "t-0", batches_of_keys)
    m = OffsetMap(100)
    cleaner = Cleaner(m, io_buffer_bytes=300)
    cleaner.batch_table_rows = rows
    end = ulog.segments.base_offsets[-1]
    assert cleaner.build_offset_map(ulog, 0, end, CleanResult(0, 0)) == end
    headers = [h for seg in list(ulog.segments)[:-1] for h in iter_headers(seg.log.read(0, seg.size_bytes))]
    emptied = [h.base_offset for h in headers
               if all(m.get(key) > offset for offset, key, _ in batch_keys(h) if key is not None)]
    tracked = {h.base_offset for h in headers[:rows]}
    assert cleaner.batch_table.superseded().tolist() == [b for b in emptied if b in tracked]
    ulog.close()


def test_a_kept_batch_damaged_after_the_map_pass_stops_the_rewrite(tmp_path: Path) -> None:
    """The rewrite does not check again the CRC of a batch the map pass found superseded (none of
    its bytes are kept), but it checks every batch whose bytes go to the cleaned segment: one damaged
    between the two passes stops the cleaning before any swap, and the log is as it was."""
    from tierlog.storage.cleaner.batches import CorruptDirtyBatchError

    ulog = _keyed_log(tmp_path / "t-0", [[i % 4, 10 + i] for i in range(30)])  # every batch keeps key 10+i
    before = _segments(tmp_path / "t-0")
    cleaner = Cleaner(OffsetMap(100), io_buffer_bytes=4096)
    build = cleaner.build_offset_map

    def build_then_damage(*args: object) -> int:
        end = build(*args)  # type: ignore[arg-type]
        seg = next(iter(ulog.segments))
        last = list(iter_headers(seg.log.read(0, seg.size_bytes)))[-1]
        with open(seg.log.path, "r+b") as f:  # a value byte of its last (kept) batch
            f.seek(last.position + last.size_bytes - 3)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0xFF]))
        return end

    cleaner.build_offset_map = build_then_damage  # type: ignore[method-assign]
    with pytest.raises(CorruptDirtyBatchError):
        clean_log(ulog, cleaner, None, TS)
    assert not [p for p in (tmp_path / "t-0").iterdir() if p.name.endswith((".cleaned", ".swap", ".deleted"))]
    after = _segments(tmp_path / "t-0")
    assert after.keys() == before.keys()
    ulog.close()


def test_the_rewrite_skips_runs_of_superseded_batches_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Twenty rounds of two key sets: all but the last round of each are superseded. The compiled
    rewrite reads almost none of their bytes again (only the map pass reads them: runs of them are
    skipped) and leaves the same segments and counts as the Python reference, which reads everything
    twice; a superseded batch that is its producer's last is not skipped (kept, emptied)."""
    from tierlog.storage.file_records import FileRecords

    config = compact_config(segment_bytes=4000)
    for name in ("t-0", "t-1"):
        ulog = load_log(tmp_path / name, config, LoadOptions(had_clean_shutdown=True), clock=ManualClock(TS))
        for r in range(39):  # two key sets, twenty rounds each, the last of one set a producer's
            recs = [SimpleRecord(b"key-%d" % k, b"v" * 20, timestamp=TS) for k in range(r % 2, 20, 2)]
            ulog.append_as_leader(build_batch(recs, producer_id=9, producer_epoch=0, base_sequence=10 * r)
                                  if r == 37 else build_batch(recs))
        ulog.roll()
        ulog.close()
    size = sum(p.stat().st_size for p in sorted((tmp_path / "t-0").glob("*.log"))[:-1])  # the closed segments
    read = [0]
    original = FileRecords.read

    def counting(self: FileRecords, position: int, n: int) -> bytes:
        data = original(self, position, n)
        read[0] += len(data)
        return data

    monkeypatch.setattr(FileRecords, "read", counting)
    outcomes = []
    for name, offset_map in (("t-0", OffsetMap(1000)), ("t-1", DictOffsetMap(1000))):
        log_ = load_log(tmp_path / name, config, LoadOptions(had_clean_shutdown=True), clock=ManualClock(TS))
        read[0] = 0
        r = clean_log(log_, Cleaner(offset_map, io_buffer_bytes=1000), None, TS)
        outcomes.append(((r.end_offset, r.records_read, r.records_written, r.bytes_written), read[0]))
        log_.close()
    (compiled, compiled_read), (reference, reference_read) = outcomes
    assert compiled == reference
    assert _segments(tmp_path / "t-0") == _segments(tmp_path / "t-1")
    assert reference_read >= 2 * size  # the closed segments, twice (and what loading them reads)
    # The same reads, but for the rewrite's: at least 80% of the closed segments not read again.
    assert reference_read - compiled_read > 0.8 * size, (compiled_read, reference_read, size)
