"""The clients of the TLS/SASL handshake fuzzing (tests/reliability/sasl_fuzz.py): a raw-frame
connection (TLS-wrapped or not), the client side of SCRAM-SHA-512 for good, wrong and replayed
messages, a real ClientHello made without a socket, and the well-behaved client that logs in,
produces and fetches between the attacks."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import socket
import ssl
import struct
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from tests.reliability.harness import fetch_request
from tierlog.protocol import ApiKey, build_request, encode_request, parse_response
from tierlog.records import SimpleRecord, build_batch, decode_batch, iter_headers

USER, PASSWORD = "fuzz-user", "fuzz-secret"
#: Seconds an attempt may take before it counts as a hang (the TLS handshake timeout is 10 s).
ATTEMPT_BOUND_S = 20.0


class Conn:
    """One connection to a listener (TLS-wrapped when ``tls`` is a context) speaking raw frames."""

    def __init__(self, port: int, tls: ssl.SSLContext | None, timeout_s: float = ATTEMPT_BOUND_S) -> None:
        raw = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.sock: socket.socket = tls.wrap_socket(raw, server_hostname="localhost") if tls else raw
        self.buf = bytearray()
        self.corr = 0

    def send(self, api_key: int, version: int, values: dict[str, Any]) -> int:
        self.corr += 1
        self.sock.sendall(encode_request(api_key, version, self.corr, "fuzz", build_request(api_key, version, values)))
        return self.corr

    def raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frame(self) -> bytes | None:
        """The next frame, or None when the broker closed the connection."""
        try:
            while len(self.buf) < 4 or len(self.buf) < 4 + struct.unpack_from(">i", self.buf)[0]:
                chunk = self.sock.recv(1 << 16)
                if not chunk:
                    return None
                self.buf += chunk
        except (ConnectionError, ssl.SSLError):
            return None
        size = struct.unpack_from(">i", self.buf)[0]
        out = bytes(self.buf[4:4 + size])
        del self.buf[:4 + size]
        return out

    def call(self, api_key: int, version: int, values: dict[str, Any]) -> Any | None:
        """The response body, or None when the broker closed instead of answering."""
        corr = self.send(api_key, version, values)
        frame = self.frame()
        if frame is None:
            return None
        got, body = parse_response(api_key, version, frame)
        assert got == corr, (got, corr)
        return body

    def closed(self) -> bool:
        """Whether the broker closes the connection (anything it sends first is dropped); a timeout
        raises (the attempt is a hang)."""
        try:
            while True:
                if not self.sock.recv(1 << 16):
                    return True
        except (ConnectionError, ssl.SSLError):
            return True

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


@dataclass
class ScramClient:
    """The client side of SCRAM-SHA-512 (RFC 5802), to make good, wrong and replayed messages."""

    user: str = USER
    password: str = PASSWORD
    nonce: str = field(default_factory=lambda: base64.b64encode(os.urandom(18)).decode())

    @property
    def first_bare(self) -> str:
        return f"n={self.user},r={self.nonce}"

    @property
    def first(self) -> bytes:
        return ("n,," + self.first_bare).encode()

    def final(self, server_first: bytes, *, nonce: str | None = None, proof: bytes | None = None) -> bytes:
        fields = dict(item.split("=", 1) for item in server_first.decode().split(","))
        without_proof = f"c=biws,r={nonce if nonce is not None else fields['r']}"
        if proof is None:
            salted = hashlib.pbkdf2_hmac("sha512", self.password.encode(), base64.b64decode(fields["s"]), int(fields["i"]))
            client_key = hmac.digest(salted, b"Client Key", "sha512")
            auth_message = f"{self.first_bare},{server_first.decode()},{without_proof}".encode()
            signature = hmac.digest(hashlib.sha512(client_key).digest(), auth_message, "sha512")
            proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def client_hello(ctx: ssl.SSLContext) -> bytes:
    """The bytes of a real TLS ClientHello, made without a socket."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def handshake(conn: Conn, mechanism: str, version: int = 1) -> Any | None:
    return conn.call(ApiKey.SASL_HANDSHAKE, version, {"mechanism": mechanism})


def authenticate(conn: Conn, token: bytes) -> Any | None:
    return conn.call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})


class GoodClient:
    """SCRAM-SHA-512 over SASL_SSL: logs in, produces one record and fetches it back, on a new connection
    each check (so each check also proves a login still works)."""

    def __init__(self, port: int, tls: ssl.SSLContext, topic: str) -> None:
        self.port, self.tls, self.topic = port, tls, topic
        self.checks = 0
        self.failures: list[str] = []
        self.latencies_s: list[float] = []

    def login(self) -> tuple[Conn, tuple[bytes, bytes]]:
        conn = Conn(self.port, self.tls)
        h = handshake(conn, "SCRAM-SHA-512")
        assert h is not None and h.error_code == 0, h
        client = ScramClient()
        first = authenticate(conn, client.first)
        assert first is not None and first.error_code == 0, first
        final = client.final(bytes(first.auth_bytes))
        done = authenticate(conn, final)
        assert done is not None and done.error_code == 0, done
        return conn, (client.first, final)

    def check(self) -> None:
        started = time.monotonic()
        try:
            conn, _ = self.login()
            try:
                value = uuid.uuid4().bytes
                batch = build_batch([SimpleRecord(None, value, timestamp=int(time.time() * 1000))])
                produced = conn.call(ApiKey.PRODUCE, 9, {"acks": -1, "timeout": 10000, "topic_data": [
                    {"name": self.topic, "partition_data": [{"index": 0, "records": batch}]}]})
                assert produced is not None, "closed on produce"
                p = produced.responses[0].partition_responses[0]
                assert p.error_code == 0, p
                fetched = conn.call(ApiKey.FETCH, 11, fetch_request(self.topic, 0, p.base_offset, 1 << 16))
                assert fetched is not None, "closed on fetch"
                part = fetched.responses[0].partitions[0]
                values = [r.value for h in iter_headers(bytes(part.records or b"")) for r in decode_batch(h)
                          if r.offset == p.base_offset]
                assert values == [value], values
            finally:
                conn.close()
        except (AssertionError, OSError, ssl.SSLError) as e:
            self.failures.append(f"{type(e).__name__}: {e}")
        self.checks += 1
        self.latencies_s.append(time.monotonic() - started)
