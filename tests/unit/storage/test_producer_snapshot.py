"""The producer snapshot file format and the snapshot lifecycle (KAFKA-FACTS §2.6, §2.12 step 7,
§4.4-4.5; cases from Kafka's ProducerStateManagerTest)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tierlog._util.crc import crc32c
from tierlog.errors import CorruptSnapshotError
from tierlog.storage.producer_snapshot import (
    SnapshotEntry,
    decode_snapshot,
    encode_snapshot,
    snapshot_file_name,
)
from tierlog.storage.producer_state import (
    BatchMetadata,
    ProducerStateEntry,
    ProducerStateManager,
    read_snapshot,
    write_snapshot,
)

T0 = 1_700_000_000_000
EMPTY_SNAPSHOT = bytes.fromhex("0001 48674BC7 00000000")


def entry(pid: int, *, seq: int = 4, offset: int = 10, delta: int = 4, ts: int = T0, epoch: int = 0,
          coordinator_epoch: int = -1, txn: int | None = None) -> ProducerStateEntry:
    return ProducerStateEntry(pid, epoch, [BatchMetadata(seq, offset, delta, ts)], coordinator_epoch, ts, txn)


def manager_with(tmp_path: Path, offsets: list[int], entries: list[ProducerStateEntry] | None = None,
                 expiration_ms: int = 86_400_000) -> ProducerStateManager:
    for o in offsets:
        write_snapshot(tmp_path / snapshot_file_name(o), entries or [entry(1, offset=o - 1)])
    return ProducerStateManager(tmp_path, expiration_ms)


def snapshot_offsets(psm: ProducerStateManager) -> list[int]:
    on_disk = sorted(int(p.name.split(".")[0]) for p in psm.log_dir.glob("*.snapshot"))
    listed = [s.offset for s in psm.list_snapshots()]
    assert listed == on_disk, "the manager's list and the directory disagree"
    return listed


# -- format ----------------------------------------------------------------------------------------------


def test_empty_snapshot_golden_bytes(tmp_path: Path) -> None:
    assert encode_snapshot([]) == EMPTY_SNAPSHOT
    psm = ProducerStateManager(tmp_path)
    psm.update_map_end_offset(5)
    path = psm.take_snapshot()
    assert path == tmp_path / "00000000000000000005.snapshot"
    assert path.read_bytes() == EMPTY_SNAPSHOT
    assert decode_snapshot(EMPTY_SNAPSHOT) == []


def test_one_producer_snapshot_field_by_field(tmp_path: Path) -> None:
    e = ProducerStateEntry(
        producer_id=0x0102030405060708, producer_epoch=0x0A0B,
        batch_metadata=[BatchMetadata(last_seq=0x11223344, last_offset=0x2233445566778899, offset_delta=0x55,
                                      timestamp=T0)],
        coordinator_epoch=0x77, last_timestamp=T0 + 1, current_txn_first_offset=0x0F,
    )
    path = tmp_path / snapshot_file_name(9)
    write_snapshot(path, [e])
    data = path.read_bytes()
    assert len(data) == 10 + 46
    assert data[0:2] == b"\x00\x01"  # version
    assert struct.unpack(">I", data[2:6])[0] == crc32c(data[6:])
    assert data[6:10] == b"\x00\x00\x00\x01"  # count
    assert data[10:18] == bytes.fromhex("0102030405060708")  # producer id
    assert data[18:20] == bytes.fromhex("0A0B")  # epoch
    assert data[20:24] == bytes.fromhex("11223344")  # last sequence
    assert data[24:32] == bytes.fromhex("2233445566778899")  # last offset
    assert data[32:36] == bytes.fromhex("00000055")  # offset delta
    assert data[36:44] == struct.pack(">q", T0 + 1)  # the entry's last timestamp, not the batch's
    assert data[44:48] == bytes.fromhex("00000077")  # coordinator epoch
    assert data[48:56] == bytes.fromhex("000000000000000F")  # current txn first offset


def test_producer_without_batches_or_txn_is_written_with_sentinels(tmp_path: Path) -> None:
    path = tmp_path / snapshot_file_name(1)
    write_snapshot(path, [ProducerStateEntry(3, 2, [], 5, T0, None)])
    assert decode_snapshot(path.read_bytes()) == [SnapshotEntry(3, 2, -1, -1, 0, T0, 5, -1)]


def test_read_write_round_trip(tmp_path: Path) -> None:
    entries = [
        entry(1, seq=9, offset=100, delta=3, coordinator_epoch=2),
        ProducerStateEntry(2, 1, [], 4, T0 + 5, None),  # no batch metadata (Kafka's round-trip case)
        entry(3, txn=90, ts=T0 - 1),
    ]
    path = tmp_path / snapshot_file_name(101)
    write_snapshot(path, entries, sync=False)
    loaded = read_snapshot(path)
    # only the newest batch survives, with the entry's timestamp
    assert loaded == [
        ProducerStateEntry(1, 0, [BatchMetadata(9, 100, 3, T0)], 2, T0, None),
        entries[1],
        ProducerStateEntry(3, 0, [BatchMetadata(4, 10, 4, T0 - 1)], -1, T0 - 1, 90),
    ]


def test_only_the_newest_batch_is_persisted(tmp_path: Path) -> None:
    e = ProducerStateEntry(1, 0, [BatchMetadata(1, 1, 1, T0), BatchMetadata(3, 3, 1, T0 + 1)], -1, T0 + 1)
    path = tmp_path / snapshot_file_name(4)
    write_snapshot(path, [e])
    assert list(read_snapshot(path)[0].batch_metadata) == [BatchMetadata(3, 3, 1, T0 + 1)]


@pytest.mark.parametrize(
    "mangle",
    [
        pytest.param(lambda b: b"", id="empty"),
        pytest.param(lambda b: b[:5], id="shorter-than-header"),
        pytest.param(lambda b: b[:-7], id="truncated"),
        pytest.param(lambda b: b[:30] + bytes([b[30] ^ 1]) + b[31:], id="bit-flip"),
        pytest.param(lambda b: b"\x00\x02" + b[2:], id="version-2"),
        pytest.param(lambda b: b + b"\x00", id="trailing-byte"),
    ],
)
def test_corrupt_snapshot_is_rejected(tmp_path: Path, mangle: object) -> None:
    good = encode_snapshot([SnapshotEntry(1, 0, 4, 10, 4, T0, -1, -1)])
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(mangle(good))  # type: ignore[operator]


def test_count_not_matching_size_is_corrupt_even_with_valid_crc() -> None:
    data = bytearray(encode_snapshot([SnapshotEntry(1, 0, 4, 10, 4, T0, -1, -1)]))
    struct.pack_into(">i", data, 6, 2)
    struct.pack_into(">I", data, 2, crc32c(data[6:]))
    with pytest.raises(CorruptSnapshotError, match="count"):
        decode_snapshot(data)


# -- taking and finding snapshots -----------------------------------------------------------------------------


def test_take_snapshot_only_when_the_map_end_moved(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    assert psm.take_snapshot() is None  # map end 0 is not past the initial snapshot offset 0
    psm.update_map_end_offset(3)
    assert psm.take_snapshot() is not None
    assert psm.take_snapshot() is None
    psm.update_map_end_offset(7)
    psm.take_snapshot(sync=False)
    psm.flush_snapshots()
    assert snapshot_offsets(psm) == [3, 7]
    assert (psm.oldest_snapshot_offset, psm.latest_snapshot_offset) == (3, 7)
    assert psm.snapshot_file_for(7) == tmp_path / "00000000000000000007.snapshot"
    assert psm.snapshot_file_for(5) is None  # KAFKA-16209: absent, not an error


def test_manager_finds_existing_snapshots_and_ignores_other_files(tmp_path: Path) -> None:
    (tmp_path / "00000000000000000001.snapshot.deleted").write_bytes(EMPTY_SNAPSHOT)
    (tmp_path / "00000000000000000002.snapshot.tmp").write_bytes(b"torn")
    (tmp_path / "00000000000000000003.log").write_bytes(b"")
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n0\n")
    psm = manager_with(tmp_path, [10, 20])
    assert snapshot_offsets(psm) == [10, 20]


def test_remove_and_mark_snapshot_for_deletion(tmp_path: Path) -> None:
    psm = manager_with(tmp_path, [5, 10])
    marked = psm.remove_and_mark_snapshot_for_deletion(5)
    assert marked == tmp_path / "00000000000000000005.snapshot.deleted"
    assert marked.exists() and snapshot_offsets(psm) == [10]
    assert psm.remove_and_mark_snapshot_for_deletion(5) is None
    (tmp_path / "00000000000000000010.snapshot").unlink()  # gone behind the manager's back
    assert psm.remove_and_mark_snapshot_for_deletion(10) is None


def test_delete_snapshots_below(tmp_path: Path) -> None:
    psm = manager_with(tmp_path, [1, 5, 9])
    psm.delete_snapshots_below(5)
    assert snapshot_offsets(psm) == [5, 9]
    assert psm.delete_snapshot(9) and not psm.delete_snapshot(9)


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    psm = manager_with(tmp_path, [1, 5])
    psm.truncate_and_reload(0, 5, T0)
    assert psm.active_producers_count == 1
    psm.truncate_fully_and_start_at(42)
    assert snapshot_offsets(psm) == [] and psm.active_producers_count == 0 and psm.map_end_offset == 42
    assert psm.take_snapshot() is not None  # a snapshot at the new start is written again


# -- stray snapshots (LogLoaderTest#testLoadingLogKeepsLargestStrayProducerStateSnapshot) -------------------------


@pytest.mark.parametrize(
    ("snapshots", "bases", "kept"),
    [
        ([0, 1, 2, 3, 4], [0, 2, 4], [0, 2, 4]),  # strays below the last base go
        ([0, 2, 4, 5, 6], [0, 2, 4], [0, 2, 4, 6]),  # the newest stray above every base is the LEO snapshot
        ([1, 3], [0, 2, 4], []),
        ([2, 7], [], [7]),  # no segments: keep the newest
        ([], [0, 5], []),
    ],
)
def test_remove_stray_snapshots(tmp_path: Path, snapshots: list[int], bases: list[int], kept: list[int]) -> None:
    psm = manager_with(tmp_path, snapshots)
    (tmp_path / "00000000000000000099.snapshot.tmp").write_bytes(b"half")
    psm.remove_stray_snapshots(bases)
    assert snapshot_offsets(psm) == kept
    assert not (tmp_path / "00000000000000000099.snapshot.tmp").exists()


# -- reload ---------------------------------------------------------------------------------------------------


def test_truncate_and_reload_drops_out_of_range_snapshots(tmp_path: Path) -> None:
    psm = manager_with(tmp_path, [1, 2, 3, 4, 5])
    psm.truncate_and_reload(log_start_offset=1, log_end_offset=4, now_ms=T0)
    # (1, 4] survives: a snapshot at the log start is as good as none, one past the end is from the future
    assert snapshot_offsets(psm) == [2, 3, 4]
    assert psm.map_end_offset == 4 and psm.producers[1].last_data_offset == 3


def test_truncate_and_reload_without_snapshots_starts_at_log_start(tmp_path: Path) -> None:
    psm = manager_with(tmp_path, [3])
    psm.truncate_and_reload(log_start_offset=5, log_end_offset=9, now_ms=T0)
    assert psm.map_end_offset == 5 and psm.active_producers_count == 0
    assert psm.take_snapshot() is None  # nothing new since the log start


def test_truncate_and_reload_at_the_map_end_keeps_the_state(tmp_path: Path) -> None:
    psm = manager_with(tmp_path, [4])
    psm.truncate_and_reload(0, 4, T0)
    psm._producers[2] = entry(2)  # state that exists only in memory
    psm.truncate_and_reload(1, 4, T0)
    assert set(psm.producers) == {1, 2}


@pytest.mark.parametrize(
    "mangle",
    [
        pytest.param(lambda b: b"", id="empty"),
        pytest.param(lambda b: b[: len(b) // 2], id="truncated"),
        pytest.param(lambda b: b[:-1] + bytes([b[-1] ^ 0xFF]), id="corrupt"),
    ],
)
def test_bad_newest_snapshot_falls_back_to_the_older_one(tmp_path: Path, mangle: object) -> None:
    write_snapshot(tmp_path / snapshot_file_name(5), [entry(1, offset=4)])
    write_snapshot(tmp_path / snapshot_file_name(9), [entry(1, offset=8), entry(2, offset=7)])
    newest = tmp_path / snapshot_file_name(9)
    newest.write_bytes(mangle(newest.read_bytes()))  # type: ignore[operator]
    psm = ProducerStateManager(tmp_path)
    psm.truncate_and_reload(0, 10, T0)
    assert psm.map_end_offset == 5
    assert list(psm.producers) == [1] and psm.producers[1].last_data_offset == 4
    assert not newest.exists() and snapshot_offsets(psm) == [5]


def test_expired_producers_are_dropped_at_load(tmp_path: Path) -> None:
    entries = [entry(1, ts=T0), entry(2, ts=T0 + 500), entry(3, ts=T0 - 10_000, txn=3)]
    psm = manager_with(tmp_path, [10], entries, expiration_ms=1000)
    psm.truncate_and_reload(0, 10, T0 + 1000)
    assert sorted(psm.producers) == [2, 3]  # 3 is old but its transaction is still open
    assert psm.first_unstable_offset() == 3 and psm.ongoing_txns[3].producer_id == 3


def test_coordinator_epoch_survives_reload(tmp_path: Path) -> None:
    psm = manager_with(tmp_path, [10], [entry(1, coordinator_epoch=7)])
    psm.truncate_and_reload(0, 10, T0)
    assert psm.producers[1].coordinator_epoch == 7


def test_on_log_start_offset_incremented(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    psm.on_log_start_offset_incremented(20)
    assert psm.map_end_offset == 20
    assert psm.take_snapshot() is None  # the log start counts as already covered
    psm.update_map_end_offset(25)
    assert psm.take_snapshot() == tmp_path / "00000000000000000025.snapshot"


def test_refresh_snapshots_picks_up_files_written_by_others(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    write_snapshot(tmp_path / snapshot_file_name(8), [])
    assert psm.snapshot_file_for(8) is None
    psm.refresh_snapshots()
    assert psm.snapshot_file_for(8) is not None


def test_detached_manager_never_touches_a_directory() -> None:
    psm = ProducerStateManager.detached()
    psm.update_map_end_offset(3)
    assert psm.list_snapshots() == []
    with pytest.raises(ValueError):
        psm.take_snapshot()
