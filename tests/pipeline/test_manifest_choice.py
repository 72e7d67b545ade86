"""Which remote manifest a reader plans from when the tier holds several for one partition name: a
topic deleted and recreated under the same name (a new topic id) leaves the old id's manifest until
its deletion is done (issue 26). The broker's manifests say when a partition's deletion began
(``partition_delete_state``); readers pass those over, then prefer the topic id the local partition
or the broker gives, then the newest, with a warning."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tierlog.ids import random_uuid
from tierlog.pipeline import catalog
from tierlog.pipeline.options import parse_options
from tierlog.tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from tierlog.tiered.backends.local import LocalDirectoryRemoteStorageManager
from tierlog.tiered.manifest import ManifestPublisher, read_manifests
from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager

S = RemoteLogSegmentState
LOCAL = "tierlog.tiered.backends.local.LocalDirectoryRemoteStorageManager"
#: The old topic's id sorts after the new one's in the tier's listing (base64 "BQUF..." > "AwMD...").
OLD, NEW = b"\x05" * 16, b"\x03" * 16


def _tier(root: Path) -> ManifestPublisher:
    rsm = LocalDirectoryRemoteStorageManager()
    rsm.configure({"dir": str(root / "tier"), "fsync": "false"})
    return ManifestPublisher(FileRemoteLogMetadataManager(root / "journal", sync=False), rsm, broker_id=1)


def _upload(rlmm: ManifestPublisher, topic_id: bytes, start: int, end: int, at_ms: int) -> None:
    tip = TopicIdPartition(topic_id, "orders", 0)
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId(tip, random_uuid()), start, end, at_ms, 1, at_ms, 100)
    rlmm.add_remote_log_segment_metadata(md)
    rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(md.segment_id, at_ms,
                                                                           S.COPY_SEGMENT_FINISHED, 1))


def _planned(root: Path, **extra: str) -> list[tuple[int, int]]:
    opts = parse_options({"tail": "none", "subscribe": "orders", "remote.log.storage.manager.class.name": LOCAL,
                          "rsm.config.dir": str(root / "tier"), **extra})
    [plog] = opts.partitions(opts.discover())
    return [(m.start_offset, m.end_offset) for m in plog.remote_segments]


def test_a_recreated_topic_reads_its_own_manifest_not_the_deleted_ones(tmp_path: Path) -> None:
    rlmm = _tier(tmp_path)
    _upload(rlmm, OLD, 0, 999, 1_000)
    # The topic is deleted: the broker marks the partition (the manifest says so) and deletes its
    # segments later; meanwhile a topic of the same name is created and tiers its own segments.
    rlmm.put_remote_partition_delete_metadata(RemotePartitionDeleteMetadata(
        TopicIdPartition(OLD, "orders", 0), RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 2_000, 1))
    _upload(rlmm, NEW, 0, 9, 3_000)
    rsm = LocalDirectoryRemoteStorageManager()
    rsm.configure({"dir": str(tmp_path / "tier"), "tierlog.read.only": "true"})
    manifests = sorted(read_manifests(rsm) or [], key=lambda m: m.tip.topic_id)
    assert [(m.tip.topic_id, m.delete_state) for m in manifests] == [
        (NEW, None), (OLD, RemotePartitionDeleteState.DELETE_PARTITION_MARKED)]
    assert _planned(tmp_path) == [(0, 9)]


def test_without_a_deletion_recorded_the_topic_id_decides_else_the_newest(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Two live manifests (a deletion that never reached the remote tier): the id the broker gives
    wins; without one, the manifest whose newest segment is newest, and a warning names both ids."""
    rlmm = _tier(tmp_path)
    _upload(rlmm, OLD, 0, 999, 1_000)
    _upload(rlmm, NEW, 0, 9, 3_000)
    with caplog.at_level(logging.WARNING, logger="tierlog.pipeline.catalog"):
        assert _planned(tmp_path) == [(0, 9)]
    assert "2 topic ids (AwMDAwMDAwMDAwMDAwMDAw, BQUFBQUFBQUFBQUFBQUFBQ); reading AwMDAwMDAwMDAwMDAwMDAw" in caplog.text

    spec = parse_options({"tail": "none", "subscribe": "orders", "remote.log.storage.manager.class.name": LOCAL,
                          "rsm.config.dir": str(tmp_path / "tier")}).remote
    assert spec is not None
    for topic_id, want in ((OLD, (0, 999)), (NEW, (0, 9))):
        logs: dict[tuple[str, int], catalog.PartitionLog] = {}
        catalog._add_remote(logs, spec, {"orders": topic_id})  # as discover_without_disk does with the broker's ids
        assert [(m.start_offset, m.end_offset) for m in logs[("orders", 0)].remote_segments] == [want]
    # An id in neither manifest (the broker's topic has tiered nothing yet): no remote segments at all.
    logs = {}
    catalog._add_remote(logs, spec, {"orders": b"\x07" * 16})
    assert ("orders", 0) not in logs
