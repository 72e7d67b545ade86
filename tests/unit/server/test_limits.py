"""Connection quotas, the request memory pool's wake-up order, the descriptor limit, and -- through an
in-process broker with real sockets -- per-address limits and the idle expiry of a client that
stops reading its responses."""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.server import append_durably
from tierlog.config import BrokerConfig
from tierlog.protocol import ApiKey, build_request, encode_request
from tierlog.records import SimpleRecord, build_batch
from tierlog.server import Broker
from tierlog.server.broker import _quiet_accept_errors
from tierlog.server.limits import (
    READ_CHUNK_BYTES,
    ConnectionQuotas,
    RequestMemoryPool,
    parse_ip_overrides,
    raise_open_file_limit,
    reserved_fds,
)
from tierlog.storage.log_manager import LogManagerSettings


def test_quotas_count_per_address_with_overrides_and_in_total() -> None:
    quotas = ConnectionQuotas(max_connections=6, max_per_ip=2, per_ip_overrides={"10.0.0.9": 3},
                              open_file_limit=100_000)
    assert [quotas.admit("10.0.0.1", 10) for _ in range(3)] == [None, None, "max.connections.per.ip"]
    assert [quotas.admit("10.0.0.9", 10) for _ in range(4)] == [None, None, None, "max.connections.per.ip"]
    assert quotas.admit("10.0.0.2", 10) is None
    assert quotas.admit("10.0.0.3", 10) == "max.connections"  # 6 open
    quotas.release("10.0.0.1")
    assert quotas.admit("10.0.0.1", 10) is None
    assert quotas.total == 6 and quotas.refused == {"max.connections.per.ip": 2, "max.connections": 1}


def test_a_socket_near_the_descriptor_limit_is_refused() -> None:
    quotas = ConnectionQuotas(max_connections=1 << 30, max_per_ip=1 << 30, open_file_limit=20_000)
    assert reserved_fds(20_000) == 2000 and reserved_fds(1024) == 256 and reserved_fds(300) == 150
    assert quotas.admit("h", 17_999) is None
    assert quotas.admit("h", 18_000) == "open-file limit"
    assert quotas.total == 1


def test_ip_overrides_parse_addresses_and_host_names() -> None:
    assert parse_ip_overrides("") == {}
    assert parse_ip_overrides("127.0.0.1:200, [::1]:7") == {"127.0.0.1": 200, "::1": 7}
    assert parse_ip_overrides("localhost:5")["127.0.0.1"] == 5
    for bad in ("127.0.0.1", "host:x", ":5", "no-such-host.invalid:3"):
        with pytest.raises(ValueError):
            parse_ip_overrides(bad)


def test_a_broker_with_unparseable_overrides_does_not_start(tmp_path: Path) -> None:
    from tierlog.errors import ConfigError

    with pytest.raises(ConfigError, match="max.connections.per.ip.overrides"):
        Broker(BrokerConfig({"log.dirs": str(tmp_path), "max.connections.per.ip.overrides": "no-such-host.invalid:3"}),
               LogManagerSettings())


def test_pool_wakes_waiters_in_order_and_no_more_than_the_room_left_takes() -> None:
    pool = RequestMemoryPool(4 * READ_CHUNK_BYTES)
    woken: list[str] = []
    pool.add(5 * READ_CHUNK_BYTES)
    for name in "abcdef":
        pool.wait(name, lambda name=name: woken.append(name))
    pool.wait("a", lambda: woken.append("again"))  # already waiting: keeps its place, not counted twice
    assert pool.waiting == 6 and pool.refusals == 6
    pool.add(-READ_CHUNK_BYTES)  # exactly full: nobody
    assert woken == []
    pool.add(-2 * READ_CHUNK_BYTES)  # two chunks of room: the first two in line
    assert woken == ["a", "b"]
    pool.cancel("c")
    pool.add(-2 * READ_CHUNK_BYTES)  # empty: four chunks of room, three left in line
    assert woken == ["a", "b", "d", "e", "f"] and pool.waiting == 0
    assert pool.peak_used_bytes == 5 * READ_CHUNK_BYTES


def test_an_unbounded_pool_counts_but_never_fills() -> None:
    pool = RequestMemoryPool(-1)
    pool.add(1 << 40)
    assert not pool.full and pool.used_bytes == 1 << 40


def test_the_soft_descriptor_limit_is_raised_to_the_hard_one() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        if hard != resource.RLIM_INFINITY and hard > 64:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard - 1, hard))
        assert raise_open_file_limit()[0] == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] in (hard, resource.RLIM_INFINITY)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_accept_running_out_of_descriptors_is_one_line_not_a_traceback_storm(
        caplog: pytest.LogCaptureFixture) -> None:
    handler = _quiet_accept_errors()
    loop = asyncio.new_event_loop()
    try:
        with caplog.at_level(logging.WARNING):
            for _ in range(50):
                handler(loop, {"message": "socket.accept() out of system resource",
                               "exception": OSError(24, "Too many open files")})
            handler(loop, {"message": "something else entirely"})
    finally:
        loop.close()
    accept_lines = [r for r in caplog.records if "cannot accept" in r.getMessage()]
    assert len(accept_lines) == 1 and accept_lines[0].exc_info is None
    assert any("something else entirely" in r.getMessage() for r in caplog.records)


# --- an in-process broker with real sockets ------------------------------------------------------


def _config(tmp_path: Path, **overrides: str) -> BrokerConfig:
    return BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "data"),
                         "offsets.topic.num.partitions": "1", **overrides})


def _api_versions(corr: int) -> bytes:
    return encode_request(ApiKey.API_VERSIONS, 3, corr, "t", build_request(
        ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}))


async def _served(port: int, local_host: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """A connection from ``local_host`` that got an ApiVersions answer, or None if it was refused."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(local_host, 0))
    writer.write(_api_versions(1))
    try:
        size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))[0]
        await reader.readexactly(size)
        return reader, writer
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()
        return None


def test_connections_beyond_the_per_address_limit_are_refused_and_others_served(tmp_path: Path) -> None:
    async def run() -> None:
        broker = Broker(_config(tmp_path, **{"max.connections.per.ip": "3",
                                             "max.connections.per.ip.overrides": "127.0.0.2:5"}),
                        LogManagerSettings())
        port = (await broker.start())[0].port
        try:
            first = [await _served(port, "127.0.0.1") for _ in range(4)]
            assert [c is not None for c in first] == [True, True, True, False]
            other = [await _served(port, "127.0.0.2") for _ in range(6)]
            assert [c is not None for c in other] == [True] * 5 + [False]
            opened = first[0]
            assert opened is not None
            opened[1].close()
            await opened[1].wait_closed()
            await asyncio.sleep(0.1)
            assert await _served(port, "127.0.0.1") is not None  # a slot came back
        finally:
            await broker.stop()

    asyncio.run(run())


def test_a_client_that_never_reads_its_fetches_is_closed_as_idle(tmp_path: Path) -> None:
    """Its first answer leaves through sendfile, which never finishes: the idle expiry must end it
    without leaving asyncio a closed socket still registered for that sendfile (the next connection
    given the same descriptor number would fail) or a waiter it completes twice."""
    loop_errors: list[str] = []

    async def run() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: loop_errors.append(str(ctx)))
        broker = Broker(_config(tmp_path, **{"connections.max.idle.ms": "400"}), LogManagerSettings())
        port = (await broker.start())[0].port
        broker_handler = asyncio.get_running_loop().get_exception_handler()
        assert broker_handler is not None

        def record(loop: asyncio.AbstractEventLoop, ctx: dict[str, Any]) -> None:
            loop_errors.append(str(ctx.get("exception") or ctx.get("message")))
            broker_handler(loop, ctx)

        asyncio.get_running_loop().set_exception_handler(record)
        ctx = broker.ctx
        assert ctx is not None
        try:
            await ctx.io.run(ctx.controller.create_topic, "big", 1, 1, {})
            now = int(time.time() * 1000)
            batch = build_batch([SimpleRecord(None, bytes(1000), timestamp=now) for _ in range(1000)])
            for _ in range(4):
                assert (await append_durably(ctx, [("big", 0, batch)]))[0].error_code == 0
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window fills at once
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
            fetch = {"max_wait": 0, "min_bytes": 0, "max_bytes": 4 << 20, "isolation_level": 0, "session_id": 0,
                     "session_epoch": -1, "replica_id": -1, "rack_id": "", "forgotten_topics_data": [],
                     "topics": [{"topic": "big", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                                 "partition_max_bytes": 4 << 20}]}]}
            frames = b"".join(encode_request(ApiKey.FETCH, 11, corr, "t", build_request(ApiKey.FETCH, 11, fetch))
                              for corr in range(1, 41))
            sock.send(frames)  # 40 fetches of 4 MB each, none of them ever read
            started = time.monotonic()
            while not broker._connections.live and time.monotonic() - started < 5:
                await asyncio.sleep(0.01)
            (stalled,) = broker._connections.live
            await asyncio.sleep(0.2)
            # Its first response is stuck in the socket: the connection is busy, not in a handler.
            assert stalled.busy and not stalled.in_handler and not stalled.closed
            while broker._connections.live and time.monotonic() - started < 10:
                await asyncio.sleep(0.05)
            assert not broker._connections.live, "the stalled reader is still connected"
            assert time.monotonic() - started < 5
            assert broker._connections.quotas.total == 0
            sock.close()
            # New connections (likely given the stalled one's descriptor number) are served.
            for _ in range(5):
                served = await _served(port, "127.0.0.1")
                assert served is not None
                served[1].close()
            await asyncio.sleep(0.1)
        finally:
            await broker.stop()
        assert loop_errors == []

    asyncio.run(run())
