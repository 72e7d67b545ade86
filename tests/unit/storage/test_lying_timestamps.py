"""Issue 20: a batch's max timestamp comes from its records, not from what the producer wrote in the
header (Sarama 1.22 writes -1). On append the header is rewritten with its CRC (Kafka's
LogValidator); data an older tierlog stored with a lying header gets its timestamps from its records
when it is loaded (recovery, and the lazy time-index check of seed 003)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.lying_batches import (
    DAY_MS,
    LIES,
    NOW_MS,
    PER_BATCH,
    T0,
    batch_timestamps,
    make_batch,
    write_indexes_from_headers,
    write_mixed_segments,
)
from tests.helpers.storage import OpenLog
from tierlog.cli.dump import time_index_errors
from tierlog.config import LogConfig
from tierlog.config.definition import INT64_MAX
from tierlog.errors import InvalidTimestampError
from tierlog.records import BatchHeader, CompressionType, SimpleRecord, build_batch, iter_headers
from tierlog.storage.log import UnifiedLog
from tierlog.storage.producer_state import AppendOrigin
from tierlog.testing import ManualClock

CODECS = [CompressionType.NONE, CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4,
          CompressionType.ZSTD]
BATCHES = 6


def config(**overrides: int) -> LogConfig:
    # index.interval.bytes=1: a time index entry per batch; two batches (550-580 bytes) per segment.
    return LogConfig(**{"segment_bytes": 1400, "index_interval_bytes": 1, "retention_ms": -1, **overrides})


def fill(log: UnifiedLog, codec: int, lie: str | None) -> None:
    for i in range(BATCHES):
        log.append_as_leader(make_batch(i, codec, lie))


def stored_bytes(log: UnifiedLog) -> bytes:
    return b"".join(seg.log.path.read_bytes()[:seg.size_bytes] for seg in log.segments)


def stored_headers(log: UnifiedLog) -> list[BatchHeader]:
    return list(iter_headers(stored_bytes(log)))


def time_index_entries(log: UnifiedLog) -> list[list[tuple[int, int]]]:
    return [[tuple(seg.time_index.entry(n)) for n in range(seg.time_index.entries)] for seg in log.segments]


def lookups(log: UnifiedLog) -> list[tuple[int, int] | None]:
    """ListOffsets by timestamp for a spread of targets: before every record, on and between records,
    inside a batch past its first record, after every record."""
    targets = [0, T0 - 1, T0, T0 + 2500, T0 + DAY_MS - 1, T0 + 3 * DAY_MS + 4500, T0 + 5 * DAY_MS + 5000,
               T0 + 5 * DAY_MS + 5001]
    return [log.fetch_offset_by_timestamp(t) for t in targets]


def retention_answers(log: UnifiedLog, **overrides: int) -> list[tuple[int, str, int]]:
    log.update_config(config(**overrides))
    return [(d.segment.base_offset, d.reason.value, d.segment.largest_timestamp_ms)
            for d in log.retention_plan(NOW_MS)]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: CompressionType(c).name.lower())
@pytest.mark.parametrize("lie", list(LIES))
def test_a_lying_header_is_stored_with_the_records_max_and_everything_follows(
        open_log: OpenLog, codec: int, lie: str) -> None:
    honest = open_log(config(), name="honest-0")
    lying = open_log(config(), name="lying-0")
    fill(honest, codec, None)
    fill(lying, codec, lie)

    # The stored header says the records' maximum, with a CRC that matches.
    headers = stored_headers(lying)
    assert [h.max_timestamp for h in headers] == [max(batch_timestamps(i)) for i in range(BATCHES)]
    assert all(h.is_valid() for h in headers)
    assert [h.compression for h in headers] == [codec] * BATCHES
    assert stored_bytes(lying) == stored_bytes(honest)

    # Time index, segment largest timestamps, ListOffsets: as for the honest producer.
    entries = time_index_entries(lying)
    assert entries == time_index_entries(honest)
    assert all(entries), "every segment has time index entries"
    assert [s.largest_timestamp for s in lying.segments] == [s.largest_timestamp for s in honest.segments]
    assert lookups(lying) == lookups(honest)
    assert lying.fetch_offset_by_timestamp(0) == (0, T0)  # before every record: the first offset
    assert lying.max_timestamp_and_offset() == honest.max_timestamp_and_offset()

    # The floor and time retention judge the segments by their records, as for honest batches.
    floor = T0 + 4 * DAY_MS
    by_floor = retention_answers(lying, retention_min_timestamp_ms=floor)
    assert by_floor == retention_answers(honest, retention_min_timestamp_ms=floor)
    assert [b for b, _, _ in by_floor] == [0, 2 * PER_BATCH]
    by_time = retention_answers(lying, retention_ms=6 * DAY_MS)
    assert by_time == retention_answers(honest, retention_ms=6 * DAY_MS)
    assert [b for b, _, _ in by_time] == [0, 2 * PER_BATCH]


@pytest.mark.parametrize("lie", list(LIES))
def test_a_lying_batch_kept_as_it_came_in_a_recompressed_request_is_fixed_too(open_log: OpenLog, lie: str) -> None:
    """compression.type=gzip: the uncompressed batch is rebuilt, the gzip one kept byte for byte; the
    request then gets a buffer of its own, where the kept batch's header is rewritten in place."""
    log = open_log(config(compression_type="gzip"))
    request = make_batch(0, CompressionType.GZIP, lie) + make_batch(1, CompressionType.NONE, lie)
    # Two batches in one append: a coordinator's write (a client's Produce holds one batch).
    log.append_as_leader(request, origin=AppendOrigin.COORDINATOR)
    headers = stored_headers(log)
    assert [h.compression for h in headers] == [CompressionType.GZIP] * 2
    assert [h.max_timestamp for h in headers] == [max(batch_timestamps(0)), max(batch_timestamps(1))]
    assert all(h.is_valid() for h in headers)
    assert log.fetch_offset_by_timestamp(0) == (0, T0)


def test_the_floor_never_deletes_new_records_whose_header_claims_they_are_old(open_log: OpenLog) -> None:
    log = open_log(config())
    records = [SimpleRecord(None, b"v", timestamp=NOW_MS - 1000 + j) for j in range(5)]
    log.append_as_leader(build_batch(records, max_timestamp=1))  # the header says 1970
    log.update_config(config(retention_min_timestamp_ms=NOW_MS - DAY_MS, retention_ms=DAY_MS))
    assert log.delete_old_segments(NOW_MS) == []
    assert log.log_start_offset == 0
    assert log.active_segment.largest_timestamp == NOW_MS - 1000 + 4


def test_minus_one_everywhere_stays_minus_one(open_log: OpenLog) -> None:
    """Records without timestamps: the header's -1 is the truth, nothing to rewrite."""
    log = open_log(config())
    data = build_batch([SimpleRecord(None, b"v", timestamp=-1) for _ in range(3)])
    log.append_as_leader(data)
    assert stored_bytes(log)[16:] == data[16:]  # all but the base offset and leader epoch, as sent
    assert log.fetch_offset_by_timestamp(0) is None


@pytest.mark.parametrize("which", ["before", "after"])
def test_each_record_timestamp_is_checked_not_only_the_header(open_log: OpenLog, clock: ManualClock,
                                                              which: str) -> None:
    log = open_log(config(message_timestamp_before_max_ms=3_600_000, message_timestamp_after_max_ms=3_600_000))
    now = clock.wall_ms()
    bad = now - 2 * 3_600_000 if which == "before" else now + 2 * 3_600_000
    # Base timestamp (the first record) and header max are both within the hour; the second record is not.
    records = [SimpleRecord(None, b"a", timestamp=now), SimpleRecord(None, b"b", timestamp=bad)]
    data = build_batch(records, max_timestamp=now)
    assert BatchHeader(data).base_timestamp == now
    with pytest.raises(InvalidTimestampError, match="rejected due to invalid timestamp") as raised:
        log.append_as_leader(data)
    assert raised.value.error_code == 32  # INVALID_TIMESTAMP
    # Kafka's per-record error (KIP-467) names the record and its timestamp.
    assert [(i, m.split(" of message")[0]) for i, m in raised.value.record_errors] == [(1, f"Timestamp {bad}")]
    assert log.log_end_offset == 0
    # In range, the same shape of batch is accepted.
    log.append_as_leader(build_batch([SimpleRecord(None, b"a", timestamp=now),
                                      SimpleRecord(None, b"b", timestamp=now - 1000)], max_timestamp=now))
    assert log.log_end_offset == 2


# -- data stored by an older tierlog, which kept the producer's header --------------------------------


def write_old_segments(directory: Path, codec: int, lie: str, *, with_indexes: bool) -> None:
    """What an older tierlog left: batches as the producer sent them (offsets assigned), two per
    segment, and -- with ``with_indexes`` -- offset and time indexes built from the headers, as its
    append path built them (the time index skips -1)."""
    directory.mkdir(parents=True)
    for first in range(0, BATCHES, 2):
        base = first * PER_BATCH
        data = b"".join(make_batch(i, codec, lie, base_offset=i * PER_BATCH) for i in (first, first + 1))
        (directory / f"{base:020d}.log").write_bytes(data)
        if with_indexes:
            write_indexes_from_headers(directory, base, data)


def expected_largest() -> list[int]:
    return [max(batch_timestamps(i + 1)) for i in range(0, BATCHES, 2)]


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.ZSTD], ids=["none", "zstd"])
@pytest.mark.parametrize("lie", list(LIES))
def test_recovery_takes_a_stored_segments_timestamps_from_its_records(
        open_log: OpenLog, tmp_path: Path, codec: int, lie: str) -> None:
    write_old_segments(tmp_path / "t-0", codec, lie, with_indexes=False)
    before = [(tmp_path / "t-0" / f"{b * PER_BATCH:020d}.log").read_bytes() for b in range(0, BATCHES, 2)]
    log = open_log(config(), clean=False, recovery_point=0)
    assert [s.largest_timestamp for s in log.segments] == expected_largest()
    assert all(s.headers_lie for s in log.segments)
    assert all(entries for entries in time_index_entries(log))
    assert log.fetch_offset_by_timestamp(0) == (0, T0)
    assert log.fetch_offset_by_timestamp(T0 + 3 * DAY_MS + 4500) == (3 * PER_BATCH + 5, T0 + 3 * DAY_MS + 5000)
    # Nothing stored was rewritten.
    assert [(tmp_path / "t-0" / f"{b * PER_BATCH:020d}.log").read_bytes() for b in range(0, BATCHES, 2)] == before
    # dump-log's index verification judges the rebuilt time indexes by the records as well.
    for seg in log.segments:
        entries = [seg.time_index.entry(n) for n in range(seg.time_index.entries)]
        assert not time_index_errors(entries, seg.log.path.read_bytes())
    assert [b for b, _, _ in retention_answers(log, retention_min_timestamp_ms=T0 + 4 * DAY_MS)] == [0, 2 * PER_BATCH]


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.LZ4], ids=["none", "lz4"])
@pytest.mark.parametrize("lie", list(LIES))
def test_the_lazy_check_takes_a_stored_segments_timestamps_from_its_records(
        open_log: OpenLog, tmp_path: Path, codec: int, lie: str) -> None:
    write_old_segments(tmp_path / "t-0", codec, lie, with_indexes=True)
    log = open_log(config(), clean=True, sanity_check_all=False)
    assert not any(s.headers_lie for s in log.segments.materialized())
    assert [b for b, _, _ in retention_answers(log, retention_min_timestamp_ms=T0 + 4 * DAY_MS)] == [0, 2 * PER_BATCH]
    assert [s.largest_timestamp for s in log.segments] == expected_largest()
    assert all(s.headers_lie for s in log.segments)
    assert log.fetch_offset_by_timestamp(0) == (0, T0)
    assert log.fetch_offset_by_timestamp(T0 + 3 * DAY_MS + 4500) == (3 * PER_BATCH + 5, T0 + 3 * DAY_MS + 5000)
    log.close()
    # The time indexes were rebuilt from the records: the next start trusts them without a rebuild.
    again = open_log(config(), clean=True, sanity_check_all=False)
    assert [s.largest_timestamp for s in again.segments] == expected_largest()
    assert again.fetch_offset_by_timestamp(0) == (0, T0)


# -- mixed headers: an honest batch followed by lying ones in one segment ------------------------------

#: Lies a header-only look can see: -1 over records that have timestamps, and a max below the base
#: timestamp (the first record's). Both leave the time index's last entry on the honest batch before.
MIXED_LIES = ["minus_one", "older"]
MIXED_CODECS = [CompressionType.NONE, CompressionType.GZIP, CompressionType.LZ4, CompressionType.ZSTD]
#: How the stored segments are opened: a clean start checking lazily, a clean start checking every
#: segment, and an unclean one whose recovery point leaves the first two segments unchecked.
OPENINGS = {
    "clean_lazy": {"clean": True, "sanity_check_all": False},
    "clean_check_all": {"clean": True, "sanity_check_all": True},
    "unclean_below_recovery_point": {"clean": False, "recovery_point": 4 * PER_BATCH, "sanity_check_all": False},
}


@pytest.mark.parametrize("opening", list(OPENINGS))
@pytest.mark.parametrize("codec", MIXED_CODECS, ids=lambda c: CompressionType(c).name.lower())
@pytest.mark.parametrize("lie", MIXED_LIES)
def test_a_segment_ending_in_lying_headers_after_an_honest_one_gets_its_records_timestamps(
        open_log: OpenLog, tmp_path: Path, codec: int, lie: str, opening: str) -> None:
    write_mixed_segments(tmp_path / "t-0", codec, lie)
    before = sorted((p.name, p.read_bytes()) for p in (tmp_path / "t-0").glob("*.log"))
    log = open_log(config(), **OPENINGS[opening])
    # A floor between the honest batch's records and the lying one's: only the first two segments go.
    floor = T0 + 4 * DAY_MS + 6000
    assert [b for b, _, _ in retention_answers(log, retention_min_timestamp_ms=floor)] == [0, 2 * PER_BATCH]
    assert [s.largest_timestamp for s in log.segments] == expected_largest()
    assert all(s.headers_lie for s in log.segments)
    assert not log.active_segment.indexes_full(), "the active segment's rebuilt indexes keep their room"
    # ListOffsets finds the records after the floor, and the ones the lying batches hold inside.
    assert log.fetch_offset_by_timestamp(floor) == (5 * PER_BATCH, T0 + 5 * DAY_MS)
    assert log.fetch_offset_by_timestamp(T0 + 3 * DAY_MS + 4500) == (3 * PER_BATCH + 5, T0 + 3 * DAY_MS + 5000)
    assert log.fetch_offset_by_timestamp(T0 + DAY_MS) == (PER_BATCH, T0 + DAY_MS)
    assert log.max_timestamp_and_offset() == (T0 + 5 * DAY_MS + 5000, 5 * PER_BATCH + PER_BATCH - 1)
    # The floor deletes what it should and no record at or after it.
    log.update_config(config(retention_min_timestamp_ms=floor))
    log.delete_old_segments(NOW_MS)
    assert log.log_start_offset == 4 * PER_BATCH
    assert log.fetch_offset_by_timestamp(floor) == (5 * PER_BATCH, T0 + 5 * DAY_MS)
    log.close()
    # Nothing stored was rewritten, and the next clean start gives the same answers from the rebuilt indexes.
    after = sorted((p.name, p.read_bytes()) for p in (tmp_path / "t-0").glob("*.log"))
    assert after == [x for x in before if x[0] == f"{4 * PER_BATCH:020d}.log"]
    again = open_log(config(), clean=True, sanity_check_all=False, log_start_offset=4 * PER_BATCH)
    assert [s.largest_timestamp for s in again.segments] == expected_largest()[2:]
    assert again.fetch_offset_by_timestamp(floor) == (5 * PER_BATCH, T0 + 5 * DAY_MS)


@pytest.mark.parametrize("bound", ["before", "after"])
def test_one_timestamp_bound_alone_is_checked(open_log: OpenLog, clock: ManualClock, bound: str) -> None:
    """The append checks record timestamps whenever either bound is below Long.MAX_VALUE
    (``LogConfig.checks_create_times``), not only when both are; with both unbounded any timestamp
    is taken."""
    other = "after" if bound == "before" else "before"
    log = open_log(config(**{f"message_timestamp_{bound}_max_ms": 3_600_000,
                             f"message_timestamp_{other}_max_ms": INT64_MAX}))
    now = clock.wall_ms()
    bad = now - 2 * 3_600_000 if bound == "before" else now + 2 * 3_600_000
    with pytest.raises(InvalidTimestampError):
        log.append_as_leader(build_batch([SimpleRecord(None, b"a", timestamp=bad)]))
    # The other side is unbounded: any distance that way is accepted.
    far = now + 10**12 if bound == "before" else now - 10**12
    log.append_as_leader(build_batch([SimpleRecord(None, b"a", timestamp=far)]))
    assert log.log_end_offset == 1
    unbounded = open_log(config(message_timestamp_before_max_ms=INT64_MAX, message_timestamp_after_max_ms=INT64_MAX),
                         name="unbounded-0")
    unbounded.append_as_leader(build_batch([SimpleRecord(None, b"a", timestamp=bad)]))
    assert unbounded.log_end_offset == 1
