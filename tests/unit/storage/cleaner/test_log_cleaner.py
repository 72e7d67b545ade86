"""Kafka's log cleaner behaviours, one test each (from LogCleanerTest, LogCleanerManagerTest and
LogCleanerIntegrationTest; the crash between swap steps is in test_swap_crash.py, the model-based
property test in test_cleaner_property.py):

====================================================  ===============================================
Kafka behaviour (test it comes from)                  test here
====================================================  ===============================================
latest record per key retained, offsets kept          test_retains_latest_value_per_key_and_offsets
  (testCleanSegments)
tombstone kept delete.retention.ms after the clean    test_tombstone_kept_until_delete_horizon_then_dropped
  that first saw it, then dropped (KIP-534 horizon)
min.compaction.lag.ms keeps young segments dirty      test_min_compaction_lag_keeps_young_segments
  (testCompactionLag... in LogCleanerManagerTest)
max.compaction.lag.ms forces a log below the ratio    test_max_compaction_lag_forces_cleaning
dirtiest log chosen by min.cleanable.dirty.ratio      test_dirtiest_log_is_chosen_above_its_ratio
  (testLogsWithSegmentsToDelete / grabFilthiest)
active segment and the last stable offset bound       test_active_segment_and_lso_are_never_cleaned
  the cleanable range (testCleanableOffsets...)
last batch of each producer kept, even emptied;       test_last_batch_of_producer_kept_and_idempotence_survives
  duplicates still detected (testDuplicateCheck...)
partial cleaning when the offset map fills            test_partial_cleaning_when_the_map_is_full
  (testPartialSegmentClean, testCleanSegmentsWith...)
aborted records removed, ABORT marker kept while      test_aborted_records_and_markers_removed
  its data is seen, then dropped after the horizon
  (testAbortMarkerRemoval, testCommitMarkerRemoval)
small cleaned segments grouped (testSegmentGrouping)  test_cleaned_segments_are_grouped
compression, producer id/epoch, base sequence and     test_batch_fields_and_compression_kept
  timestamps kept (testCleanerWithMessageFormatV2)
null-key records refused on compacted topics          test_null_key_refused_on_compacted_topic
  (LogValidator, INVALID_RECORD)
corrupt batch stops cleaning, nothing deleted         test_corrupt_batch_stops_cleaning_and_changes_nothing
cleaner-offset-checkpoint in Kafka's format           test_cleaner_checkpoint_format
====================================================  ===============================================
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.config import LogConfig
from tierlog.errors import InvalidRecordError
from tierlog.records import (
    ControlRecordType,
    EndTransactionMarker,
    SimpleRecord,
    build_batch,
    build_end_txn_marker_batch,
)
from tierlog.records.compression import CompressionType
from tierlog.storage.cleaner.batches import CorruptDirtyBatchError
from tierlog.storage.cleaner.checkpoint import CleanerCheckpoint
from tierlog.storage.cleaner.cleaner import Cleaner
from tierlog.storage.cleaner.decisions import Candidate, DirtyStats, select_filthiest
from tierlog.storage.cleaner.manager import plan_log
from tierlog.storage.cleaner.offset_map import OffsetMap
from tierlog.storage.producer_state import AppendOrigin
from tierlog.testing import ManualClock

from ..conftest import OpenLog
from .helpers import TS, batches, clean, compact_config, put, records, table

DAY_MS = 86_400_000


def test_retains_latest_value_per_key_and_offsets(open_log: OpenLog) -> None:
    ulog = open_log(compact_config())
    expected: dict[bytes, tuple[int, bytes]] = {}
    for i in range(300):
        key, value = b"k%d" % (i % 7), b"value-%d" % i
        expected[key] = (put(ulog, key, value), value)
    ulog.roll()
    clean(ulog, TS)
    got = {r.key: (r.offset, r.value) for r in records(ulog)}
    assert got == expected
    assert ulog.log_end_offset == 300
    assert ulog.read_bytes(expected[b"k3"][0])  # a fetch at a kept offset works after the swap


def test_tombstone_kept_until_delete_horizon_then_dropped(open_log: OpenLog) -> None:
    ulog = open_log(compact_config(delete_retention_ms=DAY_MS))
    put(ulog, b"a", b"1")
    put(ulog, b"b", b"1")
    put(ulog, b"a", None)
    ulog.roll()
    result = clean(ulog, TS)
    assert table(ulog) == {b"b": b"1", b"a": None}  # the tombstone stays: a reader must see the delete
    assert result.next_delete_horizon_ms == TS + DAY_MS
    clean(ulog, TS + DAY_MS - 1)
    assert table(ulog) == {b"b": b"1", b"a": None}
    clean(ulog, TS + DAY_MS)
    assert table(ulog) == {b"b": b"1"}


def test_a_horizon_left_behind_by_dropped_tombstones_does_not_reschedule_the_log(open_log: OpenLog) -> None:
    """A batch whose tombstone is dropped after its horizon keeps the horizon bit (as Kafka's rewrite
    does) for its live records; that passed horizon must not make the log due again, or the cleaner
    rewrites it over and over with nothing to drop (seen with librdkafka's 0077: a pass every 60 ms)."""
    ulog = open_log(compact_config(delete_retention_ms=DAY_MS))
    ulog.append_as_leader(build_batch([SimpleRecord(b"x", b"1", timestamp=TS), SimpleRecord(b"a", None, timestamp=TS)]))
    ulog.roll()
    assert clean(ulog, TS).next_delete_horizon_ms == TS + DAY_MS
    result = clean(ulog, TS + DAY_MS)
    assert table(ulog) == {b"x": b"1"}
    assert any(h.has_delete_horizon for h in batches(ulog))  # the live record's batch keeps the bit
    assert result.next_delete_horizon_ms is None
    _, stats, _ = plan_log(ulog, result.end_offset, TS + DAY_MS)
    due = Candidate("t-0", stats, 0.5, 0, result.next_delete_horizon_ms)
    assert select_filthiest([due], TS + DAY_MS + 1) is None


def test_min_compaction_lag_keeps_young_segments(open_log: OpenLog, clock: ManualClock) -> None:
    ulog = open_log(compact_config(min_compaction_lag_ms=60_000))
    for i in range(40):
        put(ulog, b"k", b"%d" % i, ts=TS + i * 1000)
    ulog.roll()
    rng, _, _ = plan_log(ulog, None, TS + 40_000)
    first_young = next(b for b in ulog.segments.base_offsets if b > 0)
    assert rng.first_uncleanable_offset <= first_young  # records < 60 s old are not cleanable
    rng_later, _, _ = plan_log(ulog, None, TS + 1000 * 1000)
    assert rng_later.first_uncleanable_offset == ulog.active_segment.base_offset


def test_max_compaction_lag_forces_cleaning(open_log: OpenLog) -> None:
    ulog = open_log(compact_config(max_compaction_lag_ms=10_000, min_cleanable_dirty_ratio=0.99))
    for i in range(30):
        put(ulog, b"k%d" % i, b"v", ts=TS)  # all distinct keys: nothing to gain, ratio says no
    ulog.roll()
    _, _, delay = plan_log(ulog, ulog.log_end_offset - 5, TS + 5_000)
    assert delay == 0
    _, _, delay = plan_log(ulog, 0, TS + 20_000)
    assert delay == 10_000
    low = Candidate("t-0", DirtyStats(clean_bytes=1000, dirty_bytes=10), 0.99, compaction_delay_ms=delay)
    assert select_filthiest([low], TS + 20_000) is low
    assert select_filthiest([Candidate("t-0", low.stats, 0.99)], TS + 20_000) is None
    # The active segment rolls by max.compaction.lag.ms on a compacted topic (LogConfig.maxSegmentMs).
    assert compact_config(max_compaction_lag_ms=10_000).max_segment_ms == 10_000


def test_dirtiest_log_is_chosen_above_its_ratio() -> None:
    a = Candidate("a", DirtyStats(100, 100), 0.5)
    b = Candidate("b", DirtyStats(100, 300), 0.5)
    c = Candidate("c", DirtyStats(100, 900), 0.95)  # dirtier, but below its own ratio
    assert select_filthiest([a, b, c], TS) is b
    assert select_filthiest([Candidate("d", DirtyStats(100, 10), 0.5)], TS) is None
    tombs = Candidate("e", DirtyStats(100, 0), 0.5, delete_horizon_ms=TS)
    assert select_filthiest([tombs], TS) is tombs  # tombstones past their horizon are dropped


def test_active_segment_and_lso_are_never_cleaned(open_log: OpenLog) -> None:
    ulog = open_log(compact_config())
    for i in range(30):
        put(ulog, b"k", b"%d" % i)
    rng, _, _ = plan_log(ulog, None, TS)
    assert rng.first_uncleanable_offset == ulog.active_segment.base_offset
    ulog.roll()
    # An open transaction bounds the range at its first offset (the last stable offset).
    txn = build_batch([SimpleRecord(b"k", b"t", timestamp=TS)], producer_id=5, producer_epoch=0, base_sequence=0,
                      is_transactional=True)
    first = ulog.append_as_leader(txn).first_offset
    ulog.roll()
    rng, _, _ = plan_log(ulog, None, TS)
    assert ulog.last_stable_offset == first
    assert rng.first_uncleanable_offset == first
    clean(ulog, TS)
    assert any(r.offset == first for r in records(ulog))


def test_last_batch_of_producer_kept_and_idempotence_survives(open_log: OpenLog) -> None:
    ulog = open_log(compact_config())
    for seq in range(5):
        put(ulog, b"k", b"p%d" % seq, producer_id=9, producer_epoch=0, base_sequence=seq)
    put(ulog, b"k", b"later")  # supersedes the producer's last record
    ulog.roll()
    clean(ulog, TS)
    kept = [h for h in batches(ulog) if h.producer_id == 9]
    assert len(kept) == 1
    assert (kept[0].base_offset, kept[0].records_count, kept[0].base_sequence) == (4, 0, 4)  # emptied, kept
    assert table(ulog) == {b"k": b"later"}
    dup = ulog.append_as_leader(build_batch([SimpleRecord(b"k", b"p4", timestamp=TS)], producer_id=9,
                                            producer_epoch=0, base_sequence=4))
    assert dup.duplicate
    ulog.close()
    reopened = open_log(compact_config(), clean=True)
    assert reopened.producer_state.last_entry(9) is not None
    assert reopened.producer_state.last_entry(9).last_seq == 4  # type: ignore[union-attr]


def test_partial_cleaning_when_the_map_is_full(open_log: OpenLog) -> None:
    ulog = open_log(compact_config())
    for i in range(100):
        put(ulog, b"k%d" % i, b"a")
    for i in range(100):
        put(ulog, b"k%d" % i, b"b")
    ulog.roll()
    expected = table(ulog)
    first = clean(ulog, TS, slots=60)
    assert 0 < first.end_offset < ulog.active_segment.base_offset
    assert table(ulog) == expected
    second = clean(ulog, TS, slots=60, checkpoint=first.end_offset)
    assert second.end_offset > first.end_offset
    rest = clean(ulog, TS, slots=60, checkpoint=second.end_offset)
    while rest.end_offset < ulog.active_segment.base_offset:
        rest = clean(ulog, TS, slots=60, checkpoint=rest.end_offset)
    assert table(ulog) == expected
    assert len(records(ulog)) == 100


def _txn(pid: int, seq: int, key: bytes, value: bytes) -> bytes:
    return build_batch([SimpleRecord(key, value, timestamp=TS)], producer_id=pid, producer_epoch=0,
                       base_sequence=seq, is_transactional=True)


def _marker(pid: int, commit: bool) -> bytes:
    kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    return build_end_txn_marker_batch(EndTransactionMarker(kind, 0), producer_id=pid, producer_epoch=0,
                                      timestamp_ms=TS)


def test_aborted_records_and_markers_removed(open_log: OpenLog) -> None:
    ulog = open_log(compact_config(delete_retention_ms=1000))
    put(ulog, b"a", b"committed-before")
    ulog.append_as_leader(_txn(7, 0, b"a", b"aborted"))
    ulog.append_as_leader(_marker(7, commit=False), origin=AppendOrigin.COORDINATOR)
    ulog.append_as_leader(_txn(8, 0, b"b", b"committed"))
    ulog.append_as_leader(_marker(8, commit=True), origin=AppendOrigin.COORDINATOR)
    put(ulog, b"c", b"x")
    ulog.roll()
    clean(ulog, TS)
    assert table(ulog) == {b"a": b"committed-before", b"b": b"committed", b"c": b"x"}
    controls = [h for h in batches(ulog) if h.is_control]
    assert len(controls) == 2  # the ABORT stays while its data was seen; the COMMIT while its data lives
    # The aborted data is gone (its producer's last batch is kept, emptied); the markers live on until
    # their data is gone and their delete horizon has passed.
    assert all(h.records_count == 0 for h in batches(ulog) if h.producer_id == 7 and not h.is_control)
    clean(ulog, TS + 5000)
    # While producer 7's last batch is the emptied aborted one, the cleaner still sees the transaction's
    # data and keeps its ABORT (as Kafka does); once the producer wrote on, both go.
    assert [h.producer_id for h in batches(ulog) if h.is_control and h.records_count] == [7, 8]
    put(ulog, b"d", b"y", producer_id=7, producer_epoch=0, base_sequence=1)
    ulog.roll()
    clean(ulog, TS + 6000)  # the emptied aborted batch goes; its ABORT was still needed in this pass
    assert [h.producer_id for h in batches(ulog) if h.is_control and h.records_count] == [7, 8]
    clean(ulog, TS + 8000)  # no data of the transaction left: the ABORT gets a delete horizon
    assert [h.producer_id for h in batches(ulog) if h.is_control and h.records_count] == [7, 8]
    clean(ulog, TS + 10000)
    controls = [h for h in batches(ulog) if h.is_control and h.records_count]
    assert [h.producer_id for h in controls] == [8]  # the COMMIT still guards its live data
    assert table(ulog) == {b"a": b"committed-before", b"b": b"committed", b"c": b"x", b"d": b"y"}


def test_cleaned_segments_are_grouped(open_log: OpenLog) -> None:
    ulog = open_log(compact_config(segment_bytes=2048))
    for i in range(400):
        put(ulog, b"k%d" % (i % 5), b"v%d" % i)
    ulog.roll()
    before = len(ulog.segments)
    first = clean(ulog, TS)
    assert len(ulog.segments) == before  # groups are sized by the segments before cleaning (Kafka)
    put(ulog, b"k0", b"again")
    ulog.roll()
    clean(ulog, TS, checkpoint=first.end_offset)
    assert len(ulog.segments) <= 3
    assert len(table(ulog)) == 5


def test_batch_fields_and_compression_kept(open_log: OpenLog) -> None:
    ulog = open_log(compact_config(segment_bytes=4096))
    recs = [SimpleRecord(b"k%d" % (i % 3), b"v%d" % i, timestamp=TS + i) for i in range(9)]
    ulog.append_as_leader(build_batch(recs, compression=CompressionType.GZIP, producer_id=3, producer_epoch=2,
                                      base_sequence=0))
    put(ulog, b"k0", b"newer", ts=TS + 100)
    ulog.roll()
    clean(ulog, TS)
    h = batches(ulog)[0]
    assert (h.compression, h.producer_id, h.producer_epoch, h.base_sequence) == (CompressionType.GZIP, 3, 2, 0)
    assert (h.base_offset, h.last_offset_delta) == (0, 8)  # the batch still spans its offsets
    kept = [(r.offset, r.timestamp, r.value) for r in records(ulog) if r.offset < 9]
    assert kept == [(7, TS + 7, b"v7"), (8, TS + 8, b"v8")]


def test_null_key_refused_on_compacted_topic(open_log: OpenLog) -> None:
    ulog = open_log(compact_config())
    with pytest.raises(InvalidRecordError) as e:
        ulog.append_as_leader(build_batch([SimpleRecord(None, b"v", timestamp=TS)]))
    assert e.value.error_code == 87
    plain = open_log(LogConfig(), name="plain-0")
    plain.append_as_leader(build_batch([SimpleRecord(None, b"v", timestamp=TS)]))


def test_corrupt_batch_stops_cleaning_and_changes_nothing(open_log: OpenLog) -> None:
    ulog = open_log(compact_config())
    for i in range(60):
        put(ulog, b"k%d" % (i % 4), b"v%d" % i)
    ulog.roll()
    seg = ulog.segments.get(ulog.segments.base_offsets[1])
    with open(seg.log.path, "r+b") as f:
        f.seek(70)
        f.write(b"\xff\xff")
    files_before = sorted(p.name for p in ulog.dir.iterdir())
    with pytest.raises(CorruptDirtyBatchError):
        clean(ulog, TS)
    assert sorted(p.name for p in ulog.dir.iterdir()) == files_before
    assert ulog.read_bytes(ulog.segments.base_offsets[2])  # the partition keeps serving


def test_cleaner_checkpoint_format(tmp_path: Path) -> None:
    cp = CleanerCheckpoint(tmp_path)
    cp.write({("t", 0): 42, ("__consumer_offsets", 3): 7})
    assert (tmp_path / "cleaner-offset-checkpoint").read_text() == "0\n2\nt 0 42\n__consumer_offsets 3 7\n"
    assert cp.read() == {("t", 0): 42, ("__consumer_offsets", 3): 7}
    (tmp_path / "cleaner-offset-checkpoint").write_text("garbage")
    assert cp.read() == {}


def test_offset_map_is_bounded() -> None:
    m = OffsetMap(3)
    for i in range(3):
        m.put(b"k%d" % i, i)
    assert not m.fits(1) and m.fits(0)
    assert m.get(b"k1") == 1 and m.get(b"zz") == -1
    assert m.nominal_bytes == 72
    assert Cleaner(m).offset_map is m
