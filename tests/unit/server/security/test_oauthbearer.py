"""SASL/OAUTHBEARER without a broker: RFC 7628's messages, a JWKS from a file, every way a token fails,
the unsecured mode only when named, and the session bounded by the token's expiry."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest
from joserfc import jwt
from joserfc.jwk import ECKey, RSAKey

from tierlog.config import BrokerConfig
from tierlog.errors import ConfigError
from tierlog.server.auth.mechanisms import AuthenticationFailed
from tierlog.server.auth.oauthbearer import (
    INVALID_TOKEN_CHALLENGE,
    UNSECURED_VALIDATOR,
    JwksKeys,
    OAuthBearerServer,
    OAuthSettings,
    parse_initial_response,
)
from tierlog.server.auth.session import SaslSession
from tierlog.server.security.listeners import ListenerSecurity
from tierlog.testing import ManualClock

NOW_MS = 1_800_000_000_000
NOW_S = NOW_MS // 1000


def initial(token: str, authzid: str = "", extensions: str = "") -> bytes:
    gs2 = f"n,a={authzid}," if authzid else "n,,"
    return f"{gs2}\x01auth=Bearer {token}\x01{extensions}\x01".encode()


@pytest.fixture
def keys() -> dict[str, RSAKey]:
    return {"good": RSAKey.generate_key(2048, parameters={"kid": "k1"}),
            "rotated": RSAKey.generate_key(2048, parameters={"kid": "k2"}),
            "forger": RSAKey.generate_key(2048, parameters={"kid": "k1"})}


def write_jwks(path: Path, *public: RSAKey | ECKey) -> str:
    path.write_text(json.dumps({"keys": [k.as_dict(private=False) for k in public]}))
    return path.as_uri()


def sign(key: RSAKey, **claims: object) -> str:
    base: dict[str, object] = {"sub": "alice", "exp": NOW_S + 600, "iat": NOW_S, "aud": ["kafka"], "iss": "idp"}
    base.update(claims)
    return jwt.encode({"alg": "RS256", "kid": key.kid or ""}, {k: v for k, v in base.items() if v is not None}, key)


def settings(url: str | None, **kw: object) -> OAuthSettings:
    values: dict[str, object] = {"jwks_url": url, "expected_audience": ("kafka",), "expected_issuer": "idp",
                                 "clock_skew_s": 30, "sub_claim": "sub", "jwks_refresh_ms": 3_600_000}
    values.update(kw)
    return OAuthSettings(**values)  # type: ignore[arg-type]


def server(jwks: JwksKeys | None, s: OAuthSettings, clock: ManualClock) -> OAuthBearerServer:
    return OAuthBearerServer(s, jwks.keys if jwks else lambda: None, jwks.refresh_soon if jwks else lambda: None,
                             clock.wall_ms)


def refused(srv: OAuthBearerServer, token: bytes) -> str:
    """RFC 7628's failure: the error challenge, then the client's \\x01, then the failure."""
    assert srv.evaluate(token) == INVALID_TOKEN_CHALLENGE and not srv.complete
    with pytest.raises(AuthenticationFailed) as e:
        srv.evaluate(b"\x01")
    return str(e.value)


def test_parse_initial_response() -> None:
    assert parse_initial_response(initial("abc")) == (None, "abc", {})
    assert parse_initial_response(initial("abc", "alice", "traceId=42\x01")) == ("alice", "abc", {"traceId": "42"})
    for bad in (b"n,,auth=Bearer x", b"n,,\x01auth=Basic x\x01\x01", b"p=tls,,\x01auth=Bearer x\x01\x01",
                b"n,,\x01auth=Bearer \x01\x01", b"n,,\x01auth=Bearer x\x01auth=Bearer y\x01\x01", b"\xff"):
        with pytest.raises(AuthenticationFailed):
            parse_initial_response(bad)


def test_a_signed_token_authenticates_its_subject(tmp_path: Path, keys: dict[str, RSAKey]) -> None:
    clock = ManualClock(NOW_MS)
    jwks = JwksKeys(write_jwks(tmp_path / "jwks.json", keys["good"]), 3_600_000, clock)
    jwks.load()
    srv = server(jwks, settings(jwks.url), clock)
    assert srv.evaluate(initial(sign(keys["good"]))) == b""
    assert srv.complete and srv.user == "alice" and srv.credential_expires_at_ms == (NOW_S + 600) * 1000
    # A configured principal claim other than sub.
    srv = server(jwks, settings(jwks.url, sub_claim="preferred_username"), clock)
    srv.evaluate(initial(sign(keys["good"], preferred_username="bob")))
    assert srv.user == "bob"


@pytest.mark.parametrize("case", ["forged", "unknown key", "expired", "not yet valid", "audience", "issuer",
                                  "no subject", "no expiry", "alg none", "garbage"])
def test_bad_tokens_are_refused_with_rfc7628s_error(tmp_path: Path, keys: dict[str, RSAKey], case: str) -> None:
    clock = ManualClock(NOW_MS)
    jwks = JwksKeys(write_jwks(tmp_path / "jwks.json", keys["good"]), 3_600_000, clock)
    jwks.load()
    none_header = base64.urlsafe_b64encode(b'{"alg":"none"}').rstrip(b"=").decode()
    none_claims = base64.urlsafe_b64encode(json.dumps({"sub": "alice", "exp": NOW_S + 60}).encode()).rstrip(b"=").decode()
    token = {
        "forged": sign(keys["forger"]),  # same kid, another key: the signature does not verify
        "unknown key": sign(keys["rotated"]),
        "expired": sign(keys["good"], exp=NOW_S - 31),  # past the 30 s of clock skew
        "not yet valid": sign(keys["good"], nbf=NOW_S + 120),
        "audience": sign(keys["good"], aud=["someone-else"]),
        "issuer": sign(keys["good"], iss="evil"),
        "no subject": sign(keys["good"], sub=None),
        "no expiry": sign(keys["good"], exp=None),
        "alg none": f"{none_header}.{none_claims}.",
        "garbage": "not.a.jwt",
    }[case]
    message = refused(server(jwks, settings(jwks.url), clock), initial(token))
    assert message.startswith("Authentication failed: invalid_token")


def test_within_the_clock_skew_an_expired_token_still_passes(tmp_path: Path, keys: dict[str, RSAKey]) -> None:
    clock = ManualClock(NOW_MS)
    jwks = JwksKeys(write_jwks(tmp_path / "jwks.json", keys["good"]), 3_600_000, clock)
    jwks.load()
    srv = server(jwks, settings(jwks.url), clock)
    srv.evaluate(initial(sign(keys["good"], exp=NOW_S - 10)))
    assert srv.complete


def test_a_rotated_key_is_fetched_when_a_token_names_it(tmp_path: Path, keys: dict[str, RSAKey]) -> None:
    clock = ManualClock(NOW_MS)
    path = tmp_path / "jwks.json"
    jwks = JwksKeys(write_jwks(path, keys["good"]), 3_600_000, clock)
    jwks.load()
    clock.advance(60_000)
    write_jwks(path, keys["good"], keys["rotated"])  # the provider rotates
    jwks.start()
    try:
        refused(server(jwks, settings(jwks.url), clock), initial(sign(keys["rotated"])))  # asks for a refresh
        for _ in range(200):  # wait for the refresh thread, at most 10 s
            current = jwks.keys()
            if current is not None and len(current.keys) == 2:
                break
            time.sleep(0.05)
        srv = server(jwks, settings(jwks.url), clock)
        srv.evaluate(initial(sign(keys["rotated"])))
        assert srv.complete
    finally:
        jwks.close()


def test_authzid_must_be_the_tokens_principal(tmp_path: Path, keys: dict[str, RSAKey]) -> None:
    clock = ManualClock(NOW_MS)
    jwks = JwksKeys(write_jwks(tmp_path / "jwks.json", keys["good"]), 3_600_000, clock)
    jwks.load()
    with pytest.raises(AuthenticationFailed, match="authorization id"):
        server(jwks, settings(jwks.url), clock).evaluate(initial(sign(keys["good"]), authzid="mallory"))


def test_unsecured_tokens_only_in_unsecured_mode(keys: dict[str, RSAKey]) -> None:
    clock = ManualClock(NOW_MS)
    header = base64.urlsafe_b64encode(b'{"alg":"none"}').rstrip(b"=").decode()
    claims = base64.urlsafe_b64encode(json.dumps({"sub": "dev", "exp": NOW_S + 60}).encode()).rstrip(b"=").decode()
    unsigned = f"{header}.{claims}."
    srv = server(None, settings(None, unsecured=True, expected_audience=(), expected_issuer=None), clock)
    srv.evaluate(initial(unsigned))
    assert srv.user == "dev"
    # A signed token's signature part is not empty: not an unsecured JWS.
    refused(server(None, settings(None, unsecured=True, expected_audience=(), expected_issuer=None), clock),
            initial(sign(keys["good"])))


def test_a_session_ends_with_its_token_when_reauthentication_is_on(tmp_path: Path, keys: dict[str, RSAKey]) -> None:
    clock = ManualClock(NOW_MS)
    jwks = JwksKeys(write_jwks(tmp_path / "jwks.json", keys["good"]), 3_600_000, clock)
    jwks.load()
    session = SaslSession(("OAUTHBEARER",), lambda m: server(jwks, settings(jwks.url), clock), 3_600_000,
                          clock.wall_ms)
    assert session.handshake("OAUTHBEARER", 1)
    session.authenticate(initial(sign(keys["good"], exp=NOW_S + 120)))
    assert session.authenticated and session.session_lifetime_ms() == 120_000  # the token's, not the hour
    clock.advance(120_000)
    assert session.expired


def base_config(**extra: str) -> dict[str, str]:
    return {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "OAUTHBEARER", **extra}


def test_a_listener_needs_a_jwks_or_the_unsecured_validator_named() -> None:
    with pytest.raises(ConfigError) as e:
        ListenerSecurity(BrokerConfig(base_config()))
    assert "sasl.oauthbearer.jwks.endpoint.url" in str(e.value)
    key = "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class"
    security = ListenerSecurity(BrokerConfig(base_config(**{key: UNSECURED_VALIDATOR})))
    assert security.oauth["SASL_PLAINTEXT"].unsecured
    with pytest.raises(ConfigError) as e:
        ListenerSecurity(BrokerConfig(base_config(**{key: "com.example.Handler"})))
    assert key in str(e.value)
    security = ListenerSecurity(BrokerConfig(base_config(**{
        "sasl.oauthbearer.jwks.endpoint.url": "https://idp.example/jwks", "sasl.oauthbearer.expected.audience": "kafka"})))
    s = security.oauth["SASL_PLAINTEXT"]
    assert s.jwks_url == "https://idp.example/jwks" and s.expected_audience == ("kafka",) and not s.unsecured
    assert not security.jwks["https://idp.example/jwks"].keys()  # nothing fetched before start()
