"""The remote tier's self-describing manifest (issue 26): derived from the journal, round-tripped
through its JSON form, written whole, found behind after a state change, and rejected with a
message naming the field when it is not a manifest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tierlog.ids import random_uuid
from tierlog.tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tierlog.tiered.manifest import (
    MANIFEST_NAME,
    ManifestError,
    build_manifest,
    decode,
    encode,
    is_current,
    read_local,
    write_local,
)
from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager

S = RemoteLogSegmentState
TIP = TopicIdPartition(b"\x07" * 16, "orders", 3)


def _add(store: FileRemoteLogMetadataManager, start: int, end: int, final: RemoteLogSegmentState,
         custom: bytes | None = None) -> RemoteLogSegmentMetadata:
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId(TIP, random_uuid()), start, end, 1_700_000_000_000 + end, 1, 5,
                                  (end - start + 1) * 100, ((0, start), (2, start + 1)), S.COPY_SEGMENT_STARTED)
    store.add_remote_log_segment_metadata(md)
    for state in (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED):
        if state > final:
            break
        store.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            md.segment_id, 9, state, 1, custom if state is S.COPY_SEGMENT_FINISHED else None))
    return md


def test_a_manifest_says_what_the_journal_says_and_round_trips(tmp_path: Path) -> None:
    store = FileRemoteLogMetadataManager(tmp_path / "remote-log-metadata", sync=False)
    _add(store, 0, 9, S.DELETE_SEGMENT_FINISHED)
    _add(store, 10, 19, S.DELETE_SEGMENT_STARTED)
    _add(store, 20, 29, S.COPY_SEGMENT_FINISHED, custom=b"\x00\x81key")
    _add(store, 30, 39, S.COPY_SEGMENT_STARTED)
    store.update_log_start_offset(TIP, 20, 9)
    manifest = build_manifest(store, TIP)
    assert [(m.start_offset, m.state) for m in manifest.segments] == [
        (10, S.DELETE_SEGMENT_STARTED), (20, S.COPY_SEGMENT_FINISHED), (30, S.COPY_SEGMENT_STARTED)]
    assert [m.start_offset for m in manifest.finished()] == [20]
    assert manifest.log_start_offset == 20 and manifest.segments[1].custom_metadata == b"\x00\x81key"
    assert decode(encode(manifest)) == manifest

    part = tmp_path / "tier" / "orders-3"
    part.mkdir(parents=True)
    assert read_local(part) is None and not is_current(None, store, TIP)  # missing: rebuild
    write_local(part, manifest, sync=False)
    assert sorted(p.name for p in part.iterdir()) == [MANIFEST_NAME]  # no temporary file left behind
    assert read_local(part) == manifest and is_current(read_local(part), store, TIP)
    # A reader of the journal alone (read-only, as on another host) derives the same manifest.
    assert build_manifest(FileRemoteLogMetadataManager(tmp_path / "remote-log-metadata", read_only=True), TIP) == manifest

    # The next state change: the written manifest is behind until it is rebuilt.
    _add(store, 40, 49, S.COPY_SEGMENT_FINISHED)
    assert not is_current(read_local(part), store, TIP)
    write_local(part, build_manifest(store, TIP), sync=False)
    assert is_current(read_local(part), store, TIP)
    assert [m.start_offset for m in read_local(part).finished()] == [20, 40]  # type: ignore[union-attr]
    store.close()


@pytest.mark.parametrize(("mangle", "message"), [
    (lambda doc: b"{not json", "is not JSON"),
    (lambda doc: json.dumps({**doc, "format": "other"}).encode(), "is not a tierlog-remote-manifest document"),
    (lambda doc: json.dumps({**doc, "version": 2}).encode(), "has version 2; this reader knows version 1"),
    (lambda doc: json.dumps({**doc, "partition": "3"}).encode(), "field 'partition' is '3', not int"),
    (lambda doc: json.dumps({**doc, "segments": [{**doc["segments"][0], "state": "GONE"}]}).encode(), "segment 0: state .GONE. is none of"),
    (lambda doc: json.dumps({**doc, "segments": [{**doc["segments"][0], "end_offset": True}]}).encode(),
     "field 'end_offset' is True, not int"),
])
def test_what_is_not_a_manifest_is_an_error_naming_the_field(tmp_path: Path, mangle: object, message: str) -> None:
    store = FileRemoteLogMetadataManager(tmp_path / "remote-log-metadata", sync=False)
    _add(store, 0, 9, S.COPY_SEGMENT_FINISHED)
    doc = json.loads(encode(build_manifest(store, TIP)))
    store.close()
    with pytest.raises(ManifestError, match=message):
        decode(mangle(doc))  # type: ignore[operator]


def test_the_publisher_keeps_the_local_tiers_manifest_current_through_a_real_copy(tmp_path: Path) -> None:
    from tierlog.config import LogConfig
    from tierlog.records import SimpleRecord, build_batch
    from tierlog.storage.loader import LoadOptions, load_log
    from tierlog.tiered.backends.local import LocalDirectoryRemoteStorageManager
    from tierlog.tiered.manifest import ManifestPublisher
    from tierlog.tiered.remote_log_manager import RemoteLogManager, RemoteLogManagerConfig

    ulog = load_log(tmp_path / "data" / "pub-0", LogConfig.from_props({
        "segment.bytes": 1500, "retention.ms": -1, "remote.storage.enable": True, "local.retention.bytes": 1}),
        LoadOptions())
    ulog.write_partition_metadata(b"\x0b" * 16)
    for i in range(40):
        ulog.append_as_leader(build_batch([SimpleRecord(b"k%d" % i, b"v" * 90, (), 1_700_000_000_000 + i)] * 2))
    rsm = LocalDirectoryRemoteStorageManager()
    rsm.configure({"dir": str(tmp_path / "remote"), "fsync": "false"})
    store = FileRemoteLogMetadataManager(tmp_path / "data" / "remote-log-metadata", sync=False)
    publisher = ManifestPublisher(store, rsm)
    rlm = RemoteLogManager(RemoteLogManagerConfig(system_enable=True), _OneLog(ulog), rsm, publisher,
                           index_cache_dir=tmp_path / "data" / "remote-log-index-cache")
    try:
        copied = rlm.copy_all()
        assert copied >= 2
        [raw] = rsm.manifests()
        manifest = decode(raw)
        tip = manifest.tip
        assert (tip.topic, tip.partition) == ("pub", 0) and len(manifest.finished()) == copied
        assert is_current(manifest, store, tip) and publisher.sync_all() == []
        # A crash between the journal and the manifest: the journal moved on alone; at startup the
        # manifest is found behind and rewritten.
        _add_to(store, tip, 10_000, 10_009)
        assert not is_current(decode(rsm.manifests()[0]), store, tip)
        assert publisher.sync_all() == [tip] and is_current(decode(rsm.manifests()[0]), store, tip)
        # A torn or foreign file where the manifest goes is rebuilt the same way.
        manifest_file = next((tmp_path / "remote").rglob("_manifest.json"))
        manifest_file.write_bytes(b'{"format": "tierlog-remote-manifest", "vers')
        assert publisher.sync_all() == [tip] and is_current(decode(manifest_file.read_bytes()), store, tip)
    finally:
        rlm.close()
        ulog.close()


def _add_to(store: FileRemoteLogMetadataManager, tip: TopicIdPartition, start: int, end: int) -> None:
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId(tip, random_uuid()), start, end, 1, 1, 5, 10, ((0, start),),
                                  S.COPY_SEGMENT_STARTED)
    store.add_remote_log_segment_metadata(md)


class _OneLog:
    def __init__(self, ulog: Any) -> None:
        self.ulog = ulog

    def all_logs(self) -> dict[tuple[str, int], Any]:
        return {(self.ulog.topic, self.ulog.partition): self.ulog}

    def get_log(self, topic: str, partition: int) -> Any:
        return self.ulog if (topic, partition) == (self.ulog.topic, self.ulog.partition) else None
