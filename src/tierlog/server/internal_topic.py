"""A coordinator's internal topic (``__consumer_offsets``, ``__transaction_state``): compacted,
created through the metadata controller the first time it is needed, as Kafka does -- once, even
when many requests need it at the same moment -- and the partition count its keys hash over."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from tierlog.metadata import Controller, TopicExistsError
from tierlog.server.partitions import PartitionManager
from tierlog.server.storage_io import StorageIO

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
