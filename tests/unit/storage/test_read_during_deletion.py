"""A read that retention races with ``file.delete.delay.ms=0`` (the segment's files closed and removed
the moment it is deleted) answers what a Kafka consumer handles -- OFFSET_OUT_OF_RANGE when its
offset is now below the log start offset, else the records from the segments that are left -- and
never KAFKA_STORAGE_ERROR, a log dir taken offline or a record lost.

Kafka itself reads without the log's lock: its LocalLog.read runs inside maybeHandleIOException, so a
FileRecords closed by LogSegment.deleteIfExists under a read fails with ClosedChannelException and
takes the whole log dir offline; file.delete.delay.ms (60 s by default) is what keeps its readers
safe. tierlog reads a segment, and takes the bytes of the region read, under the log's lock, which
retention also holds while it deletes: the interleaving is one or the other, never a closed file.

The interleaving is forced, without sleeps: the read's segment lookup is followed at once by a
retention pass on another thread."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.helpers.storage import OpenLog
from tierlog.config import LogConfig
from tierlog.errors import OffsetOutOfRangeError
from tierlog.records import SimpleRecord, build_batch
from tierlog.records.header import iter_headers
from tierlog.storage.log import UnifiedLog
from tierlog.storage.segment import LogSegment
from tierlog.testing import ManualClock

CONFIG = LogConfig(segment_bytes=1000, retention_ms=1000, file_delete_delay_ms=0)


def _fill(ulog: UnifiedLog, clock: ManualClock, count: int) -> None:
    for i in range(count):
        ulog.append_as_leader(build_batch([SimpleRecord(None, b"v%03d" % i * 20, timestamp=clock.wall_ms())]))


def _race_retention_into_reads(ulog: UnifiedLog, monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[threading.Thread]]:
    """Make the next segment read start a retention pass on another thread first; the pass deletes
    every inactive segment (their records are old). A read holding no lock there waits for the pass
    to finish, so the segment it found is deleted before it reads it (what the read did before); a
    read holding the log's lock reads on at once, the pass waiting for the lock (the test joins it).
    Returns the base offsets the pass deleted and the thread."""
    original = LogSegment.read
    deleted: list[int] = []
    racers: list[threading.Thread] = []

    def read_after_retention(segment: LogSegment, *args: Any, **kwargs: Any) -> Any:
        if not racers:
            racer = threading.Thread(
                target=lambda: deleted.extend(d.segment.base_offset for d in ulog.delete_old_segments()))
            racers.append(racer)
            racer.start()
            # CPython's RLock says whether this thread holds it; joining while holding it would
            # wait for ever.
            if not ulog.lock._is_owned():  # type: ignore[attr-defined]
                racer.join()
        return original(segment, *args, **kwargs)

    monkeypatch.setattr(LogSegment, "read", read_after_retention)
    return deleted, racers


def _values(data: bytes) -> list[int]:
    return [h.base_offset for h in iter_headers(data)]


def test_a_read_that_found_its_segment_gets_its_records_before_retention_deletes_it(
        open_log: OpenLog, clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Retention starts right after the read found its segment (the coordinators' loads and the
    console read so, outside the Fetch path). Before, the segment's file was closed and removed
    under the read: KafkaStorageError (ENOENT reopening ``.log.deleted``)."""
    ulog = open_log(CONFIG)
    _fill(ulog, clock, 40)
    assert ulog.num_segments > 2
    clock.advance(5_000)
    deleted, racers = _race_retention_into_reads(ulog, monkeypatch)
    data = ulog.read_bytes(0, 1 << 20)
    racers[0].join()
    assert _values(data)[0] == 0  # the read went first, whole
    assert deleted and deleted[0] == 0 and ulog.log_start_offset == 40  # then retention, whole
    with pytest.raises(OffsetOutOfRangeError):
        ulog.read_bytes(0, 1 << 20)
    assert ulog.offline_reason is None


def test_a_read_overtaken_by_retention_is_offset_out_of_range(
        open_log: OpenLog, clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read that arrives while retention deletes (with file.delete.delay.ms=0 the files go at once)
    waits for it and finds its offset below the new log start: OFFSET_OUT_OF_RANGE, which a
    consumer answers with its auto.offset.reset; never a storage error."""
    ulog = open_log(LogConfig(segment_bytes=1000, retention_ms=1000, file_delete_delay_ms=0))
    _fill(ulog, clock, 40)
    clock.advance(5_000)
    _fill(ulog, clock, 3)  # new records: the segment holding them stays
    original = LogSegment.delete_files
    outcome: list[object] = []
    readers: list[threading.Thread] = []

    def read() -> None:
        try:
            outcome.append(ulog.read_bytes(0, 1 << 20))
        except Exception as e:
            outcome.append(e)

    def delete_files_with_a_read_arriving(segment: LogSegment) -> None:
        if not readers:
            readers.append(threading.Thread(target=read))
            readers[0].start()
        original(segment)

    monkeypatch.setattr(LogSegment, "delete_files", delete_files_with_a_read_arriving)
    assert ulog.delete_old_segments()
    readers[0].join()
    assert len(outcome) == 1 and isinstance(outcome[0], OffsetOutOfRangeError), outcome
    assert ulog.offline_reason is None
    assert _values(ulog.read_bytes(ulog.log_start_offset, 1 << 20))[0] == ulog.log_start_offset


def test_a_fetch_through_the_tiered_reader_never_gets_kafka_storage_error(
        open_log: OpenLog, clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker's Fetch path (TieredReader): OFFSET_OUT_OF_RANGE or records, never a storage error."""
    from tierlog.server.partitions import _take
    from tierlog.tiered.reader import TieredReader

    ulog = open_log(CONFIG)
    _fill(ulog, clock, 40)
    clock.advance(5_000)
    deleted, racers = _race_retention_into_reads(ulog, monkeypatch)
    got = TieredReader(None).read(ulog, 0, 1 << 20, max_offset=ulog.high_watermark, min_one_message=True,
                                  take=lambda region: _take(region, True))
    racers[0].join()
    # The read went first: all its records, taken before retention could close the file.
    assert got.error is None and isinstance(got.records, bytes) and _values(got.records)[0] == 0
    assert deleted and deleted[0] == 0 and ulog.offline_reason is None
    got = TieredReader(None).read(ulog, 0, 1 << 20, max_offset=ulog.high_watermark, min_one_message=True,
                                  take=lambda region: _take(region, True))
    assert isinstance(got.error, OffsetOutOfRangeError)  # the Fetch handler answers OFFSET_OUT_OF_RANGE
