"""Remote log metadata: Kafka's record framing, state transitions, and the durable journal+snapshot
store surviving restarts, torn tails and compaction."""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import pytest

from tierlog.ids import random_uuid
from tierlog.tiered import serde
from tierlog.tiered.api import (
    InvalidStateTransitionError,
    RemoteLogMetadataManager,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
    is_valid_transition,
)
from tierlog.tiered.metadata_store import (
    SNAPSHOT_NAME,
    FileRemoteLogMetadataManager,
    RemoteLogMetadataCorruptError,
)

from .rlmm_contract import RemoteLogMetadataManagerContract

S = RemoteLogSegmentState
TIP = TopicIdPartition(b"\x02" * 16, "t", 0)


def md(start: int, end: int, tip: TopicIdPartition = TIP, custom: bytes | None = None) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(tip, random_uuid()), start, end, 1000 + start, 1, 5,
                                    end - start + 1, ((0, start),), S.COPY_SEGMENT_STARTED, custom)


def update(m: RemoteLogSegmentMetadata, state: RemoteLogSegmentState, custom: bytes | None = None) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(m.segment_id, 9, state, 1, custom)


def test_update_record_has_kafkas_layout() -> None:
    sid = RemoteLogSegmentId(TopicIdPartition(b"\x11" * 16, "ab", 7), b"\x22" * 16)
    encoded = serde.encode(RemoteLogSegmentMetadataUpdate(sid, 0x0102, S.COPY_SEGMENT_FINISHED, 3, b"xy"))
    expected = (b"\x01\x01\x00"  # frame version 1, apiKey 1, version 0
                + b"\x03ab" + b"\x11" * 16 + struct.pack(">i", 7) + b"\x00"  # TopicIdPartition + tags
                + b"\x22" * 16 + b"\x00"  # segment uuid + tags
                + struct.pack(">iq", 3, 0x0102) + b"\x03xy" + b"\x01" + b"\x00")
    assert encoded == expected


@pytest.mark.parametrize("record", [
    md(0, 99, custom=b"\x00\x01"),
    md(5, 5),
    RemoteLogSegmentMetadataUpdate(RemoteLogSegmentId(TIP, b"\x03" * 16), 7, S.DELETE_SEGMENT_STARTED, 2, None),
    RemotePartitionDeleteMetadata(TIP, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 8, 1),
    serde.RemoteLogStartOffset(TIP, 1234, 99),
])
def test_records_round_trip(record: serde.RemoteLogMetadataRecord) -> None:
    assert serde.decode(serde.encode(record)) == record


def test_the_smallest_timestamp_is_a_tagged_field_older_records_lack() -> None:
    """Tag 10003 (tierlog's own) carries a segment's smallest record timestamp: a record without it
    (an older tierlog's journal) reads as unknown, and one without a value is byte for byte what it
    was before the field existed."""
    plain = md(0, 99)
    with_min = dataclasses.replace(plain, min_timestamp_ms=-1)
    assert serde.decode(serde.encode(with_min)).min_timestamp_ms == -1
    assert serde.decode(serde.encode(dataclasses.replace(plain, min_timestamp_ms=1_700_000_000_123))) == \
        dataclasses.replace(plain, min_timestamp_ms=1_700_000_000_123)
    assert serde.decode(serde.encode(plain)).min_timestamp_ms is None
    assert serde.encode(plain).endswith(b"\x00")  # an empty tagged section: the old layout
    assert serde.encode(with_min).endswith(b"\x01" + bytes([0x93, 0x4E]) + b"\x08" + b"\xff" * 8)
    # A journal's state survives an update and the snapshot.
    moved = with_min.create_with_updates(update(with_min, S.COPY_SEGMENT_FINISHED))
    assert moved.min_timestamp_ms == -1


def test_unknown_api_key_and_trailing_bytes_are_refused() -> None:
    with pytest.raises(serde.SerdeError):
        serde.decode(b"\x01\x07\x00\x00")
    with pytest.raises(serde.SerdeError):
        serde.decode(b"\x02\x00\x00")
    with pytest.raises(serde.SerdeError):
        serde.decode(serde.encode(serde.RemoteLogStartOffset(TIP, 1, 2)) + b"\x00")


def test_state_transitions_follow_kafka() -> None:
    assert is_valid_transition(None, S.COPY_SEGMENT_STARTED)
    assert not is_valid_transition(None, S.COPY_SEGMENT_FINISHED)
    assert is_valid_transition(S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED)
    assert is_valid_transition(S.COPY_SEGMENT_FINISHED, S.COPY_SEGMENT_FINISHED)
    assert not is_valid_transition(S.COPY_SEGMENT_FINISHED, S.COPY_SEGMENT_STARTED)
    assert not is_valid_transition(S.DELETE_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED)
    assert not is_valid_transition(S.DELETE_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED)
    with pytest.raises(ValueError):
        RemoteLogSegmentMetadataUpdate(RemoteLogSegmentId(TIP, b"\x01" * 16), 0, S.COPY_SEGMENT_STARTED, 1)


def test_store_checks_transitions_and_serves_only_finished_segments(tmp_path: Path) -> None:
    store = FileRemoteLogMetadataManager(tmp_path)
    a, b = md(0, 99), md(100, 199)
    store.add_remote_log_segment_metadata(a)
    store.add_remote_log_segment_metadata(b)
    with pytest.raises(InvalidStateTransitionError):
        store.add_remote_log_segment_metadata(a)
    with pytest.raises(InvalidStateTransitionError):
        store.add_remote_log_segment_metadata(update_state(md(300, 399), S.COPY_SEGMENT_FINISHED))
    with pytest.raises(InvalidStateTransitionError):
        store.update_remote_log_segment_metadata(update(a, S.DELETE_SEGMENT_FINISHED))
    assert store.remote_log_segment_metadata(TIP, 50) is None  # only STARTED so far
    store.update_remote_log_segment_metadata(update(a, S.COPY_SEGMENT_FINISHED, b"cm"))
    found = store.remote_log_segment_metadata(TIP, 50)
    assert found is not None and found.segment_id == a.segment_id and found.custom_metadata == b"cm"
    assert store.remote_log_segment_metadata(TIP, 100) is None
    assert store.remote_log_segment_metadata(TIP, 0, leader_epoch=1) is None
    assert store.highest_offset_for_epoch(TIP, 0) == 99
    assert [m.start_offset for m in store.list_remote_log_segments(TIP)] == [0, 100]
    assert store.remote_log_size(TIP) == 100


def update_state(m: RemoteLogSegmentMetadata, state: RemoteLogSegmentState) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(m.segment_id, m.start_offset, m.end_offset, m.max_timestamp_ms, m.broker_id,
                                    m.event_timestamp_ms, m.segment_size_in_bytes, m.segment_leader_epochs, state)


def populate(store: FileRemoteLogMetadataManager) -> list[RemoteLogSegmentMetadata]:
    segs = [md(i * 100, i * 100 + 99) for i in range(5)]
    for s in segs:
        store.add_remote_log_segment_metadata(s)
        store.update_remote_log_segment_metadata(update(s, S.COPY_SEGMENT_FINISHED, b"c%d" % s.start_offset))
    store.update_remote_log_segment_metadata(update(segs[0], S.DELETE_SEGMENT_STARTED))
    store.update_remote_log_segment_metadata(update(segs[0], S.DELETE_SEGMENT_FINISHED))
    store.update_remote_log_segment_metadata(update(segs[1], S.DELETE_SEGMENT_STARTED, b"c100"))
    store.update_log_start_offset(TIP, 200, 1)
    return segs


def state_of(store: FileRemoteLogMetadataManager) -> list[tuple[int, RemoteLogSegmentState, bytes | None]]:
    return [(m.start_offset, m.state, m.custom_metadata) for m in store.list_remote_log_segments(TIP)]


@pytest.mark.parametrize("snapshot_every", [1000, 3, 1])
def test_restart_resumes_from_the_journal_and_snapshots(tmp_path: Path, snapshot_every: int) -> None:
    store = FileRemoteLogMetadataManager(tmp_path, snapshot_every=snapshot_every)
    populate(store)
    before = state_of(store)
    assert before[0] == (100, S.DELETE_SEGMENT_STARTED, b"c100")
    assert [s for s, _, _ in before] == [100, 200, 300, 400]
    store.close()
    again = FileRemoteLogMetadataManager(tmp_path, snapshot_every=snapshot_every)
    assert state_of(again) == before
    assert again.log_start_offset(TIP) == 200
    journals = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("journal-"))
    assert len(journals) == 1
    assert (tmp_path / SNAPSHOT_NAME).exists() == (snapshot_every < 1000)


def test_torn_tail_is_cut_and_appends_continue(tmp_path: Path) -> None:
    store = FileRemoteLogMetadataManager(tmp_path)
    populate(store)
    before = state_of(store)
    store.close()
    journal = next(p for p in tmp_path.iterdir() if p.name.startswith("journal-"))
    size = journal.stat().st_size
    with open(journal, "ab") as f:
        f.write(b"\x00\x00\x00\x40\x12\x34")  # a crash mid-append
    again = FileRemoteLogMetadataManager(tmp_path)
    assert state_of(again) == before
    assert journal.stat().st_size == size
    extra = md(900, 999)
    again.add_remote_log_segment_metadata(extra)
    again.close()
    assert len(state_of(FileRemoteLogMetadataManager(tmp_path))) == len(before) + 1


def test_damage_is_an_error_not_silent_loss(tmp_path: Path) -> None:
    store = FileRemoteLogMetadataManager(tmp_path, snapshot_every=4)
    populate(store)
    store.close()
    snap = tmp_path / SNAPSHOT_NAME
    data = bytearray(snap.read_bytes())
    data[-3] ^= 0xFF
    snap.write_bytes(bytes(data))
    with pytest.raises(RemoteLogMetadataCorruptError):
        FileRemoteLogMetadataManager(tmp_path)


# -- seed 002: the rejected custom metadata kept for the delete's retries ------------------------------


def test_rejected_custom_metadata_is_tagged_field_10000_of_the_update() -> None:
    sid = RemoteLogSegmentId(TopicIdPartition(b"\x11" * 16, "ab", 7), b"\x22" * 16)
    encoded = serde.encode(RemoteLogSegmentMetadataUpdate(sid, 0x0102, S.DELETE_SEGMENT_STARTED, 3, None,
                                                          b"\xaa" * 200))
    old_layout = (b"\x01\x01\x00" + b"\x03ab" + b"\x11" * 16 + struct.pack(">i", 7) + b"\x00"
                  + b"\x22" * 16 + b"\x00" + struct.pack(">iq", 3, 0x0102) + b"\x00" + b"\x02")
    # One tagged field: tag 10000 (uvarint 0x90 0x4e), 200 bytes (uvarint 0xc8 0x01).
    assert encoded == old_layout + b"\x01\x90\x4e\xc8\x01" + b"\xaa" * 200
    assert serde.decode(old_layout + b"\x00") == RemoteLogSegmentMetadataUpdate(sid, 0x0102, S.DELETE_SEGMENT_STARTED, 3)
    # A tag this version does not know is skipped (tagged fields are for exactly that).
    assert serde.decode(old_layout + b"\x01\x05\x02zz") == serde.decode(old_layout + b"\x00")


def test_rejected_custom_metadata_goes_only_with_delete_segment_started() -> None:
    sid = RemoteLogSegmentId(TIP, b"\x03" * 16)
    with pytest.raises(ValueError):
        RemoteLogSegmentMetadataUpdate(sid, 1, S.COPY_SEGMENT_FINISHED, 1, None, b"x")
    with pytest.raises(ValueError):
        RemoteLogSegmentMetadata(sid, 0, 9, 0, 1, 0, 10, (), S.COPY_SEGMENT_FINISHED, None, b"x")
    m = md(0, 9)
    started = m.create_with_updates(RemoteLogSegmentMetadataUpdate(m.segment_id, 1, S.DELETE_SEGMENT_STARTED, 1,
                                                                   None, b"big"))
    assert started.custom_metadata is None and started.rejected_custom_metadata == b"big"
    assert started.for_plugin_delete().custom_metadata == b"big"
    # A repeated DELETE_SEGMENT_STARTED keeps it; the segment never shows it as its custom metadata.
    again = started.create_with_updates(RemoteLogSegmentMetadataUpdate(m.segment_id, 2, S.DELETE_SEGMENT_STARTED, 1))
    assert again.rejected_custom_metadata == b"big" and again.custom_metadata is None


def rejected_of(store: FileRemoteLogMetadataManager) -> list[tuple[int, RemoteLogSegmentState, bytes | None, bytes | None]]:
    return [(m.start_offset, m.state, m.custom_metadata, m.rejected_custom_metadata)
            for m in store.list_remote_log_segments(TIP)]


@pytest.mark.parametrize("snapshot_every", [1000, 3, 1])
def test_rejected_custom_metadata_survives_restart_and_snapshots(tmp_path: Path, snapshot_every: int) -> None:
    store = FileRemoteLogMetadataManager(tmp_path, snapshot_every=snapshot_every)
    segs = populate(store)
    over = md(900, 999)
    store.add_remote_log_segment_metadata(over)
    store.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
        over.segment_id, 10, S.DELETE_SEGMENT_STARTED, 1, None, b"bucket=2;" + b"." * 300))
    for _ in range(4):  # entries after it, so every snapshot cadence folds it into a snapshot
        store.update_remote_log_segment_metadata(update(segs[2], S.COPY_SEGMENT_FINISHED, b"c200"))
    before = rejected_of(store)
    assert before[-1] == (900, S.DELETE_SEGMENT_STARTED, None, b"bucket=2;" + b"." * 300)
    assert store.remote_log_segment_metadata(TIP, 950) is None
    store.close()
    again = FileRemoteLogMetadataManager(tmp_path, snapshot_every=snapshot_every)
    assert rejected_of(again) == before
    assert (tmp_path / SNAPSHOT_NAME).exists() == (snapshot_every < 1000)
    again.take_snapshot()
    again.close()
    assert rejected_of(FileRemoteLogMetadataManager(tmp_path, read_only=True)) == before


def _old_segment_record(tip: TopicIdPartition, uuid: bytes, start: int, end: int) -> bytes:
    """A COPY_SEGMENT_STARTED segment record byte for byte as the first release wrote it."""
    return (b"\x01\x00\x00" + bytes([len(tip.topic) + 1]) + tip.topic.encode() + tip.topic_id
            + struct.pack(">i", tip.partition) + b"\x00" + uuid + b"\x00"
            + struct.pack(">qqiqq", start, end, 1, 1000, 5) + b"\x02" + struct.pack(">iq", 0, start) + b"\x00"
            + struct.pack(">i", end - start + 1) + b"\x00" + b"\x00" + b"\x00")


def _old_update_record(tip: TopicIdPartition, uuid: bytes, state: RemoteLogSegmentState) -> bytes:
    return (b"\x01\x01\x00" + bytes([len(tip.topic) + 1]) + tip.topic.encode() + tip.topic_id
            + struct.pack(">i", tip.partition) + b"\x00" + uuid + b"\x00" + struct.pack(">iq", 1, 9)
            + b"\x00" + bytes([int(state)]) + b"\x00")


def test_a_directory_written_before_the_tagged_field_still_loads(tmp_path: Path) -> None:
    from tierlog._util.crc import crc32c

    a, b = b"\x0a" * 16, b"\x0b" * 16
    entries = [_old_segment_record(TIP, a, 0, 99), _old_update_record(TIP, a, S.COPY_SEGMENT_FINISHED),
               _old_segment_record(TIP, b, 100, 199), _old_update_record(TIP, b, S.DELETE_SEGMENT_STARTED)]
    journal = b"TLRJ" + struct.pack(">H", 1) + b"".join(struct.pack(">II", len(e), crc32c(e)) + e for e in entries)
    (tmp_path / "journal-00000000000000000000.log").write_bytes(journal)
    store = FileRemoteLogMetadataManager(tmp_path)
    assert rejected_of(store) == [(0, S.COPY_SEGMENT_FINISHED, None, None), (100, S.DELETE_SEGMENT_STARTED, None, None)]
    # and carries on appending in the same journal
    store.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
        RemoteLogSegmentId(TIP, b), 10, S.DELETE_SEGMENT_FINISHED, 1))
    store.close()
    assert [m.start_offset for m in FileRemoteLogMetadataManager(tmp_path).list_remote_log_segments(TIP)] == [0]


class TestFileStoreContract(RemoteLogMetadataManagerContract):
    """The behaviour suite on the broker's store, with snapshots rare and after every entry."""

    @pytest.fixture(params=[1000, 1], ids=["journal", "snapshots"])
    def store(self, request: pytest.FixtureRequest, tmp_path: Path) -> FileRemoteLogMetadataManager:
        return FileRemoteLogMetadataManager(tmp_path, snapshot_every=request.param)

    def restart(self, store: RemoteLogMetadataManager) -> FileRemoteLogMetadataManager:
        assert isinstance(store, FileRemoteLogMetadataManager)
        store.close()
        return FileRemoteLogMetadataManager(store.directory, snapshot_every=store.snapshot_every)


def test_the_finished_index_follows_every_change_as_a_full_sort_would(tmp_path: Path) -> None:
    """The COPY_SEGMENT_FINISHED index is kept by one insert or removal per change (#26: re-sorting
    it at each change made every append O(n log n)): after random transitions, remote compaction's
    swaps, a snapshot and a restart it equals a sort of the segments, and offset lookups agree."""
    import random

    rnd = random.Random(26)
    store = FileRemoteLogMetadataManager(tmp_path, snapshot_every=7, sync=False)
    live: list[RemoteLogSegmentMetadata] = []
    for i in range(60):
        m = md(i * 10, i * 10 + 9)
        store.add_remote_log_segment_metadata(m)
        live.append(m)
        for m in rnd.sample(live, min(3, len(live))):
            now = next(x for x in store.list_remote_log_segments(TIP) if x.segment_id == m.segment_id).state
            nxt = [s for s in S if s > now and is_valid_transition(now, s)]
            if nxt:
                store.update_remote_log_segment_metadata(update(m, rnd.choice(nxt)))
            if now is S.DELETE_SEGMENT_STARTED:
                live.remove(m)

    def check(s: FileRemoteLogMetadataManager) -> None:
        expected = sorted((m for m in s.list_remote_log_segments(TIP) if m.state is S.COPY_SEGMENT_FINISHED),
                          key=lambda m: (m.start_offset, m.end_offset, m.segment_id.id))
        assert s.cache.finished_segments(TIP) == expected and expected
        for offset in range(0, 600, 7):
            want = next((m for m in expected if m.start_offset <= offset <= m.end_offset), None)
            assert s.remote_log_segment_metadata(TIP, offset) == want

    check(store)
    store.close()
    check(FileRemoteLogMetadataManager(tmp_path, snapshot_every=7, sync=False))


def test_snapshots_of_a_large_state_are_spaced_by_its_size(tmp_path: Path) -> None:
    """A snapshot holding n records waits for n journal entries (at least ``snapshot_every``), so
    the snapshot's O(n) write costs O(1) per entry amortized."""
    store = FileRemoteLogMetadataManager(tmp_path, snapshot_every=5, sync=False)
    for i in range(20):
        store.add_remote_log_segment_metadata(md(i * 10, i * 10 + 9))
    written = (tmp_path / SNAPSHOT_NAME).stat().st_mtime_ns, (tmp_path / SNAPSHOT_NAME).stat().st_ino
    held = len(store.cache.snapshot_records())
    assert held >= 15  # the last snapshot came after at least 15 segments
    for i in range(held - 1):
        store.add_remote_log_segment_metadata(md(1000 + i * 10, 1000 + i * 10 + 9))
    assert ((tmp_path / SNAPSHOT_NAME).stat().st_mtime_ns, (tmp_path / SNAPSHOT_NAME).stat().st_ino) == written
    store.add_remote_log_segment_metadata(md(5000, 5009))
    assert (tmp_path / SNAPSHOT_NAME).stat().st_ino != written[1]
    store.close()
