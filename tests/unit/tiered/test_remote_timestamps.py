"""Seed 004 in the remote tier: ListOffsets by timestamp over remote segments takes timestamps from
the records. A segment an older tierlog stored with lying batch headers (-1 from Sarama 1.22, or a
max below the batch's first record) is uploaded byte for byte, and one that older tierlog uploaded
carries a max timestamp taken from those headers in its remote metadata."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.helpers.lying_batches import DAY_MS, PER_BATCH, T0, write_mixed_segments
from tests.helpers.tiered import Env, tiered_config
from tierlog.records import CompressionType, iter_headers
from tierlog.testing.remote import InMemoryRemoteStorageManager
from tierlog.tiered.api import (
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager
from tierlog.tiered.remote_log_manager import RemoteLogManager

S = RemoteLogSegmentState
TIP = TopicIdPartition(b"\x01" * 16, "t", 0)
CODECS = [CompressionType.NONE, CompressionType.GZIP, CompressionType.ZSTD]
BATCHES = 8  # four segments of two batches; the first three are uploaded
#: (target, expected answer): inside each lying batch (the honest one before it ends a day earlier),
#: and past its first record.
LOOKUPS = [
    (T0 + DAY_MS, (PER_BATCH, T0 + DAY_MS)),
    (T0 + DAY_MS + 4500, (PER_BATCH + 5, T0 + DAY_MS + 5000)),
    (T0 + 3 * DAY_MS + 1, (3 * PER_BATCH + 1, T0 + 3 * DAY_MS + 1000)),
    (T0 + 5 * DAY_MS, (5 * PER_BATCH, T0 + 5 * DAY_MS)),
]
REMOTE_MAX_MS = T0 + 5 * DAY_MS + 5000  # the third segment's lying batch


def fetches(rsm: InMemoryRemoteStorageManager) -> int:
    return sum(1 for call in rsm.calls if call[0] == "fetch")


def tiered_from_old_segments(env: Env, codec: int, lie: str) -> tuple[RemoteLogManager, InMemoryRemoteStorageManager]:
    write_mixed_segments(env.root / "data" / "t-0", codec, lie, batches=BATCHES)
    env.open_log(config=tiered_config(**{"retention.ms": -1}))
    rsm = InMemoryRemoteStorageManager()
    rlm = env.rlm(rsm)
    rlm.sync_partitions()
    assert rlm.copy_partition("t", 0) == 3
    return rlm, rsm


def answers(rlm: RemoteLogManager) -> list[tuple[int, int] | None]:
    return [rlm.find_offset_by_timestamp("t", 0, target) for target, _ in LOOKUPS]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: CompressionType(c).name.lower())
@pytest.mark.parametrize("lie", ["minus_one", "older"])
def test_remote_list_offsets_finds_records_behind_lying_batch_headers(env: Env, codec: int, lie: str) -> None:
    rlm, rsm = tiered_from_old_segments(env, codec, lie)
    remote = list(rlm.rlmm.list_remote_log_segments(TIP))
    # Uploaded unchanged: the lying headers are in the remote copy; the metadata has the records' max.
    for md in remote:
        data = rsm.objects[(md.segment_id, "log")]
        assert [h.max_timestamp < h.base_timestamp for h in iter_headers(data)] == [False, True]
        assert md.max_timestamp_from_records
        assert md.max_timestamp_ms == T0 + (md.start_offset // PER_BATCH + 1) * DAY_MS + 5000
    assert answers(rlm) == [expected for _, expected in LOOKUPS]
    assert rlm.max_timestamp("t", 0) == REMOTE_MAX_MS


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: CompressionType(c).name.lower())
@pytest.mark.parametrize("lie", ["minus_one", "older"])
def test_segments_an_older_tierlog_uploaded_are_judged_by_their_records(env: Env, codec: int, lie: str) -> None:
    rlm, rsm = tiered_from_old_segments(env, codec, lie)
    rlm.close()
    # The remote metadata an older tierlog wrote for those uploads: the max timestamp from the headers
    # (the honest batch's, a day before the segment's newest records) and no tag saying otherwise.
    legacy_dir = env.root / "legacy-remote-log-metadata"
    legacy = FileRemoteLogMetadataManager(legacy_dir)
    for md in list(rlm.rlmm.list_remote_log_segments(TIP)):
        header_max = max(h.max_timestamp for h in iter_headers(rsm.objects[(md.segment_id, "log")]))
        assert header_max == md.max_timestamp_ms - DAY_MS
        legacy.add_remote_log_segment_metadata(replace(md, state=S.COPY_SEGMENT_STARTED, max_timestamp_ms=header_max,
                                                       max_timestamp_from_records=False))
        legacy.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            md.segment_id, T0, S.COPY_SEGMENT_FINISHED, 0, md.custom_metadata))
    legacy.close()
    # Read back from disk: the tag's absence survives, the new store's tag too.
    reopened = FileRemoteLogMetadataManager(legacy_dir)
    assert not any(md.max_timestamp_from_records for md in reopened.list_remote_log_segments(TIP))
    fresh = env.rlmm()
    assert all(md.max_timestamp_from_records for md in fresh.list_remote_log_segments(TIP))
    fresh.close()

    old = env.rlm(rsm, reopened)
    old.sync_partitions()
    assert answers(old) == [expected for _, expected in LOOKUPS]
    assert old.max_timestamp("t", 0) == REMOTE_MAX_MS
    # The records' max is remembered: the next lookups fetch only the segment holding each answer.
    before = fetches(rsm)
    assert answers(old) == [expected for _, expected in LOOKUPS]
    assert fetches(rsm) - before == len(LOOKUPS)
    old.close()


@pytest.mark.parametrize("lie", ["minus_one", "older"])
def test_the_remote_floor_judges_an_older_tierlogs_uploads_by_their_records(env: Env, lie: str) -> None:
    rlm, rsm = tiered_from_old_segments(env, CompressionType.NONE, lie)
    rlm.close()
    legacy = FileRemoteLogMetadataManager(env.root / "legacy-remote-log-metadata")
    for md in list(rlm.rlmm.list_remote_log_segments(TIP)):
        header_max = max(h.max_timestamp for h in iter_headers(rsm.objects[(md.segment_id, "log")]))
        legacy.add_remote_log_segment_metadata(replace(md, state=S.COPY_SEGMENT_STARTED, max_timestamp_ms=header_max,
                                                       max_timestamp_from_records=False))
        legacy.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            md.segment_id, T0, S.COPY_SEGMENT_FINISHED, 0, md.custom_metadata))
    old = env.rlm(rsm, legacy)
    old.sync_partitions()
    ulog = env.logs.get_log("t", 0)
    assert ulog is not None
    # A floor past the first segment's honest batch but before its lying one's records: nothing goes.
    ulog.update_config(tiered_config(**{"retention.ms": -1, "log.retention.min.timestamp": T0 + DAY_MS}))
    assert old.expire_partition("t", 0) == []
    assert [md.start_offset for md in legacy.list_remote_log_segments(TIP)] == [0, 2 * PER_BATCH, 4 * PER_BATCH]
    # Past the first segment's records and before the second's lying batch: the first goes, only it.
    ulog.update_config(tiered_config(**{"retention.ms": -1, "log.retention.min.timestamp": T0 + 2 * DAY_MS + 6000}))
    assert [(md.start_offset, reason.value) for md, reason in old.expire_partition("t", 0)] == [(0, "timestamp_floor")]
    assert old.find_offset_by_timestamp("t", 0, T0 + 3 * DAY_MS) == (3 * PER_BATCH, T0 + 3 * DAY_MS)
    old.close()
