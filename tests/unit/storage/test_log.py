from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers.storage import OpenLog, batch, offsets_in
from tierlog.config import LogConfig
from tierlog.errors import CorruptRecordError, InvalidRecordError, OffsetOutOfRangeError, RecordTooLargeError
from tierlog.records import decode_batch, iter_headers
from tierlog.records.header import BatchHeader
from tierlog.storage import files
from tierlog.storage.producer_state import AppendOrigin
from tierlog.testing import ManualClock


def test_append_assigns_offsets_and_reads_back(open_log: OpenLog) -> None:
    log = open_log()
    a = log.append_as_leader(batch(3))
    b = log.append_as_leader(batch(2))
    assert (a.first_offset, a.last_offset, b.first_offset, b.last_offset) == (0, 2, 3, 4)
    assert log.log_end_offset == 5
    data = log.read(0, 1 << 20).read_bytes()
    assert offsets_in(data) == [0, 1, 2, 3, 4]
    assert offsets_in(log.read(3, 1 << 20).read_bytes()) == [3, 4]
    # Reads return whole batches from the batch holding the offset, like Kafka.
    assert offsets_in(log.read(1, 1 << 20).read_bytes())[:1] == [0]
    for h in iter_headers(data):
        h.ensure_valid()


def test_read_out_of_range(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_leader(batch(1))
    assert log.read(1, 100).records is None
    with pytest.raises(OffsetOutOfRangeError):
        log.read(5, 100)


def test_min_one_message_returns_a_whole_batch_over_max_bytes(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_leader(batch(5, value_size=1000))
    info = log.read(0, 10, min_one_message=True)
    assert info.size_bytes > 10 and len(list(iter_headers(info.read_bytes()))) == 1
    partial = log.read(0, 10, min_one_message=False)
    assert partial.first_entry_incomplete and partial.size_bytes == 10


def test_invalid_batch_writes_nothing(open_log: OpenLog) -> None:
    log = open_log()
    good = bytearray(batch(2))
    good[-1] ^= 0xFF  # breaks the CRC
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(bytes(good))
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(batch(2) + b"\x00\x00\x00")
    assert log.log_end_offset == 0 and log.active_segment.size_bytes == 0


def test_max_message_bytes(open_log: OpenLog) -> None:
    log = open_log(LogConfig(max_message_bytes=200))
    with pytest.raises(RecordTooLargeError):
        log.append_as_leader(batch(1, value_size=500))
    assert log.log_end_offset == 0


def test_roll_on_segment_bytes_and_index_entries(open_log: OpenLog, tmp_path: Path) -> None:
    log = open_log(LogConfig(segment_bytes=4000, index_interval_bytes=300))
    for _ in range(40):
        log.append_as_leader(batch(2, value_size=100))
    assert log.num_segments > 1
    bases = log.segments.base_offsets
    assert bases[0] == 0 and bases == sorted(bases)
    d = tmp_path / "t-0"
    for base in bases:
        assert files.log_file(d, base).exists()
        assert files.log_file(d, base).name == f"{base:020d}.log"
    # Inactive segments' indexes are trimmed to their entries; each entry points at a batch start.
    first = log.segments.get(bases[0])
    assert os.path.getsize(first.offset_index_path) == first.offset_index.entries * 8
    assert first.offset_index.entries > 0
    for n in range(first.offset_index.entries):
        off, pos = first.offset_index.entry(n)
        h = BatchHeader(first.log.read(pos, 61))
        assert h.last_offset == off
    # Every offset is still readable after rolls.
    got: list[int] = []
    offset = 0
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).read_bytes()
        offs = offsets_in(data)
        got.extend(o for o in offs if o >= offset)
        offset = offs[-1] + 1
    assert got == list(range(80))


def test_roll_on_segment_ms_uses_batch_timestamps(open_log: OpenLog) -> None:
    log = open_log(LogConfig(segment_ms=1000))
    log.append_as_leader(batch(1, ts=10_000))
    log.append_as_leader(batch(1, ts=10_500))
    assert log.num_segments == 1
    log.append_as_leader(batch(1, ts=11_001))
    assert log.num_segments == 2 and log.active_segment.base_offset == 2


def test_log_append_time(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log(LogConfig(message_timestamp_type="LogAppendTime"))
    info = log.append_as_leader(batch(2, ts=5))
    assert info.log_append_time_ms == clock.wall_ms()
    h = next(iter_headers(log.read(0, 1 << 20).read_bytes()))
    h.ensure_valid()
    assert h.timestamp_type == 1 and h.max_timestamp == clock.wall_ms()
    assert [r.timestamp for r in decode_batch(h)] == [clock.wall_ms()] * 2


def test_clean_reopen_keeps_everything(open_log: OpenLog, tmp_path: Path) -> None:
    log = open_log(LogConfig(segment_bytes=2000))
    for _ in range(20):
        log.append_as_leader(batch(3, value_size=50))
    end = log.log_end_offset
    log.close()
    # Closed segments and the active one are trimmed on close.
    for p in (tmp_path / "t-0").glob("*.timeindex"):
        assert os.path.getsize(p) % 12 == 0 and os.path.getsize(p) < 10485756
    log2 = open_log(LogConfig(segment_bytes=2000), clean=True)
    assert log2.log_end_offset == end
    assert offsets_in(log2.read(end - 3, 1 << 20).read_bytes()) == [end - 3, end - 2, end - 1]
    info = log2.append_as_leader(batch(1))
    assert info.first_offset == end


def test_truncate_to(open_log: OpenLog) -> None:
    log = open_log(LogConfig(segment_bytes=1500))
    for _ in range(20):
        log.append_as_leader(batch(2, value_size=50))
    log.truncate_to(13)
    # Truncation keeps whole batches: offset 13 is mid-batch [12, 13], so the log ends at 12.
    assert log.log_end_offset in (12, 13)
    end = log.log_end_offset
    assert log.append_as_leader(batch(1)).first_offset == end


def test_offset_for_timestamp(open_log: OpenLog) -> None:
    log = open_log(LogConfig(segment_bytes=3000, index_interval_bytes=100))
    for i in range(30):
        log.append_as_leader(batch(2, ts=1000 + i * 10))
    assert log.fetch_offset_by_timestamp(1000) == (0, 1000)
    assert log.fetch_offset_by_timestamp(1101) == (21, 1101)
    assert log.fetch_offset_by_timestamp(1105) == (22, 1110)
    assert log.fetch_offset_by_timestamp(99_999) is None
    assert log.max_timestamp_and_offset() == (1291, 59)


def test_garbage_files_in_partition_dir(open_log: OpenLog, tmp_path: Path) -> None:
    log = open_log()
    log.append_as_leader(batch(2))
    log.close()
    d = tmp_path / "t-0"
    (d / "00000000000000000050.index").write_bytes(b"orphan")
    (d / "00000000000000000003.log.deleted").write_bytes(b"x")
    (d / "notes.txt").write_text("hello")
    log2 = open_log(clean=True)
    assert not (d / "00000000000000000050.index").exists()
    assert not (d / "00000000000000000003.log.deleted").exists()
    assert log2.log_end_offset == 2


def test_multi_batch_request_written_without_copy_keeps_input_and_gets_offsets(open_log: OpenLog) -> None:
    """The request's bytes go to disk behind patched headers; the caller's buffer is not changed."""
    log = open_log()
    log.append_as_leader(batch(2))
    request = bytearray(batch(3) + batch(1, value_size=500) + batch(4))
    before = bytes(request)
    # Several batches in one append: what the coordinators write (a client's Produce holds one).
    info = log.append_as_leader(request, leader_epoch=7, origin=AppendOrigin.COORDINATOR)
    assert bytes(request) == before
    assert (info.first_offset, info.last_offset) == (2, 9)
    headers = list(iter_headers(log.read(2, 1 << 20).read_bytes()))
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(2, 7), (5, 7), (6, 7)]
    for h in headers:
        h.ensure_valid()
    # Only the offset and epoch fields differ from what the client sent.
    sent = list(iter_headers(before))
    for h, s in zip(headers, sent, strict=True):
        assert bytes(h.body()) == bytes(s.body()) and h.crc == s.crc


def test_a_client_append_of_more_than_one_batch_is_refused_whole(open_log: OpenLog) -> None:
    """Kafka's LogValidator: one v2 batch per partition from a client, else INVALID_RECORD."""
    log = open_log()
    with pytest.raises(InvalidRecordError, match="more than one batch"):
        log.append_as_leader(batch(2) + batch(1))
    assert log.log_end_offset == 0
    assert log.append_as_leader(batch(2)).last_offset == 1


def test_request_with_more_buffers_than_one_pwritev_takes(open_log: OpenLog) -> None:
    """Two buffers per batch: 700 batches need 1,400 iovecs, past Linux's 1,024 per call."""
    log = open_log(LogConfig(segment_bytes=64 << 20))
    request = b"".join(batch(1, value_size=i % 50) for i in range(700))
    info = log.append_as_leader(request, origin=AppendOrigin.COORDINATOR)
    assert (info.first_offset, info.last_offset) == (0, 699)
    data = log.read(0, 1 << 24).read_bytes()
    assert len(data) == len(request)
    assert offsets_in(data) == list(range(700))
    for h in iter_headers(data):
        h.ensure_valid()
