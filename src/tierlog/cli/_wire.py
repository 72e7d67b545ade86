"""A blocking Kafka protocol client on tierlog's own codec, for the commands whose APIs the
confluent-kafka AdminClient lacks (librdkafka has no DescribeFeatures or UpdateFeatures).

One connection to the bootstrap broker -- over TLS (the stdlib ``ssl`` module) for SSL and SASL_SSL,
then SASL PLAIN or SCRAM for SASL_* (cli/_sasl.py), as the command's security settings say
(cli/_security.py) -- ApiVersions first (which also carries the features), then each request at the
highest version both sides support.
"""

from __future__ import annotations

import argparse
import itertools
import socket
import ssl
import struct
from typing import Any

from tierlog.cli._errors import CliError
from tierlog.cli._sasl import ScramClient, plain_token
from tierlog.cli._security import ClientSecurity, client_security, properties_of, ssl_context, wire_check
from tierlog.errors import ErrorCode
from tierlog.protocol import (
    SUPPORTED_APIS,
    ApiKey,
    MalformedResponseError,
    build_request,
    encode_request,
    parse_response,
)

_SIZE = struct.Struct(">i")


def wire_client(args: argparse.Namespace) -> WireClient:
    """A connected, authenticated client for a command's --bootstrap-server, --timeout and security settings."""
    security = client_security(properties_of(args))
    wire_check(security)
    return WireClient(args.bootstrap_server, args.timeout, security=security)


class WireClient:
    def __init__(self, bootstrap_server: str, timeout_s: float, client_id: str = "tierlog-cli", *,
                 security: ClientSecurity | None = None) -> None:
        self.bootstrap_server = bootstrap_server
        self.timeout_s = timeout_s
        self.client_id = client_id
        self.security = security or ClientSecurity()
        self._correlation = itertools.count(1)
        host, _, port = bootstrap_server.split(",")[0].strip().rpartition(":")
        if not host or not port.isdigit():
            raise CliError(f"--bootstrap-server {bootstrap_server!r} is not HOST:PORT")
        host = host.strip("[]")
        context = ssl_context(self.security) if self.security.tls else None
        try:
            sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        except OSError as e:
            raise CliError(f"no broker reachable at {bootstrap_server} within {timeout_s:g}s ({e})") from None
        self._sock: socket.socket = sock
        if context is not None:
            try:
                self._sock = context.wrap_socket(sock, server_hostname=host)
            except ssl.SSLCertVerificationError as e:
                sock.close()
                raise CliError(f"TLS handshake with {bootstrap_server} failed: {e.verify_message or e.reason}") from None
            except (ssl.SSLError, OSError) as e:
                sock.close()
                raise CliError(f"TLS handshake with {bootstrap_server} failed: {getattr(e, 'reason', None) or e} "
                               f"(is it a {self.security.protocol} listener?)") from None
        try:
            #: The broker's ApiVersions answer: its API ranges and its features.
            self.api_versions = self._api_versions()
            self._ranges = {k.api_key: (k.min_version, k.max_version) for k in self.api_versions.api_keys}
            if self.security.sasl:
                self._authenticate()
        except BaseException:
            self._sock.close()
            raise

    def _authenticate(self) -> None:
        sec = self.security
        mechanism = sec.mechanism or "PLAIN"
        assert sec.username is not None and sec.password is not None  # client_security checked it
        handshake = self.call(ApiKey.SASL_HANDSHAKE, {"mechanism": mechanism})
        if int(handshake.error_code) != ErrorCode.NONE:
            enabled = ", ".join(str(m) for m in handshake.mechanisms or ()) or "none"
            raise CliError(f"{self.bootstrap_server} does not enable SASL mechanism {mechanism} (enabled: {enabled})")
        if mechanism == "PLAIN":
            self._sasl_step(plain_token(sec.username, sec.password))
            return
        scram = ScramClient(mechanism, sec.username, sec.password)
        server_first = self._sasl_step(scram.first())
        server_final = self._sasl_step(scram.final(server_first))
        scram.verify(server_final)

    def _sasl_step(self, token: bytes) -> bytes:
        response = self.call(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": token})
        if int(response.error_code) != ErrorCode.NONE:
            raise CliError(f"SASL authentication with {self.bootstrap_server} failed: "
                           f"{response.error_message or ErrorCode(int(response.error_code)).name}")
        return bytes(response.auth_bytes or b"")

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def _roundtrip(self, api_key: int, version: int, values: dict[str, Any]) -> bytes:
        correlation_id = next(self._correlation)
        frame = encode_request(api_key, version, correlation_id, self.client_id, build_request(api_key, version, values))
        try:
            self._sock.sendall(frame)
            size = _SIZE.unpack(self._read(_SIZE.size))[0]
            return self._read(size)
        except TimeoutError:
            raise CliError(f"no answer from {self.bootstrap_server} within {self.timeout_s:g}s") from None
        except OSError as e:
            raise CliError(f"the connection to {self.bootstrap_server} failed: {e}") from None

    def _read(self, n: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < n:
            chunk = self._sock.recv(n - len(chunks))
            if not chunk:
                raise CliError(f"{self.bootstrap_server} closed the connection")
            chunks += chunk
        return bytes(chunks)

    def _api_versions(self) -> Any:
        version = SUPPORTED_APIS[ApiKey.API_VERSIONS].max_version
        values = {"client_software_name": "tierlog-cli", "client_software_version": "1"}
        frame = self._roundtrip(ApiKey.API_VERSIONS, version, values)
        body: Any
        try:
            body = parse_response(ApiKey.API_VERSIONS, version, frame)[1]
        except MalformedResponseError:
            # A broker without this version answers a v0 body listing the versions it has (KIP-511).
            body = parse_response(ApiKey.API_VERSIONS, 0, frame)[1]
            if body.error_code != ErrorCode.UNSUPPORTED_VERSION:
                raise CliError(f"{self.bootstrap_server} sent an unreadable ApiVersions response") from None
            theirs = next((k.max_version for k in body.api_keys if k.api_key == ApiKey.API_VERSIONS), 0)
            version = min(version, theirs)
            body = parse_response(ApiKey.API_VERSIONS, version,
                                  self._roundtrip(ApiKey.API_VERSIONS, version, values if version >= 3 else {}))[1]
        if body.error_code != ErrorCode.NONE:
            raise CliError(f"{self.bootstrap_server} refused ApiVersions (error {int(body.error_code)})")
        return body

    def version_for(self, api_key: ApiKey) -> int:
        """The highest version of ``api_key`` both sides support; CliError when there is none."""
        ours = SUPPORTED_APIS[api_key]
        theirs = self._ranges.get(api_key)
        if theirs is None or theirs[1] < ours.min_version or theirs[0] > ours.max_version:
            raise CliError(f"the broker at {self.bootstrap_server} does not support {ours.name}")
        return min(int(theirs[1]), ours.max_version)

    def call(self, api_key: ApiKey, values: dict[str, Any]) -> Any:
        version = self.version_for(api_key)
        return parse_response(api_key, version, self._roundtrip(api_key, version, values))[1]
