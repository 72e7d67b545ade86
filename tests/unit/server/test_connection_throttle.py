"""A throttled connection (KIP-219): after the response of a request a client quota throttled, the
connection is not read and its next request not served until the throttle time has passed."""

from __future__ import annotations

import asyncio

from tests.helpers.server import Router, api_versions
from tierlog.protocol import ParsedRequest
from tierlog.server.connection import ClientInfo, KafkaConnection, Reply
from tierlog.server.read_gate import ReadActions, ReadGate, Timer
from tierlog.testing import FakeTransport

THROTTLE_MS = 300


class ThrottlingRouter(Router):
    async def route(self, request: ParsedRequest, client: ClientInfo) -> Reply:
        if request.correlation_id == 1:
            client.throttle_ms = THROTTLE_MS
        return await super().route(request, client)


def test_throttled_gate_pauses_reading() -> None:
    gate = ReadGate(max_frames=8, max_bytes=1000)
    gate.throttled = True
    assert gate.decide(receiving=False, timeout_set=True) == ReadActions(True, Timer.KEEP)
    gate.throttled = False
    assert gate.decide(receiving=False, timeout_set=True) == ReadActions(False, Timer.KEEP)


def test_connection_is_muted_for_the_throttle_time_after_the_response() -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        conn = KafkaConnection(ThrottlingRouter(), max_frame_bytes=1 << 20)
        transport = FakeTransport()
        transport.protocol = conn
        conn.connection_made(transport)
        conn.data_received(api_versions(1) + api_versions(2))
        started = loop.time()
        while len(transport.frames()) < 1:
            await asyncio.sleep(0.005)
        # The first response is out at once; then reading stops and request 2 waits.
        assert not transport.reading
        while len(transport.frames()) < 2:
            await asyncio.sleep(0.005)
        waited = loop.time() - started
        assert waited >= THROTTLE_MS / 1000 * 0.95, waited
        while not transport.reading:
            await asyncio.sleep(0.005)

    asyncio.run(asyncio.wait_for(run(), 30))
