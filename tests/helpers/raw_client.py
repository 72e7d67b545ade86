"""A raw Kafka-protocol client over one connection, with tierlog's own codec: for tests that send
exactly the bytes a client would (a retried batch, a malformed request) or read a response field
no client library exposes."""

from __future__ import annotations

import itertools
import socket
import struct
from typing import Any

from tierlog.protocol import build_request, encode_request, parse_response


class RawClient:
    """One connection speaking the Kafka protocol with tierlog's own codec."""

    def __init__(self, port: int, *, timeout: float = 30.0, client_id: str = "chaos") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.client_id = client_id
        self._corr = itertools.count(1)
        self._buf = bytearray()

    def send(self, api_key: int, version: int, values: dict[str, Any]) -> int:
        corr = next(self._corr)
        self.sock.sendall(encode_request(api_key, version, corr, self.client_id,
                                         build_request(api_key, version, values)))
        return corr

    def read_frame(self) -> bytes:
        while len(self._buf) < 4 or len(self._buf) < 4 + struct.unpack_from(">i", self._buf)[0]:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("closed by the broker")
            self._buf += chunk
        size = struct.unpack_from(">i", self._buf)[0]
        frame = bytes(self._buf[4:4 + size])
        del self._buf[:4 + size]
        return frame

    def receive(self, api_key: int, version: int, corr: int) -> Any:
        got, body = parse_response(api_key, version, self.read_frame())
        assert got == corr, (got, corr)
        return body

    def call(self, api_key: int, version: int, values: dict[str, Any]) -> Any:
        return self.receive(api_key, version, self.send(api_key, version, values))

    def closed_by_peer(self, timeout: float = 10.0) -> bool:
        """Whether the broker closes the connection within ``timeout`` (what it sends first is dropped)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                if not self.sock.recv(65536):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
