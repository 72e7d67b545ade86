"""Keeps the remote log manager in step with the metadata image.

Without it the remote log manager would notice a topic that turned ``remote.storage.enable`` on only
at its next sync pass (``remote.log.manager.task.interval.ms``, 30 s by default), and a deleted
topic's remote segments would stay in the bucket forever: the local log goes with the topic, and
nothing else knows the remote copies belong to nobody (Kafka's ReplicaManager#stopPartitions with
delete=true).
"""

from __future__ import annotations

import logging

from tierlog.metadata import MetadataDelta, MetadataImage
from tierlog.scheduler import Scheduler
from tierlog.tiered import RemoteLogManager
from tierlog.tiered.api import ZERO_TOPIC_ID

log = logging.getLogger(__name__)

#: First and longest wait between attempts to delete a deleted topic's remote data.
RETRY_MIN_MS = 1_000
RETRY_MAX_MS = 300_000


class TierSync:
    def __init__(self, remote: RemoteLogManager, scheduler: Scheduler | None) -> None:
        self.remote = remote
        self.scheduler = scheduler
        self._last: MetadataImage | None = None

    def reconcile(self, image: MetadataImage) -> None:
        """Startup: finish deleting the remote data of topics whose deletion began before the last
        stop; keep that of other topics the metadata does not know (a restored metadata backup from
        before they existed), as their local logs are kept as stray logs."""
        self._last = image
        live = set(image.topics_by_id)
        for tip in self.remote.rlmm.partitions():
            if tip.topic_id == ZERO_TOPIC_ID or tip.topic_id in live:
                continue
            if self.remote.marked_for_deletion(tip):
                log.info("deleting the remote segments of %s-%d: its topic was deleted", tip.topic, tip.partition)
                self._delete_later(tip.topic, tip.partition, tip.topic_id, 0, RETRY_MIN_MS)
            else:
                log.warning("keeping the remote segments of %s-%d: its topic is not in the metadata, and its "
                            "deletion never began (a metadata backup restored from before the topic existed?)",
                            tip.topic, tip.partition)

    def on_commit(self, image: MetadataImage, delta: MetadataDelta) -> None:
        """Controller listener, after the log sync: logs of new topics exist by now."""
        old = self._last if self._last is not None else delta.image
        self._last = image
        try:
            for topic_id, t in old.topics_by_id.items():
                if topic_id not in image.topics_by_id:
                    for partition in t.partitions:
                        try:
                            self.remote.mark_partition_for_deletion(t.name, partition, topic_id)
                        except Exception as e:
                            # The deletion below still runs; only a restart before it ends keeps the data.
                            log.warning("could not record that the remote data of %s-%d is to be deleted: %s",
                                        t.name, partition, e)
                        self._delete_later(t.name, partition, topic_id, 0, RETRY_MIN_MS)
            if image.topics_by_id is not old.topics_by_id or image.configs is not old.configs:
                self.remote.sync_partitions()
        except Exception:
            log.exception("applying metadata offset %d to the remote tier failed", image.provenance.last_offset)

    def _delete_later(self, topic: str, partition: int, topic_id: bytes, delay_ms: int, retry_ms: int) -> None:
        """Delete off the committing thread (the plugin may be slow or down), retrying with backoff
        until it succeeds: a failure leaves the segments listed, so a retry finds them again."""
        def attempt() -> None:
            try:
                self.remote.delete_partition_data(topic, partition, topic_id)
            except Exception as e:
                log.warning("deleting the remote segments of %s-%d failed (%s); retrying in %d ms",
                            topic, partition, e, retry_ms)
                self._delete_later(topic, partition, topic_id, retry_ms, min(retry_ms * 2, RETRY_MAX_MS))

        if self.scheduler is None:
            attempt()
        else:
            self.scheduler.schedule(f"remote-partition-delete-{topic}-{partition}", attempt, delay_ms)
