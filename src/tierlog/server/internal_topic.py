"""A coordinator's internal topic (``__consumer_offsets``, ``__transaction_state``): compacted,
created through the metadata controller the first time it is needed, as Kafka does -- once, even
when many requests need it at the same moment -- and the partition count its keys hash over; and
where a coordinator's load of one of its partitions goes on when the log start moves under it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from tierlog.metadata import Controller, TopicExistsError
from tierlog.server.partitions import PartitionManager
from tierlog.server.storage_io import StorageIO
from tierlog.storage.log import UnifiedLog

log = logging.getLogger(__name__)


class InternalTopic:
    def __init__(self, name: str, partitions: PartitionManager, controller: Controller, io: StorageIO, *,
                 num_partitions: int, configs: Mapping[str, str]) -> None:
        self.name = name
        self._partitions = partitions
        self._controller = controller
        self._io = io
        self._num_partitions = num_partitions
        self._configs = dict(configs)
        self._lock = asyncio.Lock()

    def exists(self) -> bool:
        return self.name in self._partitions.image.topics_by_name

    async def ensure(self) -> None:
        """Create the topic unless it exists (TierlogError when the controller cannot)."""
        if self.exists():
            return
        async with self._lock:
            if self.exists():
                return
            try:
                await self._io.run(self._controller.create_topic, self.name, self._num_partitions, 1, self._configs)
                log.info("created %s with %d partitions", self.name, self._num_partitions)
            except TopicExistsError:
                pass

    def partition_count(self) -> int:
        """The partitions keys hash over: the topic's, or the configured count before it exists."""
        topic = self._partitions.topic(self.name)
        return topic.num_partitions if topic is not None else self._num_partitions


def load_resume_offset(ulog: UnifiedLog, offset: int) -> int | None:
    """Where a coordinator's load of ``ulog`` goes on after its read at ``offset`` was refused as
    out of range: the log start offset, when DeleteRecords or retention moved it past ``offset``
    while the load ran -- the records below it are gone, and a load started now would begin there
    too -- else None (the offset is out of range for another reason and the error stands). Without
    this the load, and with it the broker's start, would fail on a log that is merely shorter."""
    start = ulog.log_start_offset
    if start <= offset:
        return None
    log.warning("the log start offset of %s-%d moved from below %d to %d during the coordinator's load; "
                "loading on from there", ulog.topic, ulog.partition, offset, start)
    return start
