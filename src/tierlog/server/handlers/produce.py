"""Produce: append each partition's record set as the leader, answer per partition.

acks 0, 1 and -1 all append before answering (a single replica is the whole ISR, so -1 waits for
nothing more than 1 does); acks=0 sends no response, and when such a request fails the connection
is closed, as Kafka does, because that is the only way the client learns of it. A duplicate batch of
an idempotent producer is answered with the offsets it got the first time.
"""

from __future__ import annotations

import struct
from typing import Any

from tierlog.protocol import ApiKey, ParsedRequest, build_response
from tierlog.server.connection import ClientInfo, CloseConnection, Reply
from tierlog.server.context import BrokerContext, uuid_bytes
from tierlog.server.partitions import UNKNOWN_TOPIC_OR_PARTITION, AppendResult

INVALID_REQUIRED_ACKS = 21
UNKNOWN_TOPIC_ID = 100
INVALID_PRODUCER_EPOCH = 47
PRODUCER_FENCED = 90
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
TRANSACTIONAL_BIT = 0x10
#: The first batch's attributes (at byte 21), producer id (43) and producer epoch (51).
_FIRST_BATCH = struct.Struct(">21xh20xqh")
_MAGIC_AT = 16


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
        results = [AppendResult(INVALID_REQUIRED_ACKS) for _ in items]
    elif not getattr(body, "transactional_id", None) and any(_is_transactional(records) for *_, records in items):
        # Kafka (KafkaApis.handleProduceRequest) refuses the whole request: transactional records need the
        # transactional id they are written for, which is what is authorized and verified.
        results = [AppendResult(TRANSACTIONAL_ID_AUTHORIZATION_FAILED, error_message="transactional records "
                                "without a transactional id") for _ in items]
    else:
        # Transactional batches for partitions outside the producer's ongoing transaction are refused
        # before anything is written (KIP-890 part 1 verification).
        refused = _unverified(ctx, body, items)
        appended = iter(await _append(ctx, [it for i, it in enumerate(items) if i not in refused], version))
        results = [AppendResult(refused[i], error_message="the partition is not part of the producer's ongoing "
                                "transaction") if i in refused else next(appended) for i in range(len(items))]
        ctx.partitions.waiters.notify(
            (name, partition) for (_, name, partition, _), r in zip(items, results, strict=True)
            if name is not None and r.error_code == 0 and not r.duplicate
        )

    if acks == 0:
        failed = [r for r in results if r.error_code != 0]
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


async def _append(ctx: BrokerContext, items: list[tuple[Any, str | None, int, bytes | None]],
                  version: int) -> list[AppendResult]:
    known = [(name, partition, records) for _, name, partition, records in items if name is not None]
    appended = iter(await ctx.io.run(ctx.partitions.append_blocking, known) if known else [])
    results = []
    for _, name, _, _ in items:
        if name is None:
            results.append(AppendResult(UNKNOWN_TOPIC_ID if version >= 13 else UNKNOWN_TOPIC_OR_PARTITION))
        else:
            results.append(next(appended))
    return results


def _is_transactional(records: bytes | None) -> bool:
    """Whether the record set's first batch has the transactional bit (v3+ sends one batch per partition;
    message sets of magic 0 and 1 have no such bit)."""
    if records is None or len(records) < _FIRST_BATCH.size or records[_MAGIC_AT] != 2:
        return False
    return bool(_FIRST_BATCH.unpack_from(records, 0)[0] & TRANSACTIONAL_BIT)


def _unverified(ctx: BrokerContext, body: Any, items: list[tuple[Any, str | None, int, bytes | None]]) -> dict[int, int]:
    """Index → error code of each record set whose first batch is transactional but whose partition
    the transaction coordinator does not have in the producer's ongoing transaction."""
    txn_id = getattr(body, "transactional_id", None)
    if ctx.transactions is None or not txn_id:
        return {}
    out: dict[int, int] = {}
    for i, (_, name, partition, records) in enumerate(items):
        if name is None or records is None or not _is_transactional(records):
            continue
        _, producer_id, producer_epoch = _FIRST_BATCH.unpack_from(records, 0)
        tp = (name, partition)
        code = ctx.transactions.verify_partitions(txn_id, producer_id, producer_epoch, [tp])[tp]
        if code:
            # Produce predates PRODUCER_FENCED: a stale epoch is INVALID_PRODUCER_EPOCH there.
            out[i] = INVALID_PRODUCER_EPOCH if code == PRODUCER_FENCED else code
    return out


HANDLERS = {ApiKey.PRODUCE: handle_produce}
