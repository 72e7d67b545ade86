"""What the parts of the remote log manager share: its settings, the per-partition task state, the
view of the local logs it needs, and :class:`TieringContext` — the plugin, the metadata store, the
clock and the few callbacks into the manager (status file, shutdown, partition lookups) that the
copier, the expiration pass, the remote reader and partition deletion each receive instead of the
manager itself. Those four never import one another (an import-linter contract)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from tierlog.clock import Clock
from tierlog.config.settings import RemoteLogManagerSettings
from tierlog.ids import TopicPartition
from tierlog.scheduler import TaskHandle
from tierlog.storage.log import UnifiedLog
from tierlog.tiered.api import (
    RemoteLogMetadataManager,
    RemoteLogSegmentId,
    RemoteLogSegmentState,
    RemoteStorageManager,
    TopicIdPartition,
)
from tierlog.tiered.index_cache import RemoteIndexCache

#: The remote log manager's settings (built from the broker config in ``tierlog.config.settings``).
RemoteLogManagerConfig = RemoteLogManagerSettings


class LogSource(Protocol):
    """What the remote log manager needs of the LogManager."""

    def all_logs(self) -> dict[TopicPartition, UnifiedLog]: ...

    def get_log(self, topic: str, partition: int) -> UnifiedLog | None: ...


@dataclass
class PartitionState:
    """One tiered partition's copy task and what this process knows of it."""

    tp: TopicPartition
    tip: TopicIdPartition
    #: Held by a copy run and an expiration pass; shared by every state of the same topic id and
    #: partition (see TieringContext.segments_lock).
    lock: threading.Lock = field(default_factory=threading.Lock)
    copy_handle: TaskHandle | None = None
    copy_stopped: bool = False
    released: bool = False
    last_error: str | None = None
    last_error_ms: int | None = None
    consecutive_failures: int = 0
    segments_copied: int = 0
    bytes_copied: int = 0
    copy_errors: int = 0
    #: largest timestamp per closed segment base offset, for seed 001's replay window
    max_timestamps: dict[int, int] = field(default_factory=dict)
    #: The local log overlaps the remote end: the copy run compares that batch first (restore).
    boundary_unchecked: bool = False
    #: Seed 001: producer snapshots this process rebuilt before uploading a segment.
    producer_snapshots_rebuilt: int = 0
    #: Remote compaction (issue 18): the earliest delete horizon of a tombstone or marker its last run
    #: kept, when the next run is due whatever the dirty ratio (None: none known to this process).
    remote_delete_horizon_ms: int | None = None
    #: Remote compaction in this process: finished runs, failed ones, bytes, the last run's end, and
    #: the backoff after failures (no run before ``compaction_retry_at_ms``).
    compaction_runs: int = 0
    compaction_errors: int = 0
    compaction_bytes_read: int = 0
    compaction_bytes_written: int = 0
    compaction_last_run_ms: int | None = None
    compaction_failures: int = 0
    compaction_retry_at_ms: int | None = None


def is_tierable(ulog: UnifiedLog, system_enable: bool) -> bool:
    """Kafka's ``UnifiedLog.remoteLogEnabled``: broker-wide switch, topic switch, never internal
    topics. Unlike Kafka, compacted topics (``compact`` and ``compact,delete``) are tiered too (issue 18,
    docs/architecture.md "Compacted topics in the remote tier"): their segments are copied once
    cleaned, and :mod:`tierlog.tiered.remote_compaction` compacts the remote tier."""
    return system_enable and ulog.config.remote_storage_enable and not ulog.topic.startswith("__")


def highest_finished_offset(rlmm: RemoteLogMetadataManager, tip: TopicIdPartition) -> int:
    """The last offset of the newest COPY_SEGMENT_FINISHED segment (-1: none)."""
    return max((m.end_offset for m in rlmm.list_remote_log_segments(tip)
                if m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED), default=-1)


@dataclass
class TieringContext:
    config: RemoteLogManagerSettings
    logs: LogSource
    rsm: RemoteStorageManager
    rlmm: RemoteLogMetadataManager
    clock: Clock
    index_cache: RemoteIndexCache
    #: Persist the status file (task states, errors, given-up deletes) for ``tierlog tier status``.
    write_status: Callable[[], None]
    #: Whether the manager is closing: runs stop after the segment they are on.
    closed: Callable[[], bool]
    #: The tiered partition's state, or None when it is not tiered (now).
    partition: Callable[[TopicPartition], PartitionState | None]
    #: The partition's topic id as the remote tier knows it, or None when it holds nothing.
    tip_for: Callable[[str, int], TopicIdPartition | None]
    #: The lock of a partition's remote segments (see RemoteLogManager._segments_lock).
    segments_lock: Callable[[TopicIdPartition], threading.Lock]
    #: Uploads of a remote compaction running in this process, COPY_SEGMENT_STARTED until its swap:
    #: the copy run's sweep of dangling uploads passes over them (issue 18).
    compaction_uploads: set[RemoteLogSegmentId] = field(default_factory=set)

    def now_ms(self) -> int:
        return self.clock.wall_ms()

    def record_error(self, state: PartitionState, message: str) -> None:
        state.last_error = message
        state.last_error_ms = self.now_ms()
        self.write_status()
