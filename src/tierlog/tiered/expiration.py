"""The expiration pass of one tiered partition: retry the remote deletes that failed (with backoff,
:mod:`tierlog.tiered.segment_deleter`), then apply total retention to the remote tier, publishing
the new log start offset before deleting (KAFKA-FACTS §5.8). A partition whose copy run is in flight
is passed over by the periodic pass (next interval), so one slow upload does not hold up the
others."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from tierlog.errors import TierlogError
from tierlog.storage.log import UnifiedLog
from tierlog.tiered.api import RemoteLogSegmentMetadata, RemoteLogSegmentState, RemoteStorageError
from tierlog.tiered.context import PartitionState, TieringContext
from tierlog.tiered.policy import RemoteDeletionReason, RemoteRetentionPolicy, remote_deletable_segments
from tierlog.tiered.segment_deleter import SegmentDeleter

log = logging.getLogger(__name__)

S = RemoteLogSegmentState
Expired = list[tuple[RemoteLogSegmentMetadata, RemoteDeletionReason]]


class RemoteExpiration:
    def __init__(self, ctx: TieringContext, deleter: SegmentDeleter,
                 records_max_timestamp: Callable[[RemoteLogSegmentMetadata], int]) -> None:
        self.ctx = ctx
        self.deleter = deleter
        #: A remote segment's largest timestamp from its records (the remote reader's, remembered).
        self.records_max_timestamp = records_max_timestamp

    def expire_partition(self, topic: str, partition: int, now_ms: int | None = None, *,
                         wait: bool = True) -> Expired:
        """One expiration pass: retry interrupted deletes, then apply total retention to the remote
        tier, publishing the new log start offset before deleting (KAFKA-FACTS §5.8). Without
        ``wait`` nothing happens while the partition's copy run is in flight."""
        state = self.ctx.partition((topic, partition))
        ulog = self.ctx.logs.get_log(topic, partition)
        if state is None or ulog is None or ulog.offline_reason is not None:
            return []
        now = self.ctx.now_ms() if now_ms is None else now_ms
        if not state.lock.acquire(blocking=wait):
            log.debug("remote retention of %s-%d waits for its copy run in flight", topic, partition)
            return []
        try:
            return self._expire_locked(state, ulog, now)
        finally:
            state.lock.release()

    def _expire_locked(self, state: PartitionState, ulog: UnifiedLog, now: int) -> Expired:
        ctx = self.ctx
        topic, partition = state.tp
        try:
            segments = list(ctx.rlmm.list_remote_log_segments(state.tip))
            for md in segments:
                # Failed deletes, retried with backoff until given up; one still failing does not
                # hold up the others or retention (it stays DELETE_SEGMENT_STARTED).
                if md.state is S.DELETE_SEGMENT_STARTED and self.deleter.due(md, now):
                    self.deleter.delete(md, best_effort=True)
            finished = [m for m in segments if m.state is S.COPY_SEGMENT_FINISHED]
            if not finished:
                return []
            policy = RemoteRetentionPolicy.from_config(ulog.config, ctx.rlmm.log_start_offset(state.tip) or 0)
            judged = remote_deletable_segments(self._judged_by_records(finished, policy, now), policy, now,
                                               local_only_bytes(ulog))
            stored = {m.segment_id: m for m in finished}
            plan = [(stored[m.segment_id], reason) for m, reason in judged]
            if not plan:
                return []
            new_start = plan[-1][0].end_offset + 1
            ctx.rlmm.update_log_start_offset(state.tip, new_start, now)
            for md, reason in plan:
                log.info("remote segment deleted topic=%s partition=%d base_offset=%d end_offset=%d reason=%s "
                         "size_bytes=%d", topic, partition, md.start_offset, md.end_offset, reason.value,
                         md.segment_size_in_bytes)
                self.deleter.delete(md, best_effort=False)
            # The whole log now starts there: local segments below it go with the next local
            # retention pass (Kafka's updateLogStartOffsetFromRemoteTier).
            if new_start <= ulog.high_watermark:
                ulog.maybe_increment_log_start_offset(new_start, "remote retention")
            return plan
        except (RemoteStorageError, TierlogError, OSError) as e:
            log.error("remote retention of %s-%d failed: %s", topic, partition, e)
            ctx.record_error(state, f"expiration: {type(e).__name__}: {e}")
            return []


    def _judged_by_records(self, finished: list[RemoteLogSegmentMetadata], policy: RemoteRetentionPolicy,
                           now: int) -> list[RemoteLogSegmentMetadata]:
        """Seed 004: a segment an older tierlog uploaded has a max timestamp taken from its batch
        headers, which may say -1 or less than its records hold; before the floor or retention.ms
        deletes it by that value, its records say (the bytes are fetched once per segment)."""
        out = []
        for md in finished:
            by_time = policy.delete_enabled and md.end_offset >= policy.log_start_offset and (
                (policy.min_timestamp_ms > 0 and md.max_timestamp_ms < policy.min_timestamp_ms)
                or (policy.retention_ms >= 0 and md.max_timestamp_ms <= now - policy.retention_ms))
            if by_time and not md.max_timestamp_from_records:
                md = replace(md, max_timestamp_ms=self.records_max_timestamp(md), max_timestamp_from_records=True)
            out.append(md)
        return out


def local_only_bytes(ulog: UnifiedLog) -> int:
    """Bytes of local segments not (wholly) in the remote tier, newest first until a tiered one."""
    total = 0
    with ulog.lock:
        bases = ulog.segments.base_offsets
        highest = ulog.remote_end_offset
        for i in range(len(bases) - 1, -1, -1):
            upper = bases[i + 1] if i + 1 < len(bases) else ulog.log_end_offset
            if upper - 1 <= highest and i + 1 < len(bases):
                break
            total += ulog.segments.get(bases[i]).size_bytes
    return total
