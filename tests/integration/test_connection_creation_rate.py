"""``max.connection.creation.rate`` is enforced as Kafka's acceptor enforces it (ConnectionQuotas): over
the broker-wide limit a new connection waits, unread, before it is served, and the listener takes its
newer connections after it -- none is closed for it -- so a burst is served at about the limit. The
key is dynamic (per broker or cluster-wide) and is documented as one tierlog acts on. Before, it was
accepted, stored and described, and did nothing.

Real sockets against ``tierlog serve``; only lower bounds on time are asserted (a waiting connection
cannot be served sooner), never an upper bound."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.broker import BrokerProcess
from tests.helpers.raw_client import RawClient
from tests.integration.test_metrics import metrics_url, scrape
from tierlog.config.keys import BROKER_DEF, UNMODELLED_GROUP
from tierlog.protocol import ApiKey, build_request, encode_request

KEY = "max.connection.creation.rate"
WINDOWS = {"quota.window.num": "2", "quota.window.size.seconds": "1"}


@pytest.fixture
def rate_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", {**WINDOWS, "metrics.listener": "http://127.0.0.1:0"}).start()
    yield b
    assert b.stop() == 0, b.stderr_tail()


def _burst(port: int, count: int) -> list[float | None]:
    """``count`` connections opened at once, each sending ApiVersions: for each, the seconds from the
    start until its answer came, or None if it was closed unanswered."""
    request = encode_request(18, 0, 1, "burst", build_request(18, 0, {}))
    started = time.monotonic()
    socks = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(count)]
    for s in socks:
        s.sendall(request)
    answered: list[float | None] = []
    for s in socks:
        try:
            head = s.recv(4)
        except ConnectionResetError:
            head = b""
        answered.append(time.monotonic() - started if len(head) == 4 and struct.unpack(">i", head)[0] > 0 else None)
        s.close()
    return answered


def _set_rate(port: int, value: str | None) -> None:
    """Set (or delete) the cluster-wide dynamic value, through IncrementalAlterConfigs."""
    with RawClient(port, client_id="rate") as client:
        body = client.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
            {"resource_type": 4, "resource_name": "", "configs": [
                {"name": KEY, "config_operation": 0 if value is not None else 1, "value": value}]}],
            "validate_only": False})
        assert body.responses[0].error_code == 0, body.responses[0].error_message


def test_over_the_broker_limit_new_connections_wait_and_are_all_served(rate_broker: BrokerProcess) -> None:
    port = rate_broker.port
    unlimited = _burst(port, 15)
    assert all(t is not None for t in unlimited), unlimited
    _set_rate(port, "5")  # (the unlimited burst is in the rate too: it can only make the waits longer)
    limited = _burst(port, 15)
    print(f"15 connections at once: without a limit the last answered after {max(unlimited):.2f} s "  # type: ignore[type-var]
          f"(baseline), at {KEY}=5 (2 windows of 1 s) after {max(t or 0 for t in limited):.2f} s")
    assert all(t is not None for t in limited), f"closed instead of delayed: {limited}\n{rate_broker.stderr_tail()}"
    # At most 5/s once over the limit: with 15 taken at once, at least 10 wait their turn, which the
    # rate lets through at 5 a second; whatever the machine's load, the last cannot be served sooner.
    assert max(t for t in limited if t is not None) >= 1.0, limited
    log_text = rate_broker.log_path.read_text()
    assert "accepting new connections slowly" in log_text and KEY in log_text, rate_broker.stderr_tail()
    samples = scrape(metrics_url(rate_broker))
    assert samples[("tierlog_connections_accept_throttled_total", frozenset())] >= 5
    assert samples[("tierlog_connection_accept_throttle_time_ms_total", frozenset())] >= 1000
    # Deleted again: the next connections are not made to wait (Kafka's default: unlimited).
    _set_rate(port, None)
    before = samples[("tierlog_connections_accept_throttled_total", frozenset())]
    assert all(t is not None for t in _burst(port, 15))
    after = scrape(metrics_url(rate_broker))[("tierlog_connections_accept_throttled_total", frozenset())]
    assert after == before


def test_the_key_is_validated_and_documented_as_one_tierlog_acts_on() -> None:
    key = BROKER_DEF.require(KEY)
    assert key.group != UNMODELLED_GROUP and "does not act on" not in key.doc and key.dynamic
    done = subprocess.run([sys.executable, "-m", "tierlog.cli.main", "config", "validate", "--override", f"{KEY}=-1"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and KEY in done.stderr, done.stderr
    docs = subprocess.run([sys.executable, "-m", "tierlog.cli.main", "config", "docs"], capture_output=True,
                          text=True, check=True).stdout
    kafka_section = docs[docs.index("Apache Kafka's other keys"):]
    assert f"`{KEY}`" in docs and f"`{KEY}`" not in kafka_section
