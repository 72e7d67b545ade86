"""CreateTopics, DeleteTopics and CreatePartitions: commands to the metadata controller; the log
sync creates and deletes the logs once the records are committed."""

from __future__ import annotations

import logging
from typing import Any

from tierlog.errors import ErrorCode, TierlogError
from tierlog.metadata import CreateTopicResult
from tierlog.metadata.acls import AclOperation, ResourceType
from tierlog.protocol import ApiKey, ParsedRequest, build_response
from tierlog.server.connection import ClientInfo, Reply
from tierlog.server.context import BrokerContext, topic_uuid, uuid_bytes
from tierlog.server.handlers.configs import topic_config_entries
from tierlog.server.partitions import INTERNAL_TOPICS
from tierlog.server.throttling import THROTTLED_MESSAGE, mutation_refused, record_mutation

log = logging.getLogger(__name__)


def _now_ms(ctx: BrokerContext) -> int:
    return ctx.clock.monotonic_ns() // 1_000_000


def _check_mutation_quota(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> None:
    if mutation_refused(ctx.quotas, request, client, _now_ms(ctx)):
        raise _Refused(ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLED_MESSAGE)


class _Refused(TierlogError):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _check_assignments(ctx: BrokerContext, assignments: Any, num_partitions: int, replication_factor: int) -> int:
    """Manual replica assignments are accepted when they name only this broker; returns the
    partition count they imply."""
    if num_partitions != -1 or replication_factor != -1:
        raise _Refused(ErrorCode.INVALID_REQUEST, "Both numPartitions or replicationFactor and replicasAssignments were set. "
                                        "Both cannot be used at the same time.")
    indexes = sorted(a.partition_index for a in assignments)
    if indexes != list(range(len(indexes))):
        raise _Refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Partitions should be consecutive and start from 0")
    for a in assignments:
        if list(a.broker_ids) != [ctx.node_id]:
            raise _Refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"Replica assignment {list(a.broker_ids)} is not possible: this cluster has the single broker {ctx.node_id}")
    return len(indexes)


async def handle_create_topics(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    counts: dict[str, int] = {}
    for t in body.topics:
        counts[t.name] = counts.get(t.name, 0) + 1
    topics: list[dict[str, Any]] = []
    # Kafka: CREATE on the cluster allows every topic, else CREATE on each topic is needed.
    cluster_create = ctx.allowed(client, AclOperation.CREATE, log_denied=False)
    for t in body.topics:
        entry: dict[str, Any] = {"name": t.name, "error_code": ErrorCode.NONE, "error_message": None, "num_partitions": -1,
                                 "replication_factor": -1, "configs": None}
        topics.append(entry)
        try:
            if not cluster_create and not ctx.allowed(client, AclOperation.CREATE, ResourceType.TOPIC, t.name):
                raise _Refused(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            if counts[t.name] > 1:
                raise _Refused(ErrorCode.INVALID_REQUEST, f"Create topics request from client `{client.client_id}` contains "
                                                f"multiple entries for the following topics: {t.name}")
            num_partitions, rf = t.num_partitions, t.replication_factor
            if t.assignments:
                num_partitions = _check_assignments(ctx, t.assignments, num_partitions, rf)
                rf = 1
            configs: dict[str, object] = {}
            for c in t.configs:
                if c.name in configs:
                    raise _Refused(ErrorCode.INVALID_REQUEST, f"Duplicate config key {c.name}")
                configs[c.name] = c.value
            _check_mutation_quota(ctx, request, client)
            result: CreateTopicResult = await ctx.io.run(
                ctx.controller.create_topic, t.name, num_partitions, rf, configs, validate_only=body.validate_only)
            if not body.validate_only:
                record_mutation(ctx.quotas, client, result.num_partitions, _now_ms(ctx))
        except _Refused as e:
            entry.update(error_code=e.code, error_message=str(e))
            continue
        except TierlogError as e:
            entry.update(error_code=e.error_code, error_message=str(e))
            continue
        if not body.validate_only:
            log.info("created topic %s (%d partitions, configs %s)", t.name, result.num_partitions, dict(result.configs))
        entry.update(topic_id=topic_uuid(result.topic_id) if not body.validate_only else None,
                     num_partitions=result.num_partitions, replication_factor=result.replication_factor)
        if ctx.allowed(client, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, t.name, log_denied=False):
            entry["configs"] = [{k: c[k] for k in ("name", "value", "read_only", "config_source", "is_sensitive")}
                                for c in topic_config_entries(ctx, result.configs)]
        else:
            # The topic is created; its configs are not shown to a principal that may not describe them.
            entry["topic_config_error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return build_response(ApiKey.CREATE_TOPICS, request.api_version, {"topics": topics})


async def handle_delete_topics(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    if request.api_version >= 6:
        wanted = [(t.name, uuid_bytes(t.topic_id)) for t in body.topics]
    else:
        wanted = [(name, None) for name in body.topic_names]
    responses: list[dict[str, Any]] = []
    for name, topic_id in wanted:
        entry: dict[str, Any] = {"name": name, "topic_id": topic_uuid(topic_id), "error_code": ErrorCode.NONE, "error_message": None}
        responses.append(entry)
        try:
            if name is None:
                if topic_id is None:
                    raise _Refused(ErrorCode.INVALID_REQUEST, "Neither topic name nor id were specified.")
                topic = ctx.image.topics_by_id.get(topic_id)
                if topic is None:
                    raise _Refused(ErrorCode.UNKNOWN_TOPIC_ID, "This server does not host this topic ID.")
                if not ctx.allowed(client, AclOperation.DESCRIBE, ResourceType.TOPIC, topic.name):
                    # Not named to a principal that may not describe it (the id is not secret).
                    raise _Refused(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
                name = topic.name
                entry["name"] = name
            if not ctx.allowed(client, AclOperation.DELETE, ResourceType.TOPIC, name):
                raise _Refused(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            topic_image = ctx.image.topics_by_name.get(name)
            if topic_image is None:
                raise _Refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
            if name in INTERNAL_TOPICS:
                raise _Refused(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Internal topic {name} cannot be deleted")
            entry["topic_id"] = topic_uuid(topic_image.topic_id)
            _check_mutation_quota(ctx, request, client)
            await ctx.io.run(ctx.controller.delete_topic, name)
            record_mutation(ctx.quotas, client, topic_image.num_partitions, _now_ms(ctx))
            log.info("deleted topic %s", name)
            if ctx.groups is not None:
                ctx.groups.on_topic_deleted(name)
        except _Refused as e:
            entry.update(error_code=e.code, error_message=str(e))
        except TierlogError as e:
            entry.update(error_code=e.error_code, error_message=str(e))
    return build_response(ApiKey.DELETE_TOPICS, request.api_version, {"responses": responses})


async def handle_create_partitions(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    results: list[dict[str, Any]] = []
    for t in body.topics:
        entry: dict[str, Any] = {"name": t.name, "error_code": ErrorCode.NONE, "error_message": None}
        results.append(entry)
        try:
            if not ctx.allowed(client, AclOperation.ALTER, ResourceType.TOPIC, t.name):
                raise _Refused(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            if t.assignments:
                for a in t.assignments:
                    if list(a.broker_ids) != [ctx.node_id]:
                        raise _Refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                       f"Replica assignment {list(a.broker_ids)} is not possible on this single-broker cluster")
            _check_mutation_quota(ctx, request, client)
            before = ctx.image.topics_by_name.get(t.name)
            await ctx.io.run(ctx.controller.create_partitions, t.name, t.count, validate_only=body.validate_only)
            if not body.validate_only and before is not None:
                record_mutation(ctx.quotas, client, t.count - before.num_partitions, _now_ms(ctx))
        except _Refused as e:
            entry.update(error_code=e.code, error_message=str(e))
        except TierlogError as e:
            entry.update(error_code=e.error_code, error_message=str(e))
    return build_response(ApiKey.CREATE_PARTITIONS, request.api_version, {"results": results})


HANDLERS = {
    ApiKey.CREATE_TOPICS: handle_create_topics,
    ApiKey.DELETE_TOPICS: handle_delete_topics,
    ApiKey.CREATE_PARTITIONS: handle_create_partitions,
}
