"""The remote tier's manifest as objects in the store (issue 26): the documents, their names, and
how a reader folds them into one partition's state. tiered/manifest.py writes and reads them
through the plugin; docs/operations.md ("The remote tier's manifest") describes them as a file format.

A partition's manifest is append-only and versioned. Each state change a reader must see is one
new, immutable *delta* object numbered one above the last (``_manifest/<20-digit sequence>.delta.json``:
the segments that changed, those that went, the log start offset and the deletion state). Now and
then a *checkpoint* (``_manifest/<sequence>.checkpoint.json``) holds the whole state at its
sequence: the fold of the checkpoint before it and the deltas since. Every object is created once,
whole, with the store's create-only write (S3 ``If-None-Match: *``; a directory: a hard link, which
fails when the name exists), so two writers can never both create sequence N, and a reader sees an
object whole or not at all. A reader takes the highest checkpoint and the deltas above it up to the
first gap: the highest contiguous sequence.

Before versioned objects there was one document per partition, ``_manifest.json``, rewritten whole
at each change (format ``tierlog-remote-manifest``, version 1). A checkpoint is exactly that document;
a partition with no checkpoint is read from it when present.

Format, version 1 (bytes as standard base64; a checkpoint)::

    {"format": "tierlog-remote-manifest", "version": 1, "sequence": 7, "broker_id": 1 | null,
     "topic": "orders", "partition": 0, "topic_id": "<base64 uuid>", "log_start_offset": 0 | null,
     "partition_delete_state": null | "DELETE_PARTITION_MARKED" | ...,
     "segments": [{"id": "<base64 uuid>", "start_offset": 0, "end_offset": 99, "max_timestamp_ms": ...,
                   "broker_id": 1, "event_timestamp_ms": ..., "size_bytes": ...,
                   "leader_epochs": [[0, 0]], "state": "COPY_SEGMENT_FINISHED",
                   "custom_metadata": "<base64>" | null, "max_timestamp_from_records": false,
                   "min_timestamp_ms": ... | null}, ...]}

A delta (format ``tierlog-remote-manifest-delta``, version 1) has the same partition fields,
``sequence``, ``broker_id``, ``log_start_offset`` and ``partition_delete_state`` (the values after the
change: a delta sets them), ``segments`` (segments added or changed, whole, as above) and ``removed``
(ids of segments gone: DELETE_SEGMENT_FINISHED).

``min_timestamp_ms`` and ``partition_delete_state`` were added to version 1 without a new version:
readers take a missing one as null, and a reader that predates them ignores them.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

from tierlog.errors import TierlogError
from tierlog.ids import TopicIdPartition, uuid_from_base64, uuid_to_base64
from tierlog.tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemotePartitionDeleteState,
)

FORMAT = "tierlog-remote-manifest"
DELTA_FORMAT = "tierlog-remote-manifest-delta"
VERSION = 1
#: The single whole-rewritten manifest of tierlog before versioned ones, at the partition's root.
LEGACY_NAME = "_manifest.json"
#: The folder (key prefix) of a partition's versioned manifest objects, beside its segments.
MANIFEST_DIR = "_manifest"
_DELTA_SUFFIX = ".delta.json"
_CHECKPOINT_SUFFIX = ".checkpoint.json"
_DIGITS = 20


class ManifestError(TierlogError):
    """A manifest that is not one, or of a version this reader does not know."""


@dataclass(frozen=True)
class PartitionManifest:
    """A partition's remote segments as a reader sees them (a checkpoint, or the fold of one and its deltas)."""

    tip: TopicIdPartition
    log_start_offset: int | None
    segments: tuple[RemoteLogSegmentMetadata, ...]
    #: The sequence of the last object folded in; who wrote that. Not part of what it says (two
    #: manifests saying the same are equal whatever their sequence).
    sequence: int = field(default=0, compare=False)
    broker_id: int | None = field(default=None, compare=False)
    #: Set once the partition's topic is deleted (its data is going): readers pass it over, so a
    #: topic recreated under the same name (another topic id) reads only its own manifest.
    delete_state: RemotePartitionDeleteState | None = None

    def finished(self) -> list[RemoteLogSegmentMetadata]:
        return [s for s in self.segments if s.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED]


@dataclass(frozen=True)
class ManifestDelta:
    """One state change: what a reader applies to the state at ``sequence - 1``."""

    tip: TopicIdPartition
    sequence: int
    broker_id: int | None
    log_start_offset: int | None
    delete_state: RemotePartitionDeleteState | None
    #: Segments added or changed (whole), and ids of segments gone.
    upserts: tuple[RemoteLogSegmentMetadata, ...] = ()
    removed: tuple[bytes, ...] = ()


class ManifestState:
    """A partition's manifest being folded: a checkpoint, then each delta in sequence order. O(size of
    the delta) per :meth:`apply`; :meth:`manifest` sorts (O(n log n)), for checkpoints and readers."""

    def __init__(self, tip: TopicIdPartition, sequence: int = 0) -> None:
        self.tip = tip
        self.sequence = sequence
        self.broker_id: int | None = None
        self.log_start_offset: int | None = None
        self.delete_state: RemotePartitionDeleteState | None = None
        self.segments: dict[bytes, RemoteLogSegmentMetadata] = {}

    @classmethod
    def of(cls, manifest: PartitionManifest) -> ManifestState:
        state = cls(manifest.tip, manifest.sequence)
        state.broker_id = manifest.broker_id
        state.log_start_offset = manifest.log_start_offset
        state.delete_state = manifest.delete_state
        state.segments = {m.segment_id.id: m for m in manifest.segments}
        return state

    def apply(self, delta: ManifestDelta) -> None:
        if delta.sequence != self.sequence + 1:
            raise ManifestError(f"delta {delta.sequence} of {self.tip.topic}-{self.tip.partition} does not follow "
                                f"sequence {self.sequence}")
        for sid in delta.removed:
            self.segments.pop(sid, None)
        for m in delta.upserts:
            self.segments[m.segment_id.id] = m
        self.log_start_offset = delta.log_start_offset
        self.delete_state = delta.delete_state
        self.sequence = delta.sequence
        self.broker_id = delta.broker_id

    def manifest(self) -> PartitionManifest:
        segments = sorted(self.segments.values(), key=lambda m: (m.start_offset, m.segment_id.id))
        return PartitionManifest(self.tip, self.log_start_offset, tuple(segments), self.sequence, self.broker_id,
                                 self.delete_state)


# -- object names ---------------------------------------------------------------------------------------


def delta_name(sequence: int) -> str:
    return f"{MANIFEST_DIR}/{sequence:0{_DIGITS}d}{_DELTA_SUFFIX}"


def checkpoint_name(sequence: int) -> str:
    return f"{MANIFEST_DIR}/{sequence:0{_DIGITS}d}{_CHECKPOINT_SUFFIX}"


def parse_name(name: str) -> tuple[bool, int] | None:
    """(is a checkpoint, sequence) of a versioned manifest object's name (with or without the
    ``_manifest/`` folder); None for anything else (a temporary file, a stranger)."""
    base = name.rsplit("/", 1)[-1]
    for suffix, checkpoint in ((_CHECKPOINT_SUFFIX, True), (_DELTA_SUFFIX, False)):
        digits = base[:-len(suffix)]
        if base.endswith(suffix) and len(digits) == _DIGITS and digits.isdigit():
            return checkpoint, int(digits)
    return None


def is_manifest_object(key: str) -> bool:
    """Whether an object key (or file path) is a partition's manifest rather than a segment's object."""
    parts = key.replace("\\", "/").split("/")
    return MANIFEST_DIR in parts[:-1] or parts[-1] in (LEGACY_NAME, LEGACY_NAME + ".tmp")


@dataclass(frozen=True)
class Head:
    """What a listing of ``_manifest/`` says a reader reads: the highest checkpoint and the deltas after it
    up to the first gap (``sequence`` is the last of them), and the objects older than the checkpoint
    before it (those a writer may delete: a reader that listed a moment ago may still read the previous
    checkpoint and its deltas)."""

    checkpoint: int | None
    deltas: tuple[int, ...]
    garbage: tuple[str, ...]

    @property
    def sequence(self) -> int:
        if self.deltas:
            return self.deltas[-1]
        return 0 if self.checkpoint is None else self.checkpoint

    def names(self) -> list[str]:
        assert self.checkpoint is not None
        return [checkpoint_name(self.checkpoint), *(delta_name(s) for s in self.deltas)]


def head_of(names: list[str]) -> Head:
    checkpoints: set[int] = set()
    deltas: set[int] = set()
    for name in names:
        parsed = parse_name(name)
        if parsed is not None:
            (checkpoints if parsed[0] else deltas).add(parsed[1])
    if not checkpoints:
        return Head(None, (), ())
    top = max(checkpoints)
    run: list[int] = []
    while top + len(run) + 1 in deltas:
        run.append(top + len(run) + 1)
    older = [c for c in checkpoints if c < top]
    keep_from = max(older) if older else top
    garbage = [checkpoint_name(c) for c in sorted(checkpoints) if c < keep_from]
    garbage += [delta_name(d) for d in sorted(deltas) if d <= keep_from]
    return Head(top, tuple(run), tuple(garbage))


# -- documents ------------------------------------------------------------------------------------------


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _segment_doc(m: RemoteLogSegmentMetadata) -> dict[str, Any]:
    return {
        "id": uuid_to_base64(m.segment_id.id), "start_offset": m.start_offset, "end_offset": m.end_offset,
        "max_timestamp_ms": m.max_timestamp_ms, "broker_id": m.broker_id,
        "event_timestamp_ms": m.event_timestamp_ms, "size_bytes": m.segment_size_in_bytes,
        "leader_epochs": [list(e) for e in m.segment_leader_epochs], "state": m.state.name,
        "custom_metadata": _b64(m.custom_metadata),
        "max_timestamp_from_records": m.max_timestamp_from_records, "min_timestamp_ms": m.min_timestamp_ms,
    }


def _partition_doc(kind: str, tip: TopicIdPartition, sequence: int, broker_id: int | None,
                   log_start_offset: int | None, delete_state: RemotePartitionDeleteState | None) -> dict[str, Any]:
    return {
        "format": kind, "version": VERSION, "topic": tip.topic, "partition": tip.partition,
        "topic_id": uuid_to_base64(tip.topic_id), "log_start_offset": log_start_offset,
        "sequence": sequence, "broker_id": broker_id,
        "partition_delete_state": None if delete_state is None else delete_state.name,
    }


def _dump(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode("utf-8")


def encode(manifest: PartitionManifest) -> bytes:
    """A checkpoint (and the legacy ``_manifest.json``) document."""
    doc = _partition_doc(FORMAT, manifest.tip, manifest.sequence, manifest.broker_id, manifest.log_start_offset,
                         manifest.delete_state)
    doc["segments"] = [_segment_doc(m) for m in manifest.segments]
    return _dump(doc)


def encode_delta(delta: ManifestDelta) -> bytes:
    doc = _partition_doc(DELTA_FORMAT, delta.tip, delta.sequence, delta.broker_id, delta.log_start_offset,
                         delta.delete_state)
    doc["segments"] = [_segment_doc(m) for m in delta.upserts]
    doc["removed"] = [uuid_to_base64(sid) for sid in delta.removed]
    return _dump(doc)


def _field(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = obj.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ManifestError(f"{where}: field {key!r} is {value!r}, not {getattr(kind, '__name__', kind)}")
    return value


def _optional_int(obj: dict[str, Any], key: str, where: str, default: int | None = None) -> int | None:
    value = obj.get(key, default)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise ManifestError(f"{where}: field {key!r} is {value!r}, not int")
    return value


def _decode_segment(tip: TopicIdPartition, s: object, at: str) -> RemoteLogSegmentMetadata:
    if not isinstance(s, dict):
        raise ManifestError(f"{at} is not an object")
    custom = s.get("custom_metadata")
    if custom is not None and not isinstance(custom, str):
        raise ManifestError(f"{at}: field 'custom_metadata' is {custom!r}, not base64")
    epochs = _field(s, "leader_epochs", list, at)
    state = _field(s, "state", str, at)
    # Added in place (not a new version): a manifest written before it has none, read as unknown.
    smallest = _optional_int(s, "min_timestamp_ms", at)
    if state not in RemoteLogSegmentState.__members__:
        raise ManifestError(f"{at}: state {state!r} is none of {', '.join(RemoteLogSegmentState.__members__)}")
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip, uuid_from_base64(_field(s, "id", str, at))),
        _field(s, "start_offset", int, at), _field(s, "end_offset", int, at),
        _field(s, "max_timestamp_ms", int, at), _field(s, "broker_id", int, at),
        _field(s, "event_timestamp_ms", int, at), _field(s, "size_bytes", int, at),
        tuple((int(e), int(o)) for e, o in epochs),
        RemoteLogSegmentState[state],
        None if custom is None else base64.b64decode(custom, validate=True),
        max_timestamp_from_records=_field(s, "max_timestamp_from_records", bool, at),
        min_timestamp_ms=smallest)


def _load(data: bytes, kind: str, where: str) -> dict[str, Any]:
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ManifestError(f"{where} is not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != kind:
        raise ManifestError(f"{where} is not a {kind} document")
    if doc.get("version") != VERSION:
        raise ManifestError(f"{where} has version {doc.get('version')!r}; this reader knows version {VERSION}")
    return doc


def _partition_fields(doc: dict[str, Any], where: str) -> tuple[TopicIdPartition, int | None, int, int | None,
                                                                 RemotePartitionDeleteState | None]:
    tip = TopicIdPartition(uuid_from_base64(_field(doc, "topic_id", str, where)), _field(doc, "topic", str, where),
                           _field(doc, "partition", int, where))
    start = _optional_int(doc, "log_start_offset", where)
    sequence = _optional_int(doc, "sequence", where, 0)
    writer = _optional_int(doc, "broker_id", where)
    deleting = doc.get("partition_delete_state")  # added in place, like min_timestamp_ms
    if deleting is not None and deleting not in RemotePartitionDeleteState.__members__:
        raise ManifestError(f"{where}: partition_delete_state {deleting!r} is none of "
                            f"{', '.join(RemotePartitionDeleteState.__members__)}")
    return (tip, start, sequence or 0, writer,
            None if deleting is None else RemotePartitionDeleteState[deleting])


def decode(data: bytes, where: str = "manifest") -> PartitionManifest:
    """A checkpoint (or legacy ``_manifest.json``); ManifestError naming the field when it is not one."""
    doc = _load(data, FORMAT, where)
    try:
        tip, start, sequence, writer, deleting = _partition_fields(doc, where)
        segments = [_decode_segment(tip, s, f"{where} segment {i}")
                    for i, s in enumerate(_field(doc, "segments", list, where))]
    except (KeyError, ValueError, TypeError) as e:
        raise ManifestError(f"{where}: {e}") from None
    return PartitionManifest(tip, start, tuple(segments), sequence, writer, deleting)


def decode_delta(data: bytes, where: str = "manifest delta") -> ManifestDelta:
    doc = _load(data, DELTA_FORMAT, where)
    try:
        tip, start, sequence, writer, deleting = _partition_fields(doc, where)
        upserts = [_decode_segment(tip, s, f"{where} segment {i}")
                   for i, s in enumerate(_field(doc, "segments", list, where))]
        removed = []
        for sid in _field(doc, "removed", list, where):
            if not isinstance(sid, str):
                raise ManifestError(f"{where}: a removed id is {sid!r}, not a segment id")
            removed.append(uuid_from_base64(sid))
    except (KeyError, ValueError, TypeError) as e:
        raise ManifestError(f"{where}: {e}") from None
    return ManifestDelta(tip, sequence, writer, start, deleting, tuple(upserts), tuple(removed))
