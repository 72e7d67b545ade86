"""A coordinator's internal topic (``__consumer_offsets``, ``__transaction_state``): compacted,
created through the metadata controller the first time it is needed, as Kafka does -- once, even
when many requests need it at the same moment -- and the partition count its keys hash over; and
where a coordinator's load of one of its partitions goes on when the log start moves under it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Mapping

from tierlog.errors import CorruptRecordError, OffsetOutOfRangeError
from tierlog.metadata import Controller, TopicExistsError
from tierlog.records import BatchHeader, Record, iter_batches
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


def iter_load_batches(ulog: UnifiedLog, *, skip_damaged_segments: bool) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """Every batch of one partition of an internal topic, from its log start, for a coordinator's load.

    When DeleteRecords or retention moves the log start past the read while the load runs, the load
    goes on from the new log start (the records below it are gone, and a load started now would begin
    there too); without this the load, and with it the broker's start, would fail on a log that is
    merely shorter. Damaged data the log reports is skipped to the next segment with
    ``skip_damaged_segments`` (the commits in it are lost, the rest load), else the load stops there.
    The load ends at the log end, or where only a partial batch comes back (the log ends mid-batch)."""
    offset, end = ulog.log_start_offset, ulog.log_end_offset
    while offset < end:
        try:
            data = ulog.read_bytes(offset, 8 << 20)
        except OffsetOutOfRangeError:
            start = ulog.log_start_offset
            if start <= offset:
                raise  # out of range for another reason: the error stands
            log.warning("the log start offset of %s-%d moved from below %d to %d during the coordinator's load; "
                        "loading on from there", ulog.topic, ulog.partition, offset, start)
            offset = start
            continue
        except CorruptRecordError as e:
            if not skip_damaged_segments:
                log.error("stopping the load of %s-%d at damaged data at offset %d: %s", ulog.topic, ulog.partition,
                          offset, e)
                return
            segment = ulog.segments.floor(offset)
            after = None if segment is None else ulog.segments.next_base_offset(segment.base_offset)
            log.error("skipping damaged data in %s-%d from offset %d to %s: %s", ulog.topic, ulog.partition, offset,
                      "the log end" if after is None else after, e)
            if after is None or after <= offset:
                return
            offset = after
            continue
        if not data:
            return
        before = offset
        for header, records in iter_batches(data):
            offset = header.next_offset
            yield header, records
        if offset == before:
            return  # only a partial batch came back: the log ends mid-batch
