"""ListOffsets, OffsetForLeaderEpoch and DeleteRecords: questions about (and one change to) the
offsets of a partition's log."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from tierlog.errors import (
    ErrorCode,
    OffsetOutOfRangeError,
    TierlogError,
    error_code_of,
)
from tierlog.metadata.acls import AclOperation, ResourceType
from tierlog.protocol import ApiKey, ParsedRequest, build_response
from tierlog.server.connection import ClientInfo, Reply
from tierlog.server.context import BrokerContext
from tierlog.server.partitions import INTERNAL_TOPICS, PartitionManager
from tierlog.storage.log import UnifiedLog

log = logging.getLogger(__name__)

Q = TypeVar("Q", bound=tuple[Any, ...])


async def _authorized(ctx: BrokerContext, client: ClientInfo, op: AclOperation, queries: Sequence[Q],
                      blocking: Callable[[list[Q]], list[dict[str, Any]]],
                      refused: Callable[[Q], dict[str, Any]]) -> list[dict[str, Any]]:
    """Answers in query order: ``blocking`` answers the queries (topic name first) whose topic the
    principal may ``op``, ``refused`` (TOPIC_AUTHORIZATION_FAILED) the others, which are never read."""
    ok = {t for t in {q[0] for q in queries} if ctx.allowed(client, op, ResourceType.TOPIC, t)}
    allowed = [q for q in queries if q[0] in ok]
    answers = iter(await ctx.io.run(blocking, allowed) if allowed else [])
    return [next(answers) if q[0] in ok else refused(q) for q in queries]

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
EARLIEST_PENDING_UPLOAD = -6
READ_COMMITTED = 1


def _epoch_check(pm: PartitionManager, topic: str, partition: int, current_leader_epoch: int) -> int:
    epoch = pm.leader_epoch(topic, partition)
    if current_leader_epoch < 0 or current_leader_epoch == epoch:
        return 0
    return ErrorCode.FENCED_LEADER_EPOCH if current_leader_epoch < epoch else ErrorCode.UNKNOWN_LEADER_EPOCH


def _epoch_of(ulog: UnifiedLog, offset: int) -> int:
    epoch = ulog.leader_epoch_cache.epoch_for_offset(offset)
    return -1 if epoch is None else epoch


def _list_offset(pm: PartitionManager, ulog: UnifiedLog, timestamp: int, read_committed: bool) -> tuple[int, int, int]:
    """(timestamp, offset, leader epoch) answering one ListOffsets query (Kafka's
    UnifiedLog#fetchOffsetByTimestamp plus the fetchable-offset bound of ReplicaManager); the
    earliest offset and lookups by time cover the remote tier too."""
    fetchable = ulog.last_stable_offset if read_committed else ulog.high_watermark
    if timestamp == LATEST:
        latest = ulog.leader_epoch_cache.latest_epoch
        return -1, fetchable, -1 if latest is None else latest
    if timestamp == EARLIEST:
        offset = pm.log_start_offset(ulog)
        return -1, offset, _epoch_of(ulog, offset)
    if timestamp == EARLIEST_LOCAL:
        offset = ulog.log_start_offset
        bases = ulog.segments.base_offsets
        offset = max(offset, bases[0]) if bases else offset
        return -1, offset, _epoch_of(ulog, offset)
    if timestamp == LATEST_TIERED:
        offset = ulog.remote_end_offset
        return -1, offset, _epoch_of(ulog, offset) if offset >= 0 else -1
    if timestamp == EARLIEST_PENDING_UPLOAD:
        offset = ulog.remote_end_offset + 1 if ulog.config.remote_storage_enable else -1
        return -1, offset, _epoch_of(ulog, offset) if offset >= 0 else -1
    if timestamp == MAX_TIMESTAMP:
        # Kafka >= 3.8 (KAFKA-16310): the record with the highest timestamp, the first of equals, in
        # both tiers -- not the last offset of its batch. It is the first record at or after that time.
        timestamp, _ = ulog.max_timestamp_and_offset()
        if pm.remote is not None and ulog.remote_log_enabled:
            timestamp = max(timestamp, pm.remote.max_timestamp(ulog.topic, ulog.partition))
        if timestamp < 0:
            return -1, -1, -1
    found = None
    if pm.remote is not None and ulog.remote_log_enabled:
        found = pm.remote.find_offset_by_timestamp(ulog.topic, ulog.partition, timestamp)
    if found is None:
        found = ulog.fetch_offset_by_timestamp(timestamp)
    if found is None or found[0] >= fetchable:
        return -1, -1, -1
    offset, ts = found
    return ts, offset, _epoch_of(ulog, offset)


def _list_offsets_blocking(pm: PartitionManager, queries: list[tuple[str, int, int, int]],
                           read_committed: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for topic, partition, timestamp, current_epoch in queries:
        entry: dict[str, Any] = {"partition_index": partition, "timestamp": -1, "offset": -1, "leader_epoch": -1}
        out.append(entry)
        code = _epoch_check(pm, topic, partition, current_epoch)
        if code:
            entry["error_code"] = code
            continue
        try:
            ulog = pm.get_log_blocking(topic, partition)
            entry["timestamp"], entry["offset"], entry["leader_epoch"] = _list_offset(pm, ulog, timestamp, read_committed)
        except Exception as e:
            entry["error_code"] = error_code_of(e)
            if entry["error_code"] != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                log.warning("ListOffsets of %s-%d failed: %s", topic, partition, e)
    return out


async def handle_list_offsets(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    read_committed = getattr(body, "isolation_level", 0) == READ_COMMITTED
    queries = [(t.name, p.partition_index, p.timestamp, getattr(p, "current_leader_epoch", -1))
               for t in body.topics for p in t.partitions]
    answers = iter(await _authorized(
        ctx, client, AclOperation.DESCRIBE, queries,
        lambda qs: _list_offsets_blocking(ctx.partitions, qs, read_committed),
        lambda q: {"partition_index": q[1], "timestamp": -1, "offset": -1, "leader_epoch": -1,
                   "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED}))
    topics = [{"name": t.name, "partitions": [next(answers) for _ in t.partitions]} for t in body.topics]
    return build_response(ApiKey.LIST_OFFSETS, request.api_version, {"topics": topics})


def _end_offsets_blocking(pm: PartitionManager, queries: list[tuple[str, int, int, int]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for topic, partition, current_epoch, leader_epoch in queries:
        entry: dict[str, Any] = {"partition": partition, "leader_epoch": -1, "end_offset": -1}
        out.append(entry)
        code = _epoch_check(pm, topic, partition, current_epoch)
        if code:
            entry["error_code"] = code
            continue
        try:
            ulog = pm.get_log_blocking(topic, partition)
        except TierlogError as e:  # unknown, refused or offline: that partition's error (see read_blocking)
            entry["error_code"] = error_code_of(e)
            continue
        entry["leader_epoch"], entry["end_offset"] = ulog.leader_epoch_cache.end_offset_for(
            leader_epoch, ulog.log_end_offset)
    return out


async def handle_offset_for_leader_epoch(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    if getattr(body, "replica_id", -1) >= 0 and not ctx.allowed(client, AclOperation.CLUSTER_ACTION):
        return build_response(ApiKey.OFFSET_FOR_LEADER_EPOCH, request.api_version, {"topics": [
            {"topic": t.topic, "partitions": [{"partition": p.partition, "leader_epoch": -1, "end_offset": -1,
                                               "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
                                              for p in t.partitions]} for t in body.topics]})
    queries = [(t.topic, p.partition, p.current_leader_epoch, p.leader_epoch) for t in body.topics for p in t.partitions]
    answers = iter(await _authorized(
        ctx, client, AclOperation.DESCRIBE, queries, lambda qs: _end_offsets_blocking(ctx.partitions, qs),
        lambda q: {"partition": q[1], "leader_epoch": -1, "end_offset": -1,
                   "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED}))
    topics = [{"topic": t.topic, "partitions": [next(answers) for _ in t.partitions]} for t in body.topics]
    return build_response(ApiKey.OFFSET_FOR_LEADER_EPOCH, request.api_version, {"topics": topics})


def _delete_records_blocking(pm: PartitionManager, queries: list[tuple[str, int, int]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for topic, partition, offset in queries:
        entry: dict[str, Any] = {"partition_index": partition, "low_watermark": -1}
        out.append(entry)
        if topic in INTERNAL_TOPICS:
            # ReplicaManager.deleteRecordsOnLocalLog: the coordinators' state is theirs to trim.
            entry["error_code"] = ErrorCode.INVALID_TOPIC_EXCEPTION
            continue
        try:
            ulog = pm.get_log_blocking(topic, partition)
            target = ulog.high_watermark if offset == -1 else offset
            if target < 0 or target > ulog.high_watermark:
                raise OffsetOutOfRangeError(f"cannot delete records before offset {offset}")
            if pm.remote is not None and ulog.remote_log_enabled:
                # Both tiers: the remote log start offset is recorded, local segments below it go.
                pm.remote.delete_records(topic, partition, target)
            else:
                ulog.maybe_increment_log_start_offset(target, "DeleteRecords")
            entry["low_watermark"] = pm.log_start_offset(ulog)
        except OffsetOutOfRangeError:
            entry["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
        except Exception as e:
            entry["error_code"] = error_code_of(e)
    return out


async def handle_delete_records(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    queries = [(t.name, p.partition_index, p.offset) for t in body.topics for p in t.partitions]
    answers = iter(await _authorized(
        ctx, client, AclOperation.DELETE, queries, lambda qs: _delete_records_blocking(ctx.partitions, qs),
        lambda q: {"partition_index": q[1], "low_watermark": -1, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED}))
    topics = [{"name": t.name, "partitions": [next(answers) for _ in t.partitions]} for t in body.topics]
    return build_response(ApiKey.DELETE_RECORDS, request.api_version, {"topics": topics})


HANDLERS = {
    ApiKey.LIST_OFFSETS: handle_list_offsets,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: handle_offset_for_leader_epoch,
    ApiKey.DELETE_RECORDS: handle_delete_records,
}
