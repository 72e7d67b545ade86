"""The remote storage plugin API (KIP-405 with KIP-917's custom metadata), in Python casing.

Everything here is a value or a Protocol: the RemoteLogManager talks to a
:class:`RemoteStorageManager` (where segment bytes live) and a :class:`RemoteLogMetadataManager`
(what is where, and in which state). Backends are loaded by dotted path
(:func:`load_remote_storage_manager`) and receive the ``rsm.config.``-prefixed broker properties with
the prefix removed, as Kafka hands them to its plugins.
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO, Protocol, runtime_checkable

from tierlog.errors import TierlogError
from tierlog.ids import TopicIdPartition, random_uuid, uuid_to_base64

ZERO_TOPIC_ID = bytes(16)


# -- errors ---------------------------------------------------------------------------------------------


class RemoteStorageError(TierlogError):
    """A remote storage operation failed; the caller may retry (Kafka's RemoteStorageException)."""


class RemoteResourceNotFoundError(RemoteStorageError):
    """The requested remote object does not exist (e.g. a segment without a transaction index)."""


class RemoteConflictError(RemoteStorageError):
    """A conditional write found the object changed since it was read (another writer): nothing was
    written; read it again and decide."""


class CustomMetadataSizeLimitExceededError(TierlogError):
    """Seed 002: a plugin returned custom metadata larger than
    ``remote.log.metadata.custom.metadata.max.bytes``; the partition's copy task stops."""


class InvalidStateTransitionError(TierlogError):
    pass


# -- identifiers ----------------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class RemoteLogSegmentId:
    """A segment upload attempt: unique per attempt, so a retried copy never collides with the
    leftovers of a failed one."""

    topic_id_partition: TopicIdPartition
    id: bytes

    @classmethod
    def generate(cls, tip: TopicIdPartition) -> RemoteLogSegmentId:
        return cls(tip, random_uuid())

    @property
    def id_str(self) -> str:
        return uuid_to_base64(self.id)

    def __str__(self) -> str:
        return f"RemoteLogSegmentId({self.topic_id_partition}, {self.id_str})"


class RemoteLogSegmentState(enum.IntEnum):
    """Kafka's ids, as its metadata records store them."""

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


_TRANSITIONS: dict[RemoteLogSegmentState | None, frozenset[RemoteLogSegmentState]] = {
    None: frozenset({RemoteLogSegmentState.COPY_SEGMENT_STARTED}),
    RemoteLogSegmentState.COPY_SEGMENT_STARTED: frozenset({
        RemoteLogSegmentState.COPY_SEGMENT_STARTED, RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
        RemoteLogSegmentState.DELETE_SEGMENT_STARTED}),
    RemoteLogSegmentState.COPY_SEGMENT_FINISHED: frozenset({
        RemoteLogSegmentState.COPY_SEGMENT_FINISHED, RemoteLogSegmentState.DELETE_SEGMENT_STARTED}),
    RemoteLogSegmentState.DELETE_SEGMENT_STARTED: frozenset({
        RemoteLogSegmentState.DELETE_SEGMENT_STARTED, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED}),
    RemoteLogSegmentState.DELETE_SEGMENT_FINISHED: frozenset({RemoteLogSegmentState.DELETE_SEGMENT_FINISHED}),
}


def is_valid_transition(source: RemoteLogSegmentState | None, target: RemoteLogSegmentState) -> bool:
    """Kafka's ``RemoteLogSegmentState.isValidTransition`` (self-transitions allowed)."""
    return target in _TRANSITIONS[source]


class RemotePartitionDeleteState(enum.IntEnum):
    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2


class IndexType(enum.IntEnum):
    OFFSET = 0
    TIMESTAMP = 1
    PRODUCER_SNAPSHOT = 2
    TRANSACTION = 3
    LEADER_EPOCH = 4


# -- metadata -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RemoteLogSegmentMetadataUpdate:
    segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    state: RemoteLogSegmentState
    broker_id: int
    custom_metadata: bytes | None = None
    #: Seed 002: custom metadata the plugin returned over the limit, kept with DELETE_SEGMENT_STARTED
    #: only so that every attempt to delete the upload can hand it back (see
    #: :attr:`RemoteLogSegmentMetadata.rejected_custom_metadata`).
    rejected_custom_metadata: bytes | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.state is RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise ValueError("an update cannot move a segment to COPY_SEGMENT_STARTED; add the metadata instead")
        if self.rejected_custom_metadata is not None and self.state is not RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
            raise ValueError("rejected custom metadata goes only with DELETE_SEGMENT_STARTED")


@dataclass(frozen=True)
class RemoteLogSegmentMetadata:
    segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    #: (leader epoch, start offset) pairs, ascending: the epochs with records in the segment.
    segment_leader_epochs: tuple[tuple[int, int], ...] = ()
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    #: KIP-917: opaque bytes the plugin returned from the copy; interpreted only by the plugin.
    custom_metadata: bytes | None = field(default=None, repr=False)
    #: Seed 002: the custom metadata the plugin returned for this upload that exceeded
    #: ``remote.log.metadata.custom.metadata.max.bytes``. Never the segment's custom metadata (the
    #: segment never becomes COPY_SEGMENT_FINISHED); kept while the segment is
    #: DELETE_SEGMENT_STARTED only so that each attempt to delete the upload hands it to the plugin,
    #: which may need it to find its objects (:meth:`for_plugin_delete`).
    rejected_custom_metadata: bytes | None = field(default=None, repr=False)
    #: tierlog's own: ``max_timestamp_ms`` was taken from the segment's records, as every upload does
    #: since the records decide a batch's max timestamp (seed 004). An upload by an older tierlog took
    #: it from the batch headers, which a producer may have written wrong (-1 from Sarama 1.22): a
    #: reader then derives the segment's largest timestamp from its records before trusting it.
    max_timestamp_from_records: bool = False
    #: tierlog's own: the segments this one replaces (remote compaction, :mod:`tierlog.tiered.remote_compaction`).
    #: It covers exactly their offset range; the COPY_SEGMENT_FINISHED of this segment moves every one
    #: of them to DELETE_SEGMENT_STARTED in the same metadata entry (refused unless all are FINISHED),
    #: so a reader sees either the old segments or this one, never both and never neither.
    replaces: tuple[RemoteLogSegmentId, ...] = ()
    #: tierlog's own: the smallest timestamp a reader gets from the segment's records (a LogAppendTime
    #: batch's timestamp, else the records' own; -1 when a record has none), recorded at upload. With
    #: CreateTime a later segment may hold older records, so only this, never the time index, lets a
    #: reader skip a segment for an upper timestamp bound. None: unknown (an older tierlog's upload).
    min_timestamp_ms: int | None = None

    def __post_init__(self) -> None:
        if self.rejected_custom_metadata is not None and self.state is not RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
            raise ValueError("rejected custom metadata goes only with DELETE_SEGMENT_STARTED")
        if self.start_offset < 0:
            raise ValueError(f"start offset {self.start_offset} is negative")
        if self.end_offset < self.start_offset:
            raise ValueError(f"end offset {self.end_offset} is below the start offset {self.start_offset}")
        if self.segment_size_in_bytes < 0:
            raise ValueError(f"segment size {self.segment_size_in_bytes} is negative")

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.segment_id.topic_id_partition

    @property
    def leader_epochs(self) -> dict[int, int]:
        return dict(self.segment_leader_epochs)

    def create_with_updates(self, update: RemoteLogSegmentMetadataUpdate) -> RemoteLogSegmentMetadata:
        """Kafka's ``createWithUpdates``: the update's broker, time, custom metadata and state."""
        if update.segment_id != self.segment_id:
            raise ValueError(f"update for {update.segment_id} applied to {self.segment_id}")
        rejected = None
        if update.state is RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
            # A repeated DELETE_SEGMENT_STARTED (a retry) keeps what the first one carried.
            rejected = (update.rejected_custom_metadata if update.rejected_custom_metadata is not None
                        else self.rejected_custom_metadata)
        return replace(self, broker_id=update.broker_id, event_timestamp_ms=update.event_timestamp_ms,
                       custom_metadata=update.custom_metadata, state=update.state,
                       rejected_custom_metadata=rejected)

    def for_plugin_delete(self) -> RemoteLogSegmentMetadata:
        """The metadata to hand to the plugin's delete: with the rejected custom metadata (seed 002)
        as its custom metadata when there is one, as Kafka builds it for its one delete attempt."""
        if self.rejected_custom_metadata is None:
            return self
        return replace(self, custom_metadata=self.rejected_custom_metadata, rejected_custom_metadata=None)


@dataclass(frozen=True)
class RemotePartitionDeleteMetadata:
    topic_id_partition: TopicIdPartition
    state: RemotePartitionDeleteState
    event_timestamp_ms: int
    broker_id: int


@dataclass(frozen=True)
class LogSegmentData:
    """The files of one segment handed to the plugin. The producer snapshot is mandatory (seed 001:
    the copy rebuilds a missing one rather than uploading without it)."""

    log_segment: Path
    offset_index: Path
    time_index: Path
    transaction_index: Path | None
    producer_snapshot_index: Path
    #: Leader-epoch checkpoint bytes (Kafka's text format) for every epoch up to the segment's end.
    leader_epoch_index: bytes


# -- the two seams --------------------------------------------------------------------------------------


@runtime_checkable
class RemoteStorageManager(Protocol):
    def configure(self, props: Mapping[str, str]) -> None:
        """Receive the plugin properties (``rsm.config.`` prefix removed) plus ``broker.id``."""
        ...

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData) -> bytes | None:
        """Upload the segment and its indexes; idempotent (overwrite partial results of the same id).
        Returns optional custom metadata (KIP-917). Raises RemoteStorageError on failure, after
        removing what it partially wrote where it can."""
        ...

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> BinaryIO:
        """The segment's bytes from ``start_position`` to ``end_position`` (both inclusive; the end of
        the segment when None), as a stream the caller closes."""
        ...

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        """One index of the segment; RemoteResourceNotFoundError if absent (e.g. no transaction index)."""
        ...

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Delete everything of the segment; idempotent (no error if already gone)."""
        ...

    def close(self) -> None: ...


class RemoteLogMetadataManager(Protocol):
    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Record a new segment; its state must be COPY_SEGMENT_STARTED. Durable when it returns."""
        ...

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        """Move a segment to another state (never COPY_SEGMENT_STARTED). Durable when it returns."""
        ...

    def remote_log_segment_metadata(self, tip: TopicIdPartition, offset: int,
                                    leader_epoch: int | None = None) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding ``offset`` (in ``leader_epoch`` when given)."""
        ...

    def highest_offset_for_epoch(self, tip: TopicIdPartition, leader_epoch: int) -> int | None: ...

    def list_remote_log_segments(self, tip: TopicIdPartition,
                                 leader_epoch: int | None = None) -> Iterator[RemoteLogSegmentMetadata]:
        """Every segment not DELETE_SEGMENT_FINISHED, by start offset."""
        ...

    def put_remote_partition_delete_metadata(self, metadata: RemotePartitionDeleteMetadata) -> None: ...

    def remote_partition_delete_state(self, tip: TopicIdPartition) -> RemotePartitionDeleteState | None:
        """The latest deletion state recorded for the partition (None: its deletion never began)."""
        ...

    def remote_log_size(self, tip: TopicIdPartition) -> int:
        """Bytes of the COPY_SEGMENT_FINISHED segments."""
        ...

    def partitions(self) -> Iterable[TopicIdPartition]: ...

    def update_log_start_offset(self, tip: TopicIdPartition, log_start_offset: int, event_timestamp_ms: int) -> None:
        """Record the partition's log start offset (only ever raised): remote retention deletes the
        segments below it and reads below it fail. Kafka keeps it in the log's checkpoint; here the
        local log's start offset moves with the local tier, so the remote one is kept separately."""
        ...

    def log_start_offset(self, tip: TopicIdPartition) -> int | None: ...

    def close(self) -> None: ...


# -- plugin loading -------------------------------------------------------------------------------------


def load_class(dotted_path: str) -> type[object]:
    module_name, _, class_name = dotted_path.rpartition(".")
    if not module_name:
        raise RemoteStorageError(f"{dotted_path!r} is not a dotted path module.Class")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise RemoteStorageError(f"cannot import {module_name} for {dotted_path}: {e}") from e
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type):
        raise RemoteStorageError(f"{module_name} has no class {class_name}")
    return cls


def plugin_properties(all_props: Mapping[str, str], prefix: str, broker_id: int | None = None) -> dict[str, str]:
    """The properties under ``prefix``, prefix removed (Kafka's RemoteLogManagerConfig), plus
    ``broker.id`` which Kafka also hands to the plugin."""
    props = {k[len(prefix):]: v for k, v in all_props.items() if k.startswith(prefix)}
    if broker_id is not None:
        props.setdefault("broker.id", str(broker_id))
    return props


#: A plugin property readers set (the Spark pipeline): write nothing, not even the plugin's root
#: directory. Plugins that do not know it ignore it, as Kafka's plugins ignore unknown properties.
READ_ONLY_PROPERTY = "tierlog.read.only"


def load_remote_storage_manager(dotted_path: str, props: Mapping[str, str]) -> RemoteStorageManager:
    """Instantiate the plugin class with no arguments and ``configure`` it."""
    cls = load_class(dotted_path)
    instance = cls()
    if not isinstance(instance, RemoteStorageManager):
        raise RemoteStorageError(f"{dotted_path} does not implement the RemoteStorageManager methods")
    instance.configure(props)
    return instance


__all__ = [
    "READ_ONLY_PROPERTY",
    "ZERO_TOPIC_ID",
    "CustomMetadataSizeLimitExceededError",
    "IndexType",
    "InvalidStateTransitionError",
    "LogSegmentData",
    "RemoteLogMetadataManager",
    "RemoteLogSegmentId",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentMetadataUpdate",
    "RemoteLogSegmentState",
    "RemotePartitionDeleteMetadata",
    "RemotePartitionDeleteState",
    "RemoteResourceNotFoundError",
    "RemoteStorageError",
    "RemoteStorageManager",
    "TopicIdPartition",
    "is_valid_transition",
    "load_class",
    "load_remote_storage_manager",
    "plugin_properties",
]
