"""SSL and mutual-TLS listeners next to a plaintext one, with real clients; bad TLS input refused."""

from __future__ import annotations

import socket
import ssl
import struct
import time
from pathlib import Path

import pytest

from tests.security import clients
from tests.security.conftest import Pki, SecureBroker, tls_overrides


def _ssl_conf(pki: Pki, cert: Path | None = None, key: Path | None = None) -> dict[str, str]:
    conf = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_file)}
    if cert and key:
        conf |= {"ssl.certificate.location": str(cert), "ssl.key.location": str(key)}
    return conf


def _tls_connect(broker: SecureBroker, pki: Pki, cert: Path | None = None, key: Path | None = None,
                 listener: str = "SSL") -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=str(pki.ca_file))
    if cert and key:
        ctx.load_cert_chain(str(cert), str(key))
    raw = socket.create_connection(("127.0.0.1", broker.ports[listener]), timeout=10)
    tls = ctx.wrap_socket(raw, server_hostname="localhost")
    return tls


API_VERSIONS_V0 = struct.pack(">ihhih", 10, 18, 0, 7, -1)


def _api_versions(sock: socket.socket) -> int:
    """Send ApiVersions v0 and return the correlation id answered."""
    sock.sendall(API_VERSIONS_V0)
    size = struct.unpack(">i", _read(sock, 4))[0]
    body = _read(sock, size)
    return int(struct.unpack(">i", body[:4])[0])


def _read(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def _closed_by_peer(sock: socket.socket) -> bool:
    try:
        sock.settimeout(10)
        return sock.recv(1) == b""
    except (ConnectionError, ssl.SSLError, OSError):
        return True


def test_ssl_listener_next_to_plaintext_with_every_client(secure_broker_factory: type, pki: Pki, topic_name: str) -> None:
    broker = secure_broker_factory.start(tls_overrides(pki))
    conf = _ssl_conf(pki)
    clients.confluent_roundtrip(broker.address("SSL"), conf, topic_name + "-ck")
    clients.kcat_roundtrip(broker.address("SSL"), conf, topic_name + "-kcat")
    ssl_kwargs = {"security_protocol": "SSL", "ssl_cafile": str(pki.ca_file)}
    clients.kafka_python_roundtrip(broker.address("SSL"), ssl_kwargs, topic_name + "-kp")
    ctx = ssl.create_default_context(cafile=str(pki.ca_file))
    clients.aiokafka_roundtrip(broker.address("SSL"), {"security_protocol": "SSL", "ssl_context": ctx}, topic_name + "-kp")
    # The plaintext listener serves the same data (a large fetch over TLS copies instead of sendfile).
    clients.confluent_roundtrip(broker.address("PLAINTEXT"), {}, topic_name + "-plain")


def test_mutual_tls_required(secure_broker_factory: type, pki: Pki, topic_name: str) -> None:
    broker = secure_broker_factory.start(tls_overrides(pki, **{"listener.name.ssl.ssl.client.auth": "required"}))
    conf = _ssl_conf(pki, pki.client_cert, pki.client_key)
    clients.confluent_roundtrip(broker.address("SSL"), conf, topic_name)
    clients.kafka_python_roundtrip(broker.address("SSL"), {
        "security_protocol": "SSL", "ssl_cafile": str(pki.ca_file), "ssl_certfile": str(pki.client_cert),
        "ssl_keyfile": str(pki.client_key)}, topic_name + "-kp")
    clients.kcat_roundtrip(broker.address("SSL"), conf, topic_name + "-kcat")
    ctx = ssl.create_default_context(cafile=str(pki.ca_file))
    ctx.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    clients.aiokafka_roundtrip(broker.address("SSL"), {"security_protocol": "SSL", "ssl_context": ctx},
                               topic_name + "-aio")
    refused = {
        "no client certificate": (None, None),
        "certificate of an unknown CA": pki.untrusted_client("mallory"),
        "expired certificate": pki.client("old", expired=True),
    }
    for what, (cert, key) in refused.items():
        try:
            sock = _tls_connect(broker, pki, cert, key)
        except (ssl.SSLError, ConnectionError, OSError) as e:
            print(f"mTLS with {what}: handshake refused ({e})")
            continue
        # TLS 1.3: the server's verdict on the client certificate arrives after the client's handshake ends.
        with sock:
            try:
                _api_versions(sock)
            except (ssl.SSLError, ConnectionError, OSError) as e:
                print(f"mTLS with {what}: refused after the handshake ({e})")
                continue
        raise AssertionError(f"mTLS with {what} was served")
    # Each peer's refusals are logged once (all come from 127.0.0.1 within the minute).
    deadline = time.monotonic() + 10
    while "SSL handshake failed" not in broker.log_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert broker.log_text().count("Failed authentication with /127.0.0.1") == 1, broker.log_text()


def test_plaintext_client_on_tls_port_and_tls_client_on_plaintext_port(
        secure_broker_factory: type, pki: Pki, topic_name: str) -> None:
    broker = secure_broker_factory.start(tls_overrides(pki))
    good = _tls_connect(broker, pki)
    # Plaintext Kafka request to the TLS port: the handshake fails and only that socket closes.
    for _ in range(5):
        with socket.create_connection(("127.0.0.1", broker.ports["SSL"]), timeout=10) as raw:
            raw.sendall(API_VERSIONS_V0)
            assert _closed_by_peer(raw)
    # TLS ClientHello to the plaintext port: its first bytes read as a frame size far over the limit.
    with socket.create_connection(("127.0.0.1", broker.ports["PLAINTEXT"]), timeout=10) as raw:
        ctx = ssl.create_default_context(cafile=str(pki.ca_file))
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            ctx.wrap_socket(raw, server_hostname="localhost")
    # The connection made before is unaffected.
    with good:
        assert _api_versions(good) == 7
    assert broker.log_text().count("SSL handshake failed") == 1



def _client_hello(pki: Pki) -> bytes:
    """The first flight of a real TLS client, taken from a memory BIO."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context(cafile=str(pki.ca_file)).wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_a_client_leaving_during_the_handshake_is_a_disconnect_not_a_failed_authentication(
        secure_broker_factory: type, pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    """librdkafka closes a bootstrap connection it no longer needs, a producer destroyed mid-connect
    resets its sockets: like Kafka's SslTransportLayer (an EOF or reset during the handshake is a
    disconnect), that is not logged as "Failed authentication" -- which operators and the SASL tests
    read as a refused client. A plaintext client on the TLS port still is."""
    monkeypatch.setenv("TIERLOG_IT_LOG_LEVEL", "DEBUG")  # the disconnects' own lines are at DEBUG
    broker = secure_broker_factory.start(tls_overrides(pki))
    hello = _client_hello(pki)
    for sent in (b"", hello[: len(hello) // 2], hello):
        raw = socket.create_connection(("127.0.0.1", broker.ports["SSL"]), timeout=10)
        raw.sendall(sent)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
        raw.close()
    for _ in range(2):  # and two that close politely
        with socket.create_connection(("127.0.0.1", broker.ports["SSL"]), timeout=10) as raw:
            raw.sendall(hello[:20])
    # The broker has handled all five before the plaintext client comes (else its refusal, logged
    # once per peer and minute, could hide one of theirs): each is one DEBUG disconnect line.
    deadline = time.monotonic() + 30
    while broker.log_text().count("closed during the TLS handshake") < 5:
        assert time.monotonic() < deadline, "not every client that left mid-handshake was seen as a disconnect:\n" + (
            broker.log_text()[-3000:])
        time.sleep(0.05)
    with socket.create_connection(("127.0.0.1", broker.ports["SSL"]), timeout=10) as raw:
        raw.sendall(API_VERSIONS_V0)
        assert _closed_by_peer(raw)
    deadline = time.monotonic() + 10
    while "SSL handshake failed" not in broker.log_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    # Refusals are logged once per peer and minute, so the one line must be the plaintext client's.
    lines = [line for line in broker.log_text().splitlines() if "Failed authentication" in line]
    assert len(lines) == 1 and "reset" not in lines[0].lower() and "eof" not in lines[0].lower(), lines


def test_changed_certificate_is_used_without_restart(secure_broker_factory: type, pki: Pki, tmp_path: Path) -> None:
    keystore = tmp_path / "broker.pem"
    keystore.write_bytes(pki.broker_pem.read_bytes())
    broker = secure_broker_factory.start(tls_overrides(pki, **{"ssl.keystore.location": str(keystore)}))

    def serial() -> int:
        with _tls_connect(broker, pki) as s:
            der = s.getpeercert(binary_form=True)
        from cryptography import x509
        assert der is not None
        return x509.load_der_x509_certificate(der).serial_number

    first = serial()
    issued = pki.ca.issue("localhost", server=True)
    staging = tmp_path / "new.pem"
    staging.write_bytes(issued.key_pem + issued.cert_pem)
    staging.replace(keystore)
    deadline = time.monotonic() + 20
    while serial() == first:
        assert time.monotonic() < deadline, "the new certificate was not picked up"
        time.sleep(0.2)
    assert "reloaded its certificate" in broker.log_text()


def test_bad_tls_config_is_one_line(tmp_path: Path, pki: Pki) -> None:
    import subprocess
    import sys
    other = pki.ca.issue("x", server=True)
    mismatched = tmp_path / "mismatch.pem"
    mismatched.write_bytes(pki.ca.issue("y", server=True).key_pem + other.cert_pem)
    for overrides, expected in (
        ({"listeners": "SSL://127.0.0.1:0"}, "ssl.keystore.location"),
        ({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(mismatched)}, "ssl.keystore.location"),
        ({"listeners": "WEIRD://127.0.0.1:0"}, "listener.security.protocol.map"),
        ({"listeners": "PLAINTEXT://127.0.0.1:0", "inter.broker.listener.name": "OTHER"}, "inter.broker.listener.name"),
        ({"listeners": "PLAINTEXT://127.0.0.1:0", "listener.name.plaintext.ssl.client.auth": "maybe"},
         "listener.name.plaintext.ssl.client.auth"),
    ):
        args = [a for k, v in {**overrides, "log.dirs": str(tmp_path / "d")}.items() for a in ("--override", f"{k}={v}")]
        proc = subprocess.run([sys.executable, "-m", "tierlog.cli.main", "serve", *args], capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], proc.stderr
