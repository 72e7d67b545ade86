"""KafkaConnection driven through an in-memory transport: framing, ordering, closing rules."""

from __future__ import annotations

import asyncio
import ssl
import struct
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.server import Router, api_versions, settle
from tests.security.pki import CertificateAuthority
from tierlog.protocol import (
    ApiKey,
    ParsedRequest,
    api_versions_response,
    build_request,
    encode_request,
    parse_response,
)
from tierlog.server import connection as connection_module
from tierlog.server.connection import (
    MAX_DEFERRED_REPLIES,
    MAX_QUEUED_FRAMES,
    ClientInfo,
    Deferred,
    KafkaConnection,
    Reply,
)
from tierlog.server.limits import RequestMemoryPool, RequestSlots
from tierlog.testing import FakeTransport


def connect(router: Router, max_frame_bytes: int = 1 << 20, **kwargs: Any) -> tuple[KafkaConnection, FakeTransport]:
    conn = KafkaConnection(router, max_frame_bytes=max_frame_bytes, **kwargs)
    transport = FakeTransport()
    transport.protocol = conn
    conn.connection_made(transport)
    return conn, transport


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


# --- hostile clients ---------------------------------------------------------------------------


def record_abort_time(transport: FakeTransport) -> list[float]:
    """The loop time of each ``abort`` on ``transport``: timing assertions on when the broker closed,
    not on when a loaded test machine let the test look (a stalled loop fires overdue timers first)."""
    times: list[float] = []
    abort = transport.abort

    def timed_abort() -> None:
        times.append(asyncio.get_running_loop().time())
        abort()

    transport.abort = timed_abort  # type: ignore[method-assign]
    return times


async def wait_aborted(transport: FakeTransport, timeout_s: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not transport.aborted:
        assert asyncio.get_running_loop().time() < deadline, "the connection was never aborted"
        await asyncio.sleep(0.01)


def test_a_request_that_stops_halfway_is_closed_after_the_receive_timeout() -> None:
    async def run() -> None:
        timeout_s = 0.3
        conn, transport = connect(Router(), receive_timeout_s=timeout_s)
        aborted_at = record_abort_time(transport)
        frame = api_versions(1)
        started = asyncio.get_running_loop().time()
        conn.data_received(frame + frame[:7])  # one whole request, then half of the next
        await wait_aborted(transport)
        # The whole request was answered; the half one closed the connection, and not before its time.
        assert [parse_response(ApiKey.API_VERSIONS, 3, f)[0] for f in transport.frames()] == [1]
        assert len(aborted_at) == 1 and aborted_at[0] - started >= timeout_s

    asyncio.run(run())


def test_a_size_prefix_alone_is_a_request_begun() -> None:
    async def run() -> None:
        conn, transport = connect(Router(), receive_timeout_s=0.05)
        conn.data_received(struct.pack(">i", 100))  # four bytes, then nothing
        await asyncio.sleep(0.15)
        assert transport.aborted

    asyncio.run(run())


def test_the_deadline_runs_from_the_first_byte_whatever_comes_after() -> None:
    async def run() -> None:
        timeout_s, gap_s = 1.0, 0.2
        conn, transport = connect(Router(), receive_timeout_s=timeout_s)
        aborted_at = record_abort_time(transport)
        frame = api_versions(1)
        fed_at: list[float] = []
        for i in range(len(frame)):
            fed_at.append(asyncio.get_running_loop().time())
            conn.data_received(frame[i:i + 1])  # the prefix completes at the fourth byte: no new deadline
            await asyncio.sleep(gap_s)
            if transport.closed:
                break
        await wait_aborted(transport)
        # A deadline restarted by the completed prefix (or by any byte) could not fire before the fourth
        # byte's time plus the timeout; the first byte's deadline fires at its own time.
        assert len(fed_at) > 4 and len(aborted_at) == 1
        assert fed_at[0] + timeout_s <= aborted_at[0] < fed_at[3] + timeout_s

    asyncio.run(run())


def test_one_byte_at_a_time_is_closed_even_though_bytes_keep_coming() -> None:
    async def run() -> None:
        conn, transport = connect(Router(), receive_timeout_s=0.1)
        frame = api_versions(1)
        for i in range(len(frame)):  # a slowloris: every byte well inside any idle timeout
            conn.data_received(frame[i:i + 1])
            await asyncio.sleep(0.01)
            if transport.closed:
                break
        assert transport.aborted and transport.frames() == []

    asyncio.run(run())


def test_requests_that_arrive_whole_are_never_timed_out() -> None:
    async def run() -> None:
        conn, transport = connect(Router(), receive_timeout_s=0.05)
        for corr in range(1, 6):
            conn.data_received(api_versions(corr))
            await asyncio.sleep(0.03)  # 150 ms in all, each frame complete at once
        await settle(conn)
        assert not transport.closed and len(transport.frames()) == 5

    asyncio.run(run())


def test_the_receive_clock_stops_while_the_broker_is_not_reading() -> None:
    async def run() -> None:
        router = Router()
        router.gate = asyncio.Event()
        conn, transport = connect(router, receive_timeout_s=0.3)
        # A full queue pauses reading; the half frame behind it waits on the broker, not the client.
        conn.data_received(b"".join(api_versions(i) for i in range(1, MAX_QUEUED_FRAMES + 1)) + api_versions(999)[:9])
        assert not transport.reading
        await asyncio.sleep(0.6)
        assert not transport.closed
        router.gate.set()
        await settle(conn)
        assert transport.reading and not transport.closed
        conn.data_received(api_versions(999)[9:])
        await settle(conn)
        assert parse_response(ApiKey.API_VERSIONS, 3, transport.frames()[-1])[0] == 999

    asyncio.run(run())


def test_over_the_memory_bound_a_connection_with_a_partial_request_waits_and_small_requests_go_on() -> None:
    async def run() -> None:
        pool = RequestMemoryPool(1000)
        router = Router()
        big, big_transport = connect(router, memory_pool=pool)
        small, small_transport = connect(router, memory_pool=pool)
        # 1200 of a declared 5000 bytes: counted as received (not as declared), and over the bound.
        big.data_received(struct.pack(">i", 5000) + b"x" * 1200)
        assert pool.used_bytes == 1200 and pool.full
        assert not big_transport.reading and pool.waiting == 1
        # A client with one small request at a time is still read and answered.
        for corr in (1, 2, 3):
            small.data_received(api_versions(corr))
            await settle(small)
        assert [parse_response(ApiKey.API_VERSIONS, 3, f)[0] for f in small_transport.frames()] == [1, 2, 3]
        assert small_transport.reading
        # ... but one that piles up requests while memory is short is held back too.
        router.gate = asyncio.Event()
        small.data_received(api_versions(4) + api_versions(5))
        assert not small_transport.reading
        router.gate.set()
        await settle(small)
        assert small_transport.reading and not big_transport.reading  # served: its own bytes came back
        big.connection_lost(None)  # the big one's bytes come back when it goes
        assert pool.used_bytes == 0

    asyncio.run(run())


def test_the_first_waiter_resumes_when_bytes_come_back() -> None:
    async def run() -> None:
        pool = RequestMemoryPool(100)
        router = Router()
        router.gate = asyncio.Event()
        holder, _ = connect(router, memory_pool=pool)
        waiter, waiter_transport = connect(router, memory_pool=pool)
        holder.data_received(api_versions(1) + struct.pack(">i", 1000) + b"y" * 196)  # one whole, one part
        await asyncio.sleep(0.01)
        assert pool.used_bytes == 20 + 196
        waiter.data_received(api_versions(7)[:10])
        assert not waiter_transport.reading
        holder.connection_lost(None)
        assert pool.used_bytes == 6 and waiter_transport.reading
        waiter.data_received(api_versions(7)[10:])
        router.gate.set()
        await settle(waiter)
        assert pool.used_bytes == 0 and parse_response(ApiKey.API_VERSIONS, 3, waiter_transport.frames()[0])[0] == 7

    asyncio.run(run())


def test_a_closed_connection_gives_its_bytes_back_to_the_pool() -> None:
    async def run() -> None:
        pool = RequestMemoryPool(1 << 20)
        router = Router()
        router.gate = asyncio.Event()
        conn, _ = connect(router, memory_pool=pool)
        conn.data_received(api_versions(1) + api_versions(2) + struct.pack(">i", 5000) + b"x" * 100)
        await asyncio.sleep(0.01)
        assert pool.used_bytes == 2 * (len(api_versions(1)) - 4) + 100
        conn.connection_lost(None)
        await asyncio.sleep(0.01)
        assert pool.used_bytes == 0

    asyncio.run(run())


def test_a_client_that_does_not_read_is_idle_not_busy_and_stops_being_read() -> None:
    async def run() -> None:
        conn, transport = connect(Router())
        transport.stalled = True
        conn.data_received(b"".join(api_versions(i) for i in range(1, MAX_QUEUED_FRAMES + 20)))
        await asyncio.sleep(0.02)
        # The first response is stuck in the socket's buffer: no handler runs, nothing more is read.
        assert conn.busy and not conn.in_handler
        assert not transport.reading and conn.reading_paused
        stuck_since = conn.last_active
        await asyncio.sleep(0.02)
        assert conn.last_active == stuck_since  # nothing moves: the idle expiry will close it

    asyncio.run(run())


def test_closing_a_connection_whose_client_does_not_read_aborts_it_after_a_grace(monkeypatch: Any) -> None:
    monkeypatch.setattr(connection_module, "CLOSE_GRACE_S", 0.02)

    async def run() -> None:
        conn, transport = connect(Router())
        transport.stalled = True
        conn.data_received(api_versions(1))
        await asyncio.sleep(0.01)
        conn.close()
        assert transport.closed and not transport.aborted
        await asyncio.sleep(0.05)
        assert transport.aborted

    asyncio.run(run())


class DeferringRouter(Router):
    """Correlation ids in ``deferred`` answer with Deferred replies completed by the test."""

    def __init__(self, deferred: set[int]) -> None:
        super().__init__()
        self.deferred = deferred
        self.pending: dict[int, asyncio.Future[Any]] = {}

    async def route(self, request: Any, client: Any) -> Any:
        reply = await super().route(request, client)
        if request.correlation_id not in self.deferred:
            return reply
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[request.correlation_id] = future

        async def later() -> Any:
            await future
            return reply

        return Deferred(later())


def test_a_deferred_reply_lets_the_next_requests_in_and_responses_keep_their_order() -> None:
    async def run() -> None:
        router = DeferringRouter({1, 2})
        conn, transport = connect(router)
        conn.data_received(api_versions(1) + api_versions(2) + api_versions(3))
        for _ in range(200):
            await asyncio.sleep(0.001)
            if router.seen == [1, 2, 3]:
                break
        # Every request was handled while the first two wait; nothing written before them.
        assert router.seen == [1, 2, 3]
        assert transport.frames() == []
        router.pending[2].set_result(None)
        await asyncio.sleep(0.01)
        assert transport.frames() == []  # 2 is ready, but 1 goes first
        router.pending[1].set_result(None)
        await settle(conn)
        assert [parse_response(ApiKey.API_VERSIONS, 3, f)[0] for f in transport.frames()] == [1, 2, 3]

    asyncio.run(run())


def test_deferred_replies_past_the_bound_hold_the_connection() -> None:
    async def run() -> None:
        n = MAX_DEFERRED_REPLIES + 3
        router = DeferringRouter(set(range(1, n + 1)))
        conn, transport = connect(router)
        conn.data_received(b"".join(api_versions(i) for i in range(1, n + 1)))
        await asyncio.sleep(0.05)
        assert len(router.seen) == MAX_DEFERRED_REPLIES + 1  # the next one waits for the oldest
        for i in range(1, n + 1):
            while i not in router.pending:
                await asyncio.sleep(0.001)
            router.pending[i].set_result(None)
        await settle(conn)
        assert [parse_response(ApiKey.API_VERSIONS, 3, f)[0] for f in transport.frames()] == list(range(1, n + 1))

    asyncio.run(run())


def test_queued_max_requests_stops_reading_connections_that_hold_requests() -> None:
    async def run() -> None:
        slots = RequestSlots(2)
        router = DeferringRouter({1, 2, 3})
        first, first_transport = connect(router, request_slots=slots)
        second, second_transport = connect(Router(), request_slots=slots)
        first.data_received(api_versions(1) + api_versions(2))
        await asyncio.sleep(0.02)
        # Two requests held (deferred): the bound; the connection holding them is not read.
        assert slots.used == 2 and not first_transport.reading
        # One holding nothing is still read and served.
        second.data_received(api_versions(7))
        await settle(second)
        assert [parse_response(ApiKey.API_VERSIONS, 3, f)[0] for f in second_transport.frames()] == [7]
        router.pending[1].set_result(None)
        router.pending[2].set_result(None)
        await settle(first)
        assert slots.used == 0 and first_transport.reading and slots.refusals >= 1

    asyncio.run(run())


def test_over_a_real_socket_large_and_small_pipelined_requests_are_answered_in_order() -> None:
    """The connection reads as an asyncio BufferedProtocol: a large request straight into a buffer of
    its own, small ones through the shared read buffer; whatever way the bytes come, every request
    is answered, in order."""
    def big(corr: int) -> bytes:
        body = build_request(ApiKey.API_VERSIONS, 3, {"client_software_name": "x" * 200_000,
                                                       "client_software_version": "1"})
        return encode_request(ApiKey.API_VERSIONS, 3, corr, "unit", body)

    async def run() -> None:
        router = Router({1: 0.05})  # the first answer is the slowest
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: KafkaConnection(router, max_frame_bytes=1 << 20), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        wire = big(1) + api_versions(2) + big(3) + api_versions(4) + api_versions(5)
        for start in range(0, len(wire), 70_001):  # pieces that cut frames and size prefixes anywhere
            writer.write(wire[start:start + 70_001])
            await writer.drain()
        corrs = []
        for _ in range(5):
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            corrs.append(parse_response(ApiKey.API_VERSIONS, 3, await reader.readexactly(size))[0])
        assert corrs == [1, 2, 3, 4, 5] and router.seen == [1, 2, 3, 4, 5]
        writer.close()
        server.close()
        await server.wait_closed()

    asyncio.run(run())


@pytest.mark.parametrize("tls", [False, True], ids=["plaintext", "tls"])
def test_pipelined_large_requests_of_varying_sizes_arrive_whole_and_are_answered_in_order(
        tls: bool, tmp_path: Path) -> None:
    """Large requests sent back to back, as a producer does: after the first, each read at a request
    boundary goes into a buffer of the last one's size (the decoder's lent buffer); requests of the
    same, a smaller, a slightly and a much larger size, and small ones between, over plaintext and
    TLS (whose transport reads into the buffer in several pieces): each arrives byte for byte, and
    is answered in order."""
    sizes = [300_000, 300_000, 280_000, 320_000, 10, 300_000, 900_000, 900_000, 20_000, 300_000]
    names = {corr: chr(ord("a") + corr) * size for corr, size in enumerate(sizes, 1)}

    class Recording(Router):
        def __init__(self) -> None:
            super().__init__()
            self.names: dict[int, str] = {}

        async def route(self, request: ParsedRequest, client: ClientInfo) -> Reply:
            self.names[request.correlation_id] = request.body.client_software_name
            return await super().route(request, client)

    def request(corr: int) -> bytes:
        body = build_request(ApiKey.API_VERSIONS, 3, {"client_software_name": names[corr],
                                                       "client_software_version": "1"})
        return encode_request(ApiKey.API_VERSIONS, 3, corr, "unit", body)

    server_ssl = client_ssl = None
    if tls:
        ca = CertificateAuthority()
        cert, key, _ = ca.issue("localhost", server=True).write(tmp_path, "broker")
        server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_ssl.load_cert_chain(cert, key)
        client_ssl = ssl.create_default_context(cadata=ca.cert_pem.decode())

    async def run() -> None:
        router = Recording()
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: KafkaConnection(router, max_frame_bytes=4 << 20), "127.0.0.1", 0,
                                          ssl=server_ssl)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ssl,
                                                       server_hostname="localhost" if tls else None)
        writer.write(b"".join(request(corr) for corr in names))
        await writer.drain()
        corrs = []
        for _ in names:
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            corrs.append(parse_response(ApiKey.API_VERSIONS, 3, await reader.readexactly(size))[0])
        assert corrs == list(names) and router.seen == list(names)
        assert router.names == names
        writer.close()
        server.close()
        await server.wait_closed()

    asyncio.run(run())


def test_requests_served_without_waiting_send_their_responses_together_in_order() -> None:
    """Responses of requests already received, served without the loop running in between, leave in
    one write (one send), in request order; a request that waits lets the earlier ones go first."""
    async def run() -> None:
        class Immediate(Router):
            """Answers at once (Router's sleep(0) would let the loop run) except where told to wait."""

            async def route(self, request: ParsedRequest, client: ClientInfo) -> Reply:
                if request.correlation_id == 4:
                    await asyncio.sleep(0.02)  # the fourth waits: what came before must not wait with it
                return api_versions_response(request.api_version)

        conn, transport = connect(Immediate())
        writes: list[int] = []
        write = transport.write

        def counting(data: Any) -> None:
            writes.append(len(data))
            write(data)

        transport.write = counting  # type: ignore[method-assign]
        conn.data_received(b"".join(api_versions(corr) for corr in (1, 2, 3, 4, 5)))
        await settle(conn)
        assert [parse_response(ApiKey.API_VERSIONS, 3, f)[0] for f in transport.frames()] == [1, 2, 3, 4, 5]
        # 1-3 in one write before 4's wait; 4 and 5 in another.
        assert len(writes) == 2

    asyncio.run(run())
