"""Apache Kafka 4.3.1's Java clients and console tools, unchanged, over tierlog's secured listeners:
SASL_SSL with SCRAM-SHA-512 and mutual TLS, each configured with Kafka's PEM truststore/keystore keys in
a client.properties file (the certificates are made at test time by tests/security/pki.py)."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.jvm.kafka import CONSOLE_CONSUMER, CONSOLE_PRODUCER, compiled_classes, java_command, run_tool
from tests.security.conftest import Pki, SecureBroker, pki, secure_broker_factory  # noqa: F401 - fixtures
from tests.security.test_sasl import add_scram_user, sasl_overrides

SCRAM_USER, SCRAM_PASSWORD = "jvm-user", "jvm-secret"


def _properties(path: Path, props: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def _client_check(bootstrap: str, config: Path, check: str, *extra: str, broker: SecureBroker) -> str:
    prefix = f"java-sec-{check}-{uuid.uuid4().hex[:6]}"
    proc = subprocess.run(java_command("ClientCheck", [bootstrap, prefix, check, *extra], extra_cp=[compiled_classes()]),
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TIERLOG_CLIENT_CONFIG": str(config)})
    assert proc.returncode == 0, (f"ClientCheck {check} over {config.name} failed:\n{proc.stdout}\n"
                                  f"{proc.stderr[-4000:]}\nbroker log:\n{broker.log_text()[-4000:]}")
    return proc.stdout


@pytest.fixture
def secured(kafka_jars: None, secure_broker_factory: type, pki: Pki) -> SecureBroker:  # noqa: F811
    broker: SecureBroker = secure_broker_factory.start(sasl_overrides(pki, **{
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "listener.name.ssl.ssl.client.auth": "required",
        "ssl.truststore.location": str(pki.ca_file),
    }))
    add_scram_user(broker.address("PLAINTEXT"), SCRAM_USER, SCRAM_PASSWORD)
    return broker


def _scram_config(pki: Pki, directory: Path, password: str = SCRAM_PASSWORD) -> Path:  # noqa: F811
    return _properties(directory / f"scram-{password}.properties", {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": ("org.apache.kafka.common.security.scram.ScramLoginModule required "
                             f'username="{SCRAM_USER}" password="{password}";'),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_file),
    })


def _mtls_config(pki: Pki, directory: Path) -> Path:  # noqa: F811
    keystore = directory / "java-client.pem"
    keystore.write_bytes(pki.client_key.read_bytes() + pki.client_cert.read_bytes())  # Kafka's PEM keystore file
    return _properties(directory / "mtls.properties", {
        "security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_file),
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore),
    })


@pytest.mark.parametrize("setup", ["SASL_SSL SCRAM-SHA-512", "SSL with a client certificate"])
def test_java_clients_over_secured_listeners(secured: SecureBroker, pki: Pki, tmp_path: Path,  # noqa: F811
                                             setup: str) -> None:
    listener, config = (("SASL_SSL", _scram_config(pki, tmp_path)) if setup.startswith("SASL_SSL")
                        else ("SSL", _mtls_config(pki, tmp_path)))
    bootstrap = secured.address(listener)
    produced = _client_check(bootstrap, config, "produce", broker=secured)
    assert [line.split()[2] for line in produced.splitlines() if line.startswith("ok: produce+read")] == [
        "none", "gzip", "snappy", "lz4", "zstd"], produced
    assert "ok: group classic 400" in _client_check(bootstrap, config, "group", "classic", broker=secured)
    assert "ok: describeTopics paged" in _client_check(bootstrap, config, "admin", broker=secured)
    assert "Failed authentication" not in secured.log_text(), secured.log_text()[-3000:]
    print(f"{setup}: Java producer (5 codecs), classic consumer group and Admin calls passed")


def test_java_console_tools_over_sasl_ssl_scram(secured: SecureBroker, pki: Pki, tmp_path: Path) -> None:  # noqa: F811
    config = _scram_config(pki, tmp_path)
    bootstrap, topic = secured.address("SASL_SSL"), f"console-sec-{uuid.uuid4().hex[:6]}"
    run_tool(CONSOLE_PRODUCER, "--bootstrap-server", bootstrap, "--topic", topic, "--command-config", str(config),
             input_text="".join(f"v{i}\n" for i in range(20)))
    consumed = run_tool(CONSOLE_CONSUMER, "--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning",
                        "--max-messages", "20", "--group", f"g-{topic}", "--command-config", str(config)).stdout
    assert sorted(consumed.split()) == sorted(f"v{i}" for i in range(20)), consumed
    # A wrong password: the console consumer fails with Kafka's authentication error, and reads nothing.
    wrong = _scram_config(pki, tmp_path, password="not-the-password")
    refused = run_tool(CONSOLE_CONSUMER, "--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning",
                       "--max-messages", "1", "--timeout-ms", "20000", "--command-config", str(wrong), check=False)
    print(f"console consumer with a wrong SCRAM password: exit {refused.returncode}; "
          f"{[line for line in refused.stderr.splitlines() if 'uthentication' in line][:1]}")
    # (ConsoleConsumer exits 0 after "Error processing message, terminating consumer process".)
    assert "SaslAuthenticationException: Authentication failed" in refused.stderr, refused.stderr[-3000:]
    assert "Processed a total of 0 messages" in refused.stderr and "v0" not in refused.stdout, refused.stdout
