"""SASL/OAUTHBEARER over SASL_PLAINTEXT with real clients: tokens signed by a key of a JWKS served by a
small local HTTP server (the identity provider's stand-in, keys made at test time); forged, expired and
wrong-audience tokens refused, each attempt printed with what happened."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from joserfc import jwt
from joserfc.jwk import RSAKey

from tests.security import clients
from tests.security.conftest import SecureBroker
from tierlog.server.auth.oauthbearer import UNSECURED_VALIDATOR

pytestmark = pytest.mark.integration

AUDIENCE = "tierlog"
ISSUER = "https://idp.test"


class IdentityProvider:
    """Signs tokens and serves the JWKS of its public key at /jwks."""

    def __init__(self) -> None:
        self.key = RSAKey.generate_key(2048, parameters={"kid": "idp-1"})
        self.forger = RSAKey.generate_key(2048, parameters={"kid": "idp-1"})
        self.fetches = 0
        provider = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                provider.fetches += 1
                body = json.dumps({"keys": [provider.key.as_dict(private=False)]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/jwks"

    def token(self, sub: str = "alice", *, key: RSAKey | None = None, lifetime_s: int = 600,
              audience: str = AUDIENCE) -> tuple[str, float]:
        now = int(time.time())
        claims = {"sub": sub, "iat": now, "exp": now + lifetime_s, "aud": audience, "iss": ISSUER}
        signer = key or self.key
        # The expiry the client is told is in the future even when the claim is not: librdkafka
        # never sends a token it believes expired, and the broker's check is what is tested.
        return jwt.encode({"alg": "RS256", "kid": signer.kid or ""}, claims, signer), float(now + max(lifetime_s, 600))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def idp() -> Iterator[IdentityProvider]:
    provider = IdentityProvider()
    yield provider
    provider.close()


@pytest.fixture
def oauth_broker(secure_broker_factory: type, idp: IdentityProvider) -> SecureBroker:
    broker: SecureBroker = secure_broker_factory.start({
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "sasl.oauthbearer.jwks.endpoint.url": idp.url,
        "sasl.oauthbearer.expected.audience": AUDIENCE,
        "sasl.oauthbearer.expected.issuer": ISSUER,
        "connections.max.reauth.ms": "60000",
    })
    assert idp.fetches >= 1, "the broker fetched no JWKS at start"
    return broker


def confluent_conf(token: tuple[str, float]) -> dict[str, Any]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "OAUTHBEARER",
            "oauth_cb": lambda _config: token}


def test_confluent_kafka_and_kafka_python_with_signed_tokens(oauth_broker: SecureBroker, idp: IdentityProvider,
                                                             topic_name: str) -> None:
    bootstrap = oauth_broker.address("SASL_PLAINTEXT")
    clients.confluent_roundtrip(bootstrap, confluent_conf(idp.token()), topic_name)

    try:
        from kafka.net.sasl.oauth import AbstractTokenProvider  # kafka-python 3
    except ImportError:
        from kafka.sasl.oauth import AbstractTokenProvider  # kafka-python 2

    class Provider(AbstractTokenProvider):  # type: ignore[misc]
        def token(self) -> str:
            return idp.token("bob")[0]

    clients.kafka_python_roundtrip(bootstrap, {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER",
                                               "sasl_oauth_token_provider": Provider()}, f"{topic_name}-kp")
    from aiokafka.abc import AbstractTokenProvider as AioTokenProvider

    class AioProvider(AioTokenProvider):  # type: ignore[misc]
        async def token(self) -> str:
            return idp.token("carol")[0]

    clients.aiokafka_roundtrip(bootstrap, {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER",
                                           "sasl_oauth_token_provider": AioProvider()}, f"{topic_name}-aio")
    log = oauth_broker.log_text()
    assert "Failed authentication" not in log, log[-2000:]


def test_kcat_with_unsecured_tokens_only_where_configured(secure_broker_factory: type, idp: IdentityProvider,
                                                          topic_name: str) -> None:
    """kcat's librdkafka (Debian's 2.0, built without OIDC) can only make Kafka's unsecured tokens
    (``sasl.oauthbearer.config=principal=...``): served on the listener that names Kafka's unsecured
    validator, refused on the one that validates against the JWKS."""
    broker: SecureBroker = secure_broker_factory.start({
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SIGNED://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SIGNED:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": UNSECURED_VALIDATOR,
        "sasl.oauthbearer.jwks.endpoint.url": idp.url,
    })
    props = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "OAUTHBEARER",
             "sasl.oauthbearer.config": "principal=dave", "enable.sasl.oauthbearer.unsecure.jwt": "true"}
    clients.kcat_roundtrip(broker.address("SASL_PLAINTEXT"), props, topic_name)
    assert "Failed authentication" not in broker.log_text(), broker.log_text()[-2000:]
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    with pytest.raises(KafkaException) as e:
        AdminClient({"bootstrap.servers": broker.address("SIGNED"), **props}).list_topics(timeout=10)
    deadline = time.monotonic() + 30
    while "Failed authentication" not in broker.log_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    print(f"attempt: an unsecured token on the JWKS listener -> client: {e.value}")
    assert "invalid_token" in broker.log_text(), broker.log_text()[-2000:]


@pytest.mark.parametrize("attempt", ["forged signature", "expired", "wrong audience"])
def test_bad_tokens_are_refused_and_other_clients_go_on(oauth_broker: SecureBroker, idp: IdentityProvider,
                                                        attempt: str, topic_name: str) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    token = {"forged signature": idp.token(key=idp.forger),
             "expired": idp.token(lifetime_s=-3600),
             "wrong audience": idp.token(audience="someone-else")}[attempt]
    bootstrap = oauth_broker.address("SASL_PLAINTEXT")
    errors: list[KafkaError] = []
    admin = AdminClient({"bootstrap.servers": bootstrap, **confluent_conf(token), "error_cb": errors.append})
    # Short metadata requests until the client reports the authentication failure (error_cb), rather
    # than one request waiting out a long timeout: every request must fail, none may list topics.
    deadline = time.monotonic() + 30
    while not any(err.code() == KafkaError._AUTHENTICATION for err in errors) and time.monotonic() < deadline:
        with pytest.raises(KafkaException) as e:
            admin.list_topics(timeout=1)
        admin.poll(0.1)
    assert any(err.code() == KafkaError._AUTHENTICATION for err in errors), errors
    deadline = time.monotonic() + 30
    while "Failed authentication" not in oauth_broker.log_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    log = oauth_broker.log_text()
    print(f"attempt: OAUTHBEARER with a token with a {attempt} -> client: {e.value}; broker: "
          f"{'refused (Failed authentication logged)' if 'Failed authentication' in log else 'NOT REFUSED'}")
    assert "Failed authentication" in log and "invalid_token" in log, log[-2000:]
    # A client with a good token is served meanwhile.
    clients.confluent_roundtrip(bootstrap, confluent_conf(idp.token()), topic_name, count=5)
