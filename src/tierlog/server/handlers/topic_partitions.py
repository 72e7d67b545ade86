"""DescribeTopicPartitions (API 75, KIP-966): the paged topic description the Java Admin's
``describeTopics`` uses from Kafka 3.8 on, by the rules of Kafka's DescribeTopicPartitionsRequestHandler
and KRaftMetadataCache.describeTopicResponse.

Topics are described in name order from the cursor on (its topic from its partition, the others from
partition 0), at most ``min(response_partition_limit, max.request.partition.size.limit)`` partitions
(at least 1) per response. A topic cut short sets the next cursor to its next partition; a response
that used up the limit exactly at a topic's end points the cursor at the next topic's partition 0.
Asked by name, unknown topics answer UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an
impossible name); an empty topic list describes every topic and leaves such errors out. A cursor
naming a topic outside the list, or a negative partition, is an invalid request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tierlog.errors import ErrorCode
from tierlog.metadata import MetadataImage
from tierlog.metadata.acls import AclOperation, ResourceType
from tierlog.metadata.controller import legal_topic_name
from tierlog.protocol import ApiKey, ParsedRequest, build_response
from tierlog.server.connection import ClientInfo, Reply
from tierlog.server.context import BrokerContext, topic_uuid
from tierlog.server.handlers.metadata import partition_entries
from tierlog.server.partitions import INTERNAL_TOPICS

PARTITION_LIMIT_KEY = "max.request.partition.size.limit"


@dataclass(frozen=True, slots=True)
class TopicPage:
    """One topic of a response: its partitions from ``first`` (inclusive) to ``end`` (exclusive),
    or ``error_code`` for a topic that cannot be described."""
    name: str
    first: int = 0
    end: int = 0
    error_code: int = ErrorCode.NONE


def page(partition_counts: dict[str, int], requested: list[str] | None, cursor: tuple[str, int] | None,
         limit: int) -> tuple[list[TopicPage], tuple[str, int] | None]:
    """The topics of one response and the next cursor (None: nothing left). ``partition_counts``:
    every existing topic's partition count; ``requested``: the names asked for (None: every topic).
    Raises ValueError for an invalid cursor."""
    cursor_topic = cursor[0] if cursor is not None else ""
    names = set(partition_counts) if requested is None else set(requested)
    names = {n for n in names if n >= cursor_topic}
    if cursor is not None and requested is not None and cursor_topic not in names:
        raise ValueError(f"DescribeTopicPartitionsRequest topic list should contain the cursor topic: {cursor_topic}")
    if cursor is not None and cursor[1] < 0:
        raise ValueError(f"DescribeTopicPartitionsRequest cursor partition must be valid: {cursor}")
    remaining = max(limit, 1)
    out: list[TopicPage] = []
    for name in sorted(names):
        if remaining == 0:
            return out, (name, 0)
        count = partition_counts.get(name)
        if count is None:
            if requested is not None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if legal_topic_name(name) else \
                    ErrorCode.INVALID_TOPIC_EXCEPTION
                out.append(TopicPage(name, error_code=code))
            continue
        first = cursor[1] if cursor is not None and name == cursor_topic else 0
        end = min(count, first + remaining)
        out.append(TopicPage(name, first, max(end, first)))
        if end < count:
            return out, (name, end)
        remaining -= max(end - first, 0)
    return out, None


def _topic(ctx: BrokerContext, client: ClientInfo, image: MetadataImage, entry: TopicPage) -> dict[str, Any]:
    topic = image.topics_by_name.get(entry.name)
    out: dict[str, Any] = {"error_code": entry.error_code, "name": entry.name, "topic_id": None,
                           "is_internal": entry.name in INTERNAL_TOPICS, "partitions": [],
                           "topic_authorized_operations": ctx.authorized_operations(client, ResourceType.TOPIC,
                                                                                    entry.name)}
    if topic is not None and not entry.error_code:
        out["topic_id"] = topic_uuid(topic.topic_id)
        out["partitions"] = [
            {**p, "eligible_leader_replicas": [], "last_known_elr": []}  # no ELR (KIP-966) here: empty, as Kafka
            for p in partition_entries(ctx, topic) if entry.first <= p["partition_index"] < entry.end]
    return out


async def handle_describe_topic_partitions(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    image = ctx.image
    requested = [t.name for t in body.topics] or None
    cursor = (body.cursor.topic_name, body.cursor.partition_index) if body.cursor is not None else None
    limit = min(ctx.config.get_int(PARTITION_LIMIT_KEY), body.response_partition_limit)

    def may_describe(name: str) -> bool:
        return ctx.allowed(client, AclOperation.DESCRIBE, ResourceType.TOPIC, name, log_denied=requested is not None)

    # As Kafka: topics the client may not describe are left out of "every topic" and answered
    # TOPIC_AUTHORIZATION_FAILED (after the others) when named.
    counts = {name: len(t.partitions) for name, t in image.topics_by_name.items() if may_describe(name)}
    refused = sorted({n for n in requested or () if not may_describe(n)})
    try:
        entries, next_cursor = page(counts, [n for n in requested if n not in refused] if requested else None,
                                    cursor, limit)
    except ValueError:
        # Kafka's getErrorResponse for the InvalidRequestException: every topic asked for, with it.
        return build_response(ApiKey.DESCRIBE_TOPIC_PARTITIONS, request.api_version, {"topics": [
            {"error_code": ErrorCode.INVALID_REQUEST, "name": t.name, "topic_id": None, "partitions": []}
            for t in body.topics], "next_cursor": None})
    return build_response(ApiKey.DESCRIBE_TOPIC_PARTITIONS, request.api_version, {
        "topics": [_topic(ctx, client, image, e) for e in entries] + [
            {"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": n, "topic_id": None, "partitions": []}
            for n in refused],
        "next_cursor": {"topic_name": next_cursor[0], "partition_index": next_cursor[1]} if next_cursor else None,
    })


HANDLERS = {ApiKey.DESCRIBE_TOPIC_PARTITIONS: handle_describe_topic_partitions}
