"""Metadata and DescribeCluster: one broker, the leader and only replica of every partition."""

from __future__ import annotations

import logging
from typing import Any

from tierlog.errors import ErrorCode, TierlogError
from tierlog.metadata import TopicExistsError, TopicImage
from tierlog.metadata.acls import AclOperation, ResourceType
from tierlog.protocol import ApiKey, ParsedRequest, build_response
from tierlog.server.connection import ClientInfo, Reply
from tierlog.server.context import AUTHORIZED_OPERATIONS_OMITTED, BrokerContext, topic_uuid, uuid_bytes
from tierlog.server.partitions import INTERNAL_TOPICS

log = logging.getLogger(__name__)


def partition_entries(ctx: BrokerContext, topic: TopicImage) -> list[dict[str, Any]]:
    node = ctx.node_id
    return [
        {
            "error_code": ErrorCode.NONE,
            "partition_index": p.partition_id,
            "leader_id": node,
            "leader_epoch": p.leader_epoch,
            "replica_nodes": [node],
            "isr_nodes": [node],
            "offline_replicas": [],
        }
        for p in sorted(topic.partitions.values(), key=lambda p: p.partition_id)
    ]


def topic_entry(ctx: BrokerContext, topic: TopicImage, client: ClientInfo | None = None) -> dict[str, Any]:
    """A topic's Metadata entry; its authorized operations when ``client`` is given (the request asked)."""
    return {
        "error_code": ErrorCode.NONE,
        "name": topic.name,
        "topic_id": topic_uuid(topic.topic_id),
        "is_internal": topic.name in INTERNAL_TOPICS,
        "partitions": partition_entries(ctx, topic),
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED if client is None
        else ctx.authorized_operations(client, ResourceType.TOPIC, topic.name),
    }


def _unauthorized(name: str | None, topic_id: Any = None) -> dict[str, Any]:
    return {"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": name, "topic_id": topic_id,
            "is_internal": False, "partitions": [], "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}


async def _auto_create(ctx: BrokerContext, name: str) -> int:
    """Create ``name`` with the broker's defaults; the error code to answer with, 0 on success."""
    try:
        await ctx.io.run(ctx.controller.create_topic, name)
        log.info("auto-created topic %s", name)
        return 0
    except TopicExistsError:
        return 0  # another request created it first
    except TierlogError as e:
        return e.error_code


def _invalid_before_v12(requested: Any, version: int) -> bool:
    """Versions 10 and 11 can carry a null name and a topic id, but their response cannot answer by
    id (its name is not nullable): Kafka refuses such a request as a whole."""
    return version < 12 and requested is not None and any(
        t.name is None or uuid_bytes(getattr(t, "topic_id", None)) is not None for t in requested)


async def handle_metadata(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    version = request.api_version
    requested = body.topics
    topics: list[dict[str, Any]] = []
    image = ctx.image
    if _invalid_before_v12(requested, version):
        # Kafka's MetadataRequest.getErrorResponse: every topic asked for, with the error and "" for
        # a null name; no brokers.
        return build_response(ApiKey.METADATA, version, {"topics": [
            {"error_code": ErrorCode.INVALID_REQUEST, "name": t.name or "", "topic_id": getattr(t, "topic_id", None),
             "is_internal": False, "partitions": [], "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}
            for t in requested], "brokers": [], "cluster_id": None, "controller_id": -1})
    ops_for = client if getattr(body, "include_topic_authorized_operations", False) else None
    def describable(name: str, log_denied: bool = True) -> bool:
        return ctx.allowed(client, AclOperation.DESCRIBE, ResourceType.TOPIC, name, log_denied=log_denied)
    # v0 asks for every topic with an empty list; v1+ with null.
    if requested is None or (version == 0 and not requested):
        # Every topic the principal may describe; the others are left out, not reported.
        topics = [topic_entry(ctx, t, ops_for) for t in sorted(image.topics_by_name.values(), key=lambda t: t.name)
                  if describable(t.name, log_denied=False)]
    else:
        allow_auto = ctx.settings.auto_create_topics_enable and getattr(body, "allow_auto_topic_creation", True)
        for wanted in requested:
            name = wanted.name
            topic_id = uuid_bytes(getattr(wanted, "topic_id", None))
            if name is None:
                by_id = image.topics_by_id.get(topic_id) if topic_id is not None else None
                if by_id is None:
                    topics.append({"error_code": ErrorCode.UNKNOWN_TOPIC_ID, "name": None, "topic_id": topic_uuid(topic_id),
                                   "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED})
                elif not describable(by_id.name):
                    # The name is not revealed to a principal that may not describe the topic.
                    topics.append(_unauthorized(None, topic_uuid(topic_id)))
                else:
                    topics.append(topic_entry(ctx, by_id, ops_for))
                continue
            if not describable(name):
                topics.append(_unauthorized(name))
                continue
            topic = image.topics_by_name.get(name)
            if topic is None and allow_auto and name not in INTERNAL_TOPICS and not (
                    ctx.allowed(client, AclOperation.CREATE, log_denied=False)
                    or ctx.allowed(client, AclOperation.CREATE, ResourceType.TOPIC, name)):
                topics.append(_unauthorized(name))
                continue
            if topic is None and allow_auto and name not in INTERNAL_TOPICS:
                code = await _auto_create(ctx, name)
                image = ctx.image
                topic = image.topics_by_name.get(name)
                if topic is None:
                    topics.append({"error_code": code or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": name,
                                   "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED})
                    continue
            if topic is None:
                topics.append({"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": name,
                               "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED})
            else:
                topics.append(topic_entry(ctx, topic, ops_for))
    host, port = ctx.endpoint(client)
    return build_response(ApiKey.METADATA, version, {
        "brokers": [{"node_id": ctx.node_id, "host": host, "port": port, "rack": None}],
        "cluster_id": ctx.cluster_id,
        "controller_id": ctx.node_id,
        "topics": topics,
        "cluster_authorized_operations": ctx.authorized_operations(client, ResourceType.CLUSTER)
        if getattr(body, "include_cluster_authorized_operations", False) else AUTHORIZED_OPERATIONS_OMITTED,
    })


async def handle_describe_cluster(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    host, port = ctx.endpoint(client)
    # endpoint_type 2 asks for controllers (KIP-1079); this node is both.
    return build_response(ApiKey.DESCRIBE_CLUSTER, request.api_version, {
        "error_code": ErrorCode.NONE,
        "cluster_id": ctx.cluster_id,
        "controller_id": ctx.node_id,
        "endpoint_type": getattr(request.body, "endpoint_type", 1),
        "brokers": [{"broker_id": ctx.node_id, "host": host, "port": port, "rack": None, "is_fenced": False}],
        "cluster_authorized_operations": ctx.authorized_operations(client, ResourceType.CLUSTER)
        if request.body.include_cluster_authorized_operations else AUTHORIZED_OPERATIONS_OMITTED,
    })


HANDLERS = {ApiKey.METADATA: handle_metadata, ApiKey.DESCRIBE_CLUSTER: handle_describe_cluster}
