"""Responses with file slices (a Fetch's record sets) over a real loopback socket: the header, the
file's bytes and what follows them (a flexible Fetch's tagged fields) leave corked as one stream,
pipelined responses stay in request order, a slice larger than the socket takes at once resumes
(uncorked), the socket is uncorked after every response, and a TLS connection copies the file
instead."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from pathlib import Path
from typing import Any

from tests.helpers.server import api_versions
from tierlog.protocol import ApiKey, ParsedRequest, api_versions_response, parse_response
from tierlog.server import connection as connection_module
from tierlog.server.connection import ClientInfo, FileSlice, KafkaConnection, RawResponse, Reply
from tierlog.testing import FakeTransport

TAIL = b"\0\0\0"  # what a flexible Fetch response has after its last record set


class SliceRouter:
    """Answers an ApiVersions request whose correlation id is in ``slices`` with a frame made of a
    header, ``slices[corr]`` bytes of ``path`` from ``corr`` on, and :data:`TAIL` -- the shape of
    a Fetch response -- and any other with a plain ApiVersions response."""

    def __init__(self, path: Path, slices: dict[int, int]) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        self.slices = slices

    async def route(self, request: ParsedRequest, client: ClientInfo) -> Reply:
        size = self.slices.get(request.correlation_id)
        if size is None:
            return api_versions_response(request.api_version)
        head = struct.pack(">ii", 4 + size + len(TAIL), request.correlation_id)
        return RawResponse((head, FileSlice(os.dup(self.fd), request.correlation_id, size), TAIL))

    def close(self) -> None:
        os.close(self.fd)


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


def _corked(conn: KafkaConnection) -> int:
    sock = conn._sendfile_socket
    assert sock is not None, "a plaintext connection sends file slices to its socket"
    value: int = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CORK)
    return value


class SmallSendBuffer(KafkaConnection):
    """With a 64 KiB send buffer: no slice of a megabyte fits the socket at once."""

    def connection_made(self, transport: Any) -> None:
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
        super().connection_made(transport)


def _serve_and_read(tmp_path: Path, slices: dict[int, int], corrs: list[int], *,
                    receive_buffer: int | None = None,
                    connection: type[KafkaConnection] = KafkaConnection) -> tuple[list[bytes], bytes, list[int]]:
    """Pipeline ApiVersions requests with ``corrs`` to a KafkaConnection on loopback; the frames
    read back in order, the file, and TCP_CORK of the server's socket after each response."""
    data = os.urandom(max(slices.values()) + max(corrs) + 1)
    path = tmp_path / "segment"
    path.write_bytes(data)
    router = SliceRouter(path, slices)
    made: list[KafkaConnection] = []

    def factory() -> KafkaConnection:
        made.append(connection(router, max_frame_bytes=1 << 20))
        return made[-1]

    async def run() -> tuple[list[bytes], list[int]]:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(factory, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        sock = socket.socket()
        if receive_buffer is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.connect(("127.0.0.1", port))
        reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 16)
        writer.write(b"".join(api_versions(corr) for corr in corrs))
        await writer.drain()
        frames, corked = [], []
        for _ in corrs:
            frames.append(await _read_frame(reader))
            corked.append(_corked(made[0]) if not made[0].busy else 0)
        for _ in range(500):  # the last response's uncork follows its last byte
            if not made[0].busy:
                break
            await asyncio.sleep(0.002)
        corked.append(_corked(made[0]))
        writer.close()
        server.close()
        await server.wait_closed()
        return frames, corked

    try:
        frames, corked = asyncio.run(run())
    finally:
        router.close()
    return frames, data, corked


def test_slices_leave_whole_with_what_follows_them_in_request_order_and_uncorked(tmp_path: Path) -> None:
    """Slices between plain responses, pipelined: each frame is its header, the file's bytes and
    the tail, in request order; the socket is not left corked (a small response after a fetch
    would otherwise wait for the kernel's 200 ms cork timer)."""
    slices = {1: 300_000, 3: 1 << 20, 4: 700_001, 6: 1}
    corrs = [1, 2, 3, 4, 5, 6]
    frames, data, corked = _serve_and_read(tmp_path, slices, corrs)
    for corr, frame in zip(corrs, frames, strict=True):
        assert struct.unpack_from(">i", frame)[0] == corr
        if corr in slices:
            assert frame[4:] == data[corr:corr + slices[corr]] + TAIL
        else:
            assert parse_response(ApiKey.API_VERSIONS, 3, frame)[1].error_code == 0
    assert corked[-1] == 0


def test_a_slice_larger_than_the_socket_takes_at_once_resumes_and_the_next_answer_follows(tmp_path: Path) -> None:
    """Towards a client with an 8 KiB receive buffer from a 64 KiB send buffer: the first sendfile
    of each slice is partial -- 24 MiB (never corked) and 1 MiB (corked, uncorked when the socket
    stops taking it) -- asyncio's sendfile sends the rest, the tail follows the file's last byte,
    then the next request's answer."""
    slices = {1: 24 << 20, 3: 1 << 20, 4: 400_000}
    frames, data, corked = _serve_and_read(tmp_path, slices, [1, 2, 3, 4], receive_buffer=8192,
                                           connection=SmallSendBuffer)
    assert frames[0][4:] == data[1:1 + (24 << 20)] + TAIL
    assert parse_response(ApiKey.API_VERSIONS, 3, frames[1])[0] == 2
    assert frames[2][4:] == data[3:3 + (1 << 20)] + TAIL
    assert frames[3][4:] == data[4:4 + 400_000] + TAIL
    assert corked[-1] == 0


def test_a_tls_connection_copies_file_slices_and_never_corks(tmp_path: Path, monkeypatch: Any) -> None:
    """Under TLS the bytes must go through the TLS layer: the slice is read and written through
    the transport, never sendfile'd to the socket underneath (which the TLS transport still
    names), and the socket is not corked."""
    data = os.urandom(600_000)
    path = tmp_path / "segment"
    path.write_bytes(data)
    raw = socket.socket()

    class TlsTransport(FakeTransport):
        def get_extra_info(self, name: str, default: Any = None) -> Any:
            return {"ssl_object": object(), "socket": raw}.get(name, super().get_extra_info(name, default))

    def no_sendfile(*args: Any) -> int:
        raise AssertionError("sendfile on a TLS connection")

    corks: list[bool] = []
    real_cork = connection_module._cork
    monkeypatch.setattr(connection_module.os, "sendfile", no_sendfile)
    monkeypatch.setattr(connection_module, "_cork", lambda sock, on: corks.append(on) or real_cork(sock, on))
    router = SliceRouter(path, {1: 500_000})

    async def run() -> bytes:
        conn = KafkaConnection(router, max_frame_bytes=1 << 20)
        transport = TlsTransport()
        transport.protocol = conn
        conn.connection_made(transport)
        conn.data_received(api_versions(1))
        for _ in range(1000):
            await asyncio.sleep(0.002)
            if not conn.busy and transport.written:
                break
        return bytes(transport.written)

    try:
        written = asyncio.run(run())
    finally:
        router.close()
        raw.close()
    assert written[8:] == data[1:500_001] + TAIL and struct.unpack_from(">i", written, 4)[0] == 1
    assert corks == []
