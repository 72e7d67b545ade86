"""A partition's read across both tiers (Kafka's ReplicaManager#readFromLog with its remote fetch):
the local log first; below the local log start offset, or where the local copy is damaged but the
segment was tiered before the damage, the remote tier. The server shapes the request and the
response around it; this module decides where the bytes come from.

The local read's bytes are taken (copied, or their file region handed on) by the caller's ``take``
while the log's lock is held: deleting the log closes its segments under that lock, and a file
descriptor closed in between could be reused by another file. The remote read runs outside the
lock: it may take a while and appends go on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from tierlog.errors import CorruptRecordError, KafkaStorageError, OffsetOutOfRangeError
from tierlog.records.header import iter_headers
from tierlog.storage.batch_check import check_record_set
from tierlog.storage.file_records import FileRegion
from tierlog.storage.log import UnifiedLog
from tierlog.storage.segment import SegmentDamageError
from tierlog.storage.txn_index import AbortedTxn
from tierlog.tiered.remote_reader import RemoteFetchInfo

log = logging.getLogger(__name__)

R = TypeVar("R")


class RemoteTier(Protocol):
    """What the tiered read needs of the remote log manager."""

    def fetch(self, topic: str, partition: int, fetch_offset: int, max_bytes: int, *,
              min_one_message: bool = True, read_committed: bool = False) -> RemoteFetchInfo | None: ...

    def earliest_offset(self, topic: str, partition: int) -> int | None: ...


@dataclass(slots=True)
class TieredRead(Generic[R]):
    #: What ``take`` made of the local bytes, or the remote tier's bytes; None: nothing to return.
    records: R | bytes | None = None
    #: With read_committed (``collect_aborted``): the aborted transactions the bytes overlap, from the
    #: local transaction indexes or the remote tier's (then the local ones); None otherwise.
    aborted_transactions: list[AbortedTxn] | None = None
    from_remote: bool = False
    #: Why the read failed (logged here already); the server answers its error code.
    error: BaseException | None = None


class TieredReader:
    def __init__(self, remote: RemoteTier | None) -> None:
        #: The remote tier, when tiering is enabled broker-wide.
        self.remote = remote
        #: (topic, partition, damaged file) already said to be served from the remote tier.
        self._served_around_damage: set[tuple[str, int, str]] = set()

    def log_start_offset(self, ulog: UnifiedLog) -> int:
        """The partition's log start offset across both tiers (the local log's own start offset is
        Kafka's local-log-start-offset once segments have moved to the remote tier)."""
        if self.remote is None or not ulog.remote_log_enabled:
            return ulog.log_start_offset
        earliest = self.remote.earliest_offset(ulog.topic, ulog.partition)
        return ulog.log_start_offset if earliest is None else earliest

    def read(self, ulog: UnifiedLog, fetch_offset: int, max_bytes: int, *, max_offset: int,
             min_one_message: bool, take: Callable[[FileRegion], R],
             collect_aborted: bool = False) -> TieredRead[R]:
        """Read from ``fetch_offset`` up to ``max_bytes`` (the whole first batch if
        ``min_one_message``), locally below ``max_offset``; never raises. ``collect_aborted``
        (read_committed) has a remote read return the aborted transactions its bytes overlap."""
        topic, partition = ulog.topic, ulog.partition
        try:
            # Bounded by ``max_offset`` (the high watermark or the last stable offset reported with
            # the records), even if appends land meanwhile.
            with ulog.lock:
                info = ulog.read(fetch_offset, max_bytes, max_offset=max_offset, min_one_message=min_one_message)
                region = info.records
                if region is None or region.size == 0:
                    return TieredRead(aborted_transactions=[] if collect_aborted else None)
                aborted = (ulog.collect_aborted_transactions(fetch_offset, ulog.fetch_upper_bound_offset(info))
                           if collect_aborted else None)
                return TieredRead(take(region), aborted)
        except OffsetOutOfRangeError as e:
            below_local = e
        except SegmentDamageError as e:
            intact = self._remote_copy_of_damage(ulog, fetch_offset, max_bytes, min_one_message, e)
            if intact is None:
                # CORRUPT_MESSAGE reaches the application (librdkafka passes it on as a consumer
                # error; KAFKA_STORAGE_ERROR would have it wait silently for a new leader that
                # never comes). The log said so once at ERROR; a consumer retrying is not news.
                log.debug("read of %s-%d at %d hit damaged data: %s", topic, partition, fetch_offset, e)
                return TieredRead(error=e)
            # The remote copy's bytes match the local ones: the same offsets, the same bound.
            return TieredRead(intact, _aborted_around(ulog, fetch_offset, intact) if collect_aborted else None,
                              from_remote=True)
        except KafkaStorageError as e:
            # An offline partition (said at ERROR when it went offline); consumers retry.
            log.debug("read of %s-%d at %d failed: %s", topic, partition, fetch_offset, e)
            return TieredRead(error=e)
        except Exception as e:
            log.warning("read of %s-%d at %d failed: %s", topic, partition, fetch_offset, e)
            return TieredRead(error=e)
        # Outside the log's lock: the remote read may take a while and appends go on.
        try:
            remote = self.read_remote(ulog, fetch_offset, max_bytes, min_one_message, read_committed=collect_aborted)
        except Exception as e:
            log.warning("remote read of %s-%d at %d failed: %s", topic, partition, fetch_offset, e)
            return TieredRead(error=e)
        if remote is None:
            return TieredRead(error=below_local)
        aborted = None
        if collect_aborted:
            aborted = list(remote.aborted_transactions or [])
            if remote.records and not remote.aborted_complete:
                # An ABORT marker may not be tiered yet: the local indexes settle the rest.
                aborted += ulog.collect_aborted_transactions(fetch_offset, remote.upper_bound_offset)
        return TieredRead(remote.records, aborted, from_remote=True)

    def read_remote(self, ulog: UnifiedLog, fetch_offset: int, max_bytes: int, min_one_message: bool, *,
                    read_committed: bool = False) -> RemoteFetchInfo | None:
        """A read below the local log start offset, from the remote tier; None when it is not there
        either (the caller answers OFFSET_OUT_OF_RANGE)."""
        if self.remote is None or fetch_offset >= ulog.log_start_offset:
            return None
        return self._fetch_remote(ulog.topic, ulog.partition, fetch_offset, max_bytes, min_one_message,
                                  read_committed)

    def _fetch_remote(self, topic: str, partition: int, fetch_offset: int, max_bytes: int, min_one_message: bool,
                      read_committed: bool) -> RemoteFetchInfo | None:
        assert self.remote is not None
        info = self.remote.fetch(topic, partition, fetch_offset, max(max_bytes, 0), min_one_message=min_one_message,
                                 read_committed=read_committed)
        if info is None:
            return None
        # The remote copy gets the local read's guarantee: no batch that fails its CRC is served.
        records = info.records
        valid, problem = check_record_set(records)
        if problem is not None:
            log.error("damaged remote segment topic=%s partition=%d (%s-%d): %s at byte %d of the read from offset %d; "
                      "serving the %d bytes before it", topic, partition, topic, partition,
                      problem.reason, problem.position, fetch_offset, valid)
            if valid == 0:
                raise CorruptRecordError(f"damaged data in the remote tier at offset {fetch_offset}: "
                                         f"{problem.reason}")
            return RemoteFetchInfo(records[:valid], info.segment, info.aborted_transactions, info.upper_bound_offset,
                                   info.aborted_complete)
        return info

    def _remote_copy_of_damage(self, ulog: UnifiedLog, fetch_offset: int, max_bytes: int, min_one_message: bool,
                               damage: SegmentDamageError) -> bytes | None:
        """The batches at the fetch offset from the remote tier, when the local copy is damaged but the
        segment was tiered before the damage: the consumer reads on as if nothing happened. None when
        the remote tier does not hold the offset (or its copy is damaged too)."""
        topic, partition = ulog.topic, ulog.partition
        if self.remote is None or not ulog.remote_log_enabled:
            return None
        try:
            info = self._fetch_remote(topic, partition, fetch_offset, max_bytes, min_one_message, False)
        except Exception as e:
            log.warning("no remote copy of the damaged data of %s-%d at %d: %s", topic, partition, fetch_offset, e)
            return None
        if info is None or not info.records:
            return None
        key = (topic, partition, str(damage.path))
        if key not in self._served_around_damage:
            self._served_around_damage.add(key)
            log.warning("serving %s-%d from offset %d from the remote tier: the local copy in %s is damaged "
                        "(%s); move the damaged local segment aside to stop reading it",
                        topic, partition, fetch_offset, damage.path, damage.problem.reason)
        return info.records


def _aborted_around(ulog: UnifiedLog, fetch_offset: int, records: bytes) -> list[AbortedTxn]:
    last = None
    for header in iter_headers(records):
        last = header
    upper = ulog.log_end_offset if last is None else last.next_offset
    return ulog.collect_aborted_transactions(fetch_offset, upper)
