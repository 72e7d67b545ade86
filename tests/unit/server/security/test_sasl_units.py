"""SASL mechanism servers and the session's gate, without sockets; each attempt says what happened."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from tierlog.server.auth.mechanisms import (
    FAILED,
    SCRAM_MECHANISMS,
    AuthenticationFailed,
    PlainServer,
    ScramCredential,
    ScramServer,
    parse_plain_jaas,
)
from tierlog.server.auth.session import SaslSession

SHA256 = SCRAM_MECHANISMS["SCRAM-SHA-256"]


def _credential(password: str, salt: bytes = b"0123456789abcdef", iterations: int = 4096) -> ScramCredential:
    stored, server = SHA256.keys(SHA256.salted_password(password.encode(), salt, iterations))
    return ScramCredential(salt, stored, server, iterations)


def _client_final(server_first: str, client_first_bare: str, password: str) -> str:
    attrs = dict(p.split("=", 1) for p in server_first.split(","))
    salted = SHA256.salted_password(password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    without_proof = f"c=biws,r={attrs['r']}"
    auth = f"{client_first_bare},{server_first},{without_proof}".encode()
    client_key = SHA256.hmac(salted, b"Client Key")
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth, "sha256").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}"


def _server(users: dict[str, ScramCredential]) -> ScramServer:
    return ScramServer(SHA256, users.get, b"secret")


def test_scram_exchange_and_server_signature() -> None:
    server = _server({"bob": _credential("pw")})
    server_first = server.evaluate(b"n,,n=bob,r=clientnonce").decode()
    final = server.evaluate(_client_final(server_first, "n=bob,r=clientnonce", "pw").encode())
    assert server.complete and server.user == "bob" and final.startswith(b"v=")


@pytest.mark.parametrize(("user", "password"), [("bob", "wrong"), ("nobody", "pw")])
def test_wrong_password_and_unknown_user_look_the_same(user: str, password: str) -> None:
    server = _server({"bob": _credential("pw")})
    server_first = server.evaluate(f"n,,n={user},r=abc".encode()).decode()
    assert ",i=4096" in server_first  # an unknown user gets a salt and iterations too
    with pytest.raises(AuthenticationFailed) as e:
        server.evaluate(_client_final(server_first, f"n={user},r=abc", password).encode())
    print(f"SCRAM as {user!r} with password {password!r}: {e.value}")
    assert str(e.value) == FAILED


def test_replayed_client_final_is_refused() -> None:
    users = {"bob": _credential("pw")}
    first = _server(users)
    recorded = _client_final(first.evaluate(b"n,,n=bob,r=abc").decode(), "n=bob,r=abc", "pw")
    first.evaluate(recorded.encode())
    second = _server(users)
    second.evaluate(b"n,,n=bob,r=abc")
    with pytest.raises(AuthenticationFailed, match="nonce"):
        second.evaluate(recorded.encode())
    print("replayed SCRAM client-final in a new session: refused (nonce)")


def test_plain() -> None:
    users = parse_plain_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required username="a" '
                             'password="x" user_alice="alice-secret" user_bob="b\\"q";')
    assert users == {"alice": "alice-secret", "bob": 'b"q'}
    ok = PlainServer(users)
    ok.evaluate(b"\x00alice\x00alice-secret")
    assert ok.user == "alice"
    for token in (b"\x00alice\x00nope", b"\x00nobody\x00alice-secret", b"garbage", b"\x00\x00"):
        with pytest.raises(AuthenticationFailed) as e:
            PlainServer(users).evaluate(token)
        print(f"PLAIN {token!r}: {e.value}")


def test_session_gate_and_reauth() -> None:
    now = [0]
    session = SaslSession(("PLAIN",), lambda m: PlainServer({"alice": "pw"}), 1000, lambda: now[0])
    assert session.refusal(3) is not None  # Metadata before authentication
    assert session.refusal(18) is None
    assert not session.handshake("SCRAM-SHA-256", 1)
    session = SaslSession(("PLAIN",), lambda m: PlainServer({"alice": "pw"}), 1000, lambda: now[0])
    assert session.handshake("PLAIN", 1)
    session.authenticate(b"\x00alice\x00pw")
    assert session.refusal(3) is None and session.session_lifetime_ms() == 1000
    now[0] = 1000
    assert session.refusal(3) is not None  # expired without re-authentication
    assert session.handshake("PLAIN", 1)
    session.authenticate(b"\x00alice\x00pw")
    assert session.refusal(3) is None


def test_requests_out_of_order_are_illegal_sasl_state() -> None:
    """SaslAuthenticate before SaslHandshake and a second SaslHandshake mid-exchange are Kafka's
    IllegalSaslStateException (answered ILLEGAL_SASL_STATE), not an authentication failure."""
    from tierlog.server.auth.session import IllegalSaslState, SaslState

    session = SaslSession(("PLAIN",), lambda m: PlainServer({"alice": "pw"}), 0, lambda: 0)
    with pytest.raises(IllegalSaslState):
        session.authenticate(b"\x00alice\x00pw")
    assert session.state is SaslState.FAILED and session.refusal(3) is not None
    session = SaslSession(("PLAIN",), lambda m: PlainServer({"alice": "pw"}), 0, lambda: 0)
    assert session.handshake("PLAIN", 1)
    with pytest.raises(IllegalSaslState):
        session.handshake("PLAIN", 1)
