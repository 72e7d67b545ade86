"""The remote tier describing itself (issue 26): one partition's remote log metadata as an
append-only, versioned manifest in the remote store beside the data, so a reader needs neither the
broker nor its ``remote-log-metadata/`` journal. The objects and their documents are
:mod:`tierlog.tiered.manifest_format`'s; this module writes them (:class:`ManifestPublisher`) and
reads them (:func:`read_partition`, :func:`read_manifests`) through any plugin that keeps them: the
local-directory and S3 plugins offer the same five calls (``manifest_location(s)``,
``list_manifest_objects``, ``read_manifest_object``, ``create_manifest_object`` -- create-only --
and ``delete_manifest_objects``), so one code path serves both.

The journal stays the broker's source of truth; the manifest is derived from it
(:func:`build_manifest`) and compared with a rebuild to find one that is missing or behind
(:func:`is_current`). Order, so a crash anywhere leaves readers right or behind, never wrong:
journal entry (fsynced) -> the manifest's delta object -> now and then a checkpoint -> only then,
the deletion of manifest objects the checkpoint folded, and (segment_deleter.py) of a segment's data
once a manifest object saying DELETE_SEGMENT_STARTED is out (:meth:`ManifestPublisher.flush_manifest`).
A crash between the journal and the delta leaves the manifest behind: the first expiration pass
after the start compares every manifest with the journal and writes a delta with the difference
(:meth:`ManifestPublisher.sync_all`). A crash between a delta and its checkpoint leaves the deltas,
which readers fold; the next checkpoint comes at its turn.

Costs per state change: one LIST of the partition's ``_manifest/`` (bounded: two checkpoints and the
deltas since the older) and one small create; every :func:`checkpoint_interval` changes, a
checkpoint of the whole state. A reader: one LIST and a GET per object since the newest checkpoint.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from tierlog.ids import TopicIdPartition
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
from tierlog.tiered.manifest_format import (
    LEGACY_NAME,
    Head,
    ManifestDelta,
    ManifestError,
    ManifestState,
    PartitionManifest,
    checkpoint_name,
    decode,
    decode_delta,
    delta_name,
    encode,
    encode_delta,
    head_of,
    is_manifest_object,
)
from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager, RemoteLogMetadataStore

#: Conditional writes retried after a conflict before the publish counts as failed (retried later).
CONFLICT_RETRIES = 3
#: A checkpoint after every n deltas, n = segments / 8 within [16, 128]: up to ~1,000 segments the
#: checkpoint's O(n) write is O(1) per change amortized; above, n stays 128 so that a reader never
#: GETs more than 128 deltas (a 10,000-segment checkpoint, 3.8 MB, then costs ~30 KB per change).
CHECKPOINT_MIN_DELTAS = 16
CHECKPOINT_MAX_DELTAS = 128
CHECKPOINT_SEGMENTS_PER_DELTA = 8
#: A reader lists again when an object it listed is gone (a checkpoint's cleanup ran meanwhile).
READ_ATTEMPTS = 5

log = logging.getLogger(__name__)

__all__ = ["CONFLICT_RETRIES", "ManifestError", "ManifestPublisher", "PartitionManifest", "build_manifest",
           "checkpoint_interval", "decode", "encode", "is_current", "is_manifest_object", "read_manifests",
           "read_partition"]


def checkpoint_interval(segments: int) -> int:
    """Deltas after which a checkpoint is written, for a partition of ``segments`` segments."""
    return min(CHECKPOINT_MAX_DELTAS, max(CHECKPOINT_MIN_DELTAS, segments // CHECKPOINT_SEGMENTS_PER_DELTA))


def _for_reader(m: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata:
    # Rejected custom metadata (seed 002) is for the broker's own deletes only: not a reader's.
    return m if m.rejected_custom_metadata is None else replace(m, rejected_custom_metadata=None)


def build_manifest(store: RemoteLogMetadataStore, tip: TopicIdPartition) -> PartitionManifest:
    """The manifest the journal implies for ``tip`` now."""
    segments = sorted((_for_reader(m) for m in store.list_remote_log_segments(tip)
                       if m.state is not RemoteLogSegmentState.DELETE_SEGMENT_FINISHED),
                      key=lambda m: (m.start_offset, m.segment_id.id))
    return PartitionManifest(tip, store.log_start_offset(tip), tuple(segments),
                             delete_state=store.remote_partition_delete_state(tip))


def is_current(manifest: PartitionManifest | None, store: RemoteLogMetadataStore, tip: TopicIdPartition) -> bool:
    """Whether ``manifest`` says what the journal says (False when missing or behind: rebuild it)."""
    return manifest is not None and manifest == build_manifest(store, tip)


# -- reading ------------------------------------------------------------------------------------------


def keeps_manifests(rsm: object) -> bool:
    return all(callable(getattr(rsm, name, None)) for name in (
        "manifest_location", "manifest_locations", "list_manifest_objects", "read_manifest_object",
        "create_manifest_object", "delete_manifest_objects"))


def _fold(location: str, head: Head, blobs: list[bytes]) -> PartitionManifest:
    names = head.names()
    state = ManifestState.of(decode(blobs[0], f"{location}{names[0]}"))
    for name, blob in zip(names[1:], blobs[1:], strict=True):
        delta = decode_delta(blob, f"{location}{name}")
        if delta.tip != state.tip:
            raise ManifestError(f"{location}{name} is of {delta.tip}, its checkpoint of {state.tip}")
        state.apply(delta)
    return state.manifest()


def _read_once(rsm: Any, location: str, head: Head, pool: ThreadPoolExecutor | None) -> PartitionManifest | None:
    """The manifest ``head`` names; None when an object it names is gone (list again)."""
    names = head.names()
    blobs = (list(pool.map(lambda n: rsm.read_manifest_object(location, n), names)) if pool is not None
             and len(names) > 1 else [rsm.read_manifest_object(location, n) for n in names])
    if any(b is None for b in blobs):
        return None
    return _fold(location, head, blobs)


def read_partition(rsm: Any, location: str, pool: ThreadPoolExecutor | None = None
                   ) -> tuple[PartitionManifest | None, list[str]]:
    """The partition's manifest at ``location`` (its newest checkpoint with the contiguous deltas
    after it; with no checkpoint, the legacy ``_manifest.json``; None when neither is there) and the
    listing it was read from. Every object is whole or absent, so what is read is a state the writer
    wrote; an object listed and then gone (a checkpoint's cleanup ran meanwhile) means list again."""
    for _ in range(READ_ATTEMPTS):
        names = rsm.list_manifest_objects(location)
        head = head_of(names)
        if head.checkpoint is None:
            data = rsm.read_manifest_object(location, LEGACY_NAME)
            return (None if data is None else decode(data, f"{location}{LEGACY_NAME}")), names
        manifest = _read_once(rsm, location, head, pool)
        if manifest is not None:
            return manifest, names
    raise RemoteStorageError(f"the manifest objects under {location} kept changing while they were read "
                             f"({READ_ATTEMPTS} listings)")


def read_manifests(rsm: Any) -> list[PartitionManifest] | None:
    """Every partition's manifest the remote tier holds, read through the plugin (a reader's: the
    Spark planner); None when the plugin keeps none. Partitions are read in parallel, and the objects
    of each too: each is a request to the store."""
    if not keeps_manifests(rsm):
        return None
    locations = rsm.manifest_locations()
    if not locations:
        return []
    with ThreadPoolExecutor(16, thread_name_prefix="manifest-get") as gets, \
            ThreadPoolExecutor(min(16, len(locations)), thread_name_prefix="manifest-read") as reads:
        found = list(reads.map(lambda loc: read_partition(rsm, loc, gets)[0], locations))
    return [m for m in found if m is not None]


# -- writing ------------------------------------------------------------------------------------------


@dataclass
class _View:
    """What this writer knows the partition's manifest says: its state at its newest sequence, and the
    sequence of its newest checkpoint (None: there is none, only a legacy file or nothing)."""

    state: ManifestState
    checkpoint: int | None


class ManifestPublisher:
    """The broker's metadata manager, publishing each partition's manifest after every state change
    (the journal first: it stays the source of truth). Reads go to the journal.

    Each change a reader must see is one delta object with the segments that changed since the last
    one (tracked per partition as they go through this manager: O(changes), not O(segments)), created
    only if its sequence is free. Publishing never fails a state change: a manifest that cannot be
    written (the store is down) is remembered as behind and written by :meth:`maintain_manifests`
    (the expiration pass calls it). A remote segment's data is deleted only after a manifest saying
    DELETE_SEGMENT_STARTED is out (:meth:`flush_manifest`, called by the deleter), so a reader of the
    manifest never plans a read of an object that is gone without a reason to expect it.

    Another writer (say an old leader still running) shows as a newest sequence this one did not
    write, or as a create that finds its name taken: logged at WARNING with the other writer's
    broker id, then the manifest is read again and a delta written with the difference between it
    and this broker's journal, up to :data:`CONFLICT_RETRIES` times -- never a silent overwrite."""

    def __init__(self, store: FileRemoteLogMetadataManager, rsm: object, *, broker_id: int | None = None) -> None:
        self.store = store
        self.broker_id = broker_id
        self.rsm: Any = rsm
        self._keeps = keeps_manifests(rsm)
        self._lock = threading.Lock()
        self._locks: dict[TopicIdPartition, threading.Lock] = {}
        self._views: dict[TopicIdPartition, _View] = {}
        #: Segments changed in the journal since the manifest last said so, per partition; and the
        #: partitions to compare whole with the journal at their next write. Guarded by _lock.
        #: Each segment maps to the number of its latest change, so a write clears only the changes it
        #: read: one recorded while a write is under way (its state read before the change) stays.
        self._pending: dict[TopicIdPartition, dict[RemoteLogSegmentId, int]] = {}
        self._changes = 0
        self._full: set[TopicIdPartition] = set()
        #: Partitions whose manifest is behind the journal (a failed write); guarded by _lock.
        self._behind: set[TopicIdPartition] = set()
        self._synced = False

    @property
    def publishes(self) -> bool:
        return self._keeps

    def _partition_lock(self, tip: TopicIdPartition) -> threading.Lock:
        with self._lock:
            lock = self._locks.get(tip)
            if lock is None:
                lock = self._locks[tip] = threading.Lock()
            return lock

    def _changed(self, tip: TopicIdPartition, segment_ids: Iterable[RemoteLogSegmentId]) -> None:
        with self._lock:
            pending = self._pending.setdefault(tip, {})
            for segment_id in segment_ids:
                self._changes += 1
                pending[segment_id] = self._changes

    def publish(self, tip: TopicIdPartition, *, full: bool = False) -> bool:
        """Write ``tip``'s manifest as the journal says it now (``full``: compared whole with the
        journal rather than by the changes seen); False (and remembered as behind) if the store
        refused. Raises nothing but programming errors."""
        if not self.publishes:
            return True
        try:
            self._publish(tip, full)
        except (RemoteStorageError, ManifestError) as e:
            with self._lock:
                first = tip not in self._behind
                self._behind.add(tip)
                self._full.add(tip)
            if first:
                log.warning("the remote manifest of %s-%d could not be written (%s); readers of the remote tier "
                            "see it behind until it is (retried each expiration pass)", tip.topic, tip.partition, e)
            return False
        with self._lock:
            self._behind.discard(tip)
        return True

    def _publish(self, tip: TopicIdPartition, full: bool) -> bool:
        """True when something was written."""
        location = self.rsm.manifest_location(tip)
        with self._partition_lock(tip):
            if self.store.remote_partition_delete_state(tip) is RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
                return self._delete_all(tip, location)
            with self._lock:
                full = full or tip in self._full
            for attempt in range(CONFLICT_RETRIES + 1):
                names = self.rsm.list_manifest_objects(location)
                head = head_of(names)
                view = self._views.get(tip)
                if view is None or view.state.sequence != head.sequence or view.checkpoint != head.checkpoint:
                    loaded = self._load(tip, location, head)
                    if loaded is None:
                        continue  # a checkpoint's cleanup removed what was listed: list again
                    if view is not None:
                        log.warning("the remote manifest of %s-%d was changed by another writer (broker %s, sequence "
                                    "%d); writing the difference from this broker's journal (attempt %d)", tip.topic,
                                    tip.partition, loaded.state.broker_id, loaded.state.sequence, attempt + 1)
                    view = self._views[tip] = loaded
                    full = True
                try:
                    return self._write(tip, location, view, names, full)
                except RemoteConflictError:
                    full = True
                    continue  # its sequence was taken meanwhile: list, read and diff again
            self._views.pop(tip, None)
            raise RemoteConflictError(f"the remote manifest of {tip.topic}-{tip.partition} kept changing under "
                                      f"{CONFLICT_RETRIES + 1} conditional writes")

    def _load(self, tip: TopicIdPartition, location: str, head: Head) -> _View | None:
        if head.checkpoint is None:
            data = self.rsm.read_manifest_object(location, LEGACY_NAME)
            legacy = None
            if data is not None:
                try:
                    legacy = decode(data, f"{location}{LEGACY_NAME}")
                except ManifestError:
                    legacy = None  # torn or foreign: replaced by a checkpoint like a missing one
            return _View(ManifestState.of(legacy) if legacy is not None else ManifestState(tip), None)
        manifest = _read_once(self.rsm, location, head, None)
        return None if manifest is None else _View(ManifestState.of(manifest), head.checkpoint)

    def _write(self, tip: TopicIdPartition, location: str, view: _View, names: list[str], full: bool) -> bool:
        with self._lock:
            seen = dict(self._pending.get(tip, {}))
        state = view.state
        if view.checkpoint is None:
            # Nothing versioned yet (a new partition, or one with only a legacy _manifest.json): the
            # first object is a checkpoint of the whole state.
            manifest = replace(build_manifest(self.store, tip), sequence=state.sequence + 1, broker_id=self.broker_id)
            self.rsm.create_manifest_object(location, checkpoint_name(manifest.sequence), encode(manifest))
            view.state, view.checkpoint = ManifestState.of(manifest), manifest.sequence
            self._written(tip, seen)
            self._clean(tip, location, [LEGACY_NAME])
            return True
        delta = self._delta(tip, state, set(seen), full)
        if delta is None:
            self._written(tip, seen)
            return False
        self.rsm.create_manifest_object(location, delta_name(delta.sequence), encode_delta(delta))
        state.apply(delta)
        self._written(tip, seen)
        if state.sequence - view.checkpoint >= checkpoint_interval(len(state.segments)):
            self._checkpoint(tip, location, view, [*names, delta_name(delta.sequence)])
        return True

    def _written(self, tip: TopicIdPartition, seen: dict[RemoteLogSegmentId, int]) -> None:
        with self._lock:
            left = self._pending.get(tip)
            if left is not None:
                for segment_id, change in seen.items():
                    if left.get(segment_id) == change:
                        del left[segment_id]
                if not left:
                    del self._pending[tip]
            self._full.discard(tip)

    def _delta(self, tip: TopicIdPartition, state: ManifestState, seen: set[RemoteLogSegmentId],
               full: bool) -> ManifestDelta | None:
        """What changed between ``state`` and the journal: the segments seen changing (``full``: all)."""
        upserts: list[RemoteLogSegmentMetadata] = []
        removed: list[bytes] = []
        if full:
            want = {m.segment_id.id: m for m in build_manifest(self.store, tip).segments}
            upserts = [m for sid, m in want.items() if state.segments.get(sid) != m]
            removed = [sid for sid in state.segments if sid not in want]
        else:
            for segment_id in seen:
                now = self.store.segment_metadata(segment_id)
                if now is not None and now.state is RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
                    now = None
                old = state.segments.get(segment_id.id)
                if now is None:
                    if old is not None:
                        removed.append(segment_id.id)
                elif _for_reader(now) != old:
                    upserts.append(_for_reader(now))
        start = self.store.log_start_offset(tip)
        deleting = self.store.remote_partition_delete_state(tip)
        if not upserts and not removed and start == state.log_start_offset and deleting == state.delete_state:
            return None
        upserts.sort(key=lambda m: (m.start_offset, m.segment_id.id))
        return ManifestDelta(tip, state.sequence + 1, self.broker_id, start, deleting, tuple(upserts),
                             tuple(sorted(removed)))

    def _checkpoint(self, tip: TopicIdPartition, location: str, view: _View, names: list[str]) -> None:
        """The whole state at the newest sequence, then the objects no reader needs any more: those
        older than the checkpoint before this one (a reader that listed a moment ago may still be
        reading that one and its deltas). A failure here loses nothing: the deltas stay readable."""
        sequence = view.state.sequence
        try:
            self.rsm.create_manifest_object(location, checkpoint_name(sequence), encode(view.state.manifest()))
        except RemoteConflictError:
            pass  # another writer checkpointed the same sequence: the same objects folded, the same state
        except RemoteStorageError as e:
            log.warning("the remote manifest checkpoint of %s-%d at sequence %d could not be written (%s); its "
                        "deltas stay readable", tip.topic, tip.partition, sequence, e)
            return
        view.checkpoint = sequence
        self._clean(tip, location, list(head_of([*names, checkpoint_name(sequence)]).garbage))

    def _clean(self, tip: TopicIdPartition, location: str, names: list[str]) -> None:
        if not names:
            return
        try:
            self.rsm.delete_manifest_objects(location, names)
        except RemoteStorageError as e:
            log.warning("old manifest objects of %s-%d could not be deleted (%s); retried at the next checkpoint",
                        tip.topic, tip.partition, e)

    def _delete_all(self, tip: TopicIdPartition, location: str) -> bool:
        """A deleted partition's manifest goes whole; True when there was one."""
        names = self.rsm.list_manifest_objects(location)
        legacy = self.rsm.read_manifest_object(location, LEGACY_NAME) is not None
        if names or legacy:
            self.rsm.delete_manifest_objects(location, [*names, LEGACY_NAME])
        self._views.pop(tip, None)
        with self._lock:
            self._pending.pop(tip, None)
            self._full.discard(tip)
        return bool(names) or legacy

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
        (:meth:`sync_all`, writing the difference to those missing or behind after a crash or an
        older broker); afterwards those whose write failed are retried, and changes that rode along
        (copies started, deletions finished) are written."""
        if not self.publishes:
            return
        if not self._synced:
            try:
                self.sync_all()
                self._synced = True
            except (RemoteStorageError, ManifestError) as e:
                log.warning("checking the remote manifests against the journal failed (%s); retried next pass", e)
            return
        with self._lock:
            due = sorted(self._behind | set(self._pending), key=lambda t: (t.topic, t.partition))
        for tip in due:
            self.publish(tip)

    def sync_all(self) -> list[TopicIdPartition]:
        """Compare every partition's manifest whole with the journal and write the difference where
        there is one (a missing manifest gets a checkpoint); the partitions written."""
        if not self.publishes:
            return []
        written = []
        for tip in self.store.partitions():
            try:
                wrote = self._publish(tip, True)
            except (RemoteStorageError, ManifestError):
                if not self.publish(tip, full=True):
                    continue
                wrote = True
            if wrote:
                written.append(tip)
            with self._lock:
                self._behind.discard(tip)
        return written

    # -- RemoteLogMetadataManager: writes, each followed by the partition's manifest ----------------

    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        # COPY_SEGMENT_STARTED changes nothing a reader reads: it rides along with the next write.
        self.store.add_remote_log_segment_metadata(metadata)
        self._changed(metadata.topic_id_partition, [metadata.segment_id])

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        self.store.update_remote_log_segment_metadata(update)
        now = self.store.segment_metadata(update.segment_id)
        # A remote compaction's swap moves the segments it replaces in the same entry.
        self._changed(update.segment_id.topic_id_partition, [update.segment_id, *(() if now is None else now.replaces)])
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
