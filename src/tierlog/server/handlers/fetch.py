"""Fetch: read each partition from its fetch offset, long-polling up to ``max_wait`` until at least
``min_bytes`` are there; a moving high watermark wakes waiting fetches at once (the append moves it
under ``log.durable.acks=none``, the fsync under any other setting: consumers read below it).

Fetch sessions (KIP-227) are not kept: every answer carries session id 0, which tells a client that
asked for a session to go on sending full fetch requests (Kafka answers the same when its session
cache is full). Large record sets leave as file slices sent with ``sendfile``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tierlog.errors import ErrorCode
from tierlog.metadata.acls import AclOperation, ResourceType
from tierlog.protocol import ApiKey, ParsedRequest, to_millis
from tierlog.server.connection import ClientInfo, Reply
from tierlog.server.context import BrokerContext, uuid_bytes
from tierlog.server.fetch_response import PartitionData, TopicData, encode_fetch_response
from tierlog.server.partitions import ReadResult, ReadSpec
from tierlog.server.throttling import fetch_max_bytes

READ_COMMITTED = 1
#: Fetch sessions epochs: 0 opens a session, -1 is a sessionless full fetch.
INITIAL_EPOCH = 0
FINAL_EPOCH = -1


def _release(results: list[ReadResult]) -> None:
    for r in results:
        r.release()


async def _read(ctx: BrokerContext, specs: list[ReadSpec], max_bytes: int, read_committed: bool) -> list[ReadResult]:
    # On the event loop when it is only index lookups in memory (partitions.read_if_local): the
    # hand-off to the pool and back cost more than the read (~a third of the broker's CPU per
    # 1 MiB fetch). Reads have their own gate (StorageIO.read_gate).
    done = ctx.io.try_inline_read(ctx.partitions.read_if_local, specs, max_bytes, read_committed=read_committed)
    if done is not None:
        return done
    read = asyncio.ensure_future(ctx.io.run(ctx.partitions.read_blocking, specs, max_bytes,
                                            read_committed=read_committed))
    try:
        # Shielded: if the connection closes meanwhile, the read still finishes in its thread and its
        # file slices (duplicated descriptors) must be closed rather than dropped.
        return await asyncio.shield(read)
    except asyncio.CancelledError:
        read.add_done_callback(_release_when_done)
        raise


def _release_when_done(read: asyncio.Future[list[ReadResult]]) -> None:
    if not read.cancelled() and read.exception() is None:
        _release(read.result())


def _aborted(result: ReadResult) -> list[tuple[int, int]]:
    """The (producer id, first offset) pairs a read_committed consumer skips, in first-offset order
    (librdkafka and the Java client keep them in a queue ordered so)."""
    found = result.aborted_transactions or []
    return sorted({(t.producer_id, t.first_offset) for t in found}, key=lambda pair: (pair[1], pair[0]))


def _set_done(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


async def handle_fetch(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    version = request.api_version
    corr = request.correlation_id
    session_id = getattr(body, "session_id", 0)
    session_epoch = getattr(body, "session_epoch", FINAL_EPOCH)
    if session_id != 0:
        return encode_fetch_response(version, corr, [], error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    if session_epoch not in (INITIAL_EPOCH, FINAL_EPOCH):
        return encode_fetch_response(version, corr, [], error_code=ErrorCode.INVALID_FETCH_SESSION_EPOCH)

    replica_state = getattr(body, "replica_state", None)
    replica_id = replica_state.replica_id if replica_state is not None else getattr(body, "replica_id", -1)
    if replica_id >= 0 and not ctx.allowed(client, AclOperation.CLUSTER_ACTION):
        # A follower's fetch is a cluster action (Kafka's KafkaApis.handleFetchRequest).
        return encode_fetch_response(version, corr, [], error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    image = ctx.image
    by_id = version >= 13
    # Response layout: one TopicData per requested topic; specs for the partitions we can read.
    # (topic key, [(partition, spec index or the partition's error code)])
    layout: list[tuple[Any, list[tuple[int, int | None, int]]]] = []
    specs: list[ReadSpec] = []
    unknown_code = ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    for t in body.topics:
        if by_id:
            tid = uuid_bytes(t.topic_id)
            topic = image.topics_by_id.get(tid) if tid is not None else None
            key: Any = tid if tid is not None else bytes(16)
            name = topic.name if topic is not None else None
        else:
            key = name = t.topic
        entries: list[tuple[int, int | None, int]] = []
        readable = name is not None and ctx.allowed(client, AclOperation.READ, ResourceType.TOPIC, name)
        for p in t.partitions:
            if name is None:
                entries.append((p.partition, None, unknown_code))
                continue
            if not readable:
                entries.append((p.partition, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            entries.append((p.partition, len(specs), 0))
            specs.append(ReadSpec(name, p.partition, p.fetch_offset, p.partition_max_bytes,
                                  getattr(p, "current_leader_epoch", -1)))
        layout.append((key, entries))

    read_committed = getattr(body, "isolation_level", 0) == READ_COMMITTED
    max_bytes = fetch_max_bytes(ctx.quotas, client, body.max_bytes if body.max_bytes > 0 else 0x7FFFFFFF)
    max_wait_ms = max(0, to_millis(body.max_wait))
    min_bytes = body.min_bytes
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_ms / 1000.0
    waiters = ctx.partitions.waiters
    tps = [(s.topic, s.partition) for s in specs]
    # Only a fetch that may wait registers (min_bytes <= 0 is always satisfied).
    may_wait = bool(specs) and max_wait_ms > 0 and min_bytes > 0
    while True:
        # The waiter is registered *before* the read: a high watermark that moves after the read
        # looked but before the fetch would start waiting completes it, and the fetch reads again at
        # once instead of sleeping out max_wait with the data there (a lost wake-up). Registration
        # and notification both run on the event loop, so nothing slips between them.
        waiter: asyncio.Future[None] = loop.create_future()
        if may_wait:
            waiters.add(tps, waiter)
        try:
            results = await _read(ctx, specs, max_bytes, read_committed) if specs else []
            remaining = deadline - loop.time()
            if (not may_wait or remaining <= 0 or any(r.error_code for r in results)
                    or sum(r.size for r in results) >= min_bytes):
                break
            _release(results)
            timer = loop.call_later(remaining, _set_done, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
        finally:
            if may_wait:
                waiters.remove(tps, waiter)

    topics: list[TopicData] = []
    for key, entries in layout:
        out = TopicData(key)
        for partition, index, code in entries:
            if index is None:
                out.partitions.append(PartitionData(partition, code))
                continue
            r = results[index]
            out.partitions.append(PartitionData(
                partition, r.error_code, r.high_watermark, r.last_stable_offset, r.log_start_offset,
                aborted_transactions=_aborted(r) if read_committed and r.error_code == ErrorCode.NONE else None,
                records=r.records,
            ))
        topics.append(out)
    return encode_fetch_response(version, corr, topics)


HANDLERS = {ApiKey.FETCH: handle_fetch}
