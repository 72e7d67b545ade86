"""The cleaner against a model: random keys, values, tombstones, several idempotent producers,
transactional producers whose transactions commit or abort, DeleteRecords moving the log start,
rolls and cleanings at advancing times. After every cleaning each live key reads back (read_committed)
its latest value, a deleted key reads back as a tombstone or not at all (the latter only past
delete.retention.ms), a key whose latest record fell below the log start is not expected, no record
of an aborted transaction is left in the cleaned part of the log, every kept record sits at the
offset it was appended at with the same key and value, and every batch's CRC holds. A reader fetching
during cleanings always sees whole, valid batches in offset order."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierlog.errors import OffsetOutOfRangeError
from tierlog.records import SimpleRecord, build_batch
from tierlog.records.control import ControlRecordType, EndTransactionMarker, build_end_txn_marker_batch
from tierlog.records.header import iter_headers
from tierlog.storage.cleaner.cleaner import Cleaner
from tierlog.storage.cleaner.manager import clean_log
from tierlog.storage.cleaner.offset_map import OffsetMap
from tierlog.storage.loader import LoadOptions, load_log
from tierlog.storage.log import UnifiedLog
from tierlog.storage.producer_state import AppendOrigin
from tierlog.testing import ManualClock, ManualScheduler

from .helpers import TS, compact_config, put, records

RETENTION_MS = 5_000

op = st.one_of(
    st.tuples(st.just("put"), st.integers(0, 12), st.binary(min_size=0, max_size=20)),
    st.tuples(st.just("delete"), st.integers(0, 12), st.just(b"")),
    st.tuples(st.just("producer"), st.integers(0, 12), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("commit"), st.integers(0, 12), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("abort"), st.integers(0, 12), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("delete_records"), st.integers(0, 100), st.just(b"")),
    st.tuples(st.just("roll"), st.just(0), st.just(b"")),
    st.tuples(st.just("clean"), st.integers(0, 4_000), st.just(b"")),
)

_dirs = itertools.count()


def _marker(pid: int, commit: bool, ts: int) -> bytes:
    kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    return build_end_txn_marker_batch(EndTransactionMarker(kind, 0), producer_id=pid, producer_epoch=0,
                                      timestamp_ms=ts)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=1, max_size=120), slots=st.sampled_from([4, 16, 10_000]))
def test_cleaning_matches_the_model(tmp_path: Path, ops: list[tuple[str, int, bytes]], slots: int) -> None:
    clock = ManualClock(TS)
    ulog = load_log(tmp_path / f"t-{next(_dirs)}", compact_config(segment_bytes=300, delete_retention_ms=RETENTION_MS),
                    LoadOptions(had_clean_shutdown=True), clock=clock)
    #: key -> (latest committed value or None for a tombstone, its offset)
    model: dict[bytes, tuple[bytes | None, int]] = {}
    appended: dict[int, tuple[bytes, bytes | None]] = {}
    aborted: set[int] = set()
    deleted_at: dict[bytes, int] = {}
    cleaner = Cleaner(OffsetMap(slots), io_buffer_bytes=256)
    checkpoint: int | None = None
    now = TS
    sequences: dict[int, int] = {}
    for step, (kind, n, value) in enumerate(ops):
        key = b"key-%d" % n
        if kind in ("put", "delete", "producer", "commit", "abort"):
            v = None if kind == "delete" else value
            if kind == "put" or kind == "delete":
                offset = put(ulog, key, v, ts=now)
            else:
                # Three idempotent producers and two transactional ones, picked by the step.
                pid = (11 + step % 3) if kind == "producer" else (21 + step % 2)
                seq = sequences.get(pid, 0)
                sequences[pid] = seq + 1
                data = build_batch([SimpleRecord(key, v, timestamp=now)], producer_id=pid, producer_epoch=0,
                                   base_sequence=seq, is_transactional=kind != "producer")
                offset = ulog.append_as_leader(data).first_offset
                if kind != "producer":
                    ulog.append_as_leader(_marker(pid, kind == "commit", now), origin=AppendOrigin.COORDINATOR)
            appended[offset] = (key, v)
            if kind == "abort":
                aborted.add(offset)
                continue
            model[key] = (v, offset)
            if v is None:
                deleted_at[key] = now
            else:
                deleted_at.pop(key, None)
        elif kind == "delete_records":
            target = ulog.log_start_offset + (ulog.high_watermark - ulog.log_start_offset) * n // 100
            ulog.maybe_increment_log_start_offset(target, "DeleteRecords")
            for k in [k for k, (_, o) in model.items() if o < ulog.log_start_offset]:
                del model[k]  # its latest record is gone with the records below the log start
        elif kind == "roll":
            ulog.roll()
        else:
            now += n
            clock.set_wall_ms(now)
            result = clean_log(ulog, cleaner, checkpoint, now)
            if not result.aborted:
                checkpoint = result.end_offset
            _check(ulog, model, appended, aborted, deleted_at, now, checkpoint)
    ulog.roll()
    result = clean_log(ulog, cleaner, checkpoint, now)
    _check(ulog, model, appended, aborted, deleted_at, now, None if result.aborted else result.end_offset)


def _check(ulog: UnifiedLog, model: dict[bytes, tuple[bytes | None, int]], appended: dict[int, tuple[bytes, bytes | None]],
           aborted: set[int], deleted_at: dict[bytes, int], now: int, cleaned_to: int | None) -> None:
    start = ulog.log_start_offset
    kept = [r for r in records(ulog) if r.offset >= start]  # checks every CRC on the way
    got: dict[bytes, bytes | None] = {}
    for r in kept:
        assert r.key is not None
        if r.offset not in aborted:  # read_committed
            got[r.key] = r.value
    for key, (value, _) in model.items():
        if value is not None:
            assert got.get(key) == value, key
        else:
            assert got.get(key) is None, key
            if key not in got:  # the tombstone itself went: only after delete.retention.ms
                assert now >= deleted_at[key] + RETENTION_MS, key
    for r in kept:
        assert appended[r.offset] == (r.key, r.value)  # same offset, same record
        if cleaned_to is not None and r.offset < cleaned_to:
            assert r.offset not in aborted, r.offset  # aborted records are removed by cleaning
    offsets = [r.offset for r in kept]
    assert offsets == sorted(set(offsets))


def test_a_reader_during_cleaning_sees_a_valid_log(tmp_path: Path) -> None:
    """As the broker runs it: the replaced segments are unlinked file.delete.delay.ms later, so a
    reader still on one finishes it. Any exception in the reader fails the test."""
    clock = ManualClock(TS)
    ulog = load_log(tmp_path / "t-0", compact_config(segment_bytes=600, file_delete_delay_ms=60_000),
                    LoadOptions(had_clean_shutdown=True), clock=clock, scheduler=ManualScheduler(clock))
    for i in range(600):
        put(ulog, b"k%d" % (i % 17), b"v%d" % i)
    ulog.roll()
    stop = threading.Event()
    reads = 0
    problems: list[str] = []

    def reader() -> None:
        try:
            read_until_stopped()
        except Exception as e:  # any failure of the reader is the test's failure
            problems.append(f"the reader failed: {e!r}")

    def read_until_stopped() -> None:
        nonlocal reads
        while not stop.is_set():
            offset, last = 0, -1
            while offset < ulog.log_end_offset:
                try:
                    data = ulog.read(offset, 4096).read_bytes()
                except OffsetOutOfRangeError as e:
                    problems.append(str(e))
                    return
                if not data:
                    break
                for h in iter_headers(data):
                    if not h.is_valid() or h.base_offset <= last:
                        problems.append(f"bad batch at {h.base_offset} after {last}")
                        return
                    last = h.last_offset
                    offset = h.next_offset
            reads += 1

    t = threading.Thread(target=reader)
    t.start()
    try:
        checkpoint = None
        for _ in range(3):
            result = clean_log(ulog, Cleaner(OffsetMap(100), io_buffer_bytes=512), checkpoint, TS)
            checkpoint = result.end_offset
            for i in range(50):
                put(ulog, b"k%d" % (i % 17), b"w%d" % i)
            ulog.roll()
        # Wait until the reader finished at least two full passes after the cleanings.
        done = reads + 2
        while reads < done and t.is_alive():
            t.join(0.01)
    finally:
        stop.set()
        t.join()
    assert not problems
    assert reads >= 2
    clock.advance(60_000)  # the deferred deletions run
    assert not [p for p in (tmp_path / "t-0").iterdir() if p.name.endswith(".deleted")]
