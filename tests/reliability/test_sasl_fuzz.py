"""The short version of the TLS/SASL handshake fuzzing (tests/reliability/sasl_fuzz.py); the long one
runs from ``bench/chaos.py --only handshake``. A real ``tierlog serve`` with SASL_PLAINTEXT, SASL_SSL and
SSL listeners (a test CA made now) and a plaintext one on loopback for the setup."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.sasl_fuzz import (
    SASL_KINDS,
    SECRET_RECORDS,
    TLS_KINDS,
    handshake_fuzz,
    prepare,
    secured_overrides,
)
from tests.security.conftest import SecureBroker

pytestmark = pytest.mark.integration


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[SecureBroker, ssl.SSLContext]]:
    overrides, _, ca_file = secured_overrides(tmp_path)
    broker = SecureBroker(tmp_path / "data", overrides).start()
    try:
        prepare(broker)
        yield broker, ssl.create_default_context(cafile=str(ca_file))
    finally:
        if broker.alive():
            assert broker.stop() == 0, broker.log_text()[-3000:]


def test_fuzzed_tls_and_sasl_handshakes(secured: tuple[SecureBroker, ssl.SSLContext]) -> None:
    broker, tls = secured
    result = handshake_fuzz(broker, tls, 800, seed=19, batch=200, stalled=6)
    figures = result.summary()
    for key, value in figures.items():
        print(f"{key}: {value}")
    assert not result.crashed and result.tracebacks == [], "\n\n".join(result.tracebacks[:3])
    assert result.hangs == [] and result.errors == [], (result.hangs[:5], result.errors[:5])
    assert result.unauthorized == [], result.unauthorized[:10]
    assert result.unexpected == [], result.unexpected[:10]
    assert result.health_failures == [] and result.health_checks >= 4, (result.health_failures, figures)
    assert result.secret_end_offset == SECRET_RECORDS and result.topics_created == [], figures
    assert result.stalled_closed == result.stalled and result.stalled_close_max_s <= 20, figures
    # Every kind of attempt ran, and the refusals came as Kafka's errors, not only as closes.
    assert set(result.by_kind) == set(SASL_KINDS) | set(TLS_KINDS), figures
    for error in ("UNSUPPORTED_SASL_MECHANISM", "ILLEGAL_SASL_STATE", "SASL_AUTHENTICATION_FAILED"):
        assert any(error in outcome for outcome in result.outcomes), (error, figures)
    # Refusals are logged rate-limited per peer, not once per attempt.
    assert result.refusal_log_lines < result.attempts // 4, figures
    assert result.ok, figures
