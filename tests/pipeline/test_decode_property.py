"""The compiled reader (numba walk, Arrow buffers reused across windows and ranges) returns exactly
what the plain Python decoder of tierlog.records finds, on random segments: keys and values null or
not, headers, every codec, CreateTime and LogAppendTime, control batches, transactional batches
with aborted ones skipped as read_committed skips them, any window size, a segment read as several
ranges one after another or interleaved in one thread (the buffer pool's reuse)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierlog.pipeline.reader import ScanRange, read_range
from tierlog.records import (
    CompressionType,
    ControlRecordType,
    EndTransactionMarker,
    SimpleRecord,
    build_batch,
    build_end_txn_marker_batch,
    iter_batches,
)

T0 = 1_700_000_000_000
PRODUCER = 42

record = st.builds(
    SimpleRecord,
    st.one_of(st.none(), st.binary(max_size=40)),
    st.one_of(st.none(), st.binary(max_size=200)),
    st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=10))), max_size=3),
    st.integers(T0, T0 + 10_000),
)
batch = st.tuples(
    st.lists(record, min_size=1, max_size=12),
    st.sampled_from(list(CompressionType)),
    st.sampled_from(["plain", "append_time", "transactional", "marker"]),
)


def write_segment(path: Path, batches: list[tuple[list[SimpleRecord], CompressionType, str]]) -> int:
    """The batches as one segment from offset 0; returns the next offset."""
    out = bytearray()
    offset = 0
    for records, codec, kind in batches:
        if kind == "marker":
            out += build_end_txn_marker_batch(EndTransactionMarker(ControlRecordType.ABORT, 0), producer_id=PRODUCER,
                                              producer_epoch=0, timestamp_ms=T0, base_offset=offset)
            offset += 1
            continue
        extra: dict[str, object] = {}
        if kind == "append_time":
            extra = {"log_append_time_ms": T0 + 99_999}
        elif kind == "transactional":
            extra = {"producer_id": PRODUCER, "producer_epoch": 0, "base_sequence": offset, "is_transactional": True}
        out += build_batch(records, base_offset=offset, compression=codec, **extra)  # type: ignore[arg-type]
        offset += len(records)
    path.write_bytes(bytes(out))
    return offset


def expected_rows(path: Path, start: int, end: int, aborted: tuple[tuple[int, int, int], ...]) -> list[tuple[object, ...]]:
    rows: list[tuple[object, ...]] = []
    for header, records in iter_batches(path.read_bytes(), verify_crc=True):
        if header.is_control:
            continue
        if header.is_transactional and any(
                pid == header.producer_id and first <= header.base_offset <= last for pid, first, last in aborted):
            continue
        append_time = header.timestamp_type == 1
        for r in records:
            if start <= r.offset < end:
                ts = header.max_timestamp if append_time else r.timestamp
                rows.append((r.key, r.value, "t", 0, r.offset, ts, int(append_time), r.headers or None))
    return rows


def arrow_rows(batches: list[pa.RecordBatch]) -> list[tuple[object, ...]]:
    rows: list[tuple[object, ...]] = []
    for b in batches:
        d = b.to_pydict()
        millis = b.column("timestamp").cast(pa.int64()).to_pylist()
        for i in range(b.num_rows):
            headers = d["headers"][i]
            rows.append((d["key"][i], d["value"][i], d["topic"][i], d["partition"][i], d["offset"][i], millis[i] // 1000,
                         d["timestampType"][i],
                         None if headers is None else tuple((h["key"], h["value"]) for h in headers)))
    return rows


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(batch, min_size=1, max_size=12), st.lists(st.integers(0, 200), max_size=3),
       st.lists(st.tuples(st.integers(0, 150), st.integers(0, 150)), max_size=2),
       st.sampled_from([61, 300, 4096, 16 << 20]), st.booleans())
def test_fast_reader_matches_the_plain_decoder(tmp_path: Path, batches: list[tuple[list[SimpleRecord], CompressionType, str]],
                                               cuts: list[int], aborts: list[tuple[int, int]], window: int,
                                               interleave: bool) -> None:
    log = tmp_path / "t-0" / "00000000000000000000.log"
    log.parent.mkdir(exist_ok=True)
    end = write_segment(log, batches)
    aborted = tuple((PRODUCER, min(a, b), max(a, b)) for a, b in aborts)
    bounds = sorted({0, end, *(c % (end + 1) for c in cuts)})
    ranges = [ScanRange("t", 0, lo, hi, log_path=str(log), aborted=aborted or None)
              for lo, hi in itertools.pairwise(bounds)]
    readers = [read_range(r, include_headers=True, window_bytes=window) for r in ranges]
    got: list[list[pa.RecordBatch]] = [[] for _ in readers]
    if interleave:  # every range's generator open at once: none may reuse a buffer another's batch uses
        live = list(range(len(readers)))
        while live:
            for i in list(live):
                b = next(readers[i], None)
                if b is None:
                    live.remove(i)
                else:
                    got[i].append(b)
    else:
        for i, r in enumerate(readers):
            got[i] = list(r)
    for r, batches_of_range in zip(ranges, got, strict=True):
        assert arrow_rows(batches_of_range) == expected_rows(log, r.start_offset, r.end_offset, aborted)
