"""Every client command family of the tierlog CLI against a real secured broker: over SASL_SSL with
SCRAM-SHA-512 and SCRAM-SHA-256 (the protocol commands' own SCRAM client, and librdkafka's), and over
mutual TLS, with the security settings as ``--command-config`` files in Kafka's Java names and as
``-X`` properties in librdkafka's. ``tierlog users scram`` makes the SCRAM users those runs log in as.

The broker runs the authorizer: ``admin`` (PLAIN, then SCRAM) and the mTLS client ``CN=admin`` are
super users, ``alice`` gets ACLs on ``app-`` topics and groups, everyone else nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.cli import cli, ok
from tests.security.conftest import Pki, SecureBroker
from tests.security.test_sasl import PLAIN_JAAS

TIMEOUT = ["--timeout", "30"]


def _overrides(pki: Pki) -> dict[str, str]:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SSL://127.0.0.1:0",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.location": str(pki.broker_pem),
        "ssl.truststore.location": str(pki.ca_file),
        "listener.name.ssl.ssl.client.auth": "required",
        # CN=admin,OU=ops,O=tierlog-test → User:admin
        "listener.name.ssl.ssl.principal.mapping.rules": "RULE:^CN=([^,]+),.*$/$1/,DEFAULT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
    }


@pytest.fixture
def broker(secure_broker_factory: type, pki: Pki) -> SecureBroker:
    b: SecureBroker = secure_broker_factory.start(_overrides(pki))
    return b


def _config_file(path: Path, lines: list[str]) -> list[str]:
    path.write_text("\n".join(["# a Kafka client.properties", *lines]) + "\n")
    return ["--command-config", str(path)]


def _scram_jaas(user: str, password: str) -> str:
    return (f'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="{user}" password="{password}";')


def _failed(done: object, broker: SecureBroker) -> str:
    return f"{done}\n--- broker log ---\n{broker.log_text()[-4000:]}"


def _ok(broker: SecureBroker, *args: str, stdin: str | None = None) -> str:
    done = cli(*args, stdin=stdin)
    assert done.returncode == 0, _failed(done, broker)
    return done.stdout


def _families(broker: SecureBroker, conn: list[str], topic: str, group: str) -> None:
    """One command of each client family, as the principal ``conn`` logs in as."""
    assert f"created topic {topic}" in _ok(broker, "topics", "create", topic, "--partitions", "2", *conn)
    assert topic in _ok(broker, "topics", "list", *conn)
    assert topic in _ok(broker, "topics", "describe", topic, *conn)
    _ok(broker, "produce", topic, *conn, stdin="one\ntwo\nthree\n")
    out = _ok(broker, "consume", topic, "--from-beginning", "--max-messages", "3", "--group", group, *conn)
    assert sorted(out.split()) == ["one", "three", "two"]
    assert group in _ok(broker, "groups", "list", *conn)
    assert topic in _ok(broker, "groups", "describe", group, *conn)
    _ok(broker, "groups", "delete-offsets", group, "--topic", topic, *conn)


def test_users_scram_and_every_family_over_sasl_ssl_scram(broker: SecureBroker, pki: Pki, tmp_path: Path) -> None:
    port = broker.address("SASL_SSL")
    # The bootstrap: admin is a PLAIN user of the listener's JAAS config, in a Kafka client.properties.
    plain = ["--bootstrap-server", port, *TIMEOUT, *_config_file(tmp_path / "admin-plain.properties", [
        "security.protocol=SASL_SSL", f"ssl.truststore.location={pki.ca_file}", "ssl.truststore.type=PEM",
        "sasl.mechanism=PLAIN",
        'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret";'])]
    pw = tmp_path / "admin.pw"
    pw.write_text("admin-scram\n")
    assert ok("users", "scram", "set", "--user", "admin", "--mechanism", "SCRAM-SHA-512", "--mechanism",
              "SCRAM-SHA-256", "--iterations", "8192", "--password-file", str(pw), *plain) == \
        "Completed updating config for user admin.\n"
    # kafka-configs.sh's syntax; the password on stdin for the other form.
    ok("users", "scram", "set", "--user", "alice", "--add-config",
       "SCRAM-SHA-256=[iterations=4096,password=alice-256],SCRAM-SHA-512=[password=alice-512]", *plain)
    listed = ok("users", "scram", "list", *plain)
    print(listed)
    assert "SCRAM credential configs for user-principal 'admin' are SCRAM-SHA-256=iterations=8192, " \
           "SCRAM-SHA-512=iterations=8192" in listed
    assert "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=4096, " \
           "SCRAM-SHA-512=iterations=4096" in listed
    assert "admin-scram" not in listed and "alice-512" not in listed

    # admin over SCRAM-SHA-512, Java names in a file: the protocol commands' SCRAM client.
    admin = ["--bootstrap-server", port, *TIMEOUT, *_config_file(tmp_path / "admin.properties", [
        "security.protocol=SASL_SSL", f"ssl.truststore.location={pki.ca_file}", "sasl.mechanism=SCRAM-SHA-512",
        _scram_jaas("admin", "admin-scram")])]
    ok("acls", "add", *admin, "--allow-principal", "User:alice", "--operation", "All", "--topic", "app-",
       "--resource-pattern-type", "prefixed")
    ok("acls", "add", *admin, "--allow-principal", "User:alice", "--operation", "All", "--group", "app-",
       "--resource-pattern-type", "prefixed")
    assert "User:alice" in ok("acls", "list", *admin)
    ok("quotas", "alter", "--user", "alice", "--add-config", "producer_byte_rate=1048576", *admin)
    assert "producer_byte_rate=1.04858e+06" in ok("quotas", "describe", "--user", "alice", *admin)
    assert "metadata.version" in ok("features", "describe", *admin)
    ok("transactions", "list", *admin)
    # ... and over SCRAM-SHA-256 with librdkafka's names as -X.
    admin256 = ["--bootstrap-server", port, *TIMEOUT, "-X", "security.protocol=SASL_SSL",
                "-X", f"ssl.ca.location={pki.ca_file}", "-X", "sasl.mechanisms=SCRAM-SHA-256",
                "-X", "sasl.username=admin", "-X", "sasl.password=admin-scram"]
    assert "metadata.version" in ok("features", "describe", *admin256)
    assert "'alice'" in ok("users", "scram", "list", "--user", "alice", *admin256)

    # alice: every family over SCRAM-SHA-512 (-X, Java's truststore name) within her ACLs.
    alice = ["--bootstrap-server", port, *TIMEOUT, "-X", "security.protocol=SASL_SSL",
             "-X", f"ssl.truststore.location={pki.ca_file}", "-X", "sasl.mechanism=SCRAM-SHA-512",
             "-X", "sasl.username=alice", "-X", "sasl.password=alice-512"]
    _families(broker, alice, "app-orders", "app-readers")
    # ... and not beyond them: the broker's answer, one line, exit 1.
    denied = cli("topics", "create", "secret", *alice)
    assert denied.returncode == 1 and "TOPIC_AUTHORIZATION_FAILED" in denied.stderr, denied
    denied = cli("quotas", "describe", *[a.replace("SCRAM-SHA-512", "SCRAM-SHA-256").replace("alice-512", "alice-256")
                                         for a in alice])
    assert denied.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in denied.stderr, denied

    # Deleting one mechanism: SCRAM-SHA-256 logins fail, SCRAM-SHA-512 ones go on.
    ok("users", "scram", "delete", "--user", "alice", "--mechanism", "SCRAM-SHA-256", *admin)
    assert "are SCRAM-SHA-512=iterations=4096\n" in ok("users", "scram", "list", "--user", "alice", *admin)
    alice256 = [a.replace("SCRAM-SHA-512", "SCRAM-SHA-256").replace("alice-512", "alice-256") for a in alice]
    refused = cli("users", "scram", "list", *alice256)
    assert refused.returncode == 1 and refused.stderr.startswith("error: SASL authentication with"), refused
    assert len(refused.stderr.splitlines()) == 1, refused.stderr
    wrong = cli("features", "describe", *[a.replace("alice-512", "nope") for a in alice])
    assert wrong.returncode == 1 and "Invalid username or password" in wrong.stderr, wrong
    assert cli("topics", "list", *[a.replace("alice-512", "nope") for a in alice]).returncode == 1
    # Deleting every mechanism of a user (none named).
    ok("users", "scram", "delete", "--user", "alice", *admin)
    gone = cli("users", "scram", "list", "--user", "alice", *admin)
    assert gone.returncode == 1 and "nonexistent user" in gone.stderr, gone


def test_every_family_over_mutual_tls(broker: SecureBroker, pki: Pki, tmp_path: Path) -> None:
    cert, key = pki.client("admin", ou="ops")
    keystore = tmp_path / "admin-keystore.pem"  # Kafka's PEM keystore: the key, then the chain
    keystore.write_bytes(key.read_bytes() + cert.read_bytes())
    conn = ["--bootstrap-server", broker.address("SSL"), *TIMEOUT, *_config_file(tmp_path / "mtls.properties", [
        "security.protocol=SSL", "ssl.keystore.type=PEM", f"ssl.keystore.location={keystore}",
        "ssl.truststore.type=PEM", f"ssl.truststore.location={pki.ca_file}"])]
    _families(broker, conn, "tls-topic", "tls-group")
    ok("acls", "add", *conn, "--allow-principal", "User:bob", "--operation", "Read", "--topic", "tls-topic")
    assert "User:bob" in ok("acls", "list", *conn)
    ok("quotas", "alter", "--client-id", "c1", "--add-config", "consumer_byte_rate=2048", *conn)
    assert "consumer_byte_rate=2048" in ok("quotas", "describe", *conn)
    ok("users", "scram", "set", "--user", "carol", *conn, stdin="carol-pw\n")  # the password on stdin
    assert "'carol' are SCRAM-SHA-512=iterations=4096" in ok("users", "scram", "list", *conn)
    assert "metadata.version" in ok("features", "describe", *conn)
    ok("transactions", "list", *conn)
    # The certificate and key inline (librdkafka's names as -X) work the same.
    inline = ["--bootstrap-server", broker.address("SSL"), *TIMEOUT, "-X", "security.protocol=SSL",
              "-X", f"ssl.ca.location={pki.ca_file}", "-X", f"ssl.certificate.pem={cert.read_text()}",
              "-X", f"ssl.key.pem={key.read_text()}"]
    assert "metadata.version" in ok("features", "describe", *inline)
    assert "tls-topic" in ok("topics", "list", *inline)
    # Without a client certificate the broker refuses the handshake: one line, exit 1.
    bare = ["--bootstrap-server", broker.address("SSL"), *TIMEOUT, "-X", "security.protocol=SSL",
            "-X", f"ssl.ca.location={pki.ca_file}"]
    for args in (["features", "describe"], ["quotas", "describe"], ["users", "scram", "list"]):
        done = cli(*args, *bare)
        assert done.returncode == 1 and len(done.stderr.splitlines()) == 1, done
        assert done.stderr.startswith("error: "), done
    # A TLS client on the plaintext port, and a plaintext client on the TLS port.
    wrong = cli("features", "describe", "--bootstrap-server", broker.address("PLAINTEXT"), *TIMEOUT,
                "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={pki.ca_file}")
    assert wrong.returncode == 1 and "TLS handshake" in wrong.stderr, wrong
    plain = cli("features", "describe", "--bootstrap-server", broker.address("SSL"), *TIMEOUT)
    assert plain.returncode == 1 and len(plain.stderr.splitlines()) == 1, plain
