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


# -- conditional writes: two writers never overwrite each other unseen --------------------------------


@pytest.fixture(params=["local", "s3"])
def plugin(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    if request.param == "local":
        from tierlog.tiered.backends.local import LocalDirectoryRemoteStorageManager

        rsm: Any = LocalDirectoryRemoteStorageManager()
        rsm.configure({"dir": str(tmp_path / "remote"), "fsync": "false"})
        yield rsm
        return
    pytest.importorskip("moto.server", reason="moto[server] is needed for the S3 manifest test")
    from tests.helpers.tiered import S3_ENV, MotoServer, s3_props
    from tierlog.tiered.backends.s3 import S3RemoteStorageManager

    for key, value in S3_ENV.items():
        monkeypatch.setenv(key, value)
    server = MotoServer()
    server.create_bucket("manifests")
    rsm = S3RemoteStorageManager()
    rsm.configure(s3_props(server, "manifests"))
    yield rsm
    server.stop()


def test_a_manifest_write_is_conditional_on_the_version_read(plugin: Any) -> None:
    from tierlog.tiered.api import RemoteConflictError

    assert plugin.read_manifest(TIP) is None and plugin.manifests() == []
    v1 = plugin.write_manifest(TIP, b"one", None)
    with pytest.raises(RemoteConflictError):
        plugin.write_manifest(TIP, b"other", None)  # "create" when one exists
    assert plugin.read_manifest(TIP) == (b"one", v1)
    v2 = plugin.write_manifest(TIP, b"two", v1)
    with pytest.raises(RemoteConflictError):
        plugin.write_manifest(TIP, b"stale", v1)  # written against a version that is gone
    assert plugin.read_manifest(TIP) == (b"two", v2) and plugin.manifests() == [b"two"]
    plugin.delete_manifest(TIP)
    assert plugin.read_manifest(TIP) is None and plugin.manifests() == []


def test_two_publishers_of_one_partition_see_each_others_writes(plugin: Any, tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """A second broker (say, an old leader still running) writes the same partition's manifest: the
    first's next write fails its condition, is logged with the other writer's broker id, and is
    redone on top of what is there (sequence above it) -- never a silent overwrite."""
    from tierlog.tiered.manifest import ManifestPublisher

    mine = FileRemoteLogMetadataManager(tmp_path / "a", sync=False)
    theirs = FileRemoteLogMetadataManager(tmp_path / "b", sync=False)
    first = ManifestPublisher(mine, plugin, broker_id=1)
    second = ManifestPublisher(theirs, plugin, broker_id=2)
    _add(mine, 0, 9, S.COPY_SEGMENT_FINISHED)
    assert first.publish(TIP)
    _add(theirs, 0, 4, S.COPY_SEGMENT_FINISHED)
    assert second.publish(TIP)  # it had never read the manifest: it reads it first, then writes above it
    assert decode(plugin.read_manifest(TIP)[0]).broker_id == 2
    _add(mine, 10, 19, S.COPY_SEGMENT_FINISHED)
    with caplog.at_level("WARNING", logger="tierlog.tiered.manifest"):
        assert first.publish(TIP)
    assert "was changed by another writer (broker 2, sequence 2)" in caplog.text
    written = decode(plugin.read_manifest(TIP)[0])
    assert written.broker_id == 1 and written.sequence == 3 and is_current(written, mine, TIP)


def test_a_manifest_that_cannot_be_written_holds_back_the_deletion_of_data(tmp_path: Path) -> None:
    """Readers must learn of a deletion before the data goes: while the manifest cannot be written,
    the segment's objects stay (DELETE_SEGMENT_STARTED, retried); once it can, they go."""
    from tierlog.tiered.api import RemoteStorageError
    from tierlog.tiered.backends.local import LocalDirectoryRemoteStorageManager

    class Flaky(LocalDirectoryRemoteStorageManager):
        down = False

        def write_manifest(self, tip: TopicIdPartition, data: bytes, expected_version: str | None) -> str:
            if self.down:
                raise RemoteStorageError("store unavailable")
            return super().write_manifest(tip, data, expected_version)

    ulog, rsm, store, publisher, rlm = _tiered(tmp_path, Flaky())
    try:
        assert rlm.copy_all() >= 2
        tip = decode(rsm.manifests()[0]).tip
        first = decode(rsm.manifests()[0]).finished()[0]
        rsm.down = True
        rlm.delete_records("pub", 0, first.end_offset + 1)
        rlm.expire_all()
        # The journal moved on, the manifest could not: the data is still there for its readers.
        assert next(m.state for m in store.list_remote_log_segments(tip)) is S.DELETE_SEGMENT_STARTED
        assert rsm.fetch_log_segment(first, 0).read(1)
        assert decode(rsm.manifests()[0]).finished()[0].segment_id == first.segment_id
        rsm.down = False
        publisher.maintain_manifests()  # the first pass checks every manifest
        rlm.deleter._failed.clear()  # retry now rather than after the backoff
        rlm.expire_all()
        assert first.segment_id not in {m.segment_id for m in decode(rsm.manifests()[0]).finished()}
        assert publisher.sync_all() == [tip]  # DELETE_SEGMENT_FINISHED rode along, written at the next check
        assert first.segment_id not in {m.segment_id for m in decode(rsm.manifests()[0]).segments}
        with pytest.raises(RemoteStorageError):
            rsm.fetch_log_segment(first, 0)
    finally:
        rlm.close()
        ulog.close()


def _tiered(tmp_path: Path, rsm: Any) -> tuple[Any, Any, FileRemoteLogMetadataManager, Any, Any]:
    from tierlog.config import LogConfig
    from tierlog.records import SimpleRecord, build_batch
    from tierlog.storage.loader import LoadOptions, load_log
    from tierlog.tiered.manifest import ManifestPublisher
    from tierlog.tiered.remote_log_manager import RemoteLogManager, RemoteLogManagerConfig

    ulog = load_log(tmp_path / "data" / "pub-0", LogConfig.from_props({
        "segment.bytes": 1500, "retention.ms": -1, "remote.storage.enable": True, "local.retention.bytes": 1}),
        LoadOptions())
    ulog.write_partition_metadata(b"\x0b" * 16)
    for i in range(40):
        ulog.append_as_leader(build_batch([SimpleRecord(b"k%d" % i, b"v" * 90, (), 1_700_000_000_000 + i)] * 2))
    rsm.configure({"dir": str(tmp_path / "remote"), "fsync": "false"})
    store = FileRemoteLogMetadataManager(tmp_path / "data" / "remote-log-metadata", sync=False)
    publisher = ManifestPublisher(store, rsm)
    rlm = RemoteLogManager(RemoteLogManagerConfig(system_enable=True), _OneLog(ulog), rsm, publisher,
                           index_cache_dir=tmp_path / "data" / "remote-log-index-cache")
    return ulog, rsm, store, publisher, rlm


def test_the_smallest_timestamp_is_optional_in_version_1(tmp_path: Path) -> None:
    """``min_timestamp_ms`` was added to version 1 in place: a manifest written before it (no such
    key) still reads, as unknown; a value round-trips; a value that is not an integer is refused."""
    store = FileRemoteLogMetadataManager(tmp_path / "remote-log-metadata", sync=False)
    _add(store, 0, 9, S.COPY_SEGMENT_FINISHED)
    manifest = build_manifest(store, TIP)
    doc = json.loads(encode(manifest))
    assert doc["segments"][0]["min_timestamp_ms"] is None
    del doc["segments"][0]["min_timestamp_ms"]
    old = decode(json.dumps(doc).encode())
    assert old == manifest and old.segments[0].min_timestamp_ms is None
    doc["segments"][0]["min_timestamp_ms"] = 1_700_000_000_000
    assert decode(json.dumps(doc).encode()).segments[0].min_timestamp_ms == 1_700_000_000_000
    assert json.loads(encode(decode(json.dumps(doc).encode())))["segments"][0]["min_timestamp_ms"] == 1_700_000_000_000
    doc["segments"][0]["min_timestamp_ms"] = "yesterday"
    with pytest.raises(ManifestError, match="segment 0: field 'min_timestamp_ms' is 'yesterday', not int"):
        decode(json.dumps(doc).encode())
    store.close()


def test_a_deleted_partitions_manifest_says_so(tmp_path: Path) -> None:
    """``partition_delete_state`` (added to version 1 in place): set once the topic's deletion is
    recorded, absent in an older manifest (read as null), refused when it names no state."""
    from tierlog.tiered.api import RemotePartitionDeleteMetadata, RemotePartitionDeleteState

    store = FileRemoteLogMetadataManager(tmp_path / "remote-log-metadata", sync=False)
    _add(store, 0, 9, S.COPY_SEGMENT_FINISHED)
    assert build_manifest(store, TIP).delete_state is None
    store.put_remote_partition_delete_metadata(RemotePartitionDeleteMetadata(
        TIP, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 5, 1))
    manifest = build_manifest(store, TIP)
    assert manifest.delete_state is RemotePartitionDeleteState.DELETE_PARTITION_MARKED
    doc = json.loads(encode(manifest))
    assert doc["partition_delete_state"] == "DELETE_PARTITION_MARKED" and decode(encode(manifest)) == manifest
    del doc["partition_delete_state"]
    assert decode(json.dumps(doc).encode()).delete_state is None
    doc["partition_delete_state"] = "GONE"
    with pytest.raises(ManifestError, match="partition_delete_state 'GONE' is none of"):
        decode(json.dumps(doc).encode())
    store.close()
