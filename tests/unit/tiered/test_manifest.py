"""The remote tier's self-describing manifest (issue 26): derived from the journal, round-tripped
through its JSON forms (checkpoint and delta), published append-only -- one small delta per change,
a checkpoint now and then, old objects cleaned up after the checkpoint before -- found behind after
a state change, rejected with a message naming the field when it is not a manifest, and read from
the single ``_manifest.json`` of older brokers."""

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
    ManifestError,
    ManifestPublisher,
    build_manifest,
    decode,
    encode,
    is_current,
    read_manifests,
    read_partition,
)
from tierlog.tiered.manifest_format import (
    LEGACY_NAME,
    ManifestDelta,
    ManifestState,
    decode_delta,
    encode_delta,
    head_of,
    parse_name,
)
from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager

S = RemoteLogSegmentState
TIP = TopicIdPartition(b"\x07" * 16, "orders", 3)


def _add(store: Any, start: int, end: int, final: RemoteLogSegmentState,
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

    # A delta carries the changed segments whole and the ids of those gone; folding it onto the
    # state before gives the state after.
    before = ManifestState.of(manifest)
    _add(store, 40, 49, S.COPY_SEGMENT_FINISHED)
    gone = manifest.segments[0].segment_id
    store.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(gone, 9, S.DELETE_SEGMENT_FINISHED, 1))
    after = build_manifest(store, TIP)
    delta = ManifestDelta(TIP, 1, 3, after.log_start_offset, None, (after.segments[-1],), (gone.id,))
    assert decode_delta(encode_delta(delta)) == delta
    before.apply(decode_delta(encode_delta(delta)))
    assert before.manifest() == after and before.sequence == 1 and before.broker_id == 3
    with pytest.raises(ManifestError, match="does not follow sequence 1"):
        before.apply(delta)  # a delta applies only onto the sequence before it
    # A reader of the journal alone (read-only, as on another host) derives the same manifest.
    assert build_manifest(FileRemoteLogMetadataManager(tmp_path / "remote-log-metadata", read_only=True), TIP) == after
    store.close()


def test_a_reader_takes_the_newest_checkpoint_and_the_contiguous_deltas_after_it() -> None:
    def names(checkpoints: list[int], deltas: list[int]) -> list[str]:
        return sorted([f"_manifest/{c:020d}.checkpoint.json" for c in checkpoints]
                      + [f"_manifest/{d:020d}.delta.json" for d in deltas] + ["_manifest/.x.tmp", "_manifest/junk"])

    head = head_of(names([1, 17, 33], [*range(2, 40), 41]))
    assert head.checkpoint == 33 and head.deltas == (34, 35, 36, 37, 38, 39) and head.sequence == 39  # 41: a gap
    # What a writer may delete: older than the checkpoint before the newest (17), never 17 and its deltas.
    assert [parse_name(n) for n in head.garbage] == [(True, 1), *((False, d) for d in range(2, 18))]
    assert head_of(names([], [1, 2])).checkpoint is None  # deltas without a checkpoint: not a manifest
    assert parse_name("_manifest/00000000000000000007.delta.json") == (False, 7) and parse_name(LEGACY_NAME) is None


@pytest.mark.parametrize(("mangle", "message"), [
    (lambda doc: b"{not json", "is not JSON"),
    (lambda doc: json.dumps({**doc, "format": "other"}).encode(), "is not a tierlog-remote-manifest document"),
    (lambda doc: json.dumps({**doc, "version": 2}).encode(), "has version 2; this reader knows version 1"),
    (lambda doc: json.dumps({**doc, "sequence": "7"}).encode(), "field 'sequence' is '7', not int"),
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
        [manifest] = read_manifests(rsm)  # type: ignore[misc]
        tip = manifest.tip
        assert (tip.topic, tip.partition) == ("pub", 0) and len(manifest.finished()) == copied
        assert is_current(manifest, store, tip) and publisher.sync_all() == []
        # A crash between the journal and the manifest: the journal moved on alone; at startup the
        # manifest is found behind and the difference written.
        _add_to(store, tip, 10_000, 10_009)
        assert not is_current(read_manifests(rsm)[0], store, tip)  # type: ignore[index]
        assert publisher.sync_all() == [tip] and is_current(read_manifests(rsm)[0], store, tip)  # type: ignore[index]
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
    # moto keeps its objects in the process, across servers: a prefix of this test's own.
    rsm.configure(s3_props(server, "manifests", prefix=f"t-{random_uuid().hex()}"))
    yield rsm
    server.stop()


def test_a_manifest_object_is_created_once_whole(plugin: Any) -> None:
    """The store's create-only write: a second create of a name fails and changes nothing (S3
    If-None-Match, a directory's hard link), so two writers can never both create sequence N."""
    from tierlog.tiered.api import RemoteConflictError

    where = plugin.manifest_location(TIP)
    assert plugin.manifest_locations() == [] and plugin.list_manifest_objects(where) == []
    assert plugin.read_manifest_object(where, "_manifest/00000000000000000001.delta.json") is None
    plugin.create_manifest_object(where, "_manifest/00000000000000000001.delta.json", b"one")
    with pytest.raises(RemoteConflictError):
        plugin.create_manifest_object(where, "_manifest/00000000000000000001.delta.json", b"other")
    plugin.create_manifest_object(where, "_manifest/00000000000000000002.delta.json", b"two")
    assert plugin.read_manifest_object(where, "_manifest/00000000000000000001.delta.json") == b"one"
    # Only the manifest's objects are listed (no temporary file, none of the segments' objects).
    assert plugin.list_manifest_objects(where) == ["_manifest/00000000000000000001.delta.json",
                                                   "_manifest/00000000000000000002.delta.json"]
    assert plugin.manifest_locations() == [where]
    if hasattr(plugin, "root"):  # a directory: a writer killed between its temporary file and the link
        (plugin.root / where / "_manifest" / ".00000000000000000003.delta.json.77-1.tmp").write_bytes(b"thr")
        assert len(plugin.list_manifest_objects(where)) == 2
    plugin.delete_manifest_objects(where, [*plugin.list_manifest_objects(where), LEGACY_NAME])
    assert plugin.list_manifest_objects(where) == [] and plugin.manifest_locations() == []


def test_each_change_writes_one_small_delta_and_checkpoints_fold_them(plugin: Any, tmp_path: Path) -> None:
    """Append-only: a change writes one new object holding only what changed (its size does not grow
    with the partition), a checkpoint follows every checkpoint_interval deltas, and objects older than
    the checkpoint before the newest are deleted; after every change a reader's fold is the journal."""
    from tierlog.tiered.manifest import checkpoint_interval

    store = FileRemoteLogMetadataManager(tmp_path / "j", sync=False)
    publisher = ManifestPublisher(store, plugin, broker_id=1)
    where = plugin.manifest_location(TIP)
    sizes = []
    for i in range(60):
        _add(publisher, i * 10, i * 10 + 9, S.COPY_SEGMENT_FINISHED)
        if i % 7 == 6:
            publisher.update_log_start_offset(TIP, (i - 3) * 10, 9)
        names = plugin.list_manifest_objects(where)
        newest = max(names, key=lambda n: parse_name(n)[1])  # type: ignore[index]
        if newest.endswith(".delta.json"):
            delta = decode_delta(plugin.read_manifest_object(where, newest))
            assert [m.start_offset for m in delta.upserts] == [i * 10] or not delta.upserts
            if delta.upserts:
                sizes.append(len(plugin.read_manifest_object(where, newest)))
        manifest, _ = read_partition(plugin, where)
        assert is_current(manifest, store, TIP), i
    assert checkpoint_interval(60) == 16
    names = plugin.list_manifest_objects(where)
    checkpoints = [parse_name(n)[1] for n in names if n.endswith(".checkpoint.json")]  # type: ignore[index]
    head = head_of(names)
    assert len(checkpoints) == 2 and head.checkpoint == max(checkpoints) and head.garbage == ()
    # No delta the older checkpoint already folds is left (they were deleted with its predecessor).
    assert min(parse_name(n)[1] for n in names if n.endswith(".delta.json")) > min(checkpoints)  # type: ignore[index]
    assert len(sizes) > 30 and max(sizes) < 1000 and max(sizes) - min(sizes) < 20  # one segment's, whatever the partition's size
    store.close()


def test_two_publishers_of_one_partition_see_each_others_writes(plugin: Any, tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """A second broker (say, an old leader still running) writes the same partition's manifest: the
    first's next write finds a sequence it did not write, is logged with the other writer's broker id,
    and writes the difference between what is there and its own journal -- never a silent overwrite.
    Two writers racing for one sequence: one create wins, the other lists again."""
    mine = FileRemoteLogMetadataManager(tmp_path / "a", sync=False)
    theirs = FileRemoteLogMetadataManager(tmp_path / "b", sync=False)
    first = ManifestPublisher(mine, plugin, broker_id=1)
    second = ManifestPublisher(theirs, plugin, broker_id=2)
    where = plugin.manifest_location(TIP)
    _add(first, 0, 9, S.COPY_SEGMENT_FINISHED)
    _add(second, 0, 4, S.COPY_SEGMENT_FINISHED)
    # The second had never read the manifest: it reads it, then writes its difference above it.
    written, _ = read_partition(plugin, where)
    assert written is not None and written.broker_id == 2 and is_current(written, theirs, TIP)
    seq = written.sequence
    with caplog.at_level("WARNING", logger="tierlog.tiered.manifest"):
        _add(first, 10, 19, S.COPY_SEGMENT_FINISHED)
    assert f"was changed by another writer (broker 2, sequence {seq})" in caplog.text
    written, _ = read_partition(plugin, where)
    assert written is not None and written.broker_id == 1 and written.sequence == seq + 1
    assert is_current(written, mine, TIP)

    # The race itself: both computed the same next sequence; the loser's create fails, it lists
    # again, and writes above the winner.
    class Racing:
        def __init__(self, inner: Any, before_create: Any) -> None:
            self.inner, self.before_create = inner, before_create

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def create_manifest_object(self, location: str, name: str, data: bytes) -> None:
            hook, self.before_create = self.before_create, None
            if hook is not None:
                hook()
            self.inner.create_manifest_object(location, name, data)

    racer = ManifestPublisher(mine, Racing(plugin, lambda: _add(second, 20, 29, S.COPY_SEGMENT_FINISHED)),
                              broker_id=1)
    _add(racer, 30, 39, S.COPY_SEGMENT_FINISHED)
    written, _ = read_partition(plugin, where)
    assert written is not None and written.broker_id == 1 and is_current(written, mine, TIP)
    assert written.sequence == seq + 3  # the other's delta at seq + 2, then this one's
    mine.close()
    theirs.close()


def test_a_manifest_that_cannot_be_written_holds_back_the_deletion_of_data(tmp_path: Path) -> None:
    """Readers must learn of a deletion before the data goes: while the manifest cannot be written,
    the segment's objects stay (DELETE_SEGMENT_STARTED, retried); once it can, they go."""
    from tierlog.tiered.api import RemoteStorageError
    from tierlog.tiered.backends.local import LocalDirectoryRemoteStorageManager

    class Flaky(LocalDirectoryRemoteStorageManager):
        down = False

        def create_manifest_object(self, location: str, name: str, data: bytes) -> None:
            if self.down:
                raise RemoteStorageError("store unavailable")
            super().create_manifest_object(location, name, data)

    ulog, rsm, store, publisher, rlm = _tiered(tmp_path, Flaky())
    try:
        assert rlm.copy_all() >= 2
        [manifest] = read_manifests(rsm)  # type: ignore[misc]
        tip, first = manifest.tip, manifest.finished()[0]
        rsm.down = True
        rlm.delete_records("pub", 0, first.end_offset + 1)
        rlm.expire_all()
        # The journal moved on, the manifest could not: the data is still there for its readers.
        assert next(m.state for m in store.list_remote_log_segments(tip)) is S.DELETE_SEGMENT_STARTED
        assert rsm.fetch_log_segment(first, 0).read(1)
        assert read_manifests(rsm)[0].finished()[0].segment_id == first.segment_id  # type: ignore[index]
        rsm.down = False
        publisher.maintain_manifests()  # the first pass checks every manifest
        rlm.deleter._failed.clear()  # retry now rather than after the backoff
        rlm.expire_all()
        assert first.segment_id not in {m.segment_id for m in read_manifests(rsm)[0].finished()}  # type: ignore[index]
        publisher.maintain_manifests()  # DELETE_SEGMENT_FINISHED rode along: written at the next pass
        assert first.segment_id not in {m.segment_id for m in read_manifests(rsm)[0].segments}  # type: ignore[index]
        assert is_current(read_manifests(rsm)[0], store, tip) and publisher.sync_all() == []  # type: ignore[index]
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


class _Crash(BaseException):
    """The broker dying at a chosen call (nothing catches it, as nothing runs after a SIGKILL)."""


class _Wrapped:
    """A plugin whose manifest calls can be made to die or to run something first."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.crash_on: Any = None  # (call name, object name) -> bool
        self.before_read: Any = None
        self.listings = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def list_manifest_objects(self, location: str) -> list[str]:
        self.listings += 1
        return self.inner.list_manifest_objects(location)  # type: ignore[no-any-return]

    def create_manifest_object(self, location: str, name: str, data: bytes) -> None:
        if self.crash_on is not None and self.crash_on("create", name):
            raise _Crash(name)
        self.inner.create_manifest_object(location, name, data)

    def delete_manifest_objects(self, location: str, names: list[str]) -> None:
        if self.crash_on is not None and self.crash_on("delete", names):
            raise _Crash(names)
        self.inner.delete_manifest_objects(location, names)

    def read_manifest_object(self, location: str, name: str) -> bytes | None:
        hook, self.before_read = self.before_read, None
        if hook is not None:
            hook()
        return self.inner.read_manifest_object(location, name)  # type: ignore[no-any-return]


def test_a_crash_between_a_delta_and_its_checkpoint_leaves_a_readable_manifest(plugin: Any, tmp_path: Path) -> None:
    """The broker dies right after the delta that makes a checkpoint due (before the checkpoint), and
    again after a checkpoint before its cleanup: each time readers fold what is there and get the
    journal's state, and the restarted broker's publisher carries on (next checkpoint, cleanup)."""
    wrapped = _Wrapped(plugin)
    store = FileRemoteLogMetadataManager(tmp_path / "j", sync=False)
    publisher = ManifestPublisher(store, wrapped, broker_id=1)
    where = plugin.manifest_location(TIP)
    wrapped.crash_on = lambda call, name: call == "create" and str(name).endswith(".checkpoint.json")
    with pytest.raises(_Crash):
        _add(publisher, 0, 9, S.COPY_SEGMENT_FINISHED)  # the very first object is a checkpoint
    # The journal has it, no manifest does: the restarted broker's first pass writes it.
    assert read_manifests(plugin) == []
    publisher = ManifestPublisher(store, wrapped, broker_id=1)
    wrapped.crash_on = None
    assert publisher.sync_all() == [TIP] and is_current(read_partition(plugin, where)[0], store, TIP)
    wrapped.crash_on = lambda call, name: call == "create" and str(name).endswith(".checkpoint.json")
    crashed_at = None
    for i in range(1, 40):
        try:
            _add(publisher, i * 10, i * 10 + 9, S.COPY_SEGMENT_FINISHED)
        except _Crash:
            crashed_at = i
            break
    assert crashed_at is not None  # a checkpoint came due
    names = plugin.list_manifest_objects(where)
    assert sum(n.endswith(".checkpoint.json") for n in names) == 1  # only the first
    assert is_current(read_partition(plugin, where)[0], store, TIP)  # the deltas are folded by readers
    # Restarted: nothing to write (the manifest is current); the next change writes its delta and,
    # since it is overdue, the checkpoint; then it dies before the cleanup.
    publisher = ManifestPublisher(store, wrapped, broker_id=1)
    wrapped.crash_on = lambda call, name: call == "delete"
    assert publisher.sync_all() == []
    for i in range(crashed_at + 1, 80):
        try:
            _add(publisher, i * 10, i * 10 + 9, S.COPY_SEGMENT_FINISHED)
        except _Crash:
            break
    names = plugin.list_manifest_objects(where)
    assert sum(n.endswith(".checkpoint.json") for n in names) >= 2
    assert is_current(read_partition(plugin, where)[0], store, TIP)
    # Restarted once more, healthy: the next checkpoint cleans up what the last could not.
    publisher = ManifestPublisher(store, plugin, broker_id=1)
    for j in range(80, 80 + 2 * 17):
        _add(publisher, j * 10, j * 10 + 9, S.COPY_SEGMENT_FINISHED)
    names = plugin.list_manifest_objects(where)
    assert sum(n.endswith(".checkpoint.json") for n in names) == 2 and head_of(names).garbage == ()
    assert is_current(read_partition(plugin, where)[0], store, TIP)
    store.close()


def test_a_reader_racing_checkpoint_rewrites_lists_again(plugin: Any, tmp_path: Path) -> None:
    """A reader lists, then, before its first GET, the writer goes through two checkpoints and deletes
    every object the reader listed: the GET finds nothing, the reader lists again and reads the new
    state -- never a mix of the two, never an error."""
    store = FileRemoteLogMetadataManager(tmp_path / "j", sync=False)
    publisher = ManifestPublisher(store, plugin, broker_id=1)
    where = plugin.manifest_location(TIP)
    for i in range(20):
        _add(publisher, i * 10, i * 10 + 9, S.COPY_SEGMENT_FINISHED)
    listed = plugin.list_manifest_objects(where)
    reader = _Wrapped(plugin)

    def writer_runs_on() -> None:
        for i in range(20, 20 + 3 * 16):
            _add(publisher, i * 10, i * 10 + 9, S.COPY_SEGMENT_FINISHED)
        assert not set(listed) & set(plugin.list_manifest_objects(where))  # all the reader listed is gone

    reader.before_read = writer_runs_on
    manifest, _ = read_partition(reader, where)
    assert reader.listings == 2 and manifest is not None and len(manifest.finished()) == 68
    assert is_current(manifest, store, TIP)
    store.close()


def test_a_single_file_manifest_of_an_older_broker_is_read_then_folded_into_a_checkpoint(tmp_path: Path) -> None:
    """Existing tiers keep working: a partition with only ``_manifest.json`` (rewritten whole by the
    broker before versioned manifests) is read from it; the first write of a newer broker puts a
    checkpoint above its sequence with the journal's state, then deletes the old file. A torn one is
    replaced the same way."""
    from tierlog.tiered.backends.local import LocalDirectoryRemoteStorageManager

    rsm = LocalDirectoryRemoteStorageManager()
    rsm.configure({"dir": str(tmp_path / "remote"), "fsync": "false"})
    store = FileRemoteLogMetadataManager(tmp_path / "j", sync=False)
    _add(store, 0, 9, S.COPY_SEGMENT_FINISHED)
    legacy = tmp_path / "remote" / "kafka-tiered-storage" / rsm.manifest_location(TIP) / LEGACY_NAME
    legacy.parent.mkdir(parents=True)
    from dataclasses import replace
    legacy.write_bytes(encode(replace(build_manifest(store, TIP), sequence=7, broker_id=4)))
    [old] = read_manifests(rsm)  # type: ignore[misc]
    assert old == build_manifest(store, TIP) and old.sequence == 7 and old.broker_id == 4
    publisher = ManifestPublisher(store, rsm, broker_id=1)
    _add(publisher, 10, 19, S.COPY_SEGMENT_FINISHED)
    assert not legacy.exists() and rsm.list_manifest_objects(rsm.manifest_location(TIP)) == [
        "_manifest/00000000000000000008.checkpoint.json"]
    [new] = read_manifests(rsm)  # type: ignore[misc]
    assert new.sequence == 8 and is_current(new, store, TIP)

    other = TopicIdPartition(b"\x08" * 16, "orders", 3)
    torn = tmp_path / "remote" / "kafka-tiered-storage" / rsm.manifest_location(other) / LEGACY_NAME
    torn.parent.mkdir(parents=True)
    torn.write_bytes(b'{"format": "tierlog-remote-manifest", "vers')
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId(other, random_uuid()), 0, 9, 1, 1, 5, 10, ((0, 0),),
                                  S.COPY_SEGMENT_STARTED)
    store.add_remote_log_segment_metadata(md)
    store.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(md.segment_id, 9, S.COPY_SEGMENT_FINISHED, 1))
    assert publisher.sync_all() == [other] and not torn.exists()
    assert is_current(read_partition(rsm, rsm.manifest_location(other))[0], store, other)
    store.close()


def test_a_change_made_while_a_delta_is_being_written_is_published_by_the_next_write(tmp_path: Path) -> None:
    """Two threads of one broker: the expiration pass writes a delta that read a segment as copy
    started; while that delta's PUT is under way the copier finishes the segment and asks for a write
    (which waits for the partition). The first write must not count the finish as published: the
    copier's write then says the segment is readable. Before the fix the finish was dropped from the
    pending changes, so readers never saw the segment (found by tests/pipeline/test_tail.py reading
    from S3 under load: 'offsets [(340, 680)] are in neither the local log nor the remote tier')."""
    import threading

    from tierlog.tiered.backends.local import LocalDirectoryRemoteStorageManager

    inner = LocalDirectoryRemoteStorageManager()
    inner.configure({"dir": str(tmp_path / "remote"), "fsync": "false"})
    rsm = _Wrapped(inner)
    store = FileRemoteLogMetadataManager(tmp_path / "j", sync=False)
    publisher = ManifestPublisher(store, rsm, broker_id=1)
    _add(publisher, 0, 9, S.COPY_SEGMENT_FINISHED)  # the first object: a checkpoint
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId(TIP, random_uuid()), 10, 19, 1_700_000_000_019, 1, 5, 1000,
                                  ((0, 10),), S.COPY_SEGMENT_STARTED)
    publisher.add_remote_log_segment_metadata(md)  # rides along with the next write

    finisher: list[threading.Thread] = []
    recorded = threading.Event()
    record = publisher._changed

    def record_then_say_so(tip: TopicIdPartition, segment_ids: Any) -> None:
        record(tip, segment_ids)
        if finisher:
            recorded.set()

    publisher._changed = record_then_say_so  # type: ignore[method-assign]

    def copier_finishes_during_the_put(call: str, name: object) -> bool:
        if call == "create" and not finisher:
            t = threading.Thread(target=publisher.update_remote_log_segment_metadata, args=(
                RemoteLogSegmentMetadataUpdate(md.segment_id, 9, S.COPY_SEGMENT_FINISHED, 1, None),))
            finisher.append(t)
            t.start()
            # The copier has recorded its change and now waits for the partition's lock.
            assert recorded.wait(30)
        return False

    rsm.crash_on = copier_finishes_during_the_put
    assert publisher.publish(TIP)  # the expiration pass's write
    finisher[0].join(30)
    assert not finisher[0].is_alive()
    manifest, _ = read_partition(rsm, rsm.manifest_location(TIP))
    assert [(m.start_offset, m.state) for m in manifest.segments] == [
        (0, S.COPY_SEGMENT_FINISHED), (10, S.COPY_SEGMENT_FINISHED)]
    assert is_current(manifest, store, TIP)
    store.close()

