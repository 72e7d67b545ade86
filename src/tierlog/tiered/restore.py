"""Reconciling a tiered partition's local log with its remote copy when the partition is adopted
(KIP-405's "build the auxiliary state" for one node; issue 20).

The remote tier is the authority for the offsets it holds. A local log that ends at or below the
remote tier's end offset (its directory was lost, or restored from an old backup) must not hand those
offsets out again, so it is restarted at the remote end + 1 (``storage.log_restore``) -- after checking
that whatever it still holds is byte for byte what the remote tier holds at the same offsets. A local
log that holds different data at offsets the remote tier also holds (written while the partition had
no local copy, by a broker that did not know of the remote one) cannot be reconciled without losing
one side: the partition goes offline with both ranges named, and nothing is served or deleted until
the operator chooses (docs/operations.md, "Losing a disk").
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass

from tierlog.errors import CorruptSnapshotError
from tierlog.records.header import iter_headers
from tierlog.storage.checkpoints import LeaderEpochCheckpointFile
from tierlog.storage.log import UnifiedLog
from tierlog.storage.log_restore import restart_from_remote
from tierlog.storage.producer_rebuild import load_producers_from_headers, replay_window_start
from tierlog.storage.producer_snapshot import decode_snapshot, encode_snapshot
from tierlog.storage.producer_state import ProducerStateManager, entry_to_snapshot
from tierlog.tiered.api import (
    IndexType,
    RemoteLogMetadataManager,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteStorageManager,
    TopicIdPartition,
)

log = logging.getLogger(__name__)

#: Bytes compared per step when a local log below the remote end is checked against the remote copy.
COMPARE_CHUNK_BYTES = 1 << 20


class RestoreAction(enum.Enum):
    NONE = "none"  # nothing tiered, or the local log goes on past the remote end without overlap
    CHECK_BOUNDARY = "check_boundary"  # the local log overlaps the remote end: one batch compared
    RESTART = "restart"  # the local log holds nothing the remote tier lacks: restart at its end
    COMPARE_THEN_RESTART = "compare_then_restart"  # local data below the remote end: check it first


def plan_restore(local_start: int, local_end: int, remote_end: int, pending_restart: bool) -> RestoreAction:
    """What adopting the partition does, from offsets alone. ``remote_end`` is the last offset the
    remote tier holds (-1: none); ``pending_restart``: an earlier restart was cut short."""
    if pending_restart:
        return RestoreAction.RESTART
    if remote_end < 0:
        return RestoreAction.NONE
    if local_end > remote_end:
        return RestoreAction.CHECK_BOUNDARY if local_start <= remote_end else RestoreAction.NONE
    return RestoreAction.RESTART if local_start >= local_end else RestoreAction.COMPARE_THEN_RESTART


@dataclass(frozen=True)
class RemoteEnd:
    #: The last offset the remote tier holds or held (-1: none).
    end_offset: int
    #: The finished segment ending there, whose producer snapshot and leader epochs describe it.
    segment: RemoteLogSegmentMetadata | None


def remote_end(rlmm: RemoteLogMetadataManager, tip: TopicIdPartition) -> RemoteEnd:
    finished = [m for m in rlmm.list_remote_log_segments(tip)
                if m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
    newest = max(finished, key=lambda m: m.end_offset, default=None)
    # Offsets the remote tier held and deleted (retention) are spent too: never handed out again.
    start = rlmm.log_start_offset(tip)
    floor = -1 if start is None else start - 1
    if newest is None or newest.end_offset < floor:
        return RemoteEnd(floor, None)
    return RemoteEnd(newest.end_offset, newest)


def untiered_conflict(rlmm: RemoteLogMetadataManager, tip: TopicIdPartition, ulog: UnifiedLog, why: str) -> str | None:
    """Why ``ulog`` must not be served while remote storage is off for it (``why`` says which switch),
    or None. A local log that ends at or below the remote tier's end (its directory was wiped, or
    restored from an old backup) would hand out again offsets the remote tier holds; only a restore
    from the remote tier may restart it, and that needs remote storage on."""
    end = remote_end(rlmm, tip)
    if end.end_offset < 0:
        return None
    with ulog.lock:
        local_start, local_end = ulog.log_start_offset, ulog.log_end_offset
        pending = ulog.pending_restore_offset is not None
    if plan_restore(local_start, local_end, end.end_offset, pending) not in (
            RestoreAction.RESTART, RestoreAction.COMPARE_THEN_RESTART):
        return None
    finished = [m.start_offset for m in rlmm.list_remote_log_segments(tip)
                if m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
    start = rlmm.log_start_offset(tip)
    first = max(min(finished), start or 0) if finished else None
    held = (f"offsets [{first}, {end.end_offset}]" if first is not None and first <= end.end_offset
            else f"no offsets any more, having held offsets up to {end.end_offset}")
    local = (f"nothing (it would start at offset {local_start})" if local_start >= local_end
             else f"offsets [{local_start}, {local_end - 1}]")
    return (f"{tip.topic}-{tip.partition}: the remote tier holds {held} of this partition, but the local log holds "
            f"{local} and remote storage is off for it ({why}): serving it would hand out offsets the remote tier "
            "holds again. Turn remote storage back on for it to restore the partition from the remote tier "
            "(docs/operations.md, 'Losing a disk')")


def take_untiered_offline(rlmm: RemoteLogMetadataManager, tip: TopicIdPartition, ulog: UnifiedLog, why: str) -> str | None:
    """:func:`untiered_conflict`, and if there is one: the partition offline, said at ERROR."""
    reason = untiered_conflict(rlmm, tip, ulog, why)
    if reason is not None:
        ulog.take_offline(reason)
        log.error("partition offline: %s", reason)
    return reason


class PartitionConflictError(Exception):
    """The local log and the remote tier hold different data at the same offsets."""


ReadRemote = Callable[[RemoteLogSegmentMetadata, int, int], bytes | None]


def _batch_keys(records: bytes, below: int) -> list[tuple[int, int, int, int]]:
    """(base offset, last offset, CRC, size) of each whole batch starting below ``below``."""
    return [(h.base_offset, h.last_offset, h.crc, h.size_bytes) for h in iter_headers(records)
            if h.base_offset < below]


class PartitionRestorer:
    """Runs the plan for one partition. ``read_remote(md, offset, max_bytes)`` reads the remote copy
    the way a fetch does (whole batches from the one holding ``offset``)."""

    def __init__(self, rsm: RemoteStorageManager, rlmm: RemoteLogMetadataManager, read_remote: ReadRemote,
                 segment_max_timestamp: Callable[[RemoteLogSegmentMetadata], int]) -> None:
        self.rsm = rsm
        self.rlmm = rlmm
        self.read_remote = read_remote
        #: A remote segment's largest record timestamp (the remote reader's: from its records when an
        #: older tierlog's metadata took it from the batch headers).
        self.segment_max_timestamp = segment_max_timestamp

    def reconcile(self, tip: TopicIdPartition, ulog: UnifiedLog, *, check_boundary: bool) -> RestoreAction:
        """Restart ``ulog`` from the remote tier where needed; PartitionConflictError when its data
        disagrees with the remote tier's. ``check_boundary`` also compares the batch at the remote end
        when the local log overlaps it (one remote read; the copy task does it, not the startup)."""
        end = remote_end(self.rlmm, tip)
        with ulog.lock:
            local_start, local_end = ulog.log_start_offset, ulog.log_end_offset
            pending = ulog.pending_restore_offset is not None
        action = plan_restore(local_start, local_end, end.end_offset, pending)
        where = f"{tip.topic}-{tip.partition}"
        if action is RestoreAction.CHECK_BOUNDARY:
            if check_boundary:
                self._compare(tip, ulog, end.end_offset, end.end_offset + 1, where)
            return action
        if action is RestoreAction.NONE:
            return action
        if action is RestoreAction.COMPARE_THEN_RESTART:
            self._compare(tip, ulog, local_start, local_end, where)
        self._restart(ulog, end, local_start, local_end, where)
        return action

    def _compare(self, tip: TopicIdPartition, ulog: UnifiedLog, start: int, end: int, where: str) -> None:
        """Every local batch holding offsets in [start, end) against the remote copy of the same offsets."""
        offset = start
        while offset < end:
            local = ulog.read_bytes(offset, COMPARE_CHUNK_BYTES)
            local_keys = _batch_keys(local, end)
            md = self.rlmm.remote_log_segment_metadata(tip, offset)
            if md is not None and md.replaces:
                # Written by remote compaction (issue 18): it holds a subset of the batches the local
                # log held at those offsets, rewritten; batch by batch they cannot be compared.
                log.info("%s: remote segment %s [%d, %d] was compacted in the remote tier; the local log is not "
                         "compared with it", where, md.segment_id, md.start_offset, md.end_offset)
                offset = md.end_offset + 1
                continue
            remote = None if md is None else self.read_remote(md, offset, max(len(local), 1))
            remote_keys = _batch_keys(remote or b"", end)
            if not local_keys:
                return
            # The remote read may stop earlier (at its segment's end): compare what both hold, go on.
            n = min(len(local_keys), len(remote_keys))
            same = n > 0 and local_keys[:n] == remote_keys[:n]
            if not same:
                i = next((i for i in range(n) if local_keys[i] != remote_keys[i]), n)
                lk = local_keys[min(i, len(local_keys) - 1)]
                rk = remote_keys[i] if i < len(remote_keys) else None
                raise PartitionConflictError(
                    f"{where}: the local log [{ulog.log_start_offset}, {ulog.log_end_offset - 1}] and the remote "
                    f"tier (up to offset {remote_end(self.rlmm, tip).end_offset}) hold different data at offset "
                    f"{lk[0]}: local batch [{lk[0]}, {lk[1]}] crc {lk[2]:#010x}, remote "
                    + ("none" if rk is None else f"batch [{rk[0]}, {rk[1]}] crc {rk[2]:#010x}"))
            offset = local_keys[n - 1][1] + 1

    def _restart(self, ulog: UnifiedLog, end: RemoteEnd, local_start: int, local_end: int, where: str) -> None:
        next_offset = end.end_offset + 1
        epochs = []
        snapshot = None
        if end.segment is not None:
            with self.rsm.fetch_index(end.segment, IndexType.LEADER_EPOCH) as f:
                epochs = LeaderEpochCheckpointFile.decode(f.read(), f"leader epochs of remote segment {end.segment.segment_id}")
            with self.rsm.fetch_index(end.segment, IndexType.PRODUCER_SNAPSHOT) as f:
                snapshot = f.read()
            snapshot = self._unless_placeholder(ulog, end.segment, snapshot, where)
        producers = restart_from_remote(ulog, next_offset, epochs, snapshot)
        held = "nothing" if local_start >= local_end else f"offsets [{local_start}, {local_end - 1}], the same as the remote tier's"
        log.warning("%s restored from the remote tier: the local log held %s; it now starts at offset %d after the "
                    "remote tier's end offset %d, offsets below are served from the remote tier; %d producers and "
                    "%d leader epochs restored from remote segment %s", where, held, next_offset, end.end_offset,
                    producers, len(epochs), "none" if end.segment is None else end.segment.segment_id)

    def _unless_placeholder(self, ulog: UnifiedLog, newest: RemoteLogSegmentMetadata, snapshot: bytes,
                            where: str) -> bytes:
        """The remote producer snapshot, or -- when it is empty -- the state replayed from the remote
        segments within ``producer.id.expiration.ms`` before the newest one's end (seed 001's rule).
        An older tierlog uploaded the loader's empty placeholders as they were; an empty snapshot is
        trusted only when the replay proves the state empty."""
        try:
            if decode_snapshot(snapshot, f"producer snapshot of remote segment {newest.segment_id}"):
                return snapshot
        except CorruptSnapshotError:
            return snapshot  # installing it says so, and leaves the state empty
        tip = newest.topic_id_partition
        expiration_ms = ulog.producer_state.producer_id_expiration_ms
        finished = sorted((m for m in self.rlmm.list_remote_log_segments(tip)
                           if m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                           and m.end_offset <= newest.end_offset), key=lambda m: m.start_offset)
        stamps = [(m.start_offset, self.segment_max_timestamp(m)) for m in finished]
        start = replay_window_start(stamps, stamps[-1][1], expiration_ms, self.rlmm.log_start_offset(tip) or 0)
        scratch = ProducerStateManager.detached(expiration_ms)
        scratch.update_map_end_offset(start)
        for md in finished:
            if md.end_offset < start:
                continue
            with self.rsm.fetch_log_segment(md, 0) as f:
                data = f.read()
            load_producers_from_headers(scratch, (h for h in iter_headers(data) if h.last_offset >= start))
        if not scratch.producers:
            return snapshot
        log.warning("%s: the remote tier's producer snapshot of segment %s (up to offset %d) is empty, but its "
                    "segments from offset %d (producer.id.expiration.ms=%d before its end) hold %d idempotent "
                    "producers: an older tierlog uploaded a placeholder; producer state rebuilt by replaying those "
                    "remote segments", where, newest.segment_id, newest.end_offset, start, expiration_ms,
                    len(scratch.producers))
        return encode_snapshot([entry_to_snapshot(e) for e in scratch.producers.values()])
