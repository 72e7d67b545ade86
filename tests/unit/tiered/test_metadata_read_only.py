"""A read-only load of the remote log metadata beside the broker writing it (``tierlog tier status``,
the Spark source, the reliability watcher): the broker may replace the snapshot and delete the
journals folded into it in the middle of the load."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tierlog.ids import random_uuid
from tierlog.tiered import metadata_store
from tierlog.tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager

S = RemoteLogSegmentState
TIP = TopicIdPartition(b"\x05" * 16, "t", 0)


def _segment(start: int) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(TIP, random_uuid()), start, start + 9, 0, 1, 0, 100)


def _finish(store: FileRemoteLogMetadataManager, md: RemoteLogSegmentMetadata) -> None:
    store.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(md.segment_id, 1, S.COPY_SEGMENT_FINISHED, 1))


@pytest.mark.parametrize("roll_at", ["listdir", "journal read"])
def test_a_snapshot_replaced_during_a_read_only_load_is_read_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, roll_at: str) -> None:
    writer = FileRemoteLogMetadataManager(tmp_path, snapshot_every=10**6, sync=False)
    first = _segment(0)
    writer.add_remote_log_segment_metadata(first)
    writer.take_snapshot()  # holds `first` as STARTED; what follows is in the journal after it
    _finish(writer, first)
    second = _segment(10)
    writer.add_remote_log_segment_metadata(second)
    _finish(writer, second)

    rolled = []
    real_listdir, real_replay = os.listdir, FileRemoteLogMetadataManager._replay_journal

    def roll() -> None:
        if not rolled:  # the broker snapshots and deletes the journal the reader is about to read
            rolled.append(True)
            writer.take_snapshot()

    def listdir(path: object) -> list[str]:
        if roll_at == "listdir":
            roll()
        return real_listdir(path)  # type: ignore[arg-type]

    def replay(self: FileRemoteLogMetadataManager, path: Path, *, last: bool) -> int:
        if roll_at == "journal read" and self.read_only:
            roll()
        return real_replay(self, path, last=last)

    monkeypatch.setattr(metadata_store.os, "listdir", listdir)
    monkeypatch.setattr(FileRemoteLogMetadataManager, "_replay_journal", replay)
    reader = FileRemoteLogMetadataManager(tmp_path, read_only=True)
    assert rolled
    assert [(m.start_offset, m.state) for m in reader.list_remote_log_segments(TIP)] == [
        (0, S.COPY_SEGMENT_FINISHED), (10, S.COPY_SEGMENT_FINISHED)]
    assert "ignoring a remote log metadata record" not in caplog.text
