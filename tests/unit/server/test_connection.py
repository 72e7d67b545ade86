"""KafkaConnection driven through an in-memory transport: framing, ordering, closing rules."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from tierlog.protocol import (
    ApiKey,
    ParsedRequest,
    api_versions_response,
    build_request,
    encode_request,
    parse_response,
)
from tierlog.server.connection import MAX_QUEUED_FRAMES, ClientInfo, CloseConnection, KafkaConnection, Reply


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False
        self.reading = True
        self.pauses = 0

    def write(self, data: Any) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.reading = False
        self.pauses += 1

    def resume_reading(self) -> None:
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("10.0.0.7", 40000) if name == "peername" else default

    def frames(self) -> list[bytes]:
        out, pos = [], 0
        while pos + 4 <= len(self.written):
            (size,) = struct.unpack_from(">i", self.written, pos)
            out.append(bytes(self.written[pos + 4:pos + 4 + size]))
            pos += 4 + size
        return out


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


def connect(router: Router, max_frame_bytes: int = 1 << 20) -> tuple[KafkaConnection, FakeTransport]:
    conn = KafkaConnection(router, max_frame_bytes=max_frame_bytes)
    transport = FakeTransport()
    conn.connection_made(transport)
    return conn, transport


async def settle(conn: KafkaConnection) -> None:
    for _ in range(200):
        await asyncio.sleep(0.001)
        if not conn.busy:
            return


def test_responses_keep_request_order_whatever_each_takes() -> None:
    async def run() -> None:
        router = Router({1: 0.03, 2: 0.0, 3: 0.01})
        conn, transport = connect(router)
        # Three requests in one segment, the third split across two.
        data = api_versions(1) + api_versions(2) + api_versions(3)
        conn.data_received(data[:-5])
        conn.data_received(data[-5:])
        await settle(conn)
        corrs = [parse_response(ApiKey.API_VERSIONS, 3, f)[0] for f in transport.frames()]
        assert corrs == [1, 2, 3]
        assert conn.client.client_id == "unit" and conn.client.host == "10.0.0.7"

    asyncio.run(run())


def test_no_response_and_close_connection_replies() -> None:
    async def run() -> None:
        conn, transport = connect(Router())
        conn.data_received(api_versions(98) + api_versions(5))
        await settle(conn)
        assert [parse_response(ApiKey.API_VERSIONS, 3, f)[0] for f in transport.frames()] == [5]
        conn.data_received(api_versions(99) + api_versions(6))
        await settle(conn)
        assert transport.closed
        assert [parse_response(ApiKey.API_VERSIONS, 3, f)[0] for f in transport.frames()] == [5]

    asyncio.run(run())


def test_unknown_api_versions_version_gets_a_v0_answer_and_the_connection_stays() -> None:
    async def run() -> None:
        conn, transport = connect(Router())
        conn.data_received(struct.pack(">ihhi", 10, 18, 42, 7) + b"\xff\xff" + api_versions(8))
        await settle(conn)
        first, second = transport.frames()
        assert struct.unpack_from(">ih", first) == (7, 35)
        assert parse_response(ApiKey.API_VERSIONS, 3, second)[0] == 8
        assert not transport.closed

    asyncio.run(run())


def test_bad_frames_close_the_connection() -> None:
    async def run() -> None:
        for bad in (struct.pack(">i", -1), struct.pack(">i", 4096) + b"x", struct.pack(">ihhi", 10, 77, 0, 1) + b"\0\0",
                    struct.pack(">i", 5) + b"\0\0\0\0\0"):
            conn, transport = connect(Router(), max_frame_bytes=1024)
            conn.data_received(bad)
            await settle(conn)
            assert transport.closed, bad
            assert transport.frames() == []

    asyncio.run(run())


def test_reading_pauses_while_many_requests_wait() -> None:
    async def run() -> None:
        router = Router()
        router.gate = asyncio.Event()
        conn, transport = connect(router)
        conn.data_received(b"".join(api_versions(i) for i in range(1, MAX_QUEUED_FRAMES + 10)))
        await asyncio.sleep(0.01)
        assert not transport.reading
        router.gate.set()
        await settle(conn)
        assert transport.reading
        assert len(transport.frames()) == MAX_QUEUED_FRAMES + 9

    asyncio.run(run())
