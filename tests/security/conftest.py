"""Secured brokers for the security tests: a test CA made at test time, brokers with several listeners."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.broker import LISTENING, BrokerProcess
from tests.helpers.fixtures import topic_name  # noqa: F401 - a fixture
from tests.security.pki import CertificateAuthority

WAIT_S = 30.0


@dataclass
class Pki:
    directory: Path
    ca: CertificateAuthority
    ca_file: Path
    broker_pem: Path
    client_cert: Path
    client_key: Path
    other_ca: CertificateAuthority

    def client(self, cn: str, **kwargs: object) -> tuple[Path, Path]:
        """A client certificate and key signed by the test CA (``expired=True``, ``ou=...``)."""
        cert, key, _ = self.ca.issue(cn, **kwargs).write(self.directory, f"client-{cn}")  # type: ignore[arg-type]
        return cert, key

    def untrusted_client(self, cn: str) -> tuple[Path, Path]:
        cert, key, _ = self.other_ca.issue(cn).write(self.directory, f"untrusted-{cn}")
        return cert, key


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority()
    ca_file = d / "ca.crt"
    ca_file.write_bytes(ca.cert_pem)
    _, _, broker_pem = ca.issue("localhost", server=True).write(d, "broker")
    client_cert, client_key, _ = ca.issue("alice", ou="eng").write(d, "client-alice")
    return Pki(d, ca, ca_file, broker_pem, client_cert, client_key, CertificateAuthority("someone else's CA"))


class SecureBroker(BrokerProcess):
    """A broker with the listeners of ``overrides['listeners']``; ``ports[name]`` are their ports."""

    def __init__(self, data_dir: Path, overrides: dict[str, str]) -> None:
        super().__init__(data_dir, overrides)
        self.names = [item.split("://")[0].upper() for item in overrides["listeners"].split(",")]
        self.ports: dict[str, int] = {}

    def start(self) -> SecureBroker:
        super().start()
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            # Ports in the order the listeners were printed (a line may be seen twice: the base class
            # and its drainer thread both read stdout).
            ports = list(dict.fromkeys(int(line.strip().rsplit(":", 1)[1])
                                       for line in list(self.stdout_lines) if line.startswith(LISTENING)))
            if len(ports) >= len(self.names):
                self.ports = dict(zip(self.names, ports, strict=False))
                return self
            time.sleep(0.05)
        raise AssertionError(f"not every listener came up: {self.stdout_lines!r}")

    def address(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def log_text(self) -> str:
        try:
            return self.log_path.read_text()
        except FileNotFoundError:
            return ""


def tls_overrides(pki: Pki, **extra: str) -> dict[str, str]:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.broker_pem),
        "ssl.truststore.location": str(pki.ca_file),
        "inter.broker.listener.name": "PLAINTEXT",
        **extra,
    }


@pytest.fixture
def secure_broker_factory(tmp_path: Path) -> Iterator[type]:
    started: list[SecureBroker] = []

    class Factory:
        @staticmethod
        def start(overrides: dict[str, str]) -> SecureBroker:
            b = SecureBroker(tmp_path / f"data{len(started)}", overrides).start()
            started.append(b)
            return b

    yield Factory
    for b in started:
        if b.alive():
            assert b.stop() == 0, b.stderr_tail()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every security test starts a broker: marked ``integration`` as tests/integration's are."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
