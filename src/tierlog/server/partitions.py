"""The broker's partitions: which exist (the metadata image), their logs, appends and reads as
batches of blocking work, and the wake-ups that end long-polling fetches (Kafka's ReplicaManager
and fetch purgatory, for a single node that leads every partition).

The ``*_blocking`` methods run on the storage thread pool; everything else runs on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass

from tierlog.errors import (
    ErrorCode,
    TierlogError,
    UnknownTopicOrPartitionError,
    error_code_of,
    record_errors_of,
)
from tierlog.ids import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, TopicPartition
from tierlog.metadata import MetadataImage, TopicImage
from tierlog.server.connection import FileSlice
from tierlog.storage.file_records import FileRegion
from tierlog.storage.log import UnifiedLog
from tierlog.storage.log_manager import LogManager
from tierlog.storage.producer_state import AppendOrigin
from tierlog.storage.txn_index import AbortedTxn
from tierlog.tiered import RemoteLogManager
from tierlog.tiered.reader import TieredReader

log = logging.getLogger(__name__)


#: Regions smaller than this are copied in the I/O thread: for them one pread is cheaper than the
#: sendfile hand-off (which waits for the socket buffer to drain and pauses reading).
SENDFILE_MIN_BYTES = 256 << 10

#: Internal topics clients may read but not write, delete or trim (Kafka answers INVALID_TOPIC_EXCEPTION).
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})


@dataclass(frozen=True, slots=True)
class AppendResult:
    error_code: int = ErrorCode.NONE
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    #: The refused records of the batch, (index in the batch, message) each (KIP-467).
    record_errors: tuple[tuple[int, str], ...] = ()
    duplicate: bool = False
    #: Asked for with ``durable``: completed once the batches are on disk (group commit).
    synced: Future[None] | None = None


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
    #: read_committed only: the aborted transactions overlapping ``records`` (Kafka's null otherwise).
    aborted_transactions: list[AbortedTxn] | None = None

    @property
    def size(self) -> int:
        return len(self.records) if isinstance(self.records, bytes) else self.records.size

    def release(self) -> None:
        if isinstance(self.records, FileSlice):
            self.records.close()
            self.records = b""


def _take(region: FileRegion, copy_all: bool) -> bytes | FileSlice:
    """The bytes of a local read, taken under the log's lock: copied when small (or ``copy_all``),
    else a duplicate of the descriptor, which keeps the slice readable if the segment is closed or
    deleted before the response is sent."""
    if copy_all or region.size < SENDFILE_MIN_BYTES:
        return region.read_bytes()
    return FileSlice(os.dup(region.fd), region.position, region.size)


def _leader_epoch(image: MetadataImage, topic: str, partition: int) -> int:
    t = image.topics_by_name.get(topic)
    p = None if t is None else t.partitions.get(partition)
    return 0 if p is None else p.leader_epoch


class DataWaiters:
    """Futures of fetches waiting for data, by partition; a moving high watermark completes them."""

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

    def notifier(self, loop: asyncio.AbstractEventLoop) -> Callable[[UnifiedLog], None]:
        """A log's high watermark listener: wakes the fetches waiting on it, on ``loop``, from the
        thread whose fsync or flush moved the high watermark (the fetch reads up to it)."""
        def advanced(ulog: UnifiedLog) -> None:
            if (ulog.topic, ulog.partition) not in self._by_partition:
                # Nobody waits on it: no wake-up of the loop (a sync of a produce of many partitions
                # moved as many high watermarks). A fetch registers before it reads the high
                # watermark, which moved before this call, so one registering now sees it.
                return
            try:
                loop.call_soon_threadsafe(self.notify, [(ulog.topic, ulog.partition)])
            except RuntimeError:
                pass  # the loop is closed: the broker stopped, nobody waits
        return advanced


class PartitionManager:
    def __init__(self, log_manager: LogManager, image: Callable[[], MetadataImage], node_id: int,
                 remote: RemoteLogManager | None = None) -> None:
        self.log_manager = log_manager
        self._image = image
        self.node_id = node_id
        #: The remote tier, when tiering is enabled broker-wide: reads below the local log start
        #: offset are served from it, and the log start offset clients see is the earliest of both.
        self.remote = remote
        #: Where a read's bytes come from: the local log, or the remote tier (tiered.reader).
        self.reader = TieredReader(remote)
        self.waiters = DataWaiters()
        #: Whether the coordinators' own appends (offset commits) wait for their fsync too: set by the
        #: composition root from ``log.durable.acks`` (anything but none).
        self.durable_internal = False

    @property
    def image(self) -> MetadataImage:
        return self._image()

    def topic(self, name: str) -> TopicImage | None:
        return self._image().topics_by_name.get(name)

    def leader_epoch(self, topic: str, partition: int) -> int:
        return _leader_epoch(self._image(), topic, partition)

    # -- blocking: run these on the storage thread pool -------------------------------------------

    def log_start_offset(self, ulog: UnifiedLog) -> int:
        """The partition's log start offset across both tiers."""
        return self.reader.log_start_offset(ulog)

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

    def append_if_writes_only(self, items: list[tuple[str, int, bytes | memoryview | None]], *,
                              durable: bool = False) -> list[AppendResult] | None:
        """:meth:`append_blocking` when every log is there and would only be written to (its lock
        free, nothing to check or fsync first: UnifiedLog.appends_write_only), else None without
        touching any: what may run on the event loop (StorageIO.try_inline)."""
        held: list[UnifiedLog] = []
        image = self._image()
        try:
            for topic, partition, _ in items:
                ulog = self.log_manager.get_log(topic, partition)
                # A new epoch's first batch fsyncs the epoch checkpoint: a new topic's first produce
                # of many partitions did as many fsyncs on the loop, and, slow, kept every later
                # append off it for InlineGate's pause.
                if (ulog is None or not ulog.appends_write_only
                        or ulog.assigns_leader_epoch(_leader_epoch(image, topic, partition))
                        or not ulog.lock.acquire(blocking=False)):
                    return None
                held.append(ulog)
            return self.append_blocking(items, durable=durable)
        finally:
            for ulog in held:
                ulog.lock.release()

    def append_blocking(self, items: list[tuple[str, int, bytes | memoryview | None]], *, internal: bool = False,
                        origin: AppendOrigin = AppendOrigin.CLIENT, durable: bool = False) -> list[AppendResult]:
        """Append each record set; with ``durable`` each success carries the future of its fsync.
        The syncs of a request's partitions start together once all are appended (one syncfs for
        many partitions: LogManager.deferred_syncs)."""
        if len(items) < 2:
            return self._append_each(items, internal, origin, durable)
        with self.log_manager.deferred_syncs():
            return self._append_each(items, internal, origin, durable)

    def _append_each(self, items: list[tuple[str, int, bytes | memoryview | None]], internal: bool,
                     origin: AppendOrigin, durable: bool) -> list[AppendResult]:
        out: list[AppendResult] = []
        image = self._image()
        for topic, partition, records in items:
            if not internal and topic in INTERNAL_TOPICS:
                out.append(AppendResult(ErrorCode.INVALID_TOPIC_EXCEPTION, error_message=f"Cannot append to internal topic {topic}"))
                continue
            if records is None:
                out.append(AppendResult(ErrorCode.CORRUPT_MESSAGE, error_message="a produce request without records"))
                continue
            ulog = None
            try:
                ulog = self.get_log_blocking(topic, partition)
                info = ulog.append_as_leader(records, _leader_epoch(image, topic, partition), origin)
            except Exception as e:
                code = error_code_of(e)
                if code == ErrorCode.UNKNOWN_SERVER_ERROR:
                    log.exception("append to %s-%d failed", topic, partition)
                record_errors = record_errors_of(e)
                # Kafka answers a batch refused record by record with the log's start offset.
                start = ulog.log_start_offset if record_errors and ulog is not None else -1
                out.append(AppendResult(code, log_start_offset=start, error_message=str(e) or type(e).__name__,
                                        record_errors=record_errors))
                continue
            synced = None
            if durable:
                synced = self.log_manager.sync_future(ulog, info)
            elif ulog.hw_follows_durable and not info.duplicate:
                # Answered now (acks=1 under log.durable.acks=all), but consumers see the records only
                # once they are fsynced: the sync is asked for all the same, so the high watermark moves.
                self.log_manager.sync_future(ulog, info, answered=False)
            out.append(AppendResult(ErrorCode.NONE, info.first_offset, info.log_append_time_ms, info.log_start_offset,
                                    duplicate=info.duplicate, synced=synced))
        return out

    def read_if_local(self, specs: list[ReadSpec], max_bytes: int, *,
                      read_committed: bool = False) -> list[ReadResult] | None:
        """:meth:`read_blocking` when every partition's log is there and is read from its local
        segments only (no log to create, no remote tier to ask) and no log's lock is held by
        another thread (an append, a roll, retention), else None without reading any: what may run
        on the event loop (StorageIO.try_inline). Such a read is index lookups and a descriptor
        duplicated, in memory when the index pages are cached (the gate sends the reads to the
        pool for a while if one waited on the disk)."""
        held: list[UnifiedLog] = []
        remote = self.remote
        try:
            for spec in specs:
                ulog = self.log_manager.get_log(spec.topic, spec.partition)
                if (ulog is None or ulog.deleted or (remote is not None and ulog.remote_log_enabled)
                        or not ulog.lock.acquire(blocking=False)):
                    return None
                # Held to the end (the lock is re-entrant): retention cannot delete a segment
                # between this check and the read, as under the read's own lock on the pool.
                held.append(ulog)
            return self.read_blocking(specs, max_bytes, read_committed=read_committed)
        finally:
            for ulog in held:
                ulog.lock.release()

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
            except TierlogError as e:
                # Unknown, or refused at startup (UnsupportedRecordFormatError) or on an offline log
                # dir (KAFKA_STORAGE_ERROR): that partition's error, as Kafka answers per partition;
                # the other partitions of the request are still read and the connection stays open.
                result.error_code = error_code_of(e)
                continue
            epoch = self.leader_epoch(spec.topic, spec.partition)
            if spec.current_leader_epoch >= 0 and spec.current_leader_epoch != epoch:
                result.error_code = ErrorCode.FENCED_LEADER_EPOCH if spec.current_leader_epoch < epoch else ErrorCode.UNKNOWN_LEADER_EPOCH
                continue
            hw = ulog.high_watermark
            # Read after: an fsync may move the high watermark between the two reads, and the LSO
            # answered with this high watermark must not pass it.
            lso = min(ulog.last_stable_offset, hw)
            result.high_watermark, result.last_stable_offset = hw, lso
            result.log_start_offset = self.log_start_offset(ulog)
            limit = min(spec.partition_max_bytes, remaining)
            if limit <= 0 and not min_one:
                continue
            got = self.reader.read(ulog, spec.fetch_offset, max(limit, 0), max_offset=lso if read_committed else hw,
                                   min_one_message=min_one, take=lambda region: _take(region, copy_all),
                                   collect_aborted=read_committed)
            if got.error is not None:
                result.error_code = error_code_of(got.error)
                continue
            result.aborted_transactions = got.aborted_transactions
            if got.records is None:
                continue
            result.records = got.records
            remaining -= result.size
            min_one = False
        return out
