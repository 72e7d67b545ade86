"""The transaction coordinator: every transactional id of this broker, kept in ``__transaction_state``.

State lives on the event loop. Each change is written to the id's partition of the state topic before
it is applied or answered (Kafka's prepareTransitionTo / completeTransitionTo); a ``pending`` flag on
the id makes concurrent requests for it answer CONCURRENT_TRANSACTIONS meanwhile. Ending a transaction
runs Kafka's two phases in order -- PrepareCommit/PrepareAbort written, then a COMMIT/ABORT marker
into every partition of the transaction (the group's ``__consumer_offsets`` partition included), then
CompleteCommit/CompleteAbort -- so a crash at any step leaves a Prepare* record that the next start
finishes before the coordinator answers for the id. The rules (which error where) are Kafka's
TransactionCoordinator's for transaction versions 0-2; :mod:`.rules` holds them as pure functions.
State records are TransactionLogValue version 1 once the finalized ``transaction.version`` is 1 or
more, version 0 before (Kafka's TransactionStateManager does the same).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass

from tierlog.clock import Clock
from tierlog.config.settings import setting
from tierlog.errors import ErrorCode as Code
from tierlog.errors import TierlogError
from tierlog.ids import CONSUMER_OFFSETS_TOPIC, TopicPartition
from tierlog.metadata import Controller
from tierlog.metadata.features import TRANSACTION_VERSION_FEATURE
from tierlog.records import (
    ControlRecordType,
    EndTransactionMarker,
    SimpleRecord,
    build_batch,
    build_end_txn_marker_batch,
)
from tierlog.server.groups.coordinator import GroupCoordinator
from tierlog.server.internal_topic import InternalTopic, iter_load_batches
from tierlog.server.partitions import AppendResult, PartitionManager
from tierlog.server.storage_io import StorageIO
from tierlog.server.ticker import Ticker
from tierlog.server.txn import rules
from tierlog.server.txn.records import (
    TRANSACTION_STATE_TOPIC,
    TxnLogValue,
    TxnState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for_transactional_id,
)
from tierlog.server.txn.rules import TxnMetadata
from tierlog.storage.producer_state import AppendOrigin

log = logging.getLogger(__name__)

TICK_INTERVAL_S = 0.1
#: Marker writes that fail (a storage error) are retried this often before the transaction is left
#: in its Prepare state for the next start to finish.
MARKER_ATTEMPTS = 5
MARKER_BACKOFF_S = 0.2

#: The steps of ending a transaction at which a crash hook runs (see ``TransactionCoordinator``):
#: the Prepare* record written and no marker yet; the first partition's marker written and the rest
#: not; every marker written and no Complete* record yet.
CRASH_STEPS = ("end-txn-after-prepare", "end-txn-between-markers", "end-txn-before-complete")


@dataclass(frozen=True)
class TxnSettings:
    num_partitions: int = setting("transaction.state.log.num.partitions")
    segment_bytes: int = setting("transaction.state.log.segment.bytes")
    max_timeout_ms: int = setting("transaction.max.timeout.ms")
    abort_timed_out_interval_ms: int = setting("transaction.abort.timed.out.transaction.cleanup.interval.ms")
    id_expiration_ms: int = setting("transactional.id.expiration.ms")
    remove_expired_interval_ms: int = setting("transaction.remove.expired.transaction.cleanup.interval.ms")


class TransactionCoordinator:
    def __init__(self, partitions: PartitionManager, controller: Controller, io: StorageIO, clock: Clock,
                 groups: GroupCoordinator, next_producer_id: Callable[[], int], settings: TxnSettings,
                 crash_hook: Callable[[str], None] | None = None) -> None:
        self.partitions = partitions
        self.controller = controller
        self.io = io
        self.clock = clock
        self.groups = groups
        self._next_producer_id = next_producer_id
        self.settings = settings
        #: Called with each of CRASH_STEPS as ending a transaction passes it; the crash tests arm it to
        #: SIGKILL the broker right there (None in production). Armed, markers are written one
        #: partition at a time so that "between markers" exists.
        self._crash_hook = crash_hook
        self.txns: dict[str, TxnMetadata] = {}
        self._write_lock = asyncio.Lock()
        self._topic = InternalTopic(TRANSACTION_STATE_TOPIC, partitions, controller, io,
                                    num_partitions=settings.num_partitions,
                                    configs={"cleanup.policy": "compact", "segment.bytes": str(settings.segment_bytes),
                                             "min.insync.replicas": "1"})
        self._ticker = Ticker(TICK_INTERVAL_S, self.tick, "transaction coordinator")
        self._last_abort_check_ms = 0
        self._last_expire_check_ms = 0
        #: Counters for the metrics endpoint and ``transactions list``.
        self.committed = 0
        self.aborted = 0
        self.timed_out = 0

    def now_ms(self) -> int:
        return self.clock.wall_ms()

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        if TRANSACTION_STATE_TOPIC in self.partitions.image.topics_by_name:
            loaded = await self.io.run(self._load_blocking)
            log.info("loaded %d transactional ids from %s", loaded, TRANSACTION_STATE_TOPIC)
            # Recovery: a transaction whose end was decided is finished before anyone asks about it.
            for meta in list(self.txns.values()):
                if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                    log.info("completing transaction %s (producer %d, epoch %d) found in %s",
                             meta.transactional_id, meta.producer_id, meta.producer_epoch, meta.state.kafka_name)
                    meta.pending = True
                    try:
                        await self._finish(meta, meta.state is TxnState.PREPARE_COMMIT)
                    finally:
                        meta.pending = False
        now = self.now_ms()
        self._last_abort_check_ms = self._last_expire_check_ms = now
        self._ticker.start()

    async def stop(self) -> None:
        await self._ticker.stop()

    async def tick(self) -> None:
        now = self.now_ms()
        # An end whose markers could not all be written (a storage error) is retried until it lands.
        for meta in list(self.txns.values()):
            if not meta.pending and meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                meta.pending = True
                try:
                    await self._finish(meta, meta.state is TxnState.PREPARE_COMMIT)
                finally:
                    meta.pending = False
        if now - self._last_abort_check_ms >= self.settings.abort_timed_out_interval_ms:
            self._last_abort_check_ms = now
            await self.abort_timed_out(now)
        if now - self._last_expire_check_ms >= self.settings.remove_expired_interval_ms:
            self._last_expire_check_ms = now
            await self.remove_expired(now)

    def _load_blocking(self) -> int:
        topic = self.partitions.topic(TRANSACTION_STATE_TOPIC)
        assert topic is not None
        latest: dict[str, TxnLogValue | None] = {}
        for partition in sorted(topic.partitions):
            ulog = self.partitions.get_log_blocking(TRANSACTION_STATE_TOPIC, partition)
            for header, records in iter_load_batches(ulog, skip_damaged_segments=False):
                if header.is_control:
                    continue
                for record in records:
                    if record.key is None:
                        continue
                    try:
                        txn_id = decode_key(record.key)
                        latest[txn_id] = None if record.value is None else decode_value(record.value)
                    except TierlogError as e:
                        log.warning("skipping unreadable record at %s-%d offset %d: %s", TRANSACTION_STATE_TOPIC,
                                    partition, record.offset, e)
        for txn_id, value in latest.items():
            if value is None:
                self.txns.pop(txn_id, None)
            else:
                self.txns[txn_id] = TxnMetadata.from_value(txn_id, value)
        return len(self.txns)

    # -- persistence -----------------------------------------------------------------------------

    async def ensure_topic(self) -> None:
        await self._topic.ensure()

    def partition_of(self, transactional_id: str) -> int:
        return partition_for_transactional_id(transactional_id, self._topic.partition_count())

    def coordinator_epoch(self, transactional_id: str) -> int:
        return self.partitions.leader_epoch(TRANSACTION_STATE_TOPIC, self.partition_of(transactional_id))

    def transaction_version(self) -> int:
        """The finalized ``transaction.version`` (0 when never set)."""
        return int(self.partitions.image.features.get(TRANSACTION_VERSION_FEATURE, 0))

    def _value_version(self) -> int:
        return 1 if self.transaction_version() >= 1 else 0

    async def _store(self, transactional_id: str, value: TxnLogValue | None) -> int:
        """Write the id's new state (None: a tombstone); the error code."""
        try:
            await self.ensure_topic()
        except TierlogError as e:
            log.error("cannot create %s: %s", TRANSACTION_STATE_TOPIC, e)
            return Code.COORDINATOR_NOT_AVAILABLE
        raw = None if value is None else encode_value(value, self._value_version())
        batch = build_batch([SimpleRecord(encode_key(transactional_id), raw, timestamp=self.now_ms())])
        partition = self.partition_of(transactional_id)
        async with self._write_lock:
            results = await self.io.run(self.partitions.append_blocking,
                                        [(TRANSACTION_STATE_TOPIC, partition, batch)], internal=True,
                                        durable=self.partitions.durable_internal)
        # Outside the write lock: other ids' state writes share the same group commit round.
        results = await _synced(results)
        if results[0].error_code:
            log.error("storing the state of transactional id %s failed: %s", transactional_id,
                      results[0].error_message)
            # Kafka maps a failed state write to a retriable coordinator error.
            return Code.NOT_COORDINATOR
        return Code.NONE

    async def _transition(self, meta: TxnMetadata, target: TxnMetadata) -> int:
        """Write ``target`` as the id's state and apply it on success."""
        code = await self._store(meta.transactional_id, target.to_value())
        if code == Code.NONE:
            meta.apply(target)
        return code

    # -- the APIs --------------------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int, expected_producer_id: int,
                               expected_epoch: int) -> tuple[int, int, int]:
        """(error code, producer id, epoch) for InitProducerId with a transactional id."""
        if not transactional_id:
            return Code.INVALID_REQUEST, -1, -1
        if not rules.valid_timeout(timeout_ms, self.settings.max_timeout_ms):
            return Code.INVALID_TRANSACTION_TIMEOUT, -1, -1
        try:
            await self.ensure_topic()
        except TierlogError:
            return Code.COORDINATOR_NOT_AVAILABLE, -1, -1
        meta = self.txns.get(transactional_id)
        if meta is None:
            producer_id = await self.io.run(self._next_producer_id)
            meta = self.txns.setdefault(transactional_id, TxnMetadata.new(transactional_id, producer_id, timeout_ms,
                                                                        self.now_ms()))
        if meta.pending:
            return Code.CONCURRENT_TRANSACTIONS, -1, -1
        now = self.now_ms()
        decision = rules.init_producer_id(meta, timeout_ms, expected_producer_id, expected_epoch, now)
        if isinstance(decision, int):
            return decision, -1, -1
        if decision.fence_ongoing:
            # A new producer with this id: the open transaction of the old one is aborted under a
            # bumped epoch (fencing the old one); this producer retries once that is done.
            meta.pending = True
            try:
                await self._fence_and_abort(meta)
            finally:
                meta.pending = False
            return Code.CONCURRENT_TRANSACTIONS, -1, -1
        target = decision.target
        if decision.rotate_producer_id:
            target.last_producer_id = meta.producer_id
            target.producer_id = await self.io.run(self._next_producer_id)
        meta.pending = True
        try:
            code = await self._transition(meta, target)
        finally:
            meta.pending = False
        if code:
            if meta.producer_epoch < 0:
                self.txns.pop(transactional_id, None)  # never stored
            return code, -1, -1
        return Code.NONE, meta.producer_id, meta.producer_epoch

    def _check_producer(self, transactional_id: str, producer_id: int, producer_epoch: int) -> tuple[int, TxnMetadata | None]:
        if not transactional_id:
            return Code.INVALID_REQUEST, None
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return Code.INVALID_PRODUCER_ID_MAPPING, None
        if producer_epoch != meta.producer_epoch:
            return Code.PRODUCER_FENCED, None
        if meta.pending:
            return Code.CONCURRENT_TRANSACTIONS, None
        return Code.NONE, meta

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[TopicPartition],
                             client_transaction_version: int = 0) -> dict[TopicPartition, int]:
        """AddPartitionsToTxn (and AddOffsetsToTxn's partition, and the implicit adds of TV2's Produce
        v12+ and TxnOffsetCommit v5+): an error code per partition."""
        image = self.partitions.image
        unknown = [tp for tp in partitions
                   if (t := image.topics_by_name.get(tp[0])) is None or tp[1] not in t.partitions]
        if unknown:
            return {tp: Code.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else Code.OPERATION_NOT_ATTEMPTED
                    for tp in partitions}
        code, meta = self._check_producer(transactional_id, producer_id, producer_epoch)
        if meta is None:
            return dict.fromkeys(partitions, code)
        decision = rules.add_partitions(meta, partitions, self.now_ms(), client_transaction_version)
        if isinstance(decision, int):
            return dict.fromkeys(partitions, decision)
        if decision is not None:
            meta.pending = True
            try:
                code = await self._transition(meta, decision)
            finally:
                meta.pending = False
        return dict.fromkeys(partitions, code)

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """KIP-890 part 1 verification, the coordinator's answer (AddPartitionsToTxn v4+ verify_only;
        transactional produce and TxnOffsetCommit translate it with :func:`rules.verification_error`):
        is each partition part of this producer's ongoing transaction?"""
        if not transactional_id:
            return dict.fromkeys(partitions, Code.INVALID_REQUEST)
        return rules.verify_partitions(self.txns.get(transactional_id), producer_id, producer_epoch, partitions)

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> int:
        if not group_id:
            return Code.INVALID_GROUP_ID
        await self.groups.ensure_topic()
        tp = (CONSUMER_OFFSETS_TOPIC, self.groups.offsets_partition(group_id))
        return (await self.add_partitions(transactional_id, producer_id, producer_epoch, [tp]))[tp]

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                      client_transaction_version: int = 0) -> tuple[int, int, int]:
        """(error code, producer id, epoch) for EndTxn; the id and epoch are what the producer goes on
        with (EndTxn v5: under TV2 the epoch was bumped, or the id rotated)."""
        if not transactional_id:
            return Code.INVALID_REQUEST, -1, -1
        meta = self.txns.get(transactional_id)
        code = rules.check_end_txn_producer(meta, producer_id, producer_epoch)
        if code is not None or meta is None:
            return (code if code is not None else Code.INVALID_PRODUCER_ID_MAPPING), -1, -1
        decision = rules.end_txn(meta, commit)
        if decision is not None:
            if decision == Code.NONE:  # a retry of an end that completed
                return Code.NONE, meta.producer_id, meta.producer_epoch
            return decision, -1, -1
        meta.pending = True
        try:
            code = await self._end(meta, commit, client_transaction_version)
        finally:
            meta.pending = False
        return (Code.NONE, meta.producer_id, meta.producer_epoch) if code == Code.NONE else (code, -1, -1)

    async def _end(self, meta: TxnMetadata, commit: bool, client_transaction_version: int,
                   fencing: bool = False) -> int:
        """Both phases of ending the ongoing transaction of ``meta`` (pending set by the caller)."""
        next_producer_id = -1
        if client_transaction_version >= 2 and not fencing and rules.epoch_exhausted(meta.producer_epoch):
            next_producer_id = await self.io.run(self._next_producer_id)
        prepare = rules.prepare_end(meta, commit, self.now_ms(), client_transaction_version, next_producer_id)
        code = await self._transition(meta, prepare)
        if code:
            return code
        self._crash_point("end-txn-after-prepare")
        return await self._finish(meta, commit)

    def _crash_point(self, step: str) -> None:
        if self._crash_hook is not None:
            self._crash_hook(step)

    async def _finish(self, meta: TxnMetadata, commit: bool) -> int:
        """Markers into every partition, then Complete*. A marker that cannot be written leaves the
        Prepare state on disk (the next start finishes it) and answers a retriable error."""
        if not await self._write_markers(meta, commit):
            return Code.COORDINATOR_NOT_AVAILABLE
        self._crash_point("end-txn-before-complete")
        code = await self._transition(meta, rules.complete_end(meta, self.now_ms()))
        if code == Code.NONE:
            if commit:
                self.committed += 1
            else:
                self.aborted += 1
        return code

    async def _write_markers(self, meta: TxnMetadata, commit: bool) -> bool:
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        marker = EndTransactionMarker(kind, self.coordinator_epoch(meta.transactional_id))
        batch = build_end_txn_marker_batch(marker, producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
                                           timestamp_ms=self.now_ms())
        remaining = sorted(meta.partitions)
        for attempt in range(MARKER_ATTEMPTS):
            image = self.partitions.image
            # A partition whose topic was deleted meanwhile has nothing left to mark (Kafka skips it).
            remaining = [tp for tp in remaining
                         if (t := image.topics_by_name.get(tp[0])) is not None and tp[1] in t.partitions]
            if not remaining:
                break
            results = await _synced(await self._append_markers(batch, remaining))
            failed: list[TopicPartition] = []
            for tp, result in zip(remaining, results, strict=True):
                if result.error_code == Code.NONE:
                    if tp[0] == CONSUMER_OFFSETS_TOPIC:
                        self.groups.complete_txn_offsets(meta.producer_id, tp[1], commit)
                elif result.error_code in (Code.INVALID_PRODUCER_EPOCH, Code.TRANSACTION_COORDINATOR_FENCED):
                    # The partition already holds a newer epoch's marker or data: Kafka drops the marker.
                    log.warning("marker of %s not written to %s-%d: %s", meta.transactional_id, tp[0], tp[1],
                                result.error_message)
                else:
                    failed.append(tp)
            self.partitions.waiters.notify([tp for tp in remaining if tp not in failed])
            remaining = failed
            if not remaining:
                break
            log.warning("writing %s markers of %s failed for %s (attempt %d)", kind.name, meta.transactional_id,
                        remaining, attempt + 1)
            await asyncio.sleep(MARKER_BACKOFF_S * (attempt + 1))
        return not remaining

    async def _append_markers(self, batch: bytes, partitions: list[TopicPartition]) -> list[AppendResult]:
        durable = self.partitions.durable_internal
        if self._crash_hook is None:
            return await self.io.run(self.partitions.append_blocking, [(t, p, batch) for t, p in partitions],
                                     internal=True, origin=AppendOrigin.COORDINATOR, durable=durable)
        results: list[AppendResult] = []
        for i, (t, p) in enumerate(partitions):
            if i == 1:
                self._crash_point("end-txn-between-markers")
            results += await self.io.run(self.partitions.append_blocking, [(t, p, batch)], internal=True,
                                         origin=AppendOrigin.COORDINATOR, durable=durable)
        return results

    async def _fence_and_abort(self, meta: TxnMetadata) -> int:
        """Bump the epoch of an ongoing transaction (fencing its producer) and abort it with the new
        epoch (Kafka's PrepareEpochFence then an abort not from the client)."""
        fenced = rules.fenced(meta)
        if fenced is not None:
            meta.apply(fenced)  # in memory only, as Kafka: the abort's records carry the bumped epoch
        return await self._end(meta, False, meta.client_transaction_version, fencing=True)

    async def abort_timed_out(self, now_ms: int) -> int:
        """Abort every transaction open longer than its timeout; how many were."""
        count = 0
        for meta in list(self.txns.values()):
            if meta.pending or not rules.timed_out(meta, now_ms):
                continue
            log.info("aborting transaction %s (producer %d, epoch %d): open for %d ms, over its timeout of %d ms",
                     meta.transactional_id, meta.producer_id, meta.producer_epoch, now_ms - meta.start_ms,
                     meta.timeout_ms)
            meta.pending = True
            try:
                if await self._fence_and_abort(meta) == Code.NONE:
                    count += 1
                    self.timed_out += 1
            finally:
                meta.pending = False
        return count

    async def remove_expired(self, now_ms: int) -> int:
        """Forget transactional ids idle past ``transactional.id.expiration.ms`` (a tombstone each)."""
        count = 0
        for txn_id, meta in list(self.txns.items()):
            if meta.pending or not rules.expired(meta, now_ms, self.settings.id_expiration_ms):
                continue
            meta.pending = True
            try:
                if await self._store(txn_id, None) == Code.NONE:
                    self.txns.pop(txn_id, None)
                    count += 1
            finally:
                meta.pending = False
        if count:
            log.info("removed %d expired transactional ids", count)
        return count

    # -- administration --------------------------------------------------------------------------

    async def write_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                           coordinator_epoch: int, commit: bool) -> int:
        """WriteTxnMarkers for one partition: what ``kafka-transactions.sh abort`` sends the leader of
        a partition with a hanging transaction (one no coordinator will end)."""
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        marker = EndTransactionMarker(kind, coordinator_epoch)
        batch = build_end_txn_marker_batch(marker, producer_id=producer_id, producer_epoch=producer_epoch,
                                           timestamp_ms=self.now_ms())
        [result] = await _synced(await self.io.run(
            self.partitions.append_blocking, [(topic, partition, batch)], internal=True,
            origin=AppendOrigin.COORDINATOR, durable=self.partitions.durable_internal))
        if result.error_code == Code.NONE:
            self.partitions.waiters.notify([(topic, partition)])
            if topic == CONSUMER_OFFSETS_TOPIC:
                self.groups.complete_txn_offsets(producer_id, partition, commit)
        return result.error_code


async def _synced(results: list[AppendResult]) -> list[AppendResult]:
    """Each result once its group commit is done (``log.durable.acks``: a transaction's state and its
    markers are on disk before the coordinator acts on them); a failed sync becomes the result's error."""
    out = []
    for r in results:
        if r.synced is not None and not r.error_code:
            try:
                await asyncio.wrap_future(r.synced)
            except TierlogError as e:
                r = dataclasses.replace(r, error_code=e.error_code, error_message=str(e))
        out.append(r)
    return out
