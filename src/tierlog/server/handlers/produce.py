"""Produce: append each partition's record set as the leader, answer per partition.

acks 0, 1 and -1 all append before answering (a single replica is the whole ISR). With durable
acknowledgements (``log.durable.acks``, by default for acks=all) the answer also waits until the
batches are fsynced by the log dir's group commit, which one fdatasync round shares among every
request waiting then; a failed sync answers KAFKA_STORAGE_ERROR. Under any setting but none,
consumers see records only once they are fsynced, whatever the produce's acks: the high watermark
follows the fsyncs (storage/high_watermark.py). acks=0 sends no response, and when
such a request fails the connection is closed, as Kafka does, because that is the only way the
client learns of it. A duplicate batch of an idempotent producer is answered with the offsets it
got the first time (after its segment is synced too: the first attempt may still be waiting).
"""

from __future__ import annotations

import asyncio
import dataclasses
import struct
from typing import Any

from tierlog.errors import ErrorCode
from tierlog.metadata.acls import AclOperation, ResourceType
from tierlog.protocol import ApiKey, ParsedRequest
from tierlog.server.connection import ClientInfo, CloseConnection, Deferred, RawResponse, Reply
from tierlog.server.context import BrokerContext, uuid_bytes
from tierlog.server.handlers.transactions import PRODUCE_TV2_SINCE, implicit_add
from tierlog.server.partitions import AppendResult
from tierlog.server.produce_response import encode_produce_response
from tierlog.server.txn import rules as txn_rules
from tierlog.storage.group_commit import when_all

TRANSACTIONAL_BIT = 0x10
#: The first batch's attributes (at byte 21), producer id (43) and producer epoch (51).
_FIRST_BATCH = struct.Struct(">21xh20xqh")
_MAGIC_AT = 16
#: A partition's record set as the request carries it: a view of the request's frame.
Records = bytes | memoryview


async def handle_produce(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    version = request.api_version
    acks = body.acks
    image = ctx.image
    # (response topic key, topic name or None when unknown, partition, records)
    items: list[tuple[Any, str | None, int, Records | None]] = []
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
    elif getattr(body, "transactional_id", None) and not ctx.allowed(
            client, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id):
        results = [AppendResult(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED) for _ in items]
    elif not getattr(body, "transactional_id", None) and any(_is_transactional(records) for *_, records in items):
        # Kafka (KafkaApis.handleProduceRequest) refuses the whole request: transactional records need the
        # transactional id they are written for, which is what is authorized and verified.
        results = [AppendResult(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, error_message="transactional records "
                                "without a transactional id") for _ in items]
    else:
        # Transactional batches for partitions outside the producer's ongoing transaction are refused
        # before anything is written (KIP-890 part 1 verification).
        # A topic the principal may not WRITE is refused as Kafka does, before its existence is looked at.
        denied = {name for _, name, _, _ in items
                  if name is not None and not ctx.allowed(client, AclOperation.WRITE, ResourceType.TOPIC, name)}
        refused: dict[int, int] = {i: ErrorCode.TOPIC_AUTHORIZATION_FAILED for i, it in enumerate(items) if it[1] in denied}
        unverified = await _unverified(ctx, body, [it for i, it in enumerate(items) if i not in refused], version)
        kept = [i for i in range(len(items)) if i not in refused]
        refused.update((kept[j], code) for j, code in unverified.items())
        durable = durable_ack(ctx.settings.durable_acks, acks)
        if durable:
            await _room(ctx, items)
        appended = iter(await _append(ctx, [it for i, it in enumerate(items) if i not in refused], version, durable))
        results = [AppendResult(refused[i], error_message=None if refused[i] == ErrorCode.TOPIC_AUTHORIZATION_FAILED
                                else "Unable to verify the partition has been added to the transaction")
                   if i in refused else next(appended) for i in range(len(items))]
        if durable:
            # Answered once synced; meanwhile the connection appends its next requests (Deferred).
            return Deferred(_respond_synced(ctx, items, results, request))
        _notify(ctx, items, results)
    return _response(items, results, acks, request)


async def _room(ctx: BrokerContext, items: list[tuple[Any, str | None, int, Records | None]]) -> None:
    """Wait while a log dir written to has log.dir.unflushed.max.bytes waiting for an fsync (backpressure)."""
    if ctx.log_manager.syncs_have_room():
        return
    waits = [w for _, name, partition, _ in items if name is not None
             for w in [ctx.log_manager.sync_room(name, partition)] if w is not None]
    if waits:
        await asyncio.gather(*(asyncio.wrap_future(w) for w in waits))


async def _respond_synced(ctx: BrokerContext, items: list[tuple[Any, str | None, int, Records | None]],
                          results: list[AppendResult], request: ParsedRequest) -> RawResponse | CloseConnection | None:
    results = await _synced(results)
    _notify(ctx, items, results)
    return _response(items, results, -1, request)


def _notify(ctx: BrokerContext, items: list[tuple[Any, str | None, int, Records | None]],
            results: list[AppendResult]) -> None:
    if ctx.log_manager.hw_follows_durable:
        return  # the high watermark moves at the fsync, which wakes the waiting fetches (partitions.py)
    ctx.partitions.waiters.notify(
        (name, partition) for (_, name, partition, _), r in zip(items, results, strict=True)
        if name is not None and r.error_code == ErrorCode.NONE and not r.duplicate
    )


def _response(items: list[tuple[Any, str | None, int, Records | None]], results: list[AppendResult], acks: int,
              request: ParsedRequest) -> RawResponse | CloseConnection | None:
    if acks == 0:
        failed = [r for r in results if r.error_code != ErrorCode.NONE]
        if failed:
            return CloseConnection(f"acks=0 produce failed with error {failed[0].error_code}: {failed[0].error_message}")
        return None

    by_topic: dict[Any, list[tuple[int, AppendResult]]] = {}
    for (key, _, partition, _), r in zip(items, results, strict=True):
        by_topic.setdefault(key, []).append((partition, r))
    return encode_produce_response(request.api_version, request.correlation_id, list(by_topic.items()))


def durable_ack(setting: str, acks: int) -> bool:
    """Whether a produce with ``acks`` is answered only after an fsync under ``log.durable.acks``."""
    if setting == "all":
        return acks == -1
    if setting == "1":
        return acks in (-1, 1)
    return False


async def _synced(results: list[AppendResult]) -> list[AppendResult]:
    """Each result once its batches are on disk; a failed sync turns it into ErrorCode.KAFKA_STORAGE_ERROR."""
    waits = [r.synced for r in results if r.synced is not None]
    if not waits:
        return results
    # One wake-up of the event loop when the last partition is synced, not one per partition.
    # (when_all never fails: each partition's error is read below.)
    await asyncio.wrap_future(when_all(waits))
    out = []
    for r in results:
        error = None if r.synced is None else r.synced.exception()
        if error is not None:
            r = dataclasses.replace(r, error_code=ErrorCode.KAFKA_STORAGE_ERROR, base_offset=-1,
                                    error_message=str(error) or type(error).__name__)
        out.append(r)
    return out


async def _append(ctx: BrokerContext, items: list[tuple[Any, str | None, int, Records | None]],
                  version: int, durable: bool) -> list[AppendResult]:
    known = [(name, partition, records) for _, name, partition, records in items if name is not None]
    appended = iter(await _append_known(ctx, known, durable) if known else [])
    results = []
    for _, name, _, _ in items:
        if name is None:
            results.append(AppendResult(ErrorCode.UNKNOWN_TOPIC_ID if version >= 13 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
        else:
            results.append(next(appended))
    return results


async def _append_known(ctx: BrokerContext, known: list[tuple[str, int, Records | None]],
                        durable: bool) -> list[AppendResult]:
    # On the event loop when that is only a write into the page cache (storage_io.py), else on the pool.
    size = sum(len(records) for *_, records in known if records is not None)
    done = ctx.io.try_inline(size, ctx.partitions.append_if_writes_only, known, durable=durable)
    if done is None:
        done = await ctx.io.run(ctx.partitions.append_blocking, known, durable=durable)
    return done


def _is_transactional(records: Records | None) -> bool:
    """Whether the record set's first batch has the transactional bit (v3+ sends one batch per partition;
    message sets of magic 0 and 1 have no such bit)."""
    if records is None or len(records) < _FIRST_BATCH.size or records[_MAGIC_AT] != 2:
        return False
    return bool(_FIRST_BATCH.unpack_from(records, 0)[0] & TRANSACTIONAL_BIT)


async def _unverified(ctx: BrokerContext, body: Any, items: list[tuple[Any, str | None, int, Records | None]],
                      version: int) -> dict[int, int]:
    """Index → error code of each record set whose first batch is transactional but whose partition
    the transaction coordinator does not have in the producer's ongoing transaction. A TV2 Produce
    (v12+, transaction.version 2) adds the partition instead of only asking (KIP-890 part 2)."""
    txn_id = getattr(body, "transactional_id", None)
    if ctx.transactions is None or not txn_id:
        return {}
    out: dict[int, int] = {}
    for i, (_, name, partition, records) in enumerate(items):
        if name is None or records is None or not _is_transactional(records):
            continue
        _, producer_id, producer_epoch = _FIRST_BATCH.unpack_from(records, 0)
        tp = (name, partition)
        if implicit_add(ctx, version, PRODUCE_TV2_SINCE):
            code = (await ctx.transactions.add_partitions(txn_id, producer_id, producer_epoch, [tp],
                                                          client_transaction_version=2))[tp]
        else:
            code = ctx.transactions.verify_partitions(txn_id, producer_id, producer_epoch, [tp])[tp]
        if code:
            out[i] = txn_rules.produce_verification_error(code, version)
    return out


HANDLERS = {ApiKey.PRODUCE: handle_produce}
