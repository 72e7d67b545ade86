"""The remote tier describing itself (issue 26, first piece): one partition's remote log metadata as
a versioned JSON document that can live beside the data, so a reader needs neither the broker nor
its ``remote-log-metadata/`` journal.

The journal stays the broker's source of truth; a manifest is derived from it
(:func:`build_manifest`) and compared with a rebuild to find one that is missing or behind
(:func:`is_current`). Written whole under a temporary name and renamed (:func:`write_local`), so a
reader never sees half of one.

:class:`ManifestPublisher` is the broker's metadata manager (server/remote_tier.py composes it): each
state change goes to the journal first, then the partition's manifest is rewritten through the
plugin (``write_manifest``: the local-directory and S3 plugins, each with a conditional write); a
crash or a failed write between leaves it behind, and the expiration pass rewrites it
(:meth:`ManifestPublisher.maintain_manifests`: at its first run every manifest missing or behind).
Readers (pipeline/catalog.py) plan the remote tier from the manifests alone; docs/operations.md
("The remote tier's manifest") describes the objects as a file format.

Format, version 1 (bytes as standard base64)::

    {"format": "tierlog-remote-manifest", "version": 1, "sequence": 7, "broker_id": 1 | null,
     "topic": "orders", "partition": 0, "topic_id": "<base64 uuid>", "log_start_offset": 0 | null,
     "segments": [{"id": "<base64 uuid>", "start_offset": 0, "end_offset": 99, "max_timestamp_ms": ...,
                   "broker_id": 1, "event_timestamp_ms": ..., "size_bytes": ...,
                   "leader_epochs": [[0, 0]], "state": "COPY_SEGMENT_FINISHED",
                   "custom_metadata": "<base64>" | null, "max_timestamp_from_records": false,
                   "min_timestamp_ms": ... | null}, ...]}

``min_timestamp_ms`` (the smallest data record timestamp, for pruning by an upper timestamp bound)
and the top-level ``partition_delete_state`` (null, or the state of the topic's deletion once it is
deleted: ``DELETE_PARTITION_MARKED``/``STARTED``/``FINISHED``) were added to version 1 without a new
version: readers take a missing one as null, and a reader that predates them ignores them.

Segments are listed by start offset, every state but DELETE_SEGMENT_FINISHED (a reader reads only
COPY_SEGMENT_FINISHED ones; the others say an upload or a deletion is under way).
"""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tierlog._util.files import write_atomic
from tierlog.errors import TierlogError
from tierlog.ids import TopicIdPartition, uuid_from_base64, uuid_to_base64
from tierlog.tiered.api import (
    RemoteConflictError,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteStorageError,
)
from tierlog.tiered.backends.local import MANIFEST_NAME as LOCAL_MANIFEST_NAME
from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager

FORMAT = "tierlog-remote-manifest"
VERSION = 1
#: The manifest's object name inside a partition's directory (or key prefix) of the remote tier.
MANIFEST_NAME = LOCAL_MANIFEST_NAME
#: Conditional writes retried after a conflict before the publish counts as failed (retried later).
CONFLICT_RETRIES = 3

log = logging.getLogger(__name__)


class ManifestError(TierlogError):
    """A manifest that is not one, or of a version this reader does not know."""


@dataclass(frozen=True)
class PartitionManifest:
    tip: TopicIdPartition
    log_start_offset: int | None
    segments: tuple[RemoteLogSegmentMetadata, ...]
    #: One more than the manifest this one replaced; who wrote it. Not part of what it says (two
    #: manifests saying the same are equal whatever their sequence).
    sequence: int = field(default=0, compare=False)
    broker_id: int | None = field(default=None, compare=False)
    #: Set once the partition's topic is deleted (its data is going): readers pass it over, so a
    #: topic recreated under the same name (another topic id) reads only its own manifest.
    delete_state: RemotePartitionDeleteState | None = None

    def finished(self) -> list[RemoteLogSegmentMetadata]:
        return [s for s in self.segments if s.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED]


def build_manifest(store: FileRemoteLogMetadataManager, tip: TopicIdPartition) -> PartitionManifest:
    """The manifest the journal implies for ``tip`` now."""
    # Rejected custom metadata (seed 002) is for the broker's own deletes only: not a reader's.
    segments = sorted((replace(m, rejected_custom_metadata=None) for m in store.list_remote_log_segments(tip)
                       if m.state is not RemoteLogSegmentState.DELETE_SEGMENT_FINISHED),
                      key=lambda m: (m.start_offset, m.segment_id.id))
    return PartitionManifest(tip, store.log_start_offset(tip), tuple(segments),
                             delete_state=store.remote_partition_delete_state(tip))


def is_current(manifest: PartitionManifest | None, store: FileRemoteLogMetadataManager,
               tip: TopicIdPartition) -> bool:
    """Whether ``manifest`` says what the journal says (False when missing or behind: rebuild it)."""
    return manifest is not None and manifest == build_manifest(store, tip)


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def encode(manifest: PartitionManifest) -> bytes:
    tip = manifest.tip
    doc = {
        "format": FORMAT, "version": VERSION, "topic": tip.topic, "partition": tip.partition,
        "topic_id": uuid_to_base64(tip.topic_id), "log_start_offset": manifest.log_start_offset,
        "sequence": manifest.sequence, "broker_id": manifest.broker_id,
        "partition_delete_state": None if manifest.delete_state is None else manifest.delete_state.name,
        "segments": [{
            "id": uuid_to_base64(m.segment_id.id), "start_offset": m.start_offset, "end_offset": m.end_offset,
            "max_timestamp_ms": m.max_timestamp_ms, "broker_id": m.broker_id,
            "event_timestamp_ms": m.event_timestamp_ms, "size_bytes": m.segment_size_in_bytes,
            "leader_epochs": [list(e) for e in m.segment_leader_epochs], "state": m.state.name,
            "custom_metadata": _b64(m.custom_metadata),
            "max_timestamp_from_records": m.max_timestamp_from_records, "min_timestamp_ms": m.min_timestamp_ms,
        } for m in manifest.segments],
    }
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode("utf-8")


def _field(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = obj.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ManifestError(f"{where}: field {key!r} is {value!r}, not {getattr(kind, '__name__', kind)}")
    return value


def decode(data: bytes, where: str = "manifest") -> PartitionManifest:
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ManifestError(f"{where} is not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ManifestError(f"{where} is not a {FORMAT} document")
    if doc.get("version") != VERSION:
        raise ManifestError(f"{where} has version {doc.get('version')!r}; this reader knows version {VERSION}")
    try:
        tip = TopicIdPartition(uuid_from_base64(_field(doc, "topic_id", str, where)), _field(doc, "topic", str, where),
                               _field(doc, "partition", int, where))
        start = doc.get("log_start_offset")
        if start is not None and (not isinstance(start, int) or isinstance(start, bool)):
            raise ManifestError(f"{where}: field 'log_start_offset' is {start!r}, not int")
        sequence = doc.get("sequence", 0)
        if not isinstance(sequence, int) or isinstance(sequence, bool):
            raise ManifestError(f"{where}: field 'sequence' is {sequence!r}, not int")
        writer = doc.get("broker_id")
        if writer is not None and (not isinstance(writer, int) or isinstance(writer, bool)):
            raise ManifestError(f"{where}: field 'broker_id' is {writer!r}, not int")
        deleting = doc.get("partition_delete_state")  # added in place, like min_timestamp_ms
        if deleting is not None and deleting not in RemotePartitionDeleteState.__members__:
            raise ManifestError(f"{where}: partition_delete_state {deleting!r} is none of "
                                f"{', '.join(RemotePartitionDeleteState.__members__)}")
        segments = []
        for i, s in enumerate(_field(doc, "segments", list, where)):
            at = f"{where} segment {i}"
            if not isinstance(s, dict):
                raise ManifestError(f"{at} is not an object")
            custom = s.get("custom_metadata")
            if custom is not None and not isinstance(custom, str):
                raise ManifestError(f"{at}: field 'custom_metadata' is {custom!r}, not base64")
            epochs = _field(s, "leader_epochs", list, at)
            state = _field(s, "state", str, at)
            # Added in place (not a new version): a manifest written before it has none, read as unknown.
            smallest = s.get("min_timestamp_ms")
            if smallest is not None and (not isinstance(smallest, int) or isinstance(smallest, bool)):
                raise ManifestError(f"{at}: field 'min_timestamp_ms' is {smallest!r}, not int")
            if state not in RemoteLogSegmentState.__members__:
                raise ManifestError(f"{at}: state {state!r} is none of {', '.join(RemoteLogSegmentState.__members__)}")
            segments.append(RemoteLogSegmentMetadata(
                RemoteLogSegmentId(tip, uuid_from_base64(_field(s, "id", str, at))),
                _field(s, "start_offset", int, at), _field(s, "end_offset", int, at),
                _field(s, "max_timestamp_ms", int, at), _field(s, "broker_id", int, at),
                _field(s, "event_timestamp_ms", int, at), _field(s, "size_bytes", int, at),
                tuple((int(e), int(o)) for e, o in epochs),
                RemoteLogSegmentState[state],
                None if custom is None else base64.b64decode(custom, validate=True),
                max_timestamp_from_records=_field(s, "max_timestamp_from_records", bool, at),
                min_timestamp_ms=smallest))
    except (KeyError, ValueError, TypeError) as e:
        raise ManifestError(f"{where}: {e}") from None
    return PartitionManifest(tip, start, tuple(segments), sequence, writer,
                             None if deleting is None else RemotePartitionDeleteState[deleting])


def write_local(directory: Path, manifest: PartitionManifest, *, sync: bool = True) -> Path:
    """Replace ``directory/_manifest.json`` whole (temporary name, fsync, rename)."""
    path = directory / MANIFEST_NAME
    write_atomic(path, encode(manifest), sync=sync)
    return path


def read_local(directory: Path) -> PartitionManifest | None:
    path = directory / MANIFEST_NAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return decode(data, str(path))


class ManifestPublisher:
    """The broker's metadata manager, publishing each partition's manifest after every state change
    (the journal first: it stays the source of truth). Reads go to the journal.

    Publishing never fails a state change: a manifest that cannot be written (the store is down) is
    remembered as behind and rewritten by :meth:`maintain_manifests` (the expiration pass calls it). A remote
    segment's data is deleted only after a manifest saying DELETE_SEGMENT_STARTED is out
    (:meth:`flush_manifest`, called by the deleter), so a reader of the manifest never plans a read of an
    object that is gone without a reason to expect it.

    Each write is conditional on the version last read or written (the store's compare-and-swap:
    S3's If-Match/If-None-Match, a lock and an inode check for a directory), and every manifest
    carries a sequence number one above the one it replaces (so two writers' identical bytes never
    look like no change). A conflict -- another broker wrote the manifest -- is logged at WARNING
    with the other writer's broker id, then the manifest is read again and rewritten from this
    broker's journal, up to :data:`CONFLICT_RETRIES` times."""

    def __init__(self, store: FileRemoteLogMetadataManager, rsm: object, *, broker_id: int | None = None) -> None:
        self.store = store
        self.broker_id = broker_id
        self._write = getattr(rsm, "write_manifest", None)
        self._read = getattr(rsm, "read_manifest", None)
        self._delete = getattr(rsm, "delete_manifest", None)
        self._lock = threading.Lock()
        self._locks: dict[TopicIdPartition, threading.Lock] = {}
        #: The version (and sequence) last written or read per partition: the next write's condition.
        self._known: dict[TopicIdPartition, tuple[str | None, int]] = {}
        #: Partitions whose manifest is behind the journal (a failed write); guarded by _lock.
        self._behind: set[TopicIdPartition] = set()
        self._synced = False

    @property
    def publishes(self) -> bool:
        return callable(self._write) and callable(self._read)

    def _partition_lock(self, tip: TopicIdPartition) -> threading.Lock:
        with self._lock:
            lock = self._locks.get(tip)
            if lock is None:
                lock = self._locks[tip] = threading.Lock()
            return lock

    def _read_current(self, tip: TopicIdPartition) -> tuple[PartitionManifest | None, str | None, int]:
        """(manifest or None when missing or unreadable, its version, its sequence)."""
        assert callable(self._read)
        found = self._read(tip)
        if found is None:
            return None, None, 0
        data, version = found
        try:
            current = decode(data)
        except ManifestError:
            return None, version, 0  # torn or foreign: replaced like a missing one
        return current, version, current.sequence

    def publish(self, tip: TopicIdPartition) -> bool:
        """Write ``tip``'s manifest as the journal says it now; False (and remembered as behind) if
        the store refused. Raises nothing but programming errors."""
        if not self.publishes:
            return True
        try:
            self._publish(tip)
        except RemoteStorageError as e:
            with self._lock:
                first = tip not in self._behind
                self._behind.add(tip)
            if first:
                log.warning("the remote manifest of %s-%d could not be written (%s); readers of the remote tier "
                            "see it behind until it is (retried each expiration pass)", tip.topic, tip.partition, e)
            return False
        with self._lock:
            self._behind.discard(tip)
        return True

    def _publish(self, tip: TopicIdPartition) -> None:
        assert callable(self._write)
        with self._partition_lock(tip):
            if self.store.remote_partition_delete_state(tip) is RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
                if callable(self._delete):
                    self._delete(tip)
                self._known.pop(tip, None)
                return
            known = self._known.get(tip)
            if known is None:
                _, version, sequence = self._read_current(tip)
                known = (version, sequence)
            for attempt in range(CONFLICT_RETRIES + 1):
                version, sequence = known
                manifest = replace(build_manifest(self.store, tip), sequence=sequence + 1, broker_id=self.broker_id)
                try:
                    new_version = self._write(tip, encode(manifest), version)
                except RemoteConflictError:
                    current, found_version, found_sequence = self._read_current(tip)
                    log.warning("the remote manifest of %s-%d was changed by another writer (broker %s, sequence %d); "
                                "rewriting it from this broker's journal (attempt %d)", tip.topic, tip.partition,
                                None if current is None else current.broker_id, found_sequence, attempt + 1)
                    known = (found_version, max(found_sequence, sequence))
                    continue
                self._known[tip] = (str(new_version), sequence + 1)
                return
            self._known.pop(tip, None)
            raise RemoteConflictError(f"the remote manifest of {tip.topic}-{tip.partition} kept changing under "
                                      f"{CONFLICT_RETRIES + 1} conditional writes")

    def flush_manifest(self, tip: TopicIdPartition) -> None:
        """Make sure ``tip``'s manifest is out (RemoteStorageError if it cannot be): the deleter
        calls it before deleting a segment's data."""
        with self._lock:
            behind = tip in self._behind
        if behind and not self.publish(tip):
            raise RemoteStorageError(f"the remote manifest of {tip.topic}-{tip.partition} is behind and cannot be "
                                     "written: the segment's data is kept until it is")

    def maintain_manifests(self) -> None:
        """The periodic work: on the first call every manifest is checked against the journal
        (:meth:`sync_all`, rebuilding those missing or behind after a crash or an older broker),
        afterwards only those whose write failed are retried."""
        if not self.publishes:
            return
        if not self._synced:
            try:
                self.sync_all()
                self._synced = True
            except RemoteStorageError as e:
                log.warning("checking the remote manifests against the journal failed (%s); retried next pass", e)
            return
        with self._lock:
            behind = sorted(self._behind, key=lambda t: (t.topic, t.partition))
        for tip in behind:
            self.publish(tip)

    def sync_all(self) -> list[TopicIdPartition]:
        """Rewrite every manifest that is missing or behind the journal; the partitions rewritten."""
        if not self.publishes:
            return []
        rewritten = []
        for tip in self.store.partitions():
            deleted = self.store.remote_partition_delete_state(tip) is RemotePartitionDeleteState.DELETE_PARTITION_FINISHED
            with self._partition_lock(tip):
                current, version, sequence = self._read_current(tip)
                self._known[tip] = (version, sequence)
            if (current is None and deleted) or (not deleted and is_current(current, self.store, tip)):
                continue
            if self.publish(tip):
                rewritten.append(tip)
        return rewritten

    # -- RemoteLogMetadataManager: writes, each followed by the partition's manifest ----------------

    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        # COPY_SEGMENT_STARTED changes nothing a reader reads: it rides along with the next write.
        self.store.add_remote_log_segment_metadata(metadata)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        self.store.update_remote_log_segment_metadata(update)
        # Readers must see a segment become readable and a deletion begin (before the data goes);
        # DELETE_SEGMENT_FINISHED only drops an entry they already skip: it rides along too, which
        # spares a write per deleted segment.
        if update.state in (RemoteLogSegmentState.COPY_SEGMENT_FINISHED, RemoteLogSegmentState.DELETE_SEGMENT_STARTED):
            self.publish(update.segment_id.topic_id_partition)

    def put_remote_partition_delete_metadata(self, metadata: RemotePartitionDeleteMetadata) -> None:
        self.store.put_remote_partition_delete_metadata(metadata)
        self.publish(metadata.topic_id_partition)

    def update_log_start_offset(self, tip: TopicIdPartition, log_start_offset: int, event_timestamp_ms: int) -> None:
        self.store.update_log_start_offset(tip, log_start_offset, event_timestamp_ms)
        self.publish(tip)

    # -- reads ------------------------------------------------------------------------------------------

    def remote_log_segment_metadata(self, tip: TopicIdPartition, offset: int,
                                    leader_epoch: int | None = None) -> RemoteLogSegmentMetadata | None:
        return self.store.remote_log_segment_metadata(tip, offset, leader_epoch)

    def highest_offset_for_epoch(self, tip: TopicIdPartition, leader_epoch: int) -> int | None:
        return self.store.highest_offset_for_epoch(tip, leader_epoch)

    def list_remote_log_segments(self, tip: TopicIdPartition,
                                 leader_epoch: int | None = None) -> Iterator[RemoteLogSegmentMetadata]:
        return self.store.list_remote_log_segments(tip, leader_epoch)

    def remote_partition_delete_state(self, tip: TopicIdPartition) -> RemotePartitionDeleteState | None:
        return self.store.remote_partition_delete_state(tip)

    def remote_log_size(self, tip: TopicIdPartition) -> int:
        return self.store.remote_log_size(tip)

    def partitions(self) -> Iterable[TopicIdPartition]:
        return self.store.partitions()

    def log_start_offset(self, tip: TopicIdPartition) -> int | None:
        return self.store.log_start_offset(tip)

    def close(self) -> None:
        self.store.close()
