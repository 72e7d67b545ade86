"""Server-side test helpers: an in-process broker's config and a router for one KafkaConnection (its in-memory
transport is ``tierlog.testing.FakeTransport``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tierlog.config import BrokerConfig
from tierlog.protocol import (
    ApiKey,
    ParsedRequest,
    api_versions_response,
    build_request,
    encode_request,
    parse_response,
    request_header_version,
)
from tierlog.server import Broker
from tierlog.server.connection import (
    ClientInfo,
    CloseConnection,
    Deferred,
    KafkaConnection,
    RawResponse,
    Reply,
)
from tierlog.server.context import BrokerContext
from tierlog.server.handlers import all_handlers
from tierlog.storage.log_manager import LogManagerSettings


def config(tmp_path: Path) -> BrokerConfig:
    return BrokerConfig({
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(tmp_path / "data"),
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.num.partitions": "3",
    })


class Router:
    def __init__(self, delays: dict[int, float] | None = None) -> None:
        self.seen: list[int] = []
        self.delays = delays or {}
        self.gate: asyncio.Event | None = None

    async def route(self, request: ParsedRequest, client: ClientInfo) -> Reply:
        self.seen.append(request.correlation_id)
        if self.gate is not None:
            await self.gate.wait()
        await asyncio.sleep(self.delays.get(request.correlation_id, 0))
        if request.correlation_id == 99:
            return CloseConnection("asked to")
        if request.correlation_id == 98:
            return None
        return api_versions_response(request.api_version)


def api_versions(corr: int, version: int = 3) -> bytes:
    body = build_request(ApiKey.API_VERSIONS, version, {"client_software_name": "t", "client_software_version": "1"})
    return encode_request(ApiKey.API_VERSIONS, version, corr, "unit", body)


async def settle(conn: KafkaConnection) -> None:
    for _ in range(200):
        await asyncio.sleep(0.001)
        if not conn.busy:
            return


async def call(ctx: BrokerContext, api: ApiKey, version: int, values: dict[str, Any]) -> Any:
    body = build_request(api, version, values)
    request = ParsedRequest(int(api), version, 1, "unit", request_header_version(api, version), body)
    reply = await HANDLERS[int(api)](ctx, request, ClientInfo("c", "127.0.0.1", 1, "unit"))
    # A durable produce answers later (after its group commit), as the connection would write it.
    answer = await reply.reply if isinstance(reply, Deferred) else reply
    if isinstance(answer, RawResponse):  # encoded by its handler (Produce, Fetch): read it as a client would
        frame = b"".join(part for part in answer.parts if isinstance(part, bytes))
        return parse_response(api, version, frame[4:])[1]
    return answer


def with_broker(tmp_path: Path, test: Callable[[BrokerContext], Awaitable[None]], **overrides: str) -> None:
    async def run() -> None:
        broker = Broker(BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "d"),
                                      "log.retention.hours": "48", **overrides}), LogManagerSettings())
        await broker.start()
        try:
            assert broker.ctx is not None
            await test(broker.ctx)
        finally:
            await broker.stop()

    asyncio.run(run())


HANDLERS = all_handlers()


async def append_durably(ctx: BrokerContext, items: list[tuple[str, int, bytes]]) -> list[Any]:
    """Append as an acks=all produce does under log.durable.acks=all and wait for the fsync: what was
    appended is then below the high watermark, readable (an append alone becomes readable only at
    its fsync, some time later)."""
    results = await ctx.io.run(ctx.partitions.append_blocking, items, durable=True)
    await asyncio.gather(*(asyncio.wrap_future(r.synced) for r in results if r.synced is not None))
    return list(results)
