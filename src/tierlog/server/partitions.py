"""The broker's partitions: which exist (the metadata image), their logs, appends and reads as
batches of blocking work, and the wake-ups that end long-polling fetches (Kafka's ReplicaManager
and fetch purgatory, for a single node that leads every partition).

The ``*_blocking`` methods run on the storage thread pool; everything else runs on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tierlog.errors import (
    CorruptRecordError,
    ErrorCode,
    KafkaStorageError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
    error_code_of,
)
from tierlog.ids import TopicPartition
from tierlog.metadata import MetadataImage, TopicImage
from tierlog.server.connection import FileSlice
from tierlog.storage.batch_check import check_record_set
from tierlog.storage.log import UnifiedLog
from tierlog.storage.log_manager import LogManager
from tierlog.storage.producer_state import AppendOrigin
from tierlog.storage.segment import SegmentDamageError
from tierlog.tiered import RemoteLogManager

log = logging.getLogger(__name__)


#: Regions smaller than this are copied in the I/O thread: for them one pread is cheaper than the
#: sendfile hand-off (which waits for the socket buffer to drain and pauses reading).
SENDFILE_MIN_BYTES = 256 << 10

#: Internal topics clients may read but not write (Kafka answers INVALID_TOPIC_EXCEPTION).
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS_TOPIC})


@dataclass(frozen=True, slots=True)
class AppendResult:
    error_code: int = ErrorCode.NONE
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class ReadSpec:
    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1


@dataclass(slots=True)
class ReadResult:
    error_code: int = ErrorCode.NONE
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes | FileSlice = b""

    @property
    def size(self) -> int:
        return len(self.records) if isinstance(self.records, bytes) else self.records.size

    def release(self) -> None:
        if isinstance(self.records, FileSlice):
            self.records.close()
            self.records = b""


class DataWaiters:
    """Futures of fetches waiting for data, by partition; an append completes them."""

    def __init__(self) -> None:
        self._by_partition: dict[TopicPartition, set[asyncio.Future[None]]] = {}

    def add(self, partitions: Iterable[TopicPartition], waiter: asyncio.Future[None]) -> None:
        for tp in partitions:
            self._by_partition.setdefault(tp, set()).add(waiter)

    def remove(self, partitions: Iterable[TopicPartition], waiter: asyncio.Future[None]) -> None:
        for tp in partitions:
            waiters = self._by_partition.get(tp)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._by_partition[tp]

    def notify(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            waiters = self._by_partition.get(tp)
            if waiters:
                for waiter in list(waiters):
                    if not waiter.done():
                        waiter.set_result(None)

    def notify_all(self) -> None:
        self.notify(list(self._by_partition))


class PartitionManager:
    def __init__(self, log_manager: LogManager, image: Callable[[], MetadataImage], node_id: int,
                 remote: RemoteLogManager | None = None) -> None:
        self.log_manager = log_manager
        self._image = image
        self.node_id = node_id
        #: The remote tier, when tiering is enabled broker-wide: reads below the local log start
        #: offset are served from it, and the log start offset clients see is the earliest of both.
        self.remote = remote
        self.waiters = DataWaiters()
        #: (topic, partition, damaged file) already said to be served from the remote tier.
        self._served_around_damage: set[tuple[str, int, str]] = set()

    @property
    def image(self) -> MetadataImage:
        return self._image()

    def topic(self, name: str) -> TopicImage | None:
        return self._image().topics_by_name.get(name)

    def leader_epoch(self, topic: str, partition: int) -> int:
        t = self.topic(topic)
        p = None if t is None else t.partitions.get(partition)
        return 0 if p is None else p.leader_epoch

    # -- blocking: run these on the storage thread pool -------------------------------------------

    def log_start_offset(self, ulog: UnifiedLog) -> int:
        """The partition's log start offset across both tiers (the local log's own start offset is
        Kafka's local-log-start-offset once segments have moved to the remote tier)."""
        if self.remote is None or not ulog.remote_log_enabled:
            return ulog.log_start_offset
        earliest = self.remote.earliest_offset(ulog.topic, ulog.partition)
        return ulog.log_start_offset if earliest is None else earliest

    def _read_remote(self, ulog: UnifiedLog, spec: ReadSpec, limit: int, min_one: bool) -> bytes | None:
        """A read below the local log start offset, from the remote tier; None when it is not there
        either (the caller answers OFFSET_OUT_OF_RANGE)."""
        if self.remote is None or spec.fetch_offset >= ulog.log_start_offset:
            return None
        return self._fetch_remote(spec, limit, min_one)

    def _fetch_remote(self, spec: ReadSpec, limit: int, min_one: bool) -> bytes | None:
        assert self.remote is not None
        info = self.remote.fetch(spec.topic, spec.partition, spec.fetch_offset, max(limit, 0), min_one_message=min_one)
        if info is None:
            return None
        # The remote copy gets the local read's guarantee: no batch that fails its CRC is served.
        records = info.records
        valid, problem = check_record_set(records)
        if problem is not None:
            log.error("damaged remote segment topic=%s partition=%d (%s-%d): %s at byte %d of the read from offset %d; "
                      "serving the %d bytes before it", spec.topic, spec.partition, spec.topic, spec.partition,
                      problem.reason, problem.position, spec.fetch_offset, valid)
            if valid == 0:
                raise CorruptRecordError(f"damaged data in the remote tier at offset {spec.fetch_offset}: "
                                         f"{problem.reason}")
            return records[:valid]
        return records

    def _remote_copy_of_damage(self, ulog: UnifiedLog, spec: ReadSpec, limit: int, min_one: bool,
                               damage: SegmentDamageError) -> bytes | None:
        """The batches at the fetch offset from the remote tier, when the local copy is damaged but the
        segment was tiered before the damage: the consumer reads on as if nothing happened. None when
        the remote tier does not hold the offset (or its copy is damaged too)."""
        if self.remote is None or not ulog.remote_log_enabled:
            return None
        try:
            intact = self._fetch_remote(spec, limit, min_one)
        except Exception as e:
            log.warning("no remote copy of the damaged data of %s-%d at %d: %s", spec.topic, spec.partition,
                        spec.fetch_offset, e)
            return None
        if not intact:
            return None
        key = (spec.topic, spec.partition, str(damage.path))
        if key not in self._served_around_damage:
            self._served_around_damage.add(key)
            log.warning("serving %s-%d from offset %d from the remote tier: the local copy in %s is damaged "
                        "(%s); move the damaged local segment aside to stop reading it",
                        spec.topic, spec.partition, spec.fetch_offset, damage.path, damage.problem.reason)
        return intact

    def get_log_blocking(self, topic: str, partition: int) -> UnifiedLog:
        """The partition's log, created if the image has the partition but the disk does not yet."""
        t = self._image().topics_by_name.get(topic)
        if t is None or partition not in t.partitions:
            raise UnknownTopicOrPartitionError(f"This server does not host this topic-partition: {topic}-{partition}")
        ulog = self.log_manager.get_log(topic, partition)
        if ulog is None or ulog.deleted:
            ulog = self.log_manager.get_or_create_log(topic, partition, t.topic_id)
            # The topic may have been deleted between the image lookup and the creation; the log sync
            # deletes logs after the image changes, so checking the image again closes the gap.
            current = self._image().topics_by_name.get(topic)
            if current is None or current.topic_id != t.topic_id:
                self.log_manager.delete_log(topic, partition)
                raise UnknownTopicOrPartitionError(f"Topic {topic} was deleted")
        return ulog

    def append_blocking(self, items: list[tuple[str, int, bytes | None]], *, internal: bool = False,
                        origin: AppendOrigin = AppendOrigin.CLIENT) -> list[AppendResult]:
        out: list[AppendResult] = []
        image = self._image()
        for topic, partition, records in items:
            if not internal and topic in INTERNAL_TOPICS:
                out.append(AppendResult(ErrorCode.INVALID_TOPIC_EXCEPTION, error_message=f"Cannot append to internal topic {topic}"))
                continue
            if records is None:
                out.append(AppendResult(ErrorCode.CORRUPT_MESSAGE, error_message="a produce request without records"))
                continue
            try:
                ulog = self.get_log_blocking(topic, partition)
                t = image.topics_by_name.get(topic)
                epoch = t.partitions[partition].leader_epoch if t is not None and partition in t.partitions else 0
                info = ulog.append_as_leader(records, epoch, origin)
            except Exception as e:
                code = error_code_of(e)
                if code == ErrorCode.UNKNOWN_SERVER_ERROR:
                    log.exception("append to %s-%d failed", topic, partition)
                out.append(AppendResult(code, error_message=str(e) or type(e).__name__))
                continue
            out.append(AppendResult(ErrorCode.NONE, info.first_offset, info.log_append_time_ms, info.log_start_offset,
                                    duplicate=info.duplicate))
        return out

    def read_blocking(self, specs: list[ReadSpec], max_bytes: int, *, read_committed: bool = False,
                      copy_all: bool = False) -> list[ReadResult]:
        """Read every partition in request order within ``max_bytes`` overall; the first partition
        with data returns at least one whole batch even if it is larger (Kafka's minOneMessage)."""
        remaining = max_bytes
        min_one = True
        out: list[ReadResult] = []
        for spec in specs:
            result = ReadResult()
            out.append(result)
            try:
                ulog = self.get_log_blocking(spec.topic, spec.partition)
            except UnknownTopicOrPartitionError:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            epoch = self.leader_epoch(spec.topic, spec.partition)
            if spec.current_leader_epoch >= 0 and spec.current_leader_epoch != epoch:
                result.error_code = ErrorCode.FENCED_LEADER_EPOCH if spec.current_leader_epoch < epoch else ErrorCode.UNKNOWN_LEADER_EPOCH
                continue
            hw = ulog.high_watermark
            lso = ulog.last_stable_offset
            result.high_watermark, result.last_stable_offset = hw, lso
            result.log_start_offset = self.log_start_offset(ulog)
            limit = min(spec.partition_max_bytes, remaining)
            if limit <= 0 and not min_one:
                continue
            below_local = False
            try:
                # The log's lock is held from the read until the bytes are copied or the descriptor
                # duplicated: deleting the log closes its segments under that lock, and a descriptor
                # closed in between could be reused by another file.
                with ulog.lock:
                    # Bounded by the high watermark reported with the records, even if appends land
                    # meanwhile: a client may take the reported value as the end of what it got.
                    info = ulog.read(spec.fetch_offset, max(limit, 0), max_offset=lso if read_committed else hw,
                                     min_one_message=min_one)
                    region = info.records
                    if region is None or region.size == 0:
                        continue
                    if copy_all or region.size < SENDFILE_MIN_BYTES:
                        result.records = region.read_bytes()
                    else:
                        # The duplicate keeps the slice readable if the segment is closed or deleted
                        # before the response is sent.
                        dup = region.duplicate()
                        result.records = FileSlice(dup.fd, dup.position, dup.size)
            except OffsetOutOfRangeError:
                below_local = True
            except SegmentDamageError as e:
                intact = self._remote_copy_of_damage(ulog, spec, limit, min_one, e)
                if intact is None:
                    # CORRUPT_MESSAGE reaches the application (librdkafka passes it on as a consumer
                    # error; KAFKA_STORAGE_ERROR would have it wait silently for a new leader that
                    # never comes). The log said so once at ERROR; a consumer retrying is not news.
                    result.error_code = error_code_of(e)
                    log.debug("read of %s-%d at %d hit damaged data: %s", spec.topic, spec.partition,
                              spec.fetch_offset, e)
                    continue
                result.records = intact
            except KafkaStorageError as e:
                # An offline partition (said at ERROR when it went offline); consumers retry.
                result.error_code = error_code_of(e)
                log.debug("read of %s-%d at %d failed: %s", spec.topic, spec.partition, spec.fetch_offset, e)
                continue
            except Exception as e:
                result.error_code = error_code_of(e)
                log.warning("read of %s-%d at %d failed: %s", spec.topic, spec.partition, spec.fetch_offset, e)
                continue
            if below_local:
                # Outside the log's lock: the remote read may take a while and appends go on.
                try:
                    remote = self._read_remote(ulog, spec, limit, min_one)
                except Exception as e:
                    result.error_code = error_code_of(e)
                    log.warning("remote read of %s-%d at %d failed: %s", spec.topic, spec.partition,
                                spec.fetch_offset, e)
                    continue
                if remote is None:
                    result.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                    continue
                result.records = remote
            remaining -= result.size
            min_one = False
        return out
