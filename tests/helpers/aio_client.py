"""An asyncio connection speaking the Kafka protocol with tierlog's own codec, for scenarios that
need hundreds or thousands of connections at once, and the descriptor limit they need."""

from __future__ import annotations

import asyncio
import itertools
import resource
import socket
import struct
from typing import Any

from tierlog.protocol import build_request, encode_request, parse_response

_LINGER_ZERO = struct.pack("ii", 1, 0)


class AsyncClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str) -> None:
        self.reader = reader
        self.writer = writer
        self.client_id = client_id
        self._corr = itertools.count(1)

    @classmethod
    async def connect(cls, port: int, *, local_host: str | None = None, client_id: str = "aio",
                      timeout_s: float = 10.0) -> AsyncClient:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(
            "127.0.0.1", port, local_addr=(local_host, 0) if local_host else None, limit=1 << 24), timeout_s)
        return cls(reader, writer, client_id)

    def send(self, api_key: int, version: int, values: dict[str, Any]) -> int:
        corr = next(self._corr)
        self.writer.write(encode_request(api_key, version, corr, self.client_id, build_request(api_key, version, values)))
        return corr

    async def read_frame(self, timeout_s: float = 30.0) -> bytes | None:
        """The next response frame without its size prefix; None when the broker closed the connection."""
        try:
            size = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), timeout_s))[0]
            return await asyncio.wait_for(self.reader.readexactly(size), timeout_s)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None

    async def call(self, api_key: int, version: int, values: dict[str, Any], timeout_s: float = 30.0) -> Any:
        corr = self.send(api_key, version, values)
        frame = await self.read_frame(timeout_s)
        if frame is None:
            raise ConnectionError("closed by the broker")
        got, body = parse_response(api_key, version, frame)
        if got != corr:
            raise AssertionError(f"response to correlation id {got}, expected {corr}")
        return body

    async def closed_by_peer(self, timeout_s: float) -> bool:
        """Reads (and drops) whatever comes until EOF; False if the connection is still open at the end."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        try:
            while (left := deadline - loop.time()) > 0:
                if not await asyncio.wait_for(self.reader.read(1 << 16), left):
                    return True
        except TimeoutError:
            return False
        except ConnectionError:
            return True
        return False

    def abort(self) -> None:
        """Close with a reset: no TIME_WAIT left behind, so tens of thousands of short connections do
        not use up the ephemeral ports."""
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_ZERO)
            except OSError:
                pass
        self.writer.transport.abort()


def ensure_open_files(needed: int, who: str = "this test") -> int:
    """Raise this process's soft descriptor limit to the hard one; fail with what to do when even the
    hard limit is below ``needed``. The soft limit afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed and soft != resource.RLIM_INFINITY:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < needed:
        raise RuntimeError(
            f"{who} needs {needed} open files but the hard limit is {hard}: raise it before running, e.g. "
            f"`ulimit -Hn {needed} && ulimit -Sn {needed}` as root in the shell that runs the tests, "
            f"`nofile {needed}` in /etc/security/limits.conf (log in again), LimitNOFILE={needed} for a systemd "
            f"service, or `docker run --ulimit nofile={needed}:{needed}` for a container")
    return int(soft)
