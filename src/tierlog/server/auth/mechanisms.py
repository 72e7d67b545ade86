"""SASL mechanism servers: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, RFC 7677, Kafka's KIP-84).

Sans-IO: each server takes the client's token and returns the next challenge, raising
:class:`AuthenticationFailed` with one message for every failure, so a client cannot tell an unknown
user from a wrong password. Secrets are compared in constant time (``hmac.compare_digest``); an
unknown SCRAM user gets a salt derived from its name and a per-broker secret, so the exchange looks
the same as for a real user until the proof fails.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

#: The message of every authentication failure (Kafka's, for invalid credentials).
FAILED = "Authentication failed: Invalid username or password"
#: RFC 7677 and Kafka: fewer iterations than this are refused.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


class AuthenticationFailed(Exception):
    pass


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    name: str
    hash_name: str
    #: Kafka's ScramMechanism id, as UserScramCredentialRecord and the admin APIs carry it.
    id: int

    def digest(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def salted_password(self, password: bytes, salt: bytes, iterations: int) -> bytes:
        return hashlib.pbkdf2_hmac(self.hash_name, password, salt, iterations)

    def keys(self, salted_password: bytes) -> tuple[bytes, bytes]:
        """(StoredKey, ServerKey) of a salted password: all the server ever keeps."""
        client_key = self.hmac(salted_password, b"Client Key")
        return self.digest(client_key), self.hmac(salted_password, b"Server Key")


SCRAM_MECHANISMS = {m.name: m for m in (ScramMechanism("SCRAM-SHA-256", "sha256", 1),
                                        ScramMechanism("SCRAM-SHA-512", "sha512", 2))}
SCRAM_BY_ID = {m.id: m for m in SCRAM_MECHANISMS.values()}


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


class MechanismServer:
    mechanism: str
    #: The authenticated user's name once complete.
    user: str | None = None
    complete = False
    #: When the credential used expires (ms; None: it does not), which bounds a re-authenticating session.
    credential_expires_at_ms: int | None = None

    def evaluate(self, token: bytes) -> bytes:
        raise NotImplementedError


# -- PLAIN --------------------------------------------------------------------------------------------

_JAAS_OPTION = re.compile(r'([A-Za-z0-9_.\-]+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def parse_plain_jaas(text: str) -> dict[str, str]:
    """Users of Kafka's ``PlainLoginModule required user_<name>="<password>" ...;`` (the
    ``username``/``password`` options are the broker's own client identity and are not users)."""
    if "PlainLoginModule" not in text:
        raise ValueError("expected org.apache.kafka.common.security.plain.PlainLoginModule")
    return {key[len("user_"):]: value.replace('\\"', '"') for key, value in _JAAS_OPTION.findall(text)
            if key.startswith("user_")}


def _secret_digest(value: bytes) -> bytes:
    # Comparing digests keeps the comparison's time independent of the lengths too.
    return hashlib.sha256(value).digest()


class PlainServer(MechanismServer):
    mechanism = "PLAIN"

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users

    def evaluate(self, token: bytes) -> bytes:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN message: expected authzid NUL authcid NUL passwd")
        authzid, authcid, password = parts
        try:
            user = authcid.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed(FAILED) from None
        expected = self._users.get(user)
        ok = hmac.compare_digest(_secret_digest(password),
                                 _secret_digest(expected.encode("utf-8") if expected is not None else os.urandom(16)))
        if not ok or expected is None or not user:
            raise AuthenticationFailed(FAILED)
        if authzid and authzid != authcid:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id that is "
                                       "different from username")
        self.user, self.complete = user, True
        return b""


# -- SCRAM --------------------------------------------------------------------------------------------

def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        key, eq, value = part.partition("=")
        if not eq or len(key) != 1:
            raise AuthenticationFailed(f"Invalid SCRAM message attribute {part[:20]!r}")
        out[key] = value
    return out


def _sasl_name(value: str) -> str:
    if re.search(r"=(?!2C|3D)", value):
        raise AuthenticationFailed("Invalid SCRAM user name encoding")
    return value.replace("=2C", ",").replace("=3D", "=")


class ScramServer(MechanismServer):
    """One SCRAM exchange: client-first → server-first, client-final → server-final."""

    def __init__(self, mechanism: ScramMechanism, lookup: Callable[[str], ScramCredential | None],
                 unknown_user_secret: bytes, nonce: Callable[[], str] | None = None) -> None:
        self.mechanism = mechanism.name
        self._mech = mechanism
        self._lookup = lookup
        self._secret = unknown_user_secret
        # Alphanumeric, as Kafka's: some clients mishandle base64 punctuation in the nonce.
        self._nonce = nonce or (lambda: os.urandom(24).hex())
        self._state = "first"
        self._credential: ScramCredential | None = None
        self._known = False
        self._client_first_bare = ""
        self._server_first = ""
        self._full_nonce = ""
        self._name = ""

    def evaluate(self, token: bytes) -> bytes:
        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SCRAM message encoding") from None
        if self._state == "first":
            return self._first(message)
        if self._state == "final":
            return self._final(message)
        raise AuthenticationFailed("Unexpected SCRAM message after the exchange completed")

    def _first(self, message: str) -> bytes:
        gs2, _, rest = message.partition(",")
        authzid, _, bare = rest.partition(",")
        if gs2 not in ("n", "y") or not bare:
            # "p" asks for channel binding, which Kafka does not offer either.
            raise AuthenticationFailed("Invalid SCRAM client-first message")
        attrs = _attributes(bare)
        if "n" not in attrs or "r" not in attrs or not attrs["r"]:
            raise AuthenticationFailed("Invalid SCRAM client-first message")
        name = _sasl_name(attrs["n"])
        if authzid and _sasl_name(authzid.removeprefix("a=")) != name:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id that is "
                                       "different from username")
        extensions = set(attrs) - {"n", "r"}
        if extensions - {"tokenauth"}:
            raise AuthenticationFailed("Unsupported SCRAM extension")
        credential = self._lookup(name)
        self._known = credential is not None
        if credential is None:
            fake_salt = hmac.new(self._secret, name.encode("utf-8") + self.mechanism.encode(), "sha256").digest()[:16]
            credential = ScramCredential(fake_salt, os.urandom(len(self._mech.digest(b""))),
                                         os.urandom(len(self._mech.digest(b""))), MIN_ITERATIONS)
        self._credential, self._name = credential, name
        self._client_first_bare = bare
        self._full_nonce = attrs["r"] + self._nonce()
        self._server_first = (f"r={self._full_nonce},s={base64.b64encode(credential.salt).decode('ascii')},"
                              f"i={credential.iterations}")
        self._state = "final"
        return self._server_first.encode("utf-8")

    def _final(self, message: str) -> bytes:
        self._state = "done"
        without_proof, sep, proof_text = message.rpartition(",p=")
        if not sep:
            raise AuthenticationFailed("Invalid SCRAM client-final message")
        attrs = _attributes(without_proof)
        # Kafka checks that the nonce ends with the one it sent (librdkafka before 2.1 repeats the
        # client's part); a replayed client-final carries another session's server nonce and fails.
        if not attrs.get("r", "").endswith(self._full_nonce):
            raise AuthenticationFailed("Invalid SCRAM nonce")
        try:
            proof = base64.b64decode(proof_text, validate=True)
        except ValueError:
            raise AuthenticationFailed(FAILED) from None
        credential = self._credential
        assert credential is not None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = self._mech.hmac(credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise AuthenticationFailed(FAILED)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(self._mech.digest(client_key), credential.stored_key) or not self._known:
            raise AuthenticationFailed(FAILED)
        server_signature = self._mech.hmac(credential.server_key, auth_message)
        self.user, self.complete = self._name, True
        return b"v=" + base64.b64encode(server_signature)
