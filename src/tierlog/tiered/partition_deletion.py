"""Deleting a deleted topic's remote data (Kafka's stopPartitions with delete): the partition is
marked durably first (DELETE_PARTITION_MARKED), so a broker that restarts before it is done knows to
finish it; each segment is deleted; DELETE_PARTITION_FINISHED last. Nothing is deleted while a copy
of the partition is in flight: a copy finishing after the listing would leave objects that belong to
no segment."""

from __future__ import annotations

import logging
from collections.abc import Callable

from tierlog.tiered.api import (
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteStorageError,
    TopicIdPartition,
)
from tierlog.tiered.context import TieringContext
from tierlog.tiered.segment_deleter import SegmentDeleter

log = logging.getLogger(__name__)


class PartitionDeletion:
    def __init__(self, ctx: TieringContext, deleter: SegmentDeleter,
                 release: Callable[[str, int], None]) -> None:
        """``release(topic, partition)`` stops the partition's copy task."""
        self.ctx = ctx
        self.deleter = deleter
        self.release = release

    def mark_partition_for_deletion(self, topic: str, partition: int, topic_id: bytes) -> bool:
        """Record durably, before the deletion itself runs (later, retried), that the partition's
        remote data is to go: a broker that restarts before it is done knows to finish it, and a
        partition the metadata does not know without this mark (a restored metadata backup) is
        kept. Only partitions with remote data or a copy task are marked. True if marked."""
        tip = TopicIdPartition(topic_id, topic, partition)
        state = self.ctx.partition((topic, partition))
        if tip not in set(self.ctx.rlmm.partitions()) and (state is None or state.tip != tip):
            return False
        if self.ctx.rlmm.remote_partition_delete_state(tip) is None:
            self._put_state(tip, RemotePartitionDeleteState.DELETE_PARTITION_MARKED)
        return True

    def _put_state(self, tip: TopicIdPartition, state: RemotePartitionDeleteState) -> None:
        self.ctx.rlmm.put_remote_partition_delete_metadata(
            RemotePartitionDeleteMetadata(tip, state, self.ctx.now_ms(), self.ctx.config.broker_id))

    def marked_for_deletion(self, tip: TopicIdPartition) -> bool:
        state = self.ctx.rlmm.remote_partition_delete_state(tip)
        return state is not None and state is not RemotePartitionDeleteState.DELETE_PARTITION_FINISHED

    def delete_partition_data(self, topic: str, partition: int, topic_id: bytes | None = None) -> int:
        """Delete every remote segment of a partition whose topic is being deleted: MARKED, each
        segment deleted, then FINISHED. Returns the segments deleted; a failure leaves the rest in
        DELETE_SEGMENT_STARTED or FINISHED and raises, so the caller can retry. So does a copy of
        the partition still in flight (RemoteStorageError): nothing is deleted until it ended."""
        ctx = self.ctx
        # With the topic id, a topic re-created under the same name meanwhile is not touched.
        tip = ctx.tip_for(topic, partition) if topic_id is None else TopicIdPartition(topic_id, topic, partition)
        if tip is None:
            return 0
        state = ctx.partition((topic, partition))
        if state is not None and state.tip == tip:
            self.release(topic, partition)
        # A copy run still uploading (released or not, it stops after the segment it is on) would
        # finish after the listing below, and its objects would belong to no segment. Its end is
        # not waited for here (the caller may be a shared scheduler thread): the caller retries.
        lock = ctx.segments_lock(tip)
        if not lock.acquire(blocking=False):
            raise RemoteStorageError(f"a copy of {topic}-{partition} to the remote tier is in flight")
        try:
            self._put_state(tip, RemotePartitionDeleteState.DELETE_PARTITION_MARKED)
            deleted = 0
            for md in list(ctx.rlmm.list_remote_log_segments(tip)):
                self.deleter.delete(md, best_effort=False)
                deleted += 1
            self._put_state(tip, RemotePartitionDeleteState.DELETE_PARTITION_FINISHED)
        finally:
            lock.release()
        log.info("deleted %d remote segments of %s-%d", deleted, topic, partition)
        return deleted
