"""SASL PLAIN and SCRAM over SASL_SSL and SASL_PLAINTEXT with real clients; SCRAM users in the metadata log."""

from __future__ import annotations

import ssl

import pytest

from tests.security import clients
from tests.security.conftest import Pki, SecureBroker

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


def sasl_overrides(pki: Pki, **extra: str) -> dict[str, str]:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "ssl.keystore.location": str(pki.broker_pem),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        **extra,
    }


def add_scram_user(bootstrap: str, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> None:
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    mech = ScramMechanism.SCRAM_SHA_512 if mechanism == "SCRAM-SHA-512" else ScramMechanism.SCRAM_SHA_256
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(user, ScramCredentialInfo(mech, 8192), password.encode())])
    for f in futures.values():
        f.result(30)


@pytest.fixture
def sasl_broker(secure_broker_factory: type, pki: Pki) -> SecureBroker:
    broker: SecureBroker = secure_broker_factory.start(sasl_overrides(pki))
    add_scram_user(broker.address("PLAINTEXT"), "bob", "bob-secret")
    add_scram_user(broker.address("PLAINTEXT"), "bob", "bob-256", "SCRAM-SHA-256")
    return broker


def _ck(pki: Pki, protocol: str, mechanism: str, user: str, password: str) -> dict[str, str]:
    conf = {"security.protocol": protocol, "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": password}
    if protocol == "SASL_SSL":
        conf["ssl.ca.location"] = str(pki.ca_file)
    return conf


def test_scram_credentials_are_described_without_secrets(sasl_broker: SecureBroker) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": sasl_broker.address("PLAINTEXT")})
    described = admin.describe_user_scram_credentials(["bob"])["bob"].result(30)
    infos = sorted((i.mechanism.name, i.iterations) for i in described.scram_credential_infos)
    assert infos == [("SCRAM_SHA_256", 8192), ("SCRAM_SHA_512", 8192)]


#: (mechanism, user, password) of each SASL setup the matrix runs over both SASL listeners.
SETUPS = [("PLAIN", "alice", "alice-secret"), ("SCRAM-SHA-256", "bob", "bob-256"), ("SCRAM-SHA-512", "bob", "bob-secret")]


@pytest.mark.parametrize("protocol", ["SASL_SSL", "SASL_PLAINTEXT"])
def test_every_client_over_every_sasl_mechanism(sasl_broker: SecureBroker, pki: Pki, topic_name: str,
                                                protocol: str) -> None:
    """confluent-kafka, kcat, kafka-python and aiokafka produce and consume in a group (confluent-kafka
    and kafka-python also create their topic with the admin client) with PLAIN, SCRAM-SHA-256 and
    SCRAM-SHA-512."""
    address = sasl_broker.address(protocol)
    for mechanism, user, password in SETUPS:
        stem = f"{topic_name}-{mechanism.lower()}"
        conf = _ck(pki, protocol, mechanism, user, password)
        clients.confluent_roundtrip(address, conf, stem + "-ck")
        clients.kcat_roundtrip(address, conf, stem + "-kcat")
        kp: dict[str, object] = {"security_protocol": protocol, "sasl_mechanism": mechanism,
                                 "sasl_plain_username": user, "sasl_plain_password": password}
        aio = dict(kp)
        if protocol == "SASL_SSL":
            kp["ssl_cafile"] = str(pki.ca_file)
            aio["ssl_context"] = ssl.create_default_context(cafile=str(pki.ca_file))
        clients.kafka_python_roundtrip(address, kp, stem + "-kp")
        clients.aiokafka_roundtrip(address, aio, stem + "-aio")
        print(f"{protocol} {mechanism}: confluent-kafka, kcat, kafka-python, aiokafka produced and consumed")
    log = sasl_broker.log_text()
    assert "Failed authentication" not in log, log[-3000:]


@pytest.mark.parametrize(("mechanism", "user", "password"), [
    ("PLAIN", "alice", "wrong"), ("PLAIN", "nobody", "x"),
    ("SCRAM-SHA-512", "bob", "wrong"), ("SCRAM-SHA-512", "nobody", "x")])
def test_bad_credentials_fail_with_one_message(sasl_broker: SecureBroker, pki: Pki, mechanism: str, user: str,
                                               password: str) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": sasl_broker.address("SASL_SSL"),
                         **_ck(pki, "SASL_SSL", mechanism, user, password)})
    with pytest.raises(KafkaException) as e:
        admin.list_topics(timeout=10)
    print(f"{mechanism} as {user!r} with a wrong password: {e.value}")


def test_requests_before_authentication_and_oversized_frames_close_only_that_connection(
        sasl_broker: SecureBroker, pki: Pki, topic_name: str) -> None:
    import socket
    import struct

    def attempt(what: str, payload: bytes) -> None:
        with socket.create_connection(("127.0.0.1", sasl_broker.ports["SASL_PLAINTEXT"]), timeout=10) as s:
            s.sendall(payload)
            try:
                data = s.recv(65536)
            except ConnectionError:
                data = b""
            print(f"{what}: {'connection closed' if not data else f'answered {len(data)} bytes'}")
            assert data == b"", what

    metadata_v1 = struct.pack(">hhih", 3, 1, 5, -1) + struct.pack(">i", -1)
    attempt("Metadata before authentication", struct.pack(">i", len(metadata_v1)) + metadata_v1)
    attempt("a 1 MiB frame before authentication", struct.pack(">i", 1 << 20) + b"\0" * 1024)
    # An authenticated client on the same listener is unaffected.
    clients.confluent_roundtrip(sasl_broker.address("SASL_PLAINTEXT"),
                                _ck(pki, "SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret"), topic_name)
