"""The group coordinator: every classic consumer group of this broker, their committed offsets, and
their durable record in the compacted internal topic ``__consumer_offsets``.

Groups live on the event loop (the state machine in :mod:`.group` is synchronous); JoinGroup and
SyncGroup requests wait on futures that the state machine completes. Offsets are appended to the
group's partition of ``__consumer_offsets`` before a commit is acknowledged and are read back from
there at startup, so they survive restarts. The topic is created through the metadata controller
the first time a group needs it, as Kafka does.

Longer than most modules (about 650 lines) because GroupCoordinator is one class whose parts share
the groups, the committed offsets and one write path to ``__consumer_offsets``: membership, plain and
transactional commits, loading, expiry; the decisions themselves live beside it (:mod:`.group`,
:mod:`.offsets_retention`, :mod:`.offset_delete`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from tierlog.clock import Clock
from tierlog.config.settings import setting
from tierlog.errors import ErrorCode, TierlogError
from tierlog.ids import CONSUMER_OFFSETS_TOPIC, TopicPartition
from tierlog.metadata import Controller
from tierlog.records import EndTransactionMarker, Record, SimpleRecord, build_batch
from tierlog.server.groups import consumer_records
from tierlog.server.groups.consumer_coordinator import ConsumerGroups
from tierlog.server.groups.consumer_group import ConsumerGroupSettings
from tierlog.server.groups.group import Group, GroupState, JoinResult, SyncResult
from tierlog.server.groups.offset_delete import classic_group_error, classic_subscribed_topics
from tierlog.server.groups.offsets_retention import (
    ExpiryCondition,
    classic_condition,
    consumer_group_condition,
    expired_offsets,
)
from tierlog.server.groups.records import (
    GroupKey,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    partition_for_group,
)
from tierlog.server.internal_topic import InternalTopic, iter_load_batches
from tierlog.server.partitions import PartitionManager
from tierlog.server.storage_io import StorageIO
from tierlog.server.ticker import Ticker
from tierlog.storage.producer_state import AppendOrigin

log = logging.getLogger(__name__)

#: Kafka's offset.metadata.max.bytes default.
MAX_METADATA_BYTES = 4096
#: How often session timeouts and rebalance deadlines are checked.
TICK_INTERVAL_S = 0.1
#: Kafka's offsets.topic.segment.bytes default: small segments, so compaction (when it exists) and
#: loading stay cheap.
OFFSETS_SEGMENT_BYTES = 104857600


@dataclass(frozen=True)
class GroupSettings:
    num_partitions: int = setting("offsets.topic.num.partitions")
    initial_rebalance_delay_ms: int = setting("group.initial.rebalance.delay.ms")
    min_session_timeout_ms: int = setting("group.min.session.timeout.ms")
    max_session_timeout_ms: int = setting("group.max.session.timeout.ms")
    #: Kafka's offsets.retention.check.interval.ms: how often empty groups without offsets go.
    retention_check_interval_ms: int = setting("offsets.retention.check.interval.ms")
    #: Consumer groups of the KIP-848 protocol (group.consumer.*).
    consumer: ConsumerGroupSettings = field(default_factory=ConsumerGroupSettings)
    #: Kafka's offsets.retention.minutes, in ms.
    offsets_retention_ms: int = setting("offsets.retention.minutes", lambda minutes: minutes * 60_000)
    #: Kafka's offsets.topic.segment.bytes.
    segment_bytes: int = setting("offsets.topic.segment.bytes")


R = TypeVar("R")


class GroupCoordinator:
    def __init__(self, partitions: PartitionManager, controller: Controller, io: StorageIO, clock: Clock,
                 settings: GroupSettings) -> None:
        self.partitions = partitions
        self.controller = controller
        self.io = io
        self.clock = clock
        self.settings = settings
        self.groups: dict[str, Group] = {}
        self.offsets: dict[str, dict[TopicPartition, OffsetValue]] = {}
        #: TxnOffsetCommit offsets waiting for their transaction's marker: producer id → group → offsets.
        self.pending_txn_offsets: dict[int, dict[str, dict[TopicPartition, OffsetValue]]] = {}
        self.consumer = ConsumerGroups(self, settings.consumer)
        self._write_lock = asyncio.Lock()
        self._ticker = Ticker(TICK_INTERVAL_S, self.tick, "group coordinator")
        self._topic = InternalTopic(CONSUMER_OFFSETS_TOPIC, partitions, controller, io,
                                    num_partitions=settings.num_partitions,
                                    configs={"cleanup.policy": "compact", "segment.bytes": str(settings.segment_bytes)})
        self._last_cleanup_ms = self.now_ms()
        #: Wall-clock time each classic group became empty (Kafka's currentStateTimestamp of an Empty
        #: group), persisted in its group metadata record and read back at load.
        self._empty_since_ms: dict[str, int] = {}
        self._background_writes: set[asyncio.Task[int]] = set()

    def now_ms(self) -> int:
        return self.clock.monotonic_ns() // 1_000_000

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        if CONSUMER_OFFSETS_TOPIC in self.partitions.image.topics_by_name:
            started_ns = self.clock.monotonic_ns()
            loaded = await self.io.run(self._load_blocking)
            log.info("loaded %d committed offsets of %d groups from %s in %.3f s", loaded, len(self.offsets),
                     CONSUMER_OFFSETS_TOPIC, (self.clock.monotonic_ns() - started_ns) / 1e9)
        self._ticker.start()

    async def stop(self) -> None:
        await self._ticker.stop()
        for group in self.groups.values():
            group.shutdown()
        await self.flush_writes()

    def tick(self) -> None:
        now = self.now_ms()
        for group in list(self.groups.values()):
            if group.state is GroupState.EMPTY and not group.members and not group.pending_members:
                continue  # nothing to expire or complete: a tick of it would do nothing
            try:
                group.tick(now)
            except Exception:
                log.exception("group %s: tick failed", group.group_id)
        self.consumer.tick(now)
        if now - self._last_cleanup_ms >= self.settings.retention_check_interval_ms:
            self._last_cleanup_ms = now
            self.expire_offsets()
            self.remove_empty_groups()

    def expire_offsets(self) -> int:
        """offsets.retention.minutes: tombstones for the offsets expired by Kafka's rules (see
        offsets_retention); returns the offsets expired."""
        now = self.clock.wall_ms()
        expired_total = 0
        for group_id, offsets in list(self.offsets.items()):
            expired = expired_offsets(offsets, self._expiry_condition(group_id), now_ms=now,
                                      retention_ms=self.settings.offsets_retention_ms,
                                      pending=self.has_pending_offsets(group_id, None))
            if not expired:
                continue
            for tp in expired:
                del offsets[tp]
            if not offsets:
                del self.offsets[group_id]
            expired_total += len(expired)
            self._write_later(group_id, [(encode_offset_key(OffsetKey(group_id, t, p)), None) for t, p in expired])
        if expired_total:
            log.info("expired %d committed offsets (offsets.retention.minutes)", expired_total)
        return expired_total

    def _expiry_condition(self, group_id: str) -> ExpiryCondition | None:
        if group_id in self.consumer.groups:
            return consumer_group_condition(self.consumer.subscribed_topics(group_id) or set())
        group = self.groups.get(group_id)
        if group is None:
            return ExpiryCondition()  # offsets only: a standalone consumer's, aged from each commit
        empty = group.state is GroupState.EMPTY and not group.members and not group.pending_members
        return classic_condition(protocol_type=group.protocol_type, empty=empty,
                                 stable=group.state is GroupState.STABLE,
                                 empty_since_ms=self._empty_since_ms.get(group_id),
                                 subscribed=classic_subscribed_topics(group))

    def remove_empty_groups(self) -> int:
        """Kafka's periodic group cleanup: an empty group without committed offsets is forgotten,
        with a tombstone if a record of it may be in the log. Without it every JoinGroup with a new
        group id -- a client cycling through random ones -- would stay in memory for ever."""
        removed = 0
        for group_id, group in list(self.groups.items()):
            if (group.state is not GroupState.EMPTY or group.members or group.pending_members
                    or self.offsets.get(group_id)):
                continue
            del self.groups[group_id]
            self.offsets.pop(group_id, None)
            self._empty_since_ms.pop(group_id, None)
            removed += 1
            if group.generation_id > 0:  # a generation completed: its record was written
                self._write_later(group_id, [(encode_group_key(GroupKey(group_id)), None)])
        for group_id in [g for g in list(self.consumer.groups) if not self.offsets.get(g)]:
            if self.consumer.remove_if_empty(group_id, store=True):
                removed += 1
        if removed:
            log.info("removed %d empty groups without committed offsets", removed)
        return removed

    def _load_blocking(self) -> int:
        count = 0
        topic = self.partitions.topic(CONSUMER_OFFSETS_TOPIC)
        assert topic is not None
        for partition in sorted(topic.partitions):
            ulog = self.partitions.get_log_blocking(CONSUMER_OFFSETS_TOPIC, partition)
            # Damaged data (the log reported it): the commits in it are lost, the rest load.
            for header, records in iter_load_batches(ulog, skip_damaged_segments=True):
                if header.is_control:
                    self._load_marker(header.producer_id, records, partition)
                    continue
                if header.is_transactional:
                    self._load_txn_offsets(header.producer_id, records, partition)
                    continue
                for record in records:
                    if record.key is None:
                        continue
                    try:
                        count += self._apply_record(record.key, record.value)
                    except TierlogError as e:
                        log.warning("skipping unreadable record at %s-%d offset %d: %s",
                                    CONSUMER_OFFSETS_TOPIC, partition, record.offset, e)
        return count

    def _load_txn_offsets(self, producer_id: int, records: Iterable[Record], partition: int) -> None:
        for record in records:
            if record.key is None or record.value is None:
                continue
            try:
                key = decode_key(record.key)
                if isinstance(key, OffsetKey):
                    self.pending_txn_offsets.setdefault(producer_id, {}).setdefault(key.group, {})[
                        (key.topic, key.partition)] = decode_offset_value(record.value)
            except TierlogError as e:
                log.warning("skipping unreadable transactional offset record in %s-%d: %s", CONSUMER_OFFSETS_TOPIC,
                            partition, e)

    def _load_marker(self, producer_id: int, records: Iterable[Record], partition: int) -> None:
        for record in records:
            try:
                marker = EndTransactionMarker.from_record(record)
            except TierlogError:
                continue  # not a transaction marker
            self._complete_txn_offsets(producer_id, partition, marker.is_commit)

    def _apply_record(self, raw_key: bytes, raw_value: bytes | None) -> int:
        if consumer_records.record_type_of(raw_key) in consumer_records.CONSUMER_GROUP_RECORD_TYPES:
            self.consumer.replay(raw_key, raw_value)
            return 0
        key = decode_key(raw_key)
        if isinstance(key, OffsetKey):
            offsets = self.offsets.setdefault(key.group, {})
            if raw_value is None:
                offsets.pop((key.topic, key.partition), None)
                return 0
            offsets[(key.topic, key.partition)] = decode_offset_value(raw_value)
            return 1
        if raw_value is None:
            self.groups.pop(key.group, None)
            self.offsets.pop(key.group, None)
            self._empty_since_ms.pop(key.group, None)
            return 0
        value = decode_group_value(raw_value)
        group = self._new_group(key.group)
        now = self.now_ms()
        group.restore(value, now)
        if value.current_state_timestamp_ms >= 0:
            # The record holds wall-clock time, the group a monotonic one.
            group.state_timestamp_ms = now - max(0, self.clock.wall_ms() - value.current_state_timestamp_ms)
        self.groups[key.group] = group
        if value.members:
            # Stored Stable: its members are restored with fresh sessions (Kafka's load); the group is
            # not empty while they last, and empties (stored with its time) if they time out.
            self._empty_since_ms[key.group] = self.clock.wall_ms()
        elif value.current_state_timestamp_ms >= 0:
            self._empty_since_ms[key.group] = value.current_state_timestamp_ms
        else:  # an old record without the timestamp: offsets age from their commits
            self._empty_since_ms.pop(key.group, None)
        return 0

    # -- persistence -----------------------------------------------------------------------------

    async def ensure_topic(self) -> None:
        await self._topic.ensure()

    def _partition_of(self, group_id: str) -> int:
        return partition_for_group(group_id, self._topic.partition_count())

    async def _append(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> int:
        """Append records to the group's partition; the error code (0 when stored)."""
        try:
            await self.ensure_topic()
        except TierlogError as e:
            log.error("cannot create %s: %s", CONSUMER_OFFSETS_TOPIC, e)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        batch = build_batch([SimpleRecord(k, v, timestamp=self.clock.wall_ms()) for k, v in records])
        partition = self._partition_of(group_id)
        async with self._write_lock:
            results = await self.io.run(self.partitions.append_blocking,
                                        [(CONSUMER_OFFSETS_TOPIC, partition, batch)], internal=True,
                                        durable=self.partitions.durable_internal)
        synced = results[0].synced
        if synced is not None and not results[0].error_code:
            # Outside the write lock: commits of other groups share the same group commit round.
            try:
                await asyncio.wrap_future(synced)
            except TierlogError as e:
                results = [dataclasses.replace(results[0], error_code=e.error_code, error_message=str(e))]
        if results[0].error_code:
            log.error("storing offsets of group %s failed: %s", group_id, results[0].error_message)
            # Kafka maps storage failures of the offsets topic to a retriable coordinator error.
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        self.partitions.waiters.notify([(CONSUMER_OFFSETS_TOPIC, partition)])
        return ErrorCode.NONE

    def _write_later(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> None:
        """Append in the background (group records and tombstones nobody waits on); stop() waits
        for these, so a tombstone decided just before shutdown is not lost."""
        task = asyncio.get_running_loop().create_task(self._append(group_id, records))
        self._background_writes.add(task)
        task.add_done_callback(self._background_writes.discard)
        task.add_done_callback(_log_failure)

    async def flush_writes(self) -> None:
        """Wait for the background writes started so far."""
        while self._background_writes:
            await asyncio.gather(*list(self._background_writes), return_exceptions=True)

    def _store_group(self, group: Group) -> None:
        value = group.to_value()
        if group.state_timestamp_ms >= 0:
            # The group's own clock is monotonic; the record holds wall-clock time, as Kafka's.
            state_wall_ms = self.clock.wall_ms() - (self.now_ms() - group.state_timestamp_ms)
            value = dataclasses.replace(value, current_state_timestamp_ms=state_wall_ms)
            if group.state is GroupState.EMPTY:
                self._empty_since_ms[group.group_id] = state_wall_ms
            else:
                self._empty_since_ms.pop(group.group_id, None)
        encoded = encode_group_value(value)
        self._write_later(group.group_id, [(encode_group_key(GroupKey(group.group_id)), encoded)])

    def _new_group(self, group_id: str) -> Group:
        group = Group(group_id, initial_rebalance_delay_ms=self.settings.initial_rebalance_delay_ms)
        group.on_change = self._store_group
        return group

    # -- membership ------------------------------------------------------------------------------

    async def join(self, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
                   client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_member_id: bool,
                   supports_skip_assignment: bool = False) -> JoinResult:
        if not group_id:
            return JoinResult(ErrorCode.INVALID_GROUP_ID, member_id)
        if not self.consumer.remove_if_empty(group_id, store=True):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)  # a consumer group has the name
        s = self.settings
        if not s.min_session_timeout_ms <= session_timeout_ms <= s.max_session_timeout_ms:
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id)
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
            group = self.groups[group_id] = self._new_group(group_id)
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        group.join(member_id=member_id, group_instance_id=group_instance_id, client_id=client_id,
                   client_host=client_host, session_timeout_ms=session_timeout_ms,
                   rebalance_timeout_ms=rebalance_timeout_ms, protocol_type=protocol_type, protocols=protocols,
                   require_known_member_id=require_known_member_id, now_ms=self.now_ms(),
                   callback=_resolver(future), supports_skip_assignment=supports_skip_assignment)
        result = await future
        log.debug("group %s: JoinGroup from %r -> error %d, member %s, generation %d", group_id, member_id,
                  result.error_code, result.member_id, result.generation_id)
        return result

    async def sync(self, group_id: str, member_id: str, generation_id: int, protocol_type: str | None,
                   protocol_name: str | None, assignments: dict[str, bytes],
                   group_instance_id: str | None = None) -> SyncResult:
        group = self.groups.get(group_id)
        if group is None:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        future: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        group.sync(member_id=member_id, generation_id=generation_id, protocol_type=protocol_type,
                   protocol_name=protocol_name, assignments=assignments, now_ms=self.now_ms(),
                   callback=_resolver(future), group_instance_id=group_instance_id)
        result = await future
        log.debug("group %s: SyncGroup from %s generation %d -> error %d", group_id, member_id, generation_id,
                  result.error_code)
        return result

    def heartbeat(self, group_id: str, member_id: str, generation_id: int, group_instance_id: str | None = None) -> int:
        group = self.groups.get(group_id)
        code = ErrorCode.UNKNOWN_MEMBER_ID if group is None else \
            group.heartbeat(member_id, generation_id, self.now_ms(), group_instance_id)
        log.debug("group %s: Heartbeat from %s generation %d -> error %d", group_id, member_id, generation_id, code)
        return code

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
        """(group error, per-member errors) for (member id, group instance id) pairs."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, [ErrorCode.UNKNOWN_MEMBER_ID for _ in members]
        now = self.now_ms()
        return ErrorCode.NONE, [group.leave(member_id, now, instance_id) for member_id, instance_id in members]

    # -- offsets ---------------------------------------------------------------------------------

    def _commit_error(self, group_id: str, member_id: str, generation_id: int,
                      group_instance_id: str | None = None) -> int:
        consumer_code = self.consumer.commit_error(group_id, member_id, generation_id)
        if consumer_code is not None:
            return consumer_code
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE if generation_id < 0 else ErrorCode.ILLEGAL_GENERATION
        if group.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.state is GroupState.EMPTY:
            return ErrorCode.NONE  # the group only stores offsets here (manual assignment)
        # Kafka's order (ClassicGroup.validateOffsetCommit): the member and its generation first, so a
        # member committing with the generation before a rebalance gets ILLEGAL_GENERATION -- what
        # clients handle by rejoining -- and only a member of the current generation whose group is
        # still completing the rebalance gets REBALANCE_IN_PROGRESS.
        if generation_id >= 0 or member_id or group_instance_id is not None:
            code = group.validate_member(member_id, group_instance_id)
            if code:
                return code
            if generation_id != group.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
        elif group.state is not GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID  # v0-style commits only into an empty group
        if group.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def _offset_records(self, group_id: str, offsets: list[tuple[str, int, int, int, str | None]], now: int,
                        ) -> tuple[list[int], list[tuple[bytes, bytes | None]], list[tuple[TopicPartition, OffsetValue]]]:
        """What an OffsetCommit or a TxnOffsetCommit writes: an error code per entry (an unknown
        partition, metadata too large), and for the accepted ones their record and the offset it commits."""
        image = self.partitions.image
        codes: list[int] = []
        records: list[tuple[bytes, bytes | None]] = []
        accepted: list[tuple[TopicPartition, OffsetValue]] = []
        for topic, partition, offset, leader_epoch, metadata in offsets:
            t = image.topics_by_name.get(topic)
            if t is None or partition not in t.partitions:
                codes.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            if metadata is not None and len(metadata.encode("utf-8")) > MAX_METADATA_BYTES:
                codes.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
                continue
            value = OffsetValue(offset, leader_epoch, metadata or "", now)
            records.append((encode_offset_key(OffsetKey(group_id, topic, partition)), encode_offset_value(value)))
            accepted.append(((topic, partition), value))
            codes.append(ErrorCode.NONE)
        return codes, records, accepted

    async def commit(self, group_id: str, member_id: str, generation_id: int,
                     offsets: list[tuple[str, int, int, int, str | None]],
                     group_instance_id: str | None = None) -> list[int]:
        """Commit (topic, partition, offset, leader epoch, metadata) entries; an error code each."""
        if not group_id:
            return [ErrorCode.INVALID_GROUP_ID] * len(offsets)
        code = self._commit_error(group_id, member_id, generation_id, group_instance_id)
        if code:
            return [code] * len(offsets)
        now = self.clock.wall_ms()
        codes, records, accepted = self._offset_records(group_id, offsets, now)
        if records:
            code = await self._append(group_id, records)
            if code:
                return [c or code for c in codes]
            if group_id not in self.groups and group_id not in self.consumer.groups:
                self.groups[group_id] = self._new_group(group_id)
            self.offsets.setdefault(group_id, {}).update(accepted)
        return codes

    # -- transactional offsets (KIP-98/447) ------------------------------------------------------

    def offsets_partition(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition of a group (what AddOffsetsToTxn adds to a transaction)."""
        return self._partition_of(group_id)

    async def txn_commit(self, group_id: str, member_id: str, generation_id: int, producer_id: int,
                         producer_epoch: int, offsets: list[tuple[str, int, int, int, str | None]],
                         group_instance_id: str | None = None) -> list[int]:
        """TxnOffsetCommit: the offsets go to the group's partition in a transactional batch of the
        producer and stay pending until its transaction's marker lands there."""
        if not group_id:
            return [ErrorCode.INVALID_GROUP_ID] * len(offsets)
        group = self.groups.get(group_id)
        if group is not None and member_id and generation_id >= 0:
            code = self._commit_error(group_id, member_id, generation_id, group_instance_id)
            if code:
                return [code] * len(offsets)
        now = self.clock.wall_ms()
        codes, records, accepted = self._offset_records(group_id, offsets, now)
        if not records:
            return codes
        batch = build_batch([SimpleRecord(k, v, timestamp=now) for k, v in records], producer_id=producer_id,
                            producer_epoch=producer_epoch, base_sequence=0, is_transactional=True)
        partition = self._partition_of(group_id)
        async with self._write_lock:
            results = await self.io.run(self.partitions.append_blocking, [(CONSUMER_OFFSETS_TOPIC, partition, batch)],
                                        internal=True, origin=AppendOrigin.COORDINATOR)
        code = results[0].error_code
        if code:
            log.warning("transactional offsets of group %s (producer %d) not stored: %s", group_id, producer_id,
                        results[0].error_message)
            return [c or code for c in codes]
        self.pending_txn_offsets.setdefault(producer_id, {}).setdefault(group_id, {}).update(accepted)
        return codes

    def complete_txn_offsets(self, producer_id: int, offsets_partition: int, commit: bool) -> None:
        """A COMMIT or ABORT marker of the producer landed in ``offsets_partition``: its pending
        offsets of the groups there become committed or are dropped."""
        self._complete_txn_offsets(producer_id, offsets_partition, commit)

    def _complete_txn_offsets(self, producer_id: int, offsets_partition: int, commit: bool) -> None:
        by_group = self.pending_txn_offsets.get(producer_id)
        if not by_group:
            return
        for group_id in list(by_group):
            if self._partition_of(group_id) != offsets_partition:
                continue
            pending = by_group.pop(group_id)
            if commit:
                self.offsets.setdefault(group_id, {}).update(pending)
                if group_id not in self.groups:
                    self.groups[group_id] = self._new_group(group_id)
        if not by_group:
            del self.pending_txn_offsets[producer_id]

    def has_pending_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None) -> set[TopicPartition]:
        """The partitions of the group with a transactional offset not yet committed or aborted."""
        found: set[TopicPartition] = set()
        for by_group in self.pending_txn_offsets.values():
            pending = by_group.get(group_id)
            if pending:
                found.update(pending)
        return found if partitions is None else found.intersection(partitions)

    def fetch(self, group_id: str, partitions: list[TopicPartition] | None) -> dict[TopicPartition, OffsetValue]:
        committed = self.offsets.get(group_id, {})
        if partitions is None:
            topics = self.partitions.image.topics_by_name
            return {tp: value for tp, value in committed.items() if tp[0] in topics}
        return {tp: committed[tp] for tp in partitions if tp in committed}

    # -- administration --------------------------------------------------------------------------

    def list_groups(self) -> list[Group]:
        return [g for g in self.groups.values() if g.state is not GroupState.DEAD]

    def describe(self, group_id: str) -> Group | None:
        return self.groups.get(group_id)

    async def delete(self, group_id: str) -> int:
        group = self.groups.get(group_id)
        consumer_group = self.consumer.groups.get(group_id)
        if group is None and consumer_group is None and group_id not in self.offsets:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if (group is not None and group.state is not GroupState.EMPTY) or (consumer_group and consumer_group.members):
            return ErrorCode.NON_EMPTY_GROUP
        records: list[tuple[bytes, bytes | None]] = [
            (encode_offset_key(OffsetKey(group_id, topic, partition)), None)
            for topic, partition in self.offsets.get(group_id, {})
        ]
        records += self.consumer.tombstones(group_id) if consumer_group else [(encode_group_key(GroupKey(group_id)), None)]
        code = await self._append(group_id, records)
        if code:
            return code
        self.groups.pop(group_id, None)
        self.consumer.remove_if_empty(group_id, store=False)
        self.offsets.pop(group_id, None)
        self._empty_since_ms.pop(group_id, None)
        return ErrorCode.NONE

    async def delete_offsets(self, group_id: str, partitions: list[TopicPartition]) -> tuple[int, list[int]]:
        """OffsetDelete: (group error, an error per partition) by Kafka's rules (:mod:`.offset_delete`)."""
        group = self.groups.get(group_id)
        subscribed: set[str] | None = self.consumer.subscribed_topics(group_id)
        if group is None and subscribed is None and group_id not in self.offsets:
            return ErrorCode.GROUP_ID_NOT_FOUND, []
        if group is not None:
            code = classic_group_error(group)
            if code:
                return code, []
            subscribed = classic_subscribed_topics(group) or set()
        subscribed = subscribed or set()
        committed = self.offsets.get(group_id, {})
        codes: list[int] = [ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if topic in subscribed else ErrorCode.NONE
                            for topic, _ in partitions]
        gone = [tp for tp, code in zip(partitions, codes, strict=True) if not code and tp in committed]
        if gone:
            code = await self._append(group_id, [(encode_offset_key(OffsetKey(group_id, *tp)), None) for tp in gone])
            if code:
                return code, []
            for tp in gone:
                committed.pop(tp, None)
        return ErrorCode.NONE, codes

    def on_topic_deleted(self, topic: str) -> None:
        """Offsets of a deleted topic go, with tombstones as Kafka writes them: a topic later created
        with the same name must not find them at the next load, and the cleaner can drop them."""
        for group_id, offsets in list(self.offsets.items()):
            gone = [tp for tp in offsets if tp[0] == topic]
            if not gone:
                continue
            for tp in gone:
                del offsets[tp]
            self._write_later(group_id, [(encode_offset_key(OffsetKey(group_id, t, p)), None) for t, p in gone])


def _resolver(future: asyncio.Future[R]) -> Callable[[R], None]:
    def resolve(result: R) -> None:
        # The request may have been cancelled (its connection closed) while it waited.
        if not future.done():
            future.set_result(result)

    return resolve


def _log_failure(task: asyncio.Task[int]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("storing group metadata failed", exc_info=task.exception())
