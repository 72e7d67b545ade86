"""SASL/OAUTHBEARER with signed JWTs against a JWKS served by a local HTTP server: confluent-kafka
(librdkafka's oauth_cb) produces and consumes with a good token; forged, expired, wrong-audience and
wrong-issuer tokens and unsigned ones are refused with the one authentication error; the token's
``sub`` is the principal ACLs see. Keys are made at test time."""

from __future__ import annotations

import http.server
import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from joserfc import jwt
from joserfc.jwk import OctKey, RSAKey

from tests.security.conftest import SecureBroker
from tierlog.server.auth.mechanisms import AuthenticationFailed
from tierlog.server.auth.oauthbearer import TokenRules, check_claims, parse_initial_response

TIMEOUT_S = 30.0
ISSUER = "https://issuer.test"
AUDIENCE = "tierlog"


@pytest.fixture(scope="module")
def signing_key() -> RSAKey:
    return RSAKey.generate_key(2048, parameters={"kid": "good"})


@pytest.fixture
def jwks_url(signing_key: RSAKey) -> Iterator[str]:
    body = json.dumps({"keys": [signing_key.as_dict(private=False)]}).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
    server.shutdown()
    server.server_close()


def token(key: Any, *, sub: str = "carol", exp_in_s: int = 600, aud: str = AUDIENCE, iss: str = ISSUER,
          kid: str = "good", alg: str = "RS256") -> str:
    now = int(time.time())
    claims = {"sub": sub, "iss": iss, "aud": aud, "iat": now, "exp": now + exp_in_s}
    return jwt.encode({"alg": alg, "kid": kid}, claims, key)


@pytest.fixture
def oauth_broker(secure_broker_factory: type, jwks_url: str) -> SecureBroker:
    broker: SecureBroker = secure_broker_factory.start({
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "sasl.oauthbearer.jwks.endpoint.url": jwks_url,
        "sasl.oauthbearer.expected.audience": AUDIENCE,
        "sasl.oauthbearer.expected.issuer": ISSUER,
    })
    return broker


def _conf(broker: SecureBroker, jwt_text: str) -> dict[str, Any]:
    return {"bootstrap.servers": broker.address("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "oauth_cb": lambda _cfg: (jwt_text, time.time() + 600)}


def test_clients_with_a_signed_token_produce_and_consume(oauth_broker: SecureBroker, signing_key: RSAKey) -> None:
    from tests.security import clients

    conf = _conf(oauth_broker, token(signing_key))
    clients.confluent_roundtrip(conf.pop("bootstrap.servers"), conf, f"oauth-{uuid.uuid4().hex[:6]}")


@pytest.mark.parametrize("case", ["forged", "unknown-kid", "expired", "wrong-audience", "wrong-issuer", "unsigned",
                                  "hmac-with-public-key"])
def test_bad_tokens_are_refused(oauth_broker: SecureBroker, signing_key: RSAKey, case: str) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    other = RSAKey.generate_key(2048, parameters={"kid": "good"})
    bad = {
        "forged": lambda: token(other),
        "unknown-kid": lambda: token(RSAKey.generate_key(2048, parameters={"kid": "k9"}), kid="k9"),
        "expired": lambda: token(signing_key, exp_in_s=-3600),
        "wrong-audience": lambda: token(signing_key, aud="someone-else"),
        "wrong-issuer": lambda: token(signing_key, iss="https://evil.test"),
        # alg none: a token without a signature.
        "unsigned": lambda: ".".join(p.rstrip("=") for p in (
            _b64(json.dumps({"alg": "none"})), _b64(json.dumps({"sub": "carol", "exp": int(time.time()) + 600,
                                                                 "aud": AUDIENCE, "iss": ISSUER})), "")),
        # the RSA public key's bytes used as an HMAC secret (the classic algorithm confusion)
        "hmac-with-public-key": lambda: token(OctKey.import_key(json.dumps(signing_key.as_dict(private=False))),
                                              alg="HS256"),
    }[case]()
    errors: list[str] = []
    admin = AdminClient({**_conf(oauth_broker, bad), "error_cb": lambda err: errors.append(str(err))})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=10)
    admin.poll(1)  # serves error_cb
    print(f"{case}: {errors[:1]}")
    assert any("SASL authentication error: Authentication failed: invalid_token" in e for e in errors), errors[:3]


def _b64(text: str) -> str:
    import base64

    return base64.urlsafe_b64encode(text.encode()).decode()


def test_claim_rules() -> None:
    rules = TokenRules((AUDIENCE,), ISSUER, 30, "sub")
    good = {"sub": "carol", "aud": [AUDIENCE, "x"], "iss": ISSUER, "exp": 1000, "iat": 900}
    assert check_claims(good, rules, now_s=950) == "carol"
    assert check_claims(good, rules, now_s=1029) == "carol"  # within the clock skew
    for claims, now in ((good, 1030), ({**good, "nbf": 1100}, 950), ({**good, "aud": "x"}, 950),
                        ({**good, "iss": "other"}, 950), ({k: v for k, v in good.items() if k != "exp"}, 950),
                        ({**good, "sub": ""}, 950)):
        with pytest.raises(AuthenticationFailed):
            check_claims(claims, rules, now_s=now)


def test_initial_response_parsing() -> None:
    assert parse_initial_response(b"n,,\x01auth=Bearer abc.def.ghi\x01\x01") == "abc.def.ghi"
    assert parse_initial_response(b"n,a=carol,\x01host=x\x01auth=Bearer t\x01ext=1\x01\x01") == "t"
    for bad in (b"", b"n,,\x01auth=Basic x\x01\x01", b"y,,\x01auth=Bearer t\x01\x01", b"n,,\x01auth=Bearer t\x01",
                b"\xff\xfe", b"n,,\x01novalue\x01\x01"):
        with pytest.raises(AuthenticationFailed):
            parse_initial_response(bad)


def test_a_session_ends_when_its_token_expires(tmp_path: Any, signing_key: RSAKey) -> None:
    from tierlog.server.auth.oauthbearer import JwksSource, OAuthBearerServer
    from tierlog.server.auth.session import SaslSession

    jwks_file = tmp_path / "jwks.json"
    jwks_file.write_text(json.dumps({"keys": [signing_key.as_dict(private=False)]}))
    wall_s = 1_000_000.0
    jwks = JwksSource(jwks_file.as_uri(), 3_600_000, lambda: 0.0)
    rules = TokenRules((AUDIENCE,), ISSUER, 30, "sub")
    claims = {"sub": "carol", "aud": AUDIENCE, "iss": ISSUER, "iat": int(wall_s), "exp": int(wall_s) + 120}
    bearer = jwt.encode({"alg": "RS256", "kid": "good"}, claims, signing_key)
    message = f"n,,\x01auth=Bearer {bearer}\x01\x01".encode()
    for reauth_ms, expected_ms in ((600_000, 120_000), (60_000, 60_000), (0, 0)):
        session = SaslSession(("OAUTHBEARER",), lambda _m: OAuthBearerServer(jwks, rules, lambda: wall_s),
                              reauth_ms, lambda: 5_000)
        assert session.handshake("OAUTHBEARER", 1)
        assert session.authenticate(message) == (b"", True)
        assert session.user == "carol"
        # KIP-368: re-authentication by connections.max.reauth.ms or the token's exp, whichever is first.
        assert session.session_lifetime_ms() == expected_ms
