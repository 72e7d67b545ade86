"""Produce: append each partition's record set as the leader, answer per partition.

acks 0, 1 and -1 all append before answering (a single replica is the whole ISR, so -1 waits for
nothing more than 1 does); acks=0 sends no response, and when such a request fails the connection
is closed, as Kafka does, because that is the only way the client learns of it. A duplicate batch of
an idempotent producer is answered with the offsets it got the first time.
"""

from __future__ import annotations

from typing import Any

from tierlog.errors import ErrorCode
from tierlog.protocol import ApiKey, ParsedRequest, build_response
from tierlog.server.connection import ClientInfo, CloseConnection, Reply
from tierlog.server.context import BrokerContext, uuid_bytes
from tierlog.server.partitions import AppendResult


async def handle_produce(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    version = request.api_version
    acks = body.acks
    image = ctx.image
    # (response topic key, topic name or None when unknown, partition, records)
    items: list[tuple[Any, str | None, int, bytes | None]] = []
    for topic_data in body.topic_data:
        if version >= 13:
            key: Any = topic_data.topic_id
            tid = uuid_bytes(key)
            topic = image.topics_by_id.get(tid) if tid is not None else None
            name = topic.name if topic is not None else None
        else:
            key = name = topic_data.name
        for pd in topic_data.partition_data:
            items.append((key, name, pd.index, pd.records))

    results: list[AppendResult]
    if acks not in (-1, 0, 1):
        results = [AppendResult(ErrorCode.INVALID_REQUIRED_ACKS) for _ in items]
    else:
        known = [(name, partition, records) for _, name, partition, records in items if name is not None]
        appended = iter(await ctx.io.run(ctx.partitions.append_blocking, known) if known else [])
        results = []
        for _, name, _, _ in items:
            if name is None:
                results.append(AppendResult(ErrorCode.UNKNOWN_TOPIC_ID if version >= 13 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            else:
                results.append(next(appended))
        ctx.partitions.waiters.notify(
            (name, partition) for (_, name, partition, _), r in zip(items, results, strict=True)
            if name is not None and r.error_code == ErrorCode.NONE and not r.duplicate
        )

    if acks == 0:
        failed = [r for r in results if r.error_code != ErrorCode.NONE]
        if failed:
            return CloseConnection(f"acks=0 produce failed with error {failed[0].error_code}: {failed[0].error_message}")
        return None

    by_topic: dict[Any, list[dict[str, Any]]] = {}
    for (key, _, partition, _), r in zip(items, results, strict=True):
        by_topic.setdefault(key, []).append({
            "index": partition,
            "error_code": r.error_code,
            "base_offset": r.base_offset,
            "log_append_time": r.log_append_time_ms,
            "log_start_offset": r.log_start_offset,
            "error_message": r.error_message if r.error_code else None,
        })
    topic_key = "topic_id" if version >= 13 else "name"
    return build_response(ApiKey.PRODUCE, version, {
        "responses": [{topic_key: key, "partition_responses": parts} for key, parts in by_topic.items()],
    })


HANDLERS = {ApiKey.PRODUCE: handle_produce}
