"""Kafka's dynamic keystore update: ``listener.name.<listener>.ssl.keystore.location`` altered with
IncrementalAlterConfigs on the broker resource (what ``kafka-configs.sh --entity-type brokers
--entity-name 1 --alter`` sends) is checked first -- a keystore that does not load, or whose
certificate names another subject, is refused with INVALID_REQUEST and the old certificate stays --
and then serves new connections without a restart, and after one. Driven with confluent-kafka's
AdminClient, and a producer and consumer that trust only the new certificate's CA."""

from __future__ import annotations

import hashlib
import socket
import ssl
from pathlib import Path
from typing import Any

import pytest

from tests.security import clients
from tests.security.conftest import Pki, SecureBroker, tls_overrides
from tests.security.pki import CertificateAuthority

KEY = "listener.name.ssl.ssl.keystore.location"
TIMEOUT_S = 30


def _served(broker: SecureBroker) -> str:
    """The SHA-256 of the certificate a new TLS connection to the SSL listener is served."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", broker.ports["SSL"]), timeout=10) as raw, \
            ctx.wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return hashlib.sha256(der).hexdigest()


def _fingerprint(pem: bytes) -> str:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    return hashlib.sha256(x509.load_pem_x509_certificate(pem).public_bytes(Encoding.DER)).hexdigest()


def _alter_cluster_default(broker: SecureBroker, name: str, value: str) -> tuple[str, str]:
    """IncrementalAlterConfigs on the cluster-default broker resource ("", which librdkafka will not
    send): the error's name and message."""
    from tests.helpers.raw_client import RawClient
    from tierlog.errors import ErrorCode

    with RawClient(broker.ports["PLAINTEXT"]) as c:
        response = c.call(44, 1, {"validate_only": False, "resources": [{
            "resource_type": 4, "resource_name": "", "configs": [{"name": name, "config_operation": 0,
                                                                 "value": value}]}]})
    result = response.responses[0]
    return ErrorCode(int(result.error_code)).name, str(result.error_message)


def _alter(broker: SecureBroker, name: str, value: str) -> Any:
    """IncrementalAlterConfigs SET on broker 1; the error it got, or None."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": broker.address("PLAINTEXT")})
    res = ConfigResource("BROKER", "1", incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
    try:
        admin.incremental_alter_configs([res])[res].result(TIMEOUT_S)
    except KafkaException as e:
        return e.args[0]
    return None


def _ssl_client(ca: Path) -> dict[str, str]:
    return {"security.protocol": "SSL", "ssl.ca.location": str(ca), "socket.connection.setup.timeout.ms": "5000"}


def _reachable(broker: SecureBroker, ca: Path) -> bool:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.address("SSL"), **_ssl_client(ca)})
    try:
        admin.list_topics(timeout=8)
    except KafkaException:
        return False
    return True


@pytest.fixture
def broker(secure_broker_factory: type, pki: Pki) -> SecureBroker:
    b: SecureBroker = secure_broker_factory.start(tls_overrides(pki))
    return b


def test_keystore_altered_through_incremental_alter_configs(broker: SecureBroker, pki: Pki, tmp_path: Path,
                                                            topic_name: str) -> None:
    old = _served(broker)
    assert old == _fingerprint(pki.broker_pem.read_bytes().split(b"-----END PRIVATE KEY-----")[1])
    # A rotation: a new key and certificate for the same name, from another CA.
    new_ca = CertificateAuthority("rotated CA")
    new_ca_file = tmp_path / "new-ca.crt"
    new_ca_file.write_bytes(new_ca.cert_pem)
    _, _, new_keystore = new_ca.issue("localhost", server=True).write(tmp_path, "rotated")
    assert not _reachable(broker, new_ca_file)  # a client trusting only the new CA cannot connect yet

    # Refused, each with INVALID_REQUEST, and the old certificate stays.
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a keystore\n")
    wrong_name = tmp_path / "elsewhere.pem"
    _, _, other = new_ca.issue("elsewhere.example", server=True).write(tmp_path, "elsewhere")
    other.replace(wrong_name)
    for value, why in ((str(garbage), "cannot load"), (str(tmp_path / "missing.pem"), "cannot load"),
                       (str(wrong_name), "DistinguishedName does not match")):
        error = _alter(broker, KEY, value)
        print(f"{KEY}={Path(value).name}: {error}")
        assert error is not None and error.name() == "INVALID_REQUEST", error
        assert why in error.str(), error.str()
        assert _served(broker) == old
    name, message = _alter_cluster_default(broker, KEY, str(new_keystore))
    print(f"{KEY} on the cluster default: {name} {message}")
    assert name == "INVALID_REQUEST" and "broker id must be specified" in message
    assert _served(broker) == old
    assert _alter(broker, "listener.name.ssl.ssl.client.auth", "required") is not None  # not dynamic

    # Accepted: new connections get the new certificate at once, no restart.
    assert _alter(broker, KEY, str(new_keystore)) is None
    assert _served(broker) == _fingerprint(new_keystore.read_bytes().split(b"-----END PRIVATE KEY-----")[1])
    clients.confluent_roundtrip(broker.address("SSL"), _ssl_client(new_ca_file), topic_name)
    assert not _reachable(broker, pki.ca_file)  # the old CA no longer vouches for the broker
    assert "serving a new certificate (dynamic keystore update)" in broker.log_text()

    # The inline PEM forms (ssl.keystore.certificate.chain and ssl.keystore.key) work too: beside the
    # dynamic location they are refused (Kafka: both forms at once is invalid), instead of it they serve.
    inline = new_ca.issue("localhost", server=True)
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": broker.address("PLAINTEXT")})
    pem = [ConfigEntry(f"listener.name.ssl.ssl.keystore.{k}", v.decode(), incremental_operation=AlterConfigOpType.SET)
           for k, v in (("certificate.chain", inline.cert_pem), ("key", inline.key_pem))]
    res = ConfigResource("BROKER", "1", incremental_configs=pem)
    with pytest.raises(KafkaException, match="not both"):
        admin.incremental_alter_configs([res])[res].result(TIMEOUT_S)
    res = ConfigResource("BROKER", "1", incremental_configs=[
        *pem, ConfigEntry(KEY, None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([res])[res].result(TIMEOUT_S)
    assert _served(broker) == _fingerprint(inline.cert_pem)
    # Back to the file: the location set and the inline keys deleted in one request.
    res = ConfigResource("BROKER", "1", incremental_configs=[
        ConfigEntry(KEY, str(new_keystore), incremental_operation=AlterConfigOpType.SET),
        *[ConfigEntry(e.name, None, incremental_operation=AlterConfigOpType.DELETE) for e in pem]])
    admin.incremental_alter_configs([res])[res].result(TIMEOUT_S)
    assert _served(broker) == _fingerprint(new_keystore.read_bytes().split(b"-----END PRIVATE KEY-----")[1])

    # Described as Kafka does (a dynamic per-broker config), and kept over a restart.
    res = ConfigResource("BROKER", "1")
    described = admin.describe_configs([res])[res].result(TIMEOUT_S)
    assert described[KEY].value == str(new_keystore)
    assert described[KEY].source == 2  # DYNAMIC_BROKER_CONFIG
    broker.stop()
    broker.start()
    assert _served(broker) == _fingerprint(new_keystore.read_bytes().split(b"-----END PRIVATE KEY-----")[1])
