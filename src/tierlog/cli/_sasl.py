"""The client side of SASL PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, RFC 7677) for the
protocol commands (cli/_wire.py). Sans-IO: each step takes the server's message and returns the
next one to send.

SCRAM's hashing (the salted password, ClientKey/StoredKey/ServerKey) is the broker's own
``ScramMechanism`` (server/auth/mechanisms.py), so both sides compute it one way. As Kafka's
ScramSaslClient, the client checks that the server's nonce extends its own, that the iteration count
is at least 4,096, and the server's signature in the final message (a broker that does not know the
password cannot forge it).
"""

from __future__ import annotations

import base64
import hmac
import os

from tierlog.cli._errors import CliError
from tierlog.server.auth.mechanisms import MIN_ITERATIONS, SCRAM_MECHANISMS, ScramMechanism


class SaslClientError(CliError):
    """The broker's side of the exchange is not what SCRAM allows (or authentication failed)."""


def plain_token(username: str, password: str) -> bytes:
    return b"\x00" + username.encode("utf-8") + b"\x00" + password.encode("utf-8")


def _sasl_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        key, eq, value = part.partition("=")
        if eq and len(key) == 1:
            out[key] = value
    return out


class ScramClient:
    """One SCRAM exchange: :meth:`first`, then :meth:`final` with the server-first message, then
    :meth:`verify` with the server-final message."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None) -> None:
        self._mech: ScramMechanism = SCRAM_MECHANISMS[mechanism]
        self._username = username
        self._password = password
        # Alphanumeric, as Kafka's clients send it.
        self._nonce = nonce or os.urandom(24).hex()
        self._client_first_bare = f"n={_sasl_name(username)},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._client_first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode("utf-8", "replace")
        attrs = _attributes(text)
        if "e" in attrs:
            raise SaslClientError(f"SCRAM authentication failed: {attrs['e']}")
        nonce, salt_text, iterations_text = attrs.get("r", ""), attrs.get("s", ""), attrs.get("i", "")
        if not nonce.startswith(self._nonce) or len(nonce) <= len(self._nonce):
            raise SaslClientError("invalid SCRAM server-first message: the nonce does not extend the client's")
        if not iterations_text.isdigit() or int(iterations_text) < MIN_ITERATIONS:
            raise SaslClientError(f"invalid SCRAM server-first message: iterations {iterations_text!r} "
                                  f"(at least {MIN_ITERATIONS})")
        try:
            salt = base64.b64decode(salt_text, validate=True)
        except ValueError:
            raise SaslClientError("invalid SCRAM server-first message: the salt is not base64") from None
        salted = self._mech.salted_password(self._password.encode("utf-8"), salt, int(iterations_text))
        client_key = self._mech.hmac(salted, b"Client Key")
        stored_key = self._mech.digest(client_key)
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        signature = self._mech.hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = self._mech.hmac(self._mech.hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode('ascii')}".encode()

    def verify(self, server_final: bytes) -> None:
        attrs = _attributes(server_final.decode("utf-8", "replace"))
        if "e" in attrs:
            raise SaslClientError(f"SCRAM authentication failed: {attrs['e']}")
        try:
            signature = base64.b64decode(attrs.get("v", ""), validate=True)
        except ValueError:
            signature = b""
        if not self._server_signature or not hmac.compare_digest(signature, self._server_signature):
            raise SaslClientError("the broker's SCRAM signature is wrong: it does not know this user's credential")
