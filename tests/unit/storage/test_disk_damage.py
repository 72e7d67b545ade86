"""Damaged files of a stopped log: the log opens, never serves a batch that fails its checks, keeps
every record before the damage and says where the damage is, naming the partition."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.helpers.storage import OpenLog, batch, offsets_in
from tierlog.config import LogConfig
from tierlog.errors import CorruptRecordError
from tierlog.records.header import iter_headers
from tierlog.storage import files
from tierlog.storage.checkpoints import LEADER_EPOCH_CHECKPOINT, LeaderEpochCheckpointFile
from tierlog.storage.leader_epoch import EpochEntry
from tierlog.storage.log import UnifiedLog

CONFIG = LogConfig(segment_bytes=4000, index_interval_bytes=300)


def build(open_log: OpenLog, batches: int = 40, *, epoch: int = 0, close: bool = True) -> UnifiedLog:
    log = open_log(CONFIG)
    for _ in range(batches):
        log.append_as_leader(batch(5, value_size=20), leader_epoch=epoch)
    if close:
        log.close()
    return log


def segment_files(d: Path) -> list[Path]:
    return sorted(d.glob("*.log"))


def batch_positions(path: Path) -> list[tuple[int, int, int]]:
    """(position, base offset, last offset) of each batch in a segment file."""
    return [(h.position, h.base_offset, h.last_offset) for h in iter_headers(path.read_bytes())]


def flip(path: Path, position: int, mask: int = 0x20) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= mask
    path.write_bytes(bytes(data))


def read_through(log: UnifiedLog) -> tuple[list[int], int | None]:
    """Every offset served from the log start on, every batch CRC-checked by the reader, and the
    offset a read failed at (None if it got to the log end)."""
    got: list[int] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        try:
            data = log.read(offset, 1 << 20).read_bytes()
        except CorruptRecordError:
            return got, offset
        for h in iter_headers(data):
            h.ensure_valid()
        offs = [o for o in offsets_in(data) if o >= offset]
        if not offs:
            return got, offset
        got.extend(offs)
        offset = offs[-1] + 1
    return got, None


def errors_naming(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR and text in r.getMessage()]


@pytest.mark.parametrize("lazy", [False, True])
def test_a_flipped_byte_in_an_inactive_segment_is_never_served(open_log: OpenLog, tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture, lazy: bool) -> None:
    build(open_log)
    d = tmp_path / "t-0"
    second = segment_files(d)[1]
    pos, bad_offset, _ = batch_positions(second)[2]
    flip(second, pos + 80)  # inside the records: the CRC fails
    log = open_log(CONFIG, clean=True, sanity_check_all=not lazy)
    got, failed_at = read_through(log)
    # Everything before the damaged batch, nothing from it on; the read at it fails (CORRUPT_MESSAGE).
    assert got == list(range(bad_offset))
    assert failed_at == bad_offset
    with pytest.raises(CorruptRecordError):
        log.read(bad_offset, 1 << 20)
    with pytest.raises(CorruptRecordError):
        log.read(bad_offset + 2, 1 << 20)  # inside the damaged batch
    # A consumer seeking past the damaged batch reads on from the next one, in the same segment.
    after = log.read(bad_offset + 5, 1 << 20).read_bytes()
    for h in iter_headers(after):
        h.ensure_valid()
    assert offsets_in(after)[0] == bad_offset + 5
    errors = errors_naming(caplog, "t-0")
    assert len(errors) == 1, errors  # once, not once per fetch
    assert "partition=0" in errors[0] and str(second) in errors[0] and f"offset {bad_offset}" in errors[0]


def test_a_raised_base_offset_outside_the_crc_is_not_served(open_log: OpenLog, tmp_path: Path) -> None:
    build(open_log)
    d = tmp_path / "t-0"
    first = segment_files(d)[0]
    pos, bad_offset, _ = batch_positions(first)[3]
    flip(first, pos + 7, 0x04)  # base offset + 4: overlaps the next batch
    log = open_log(CONFIG, clean=True)
    got, failed_at = read_through(log)
    assert got == list(range(bad_offset)) and failed_at == bad_offset


def test_reads_from_the_middle_and_a_damaged_index_entry_serve_the_right_batches(open_log: OpenLog,
                                                                                 tmp_path: Path) -> None:
    build(open_log)
    d = tmp_path / "t-0"
    index = sorted(d.glob("*.index"))[0]
    data = bytearray(index.read_bytes())
    assert len(data) >= 16
    data[15] ^= 0x03  # the second entry's position moves a few bytes: no batch starts there
    index.write_bytes(bytes(data))
    log = open_log(CONFIG, clean=True, sanity_check_all=False)
    for start in (27, 3, 40):  # 27 goes through the damaged entry (offset 24)
        records = log.read(start, 1 << 20).read_bytes()
        for h in iter_headers(records):
            h.ensure_valid()
        offsets = offsets_in(records)
        assert offsets[0] <= start <= offsets[-1]
        assert offsets == list(range(offsets[0], offsets[-1] + 1))
    # The index was rebuilt once rather than walked around on every read.
    first = log.segments.get(0)
    assert not first.index_distrusted
    assert all(first._plausible_entry(*first.offset_index.entry(n)) for n in range(first.offset_index.entries))


def test_an_inactive_segment_cut_short_is_reported_and_reads_go_on_in_the_next(
        open_log: OpenLog, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    build(open_log)
    d = tmp_path / "t-0"
    second, third = segment_files(d)[1:3]
    pos, cut_offset, _ = batch_positions(second)[-2]
    with open(second, "r+b") as f:
        f.truncate(pos + 20)
    log = open_log(CONFIG, clean=True)
    got, failed_at = read_through(log)
    next_base = files.offset_from_file(third)
    assert failed_at is None
    assert got == [o for o in range(log.log_end_offset) if not cut_offset <= o < next_base]
    errors = errors_naming(caplog, "t-0")
    assert any(f"offsets {cut_offset} to {next_base - 1} are lost" in e for e in errors), errors


def test_a_truncated_active_segment_ends_the_log_at_its_last_whole_batch(
        open_log: OpenLog, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    before = build(open_log)
    leo = before.log_end_offset
    d = tmp_path / "t-0"
    active = segment_files(d)[-1]
    positions = batch_positions(active)
    pos, cut_offset, _ = positions[len(positions) // 2]
    with open(active, "r+b") as f:
        f.truncate(pos + 30)  # the index still names positions past the cut
    log = open_log(CONFIG, clean=True)
    assert log.log_end_offset == cut_offset
    got, failed_at = read_through(log)
    assert got == list(range(cut_offset)) and failed_at is None
    assert any(f"offsets {cut_offset} to {leo - 1} are lost" in e for e in errors_naming(caplog, "t-0"))
    log.append_as_leader(batch(2))
    assert read_through(log)[0] == list(range(cut_offset + 2))


def test_a_raised_base_offset_in_the_last_batch_does_not_move_the_log_end(open_log: OpenLog, tmp_path: Path) -> None:
    before = build(open_log)
    leo = before.log_end_offset
    d = tmp_path / "t-0"
    active = segment_files(d)[-1]
    pos, bad_offset, _ = batch_positions(active)[-1]
    flip(active, pos + 5, 0x01)  # base offset + 65536: the log end would jump
    log = open_log(CONFIG, clean=True)
    assert log.log_end_offset == bad_offset < leo
    assert read_through(log) == (list(range(bad_offset)), None)


def test_an_unreadable_leader_epoch_checkpoint_is_rebuilt_from_the_batches(
        open_log: OpenLog, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = open_log(CONFIG)
    for epoch in (0, 0, 3, 3, 3, 7):
        for _ in range(4):
            log.append_as_leader(batch(5, value_size=20), leader_epoch=epoch)
    expected = log.leader_epoch_cache.entries()
    assert [e.epoch for e in expected] == [0, 3, 7]
    log.close()
    path = tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT
    path.write_bytes(b"0\n3\n0 0\n\xff\xfe 40\n")
    reopened = open_log(CONFIG, clean=True)
    assert reopened.leader_epoch_cache.entries() == expected
    assert LeaderEpochCheckpointFile(path).read() == expected  # rewritten
    assert errors_naming(caplog, "t-0")


@pytest.mark.parametrize("content", [b"", b"0\n", b"0\n1\n"])
def test_a_leader_epoch_checkpoint_cut_to_nothing_is_rebuilt(open_log: OpenLog, tmp_path: Path,
                                                             content: bytes) -> None:
    log = build(open_log, epoch=2)
    expected = log.leader_epoch_cache.entries()
    assert expected == [EpochEntry(2, 0)]
    # Empty, version only (both read as no entries), and a count without its line (unreadable).
    (tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT).write_bytes(content)
    assert open_log(CONFIG, clean=True).leader_epoch_cache.entries() == expected


def test_a_damaged_log_start_offset_checkpoint_keeps_deleted_records_deleted(open_log: OpenLog,
                                                                            tmp_path: Path) -> None:
    log = build(open_log, close=False)
    assert log.maybe_increment_log_start_offset(23)  # DeleteRecords inside the first segment
    log.close()
    assert files.offset_from_file(segment_files(tmp_path / "t-0")[0]) == 0
    from tierlog.storage.loader import LoadOptions, load_log

    reopened = load_log(tmp_path / "t-0", CONFIG, LoadOptions(had_clean_shutdown=True, log_start_offset=0,
                                                              log_start_offset_unknown=True))
    assert reopened.log_start_offset == 23


def test_a_log_start_offset_past_the_log_end_keeps_the_records(open_log: OpenLog, tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    leo = build(open_log).log_end_offset
    log = open_log(CONFIG, clean=True, log_start_offset=leo + 9000)  # a flipped digit
    assert log.log_start_offset == 0 and log.log_end_offset == leo
    assert read_through(log) == (list(range(leo)), None)
    assert errors_naming(caplog, "t-0")


def test_a_log_start_offset_above_the_epoch_checkpoint_keeps_the_lower(open_log: OpenLog) -> None:
    log = build(open_log, close=False)
    assert log.maybe_increment_log_start_offset(23)
    log.close()
    reopened = open_log(CONFIG, clean=True, log_start_offset=93)  # 23 with a flipped digit
    assert reopened.log_start_offset == 23


def test_a_damaged_segment_after_a_crash_is_cut_there_and_later_ones_deleted(
        open_log: OpenLog, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    build(open_log, close=False)  # no clean shutdown
    d = tmp_path / "t-0"
    second = segment_files(d)[1]
    pos, bad_offset, _ = batch_positions(second)[1]
    flip(second, pos + 7, 0x02)  # base offset lowered: below the offset after the previous batch
    log = open_log(CONFIG, clean=False)
    assert log.log_end_offset == bad_offset
    assert read_through(log) == (list(range(bad_offset)), None)
    assert any(f"records from offset {bad_offset} on are lost" in e for e in errors_naming(caplog, "t-0"))


def test_producer_state_replay_stops_at_damaged_headers_instead_of_failing_the_load(
        open_log: OpenLog, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = open_log(CONFIG)
    for seq in range(0, 200, 5):
        log.append_as_leader(batch(5, value_size=20, producer_id=7, producer_epoch=0, base_sequence=seq))
    log.close()
    d = tmp_path / "t-0"
    snapshots = sorted(d.glob("*.snapshot"))
    for snap in snapshots[1:]:
        snap.unlink()  # only the oldest is left: loading replays every segment after it
    damaged = segment_files(d)[-2]
    pos = batch_positions(damaged)[1][0]
    data = bytearray(damaged.read_bytes())
    data[pos + 8 : pos + 12] = bytes(4)  # batch length 0: not a batch
    damaged.write_bytes(bytes(data))
    reopened = open_log(CONFIG, clean=True)
    assert 7 in reopened.producer_state.producers  # loaded, with what came before the damage
    assert any(str(damaged) in e for e in errors_naming(caplog, "t-0"))


@pytest.mark.parametrize("lazy", [False, True])
def test_a_flipped_timestamp_in_a_time_index_does_not_let_retention_delete_the_segment(
        open_log: OpenLog, tmp_path: Path, clock: object, lazy: bool) -> None:
    config = LogConfig(segment_bytes=4000, index_interval_bytes=300, retention_ms=7 * 86_400_000)
    log = open_log(config)
    now = 1_700_000_000_000
    for _ in range(40):
        log.append_as_leader(batch(5, value_size=20, ts=now))
    log.close()
    first = sorted((tmp_path / "t-0").glob("*.timeindex"))[0]
    data = bytearray(first.read_bytes())
    data[len(data) - 12 + 3] ^= 0x80  # the last entry's timestamp drops by years
    first.write_bytes(bytes(data))
    reopened = open_log(config, clean=True, sanity_check_all=not lazy)
    assert reopened.delete_old_segments(now + 1000) == []
    assert reopened.log_start_offset == 0


def test_a_damaged_time_index_entry_does_not_make_a_lookup_by_time_skip_records(open_log: OpenLog,
                                                                               tmp_path: Path) -> None:
    import struct

    config = LogConfig(segment_bytes=1 << 20, index_interval_bytes=300)
    log = open_log(config)
    base_ts = 1_700_000_000_000
    for i in range(40):
        log.append_as_leader(batch(5, value_size=20, ts=base_ts + 10 * i))  # batch i: ts +10i .. +10i+4
    log.close()
    index = sorted((tmp_path / "t-0").glob("*.timeindex"))[0]
    data = bytearray(index.read_bytes())
    entries = [struct.unpack_from(">qi", data, at) for at in range(0, len(data), 12)]
    assert len(entries) >= 4
    ts, rel = entries[2]
    # The entry's offset moves up but stays below the next entry's: the sanity check cannot tell.
    moved = entries[3][1] - 1
    assert rel + 5 < moved  # past the next batch, which holds the answer
    struct.pack_into(">i", data, 2 * 12 + 8, moved)
    index.write_bytes(bytes(data))
    reopened = open_log(config, clean=True, sanity_check_all=True)
    # The first record after the entry's timestamp opens the next batch.
    assert reopened.fetch_offset_by_timestamp(ts + 1) == (rel + 1, ts + 6)


@pytest.mark.parametrize("clean", [True, False])
def test_a_log_cut_at_a_batch_boundary_reports_the_offsets_it_lost(open_log: OpenLog, tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture,
                                                                    clean: bool) -> None:
    leo = build(open_log).log_end_offset  # a clean shutdown snapshots producer state at the log end
    active = segment_files(tmp_path / "t-0")[-1]
    pos, cut_offset, _ = batch_positions(active)[-1]
    with open(active, "r+b") as f:
        f.truncate(pos)  # the last batch goes whole: nothing in the file looks wrong
    log = open_log(CONFIG, clean=clean)
    assert log.log_end_offset == cut_offset
    assert any(f"offsets {cut_offset} to {leo - 1} are lost" in e for e in errors_naming(caplog, "t-0"))
