"""``max.connection.creation.rate`` is enforced as Kafka's acceptor enforces it (ConnectionQuotas): over
the broker-wide limit a new connection waits, unread, before it is served, and the listener takes its
newer connections after it -- none is closed for it -- so a burst is served at about the limit. The
key is dynamic (per broker or cluster-wide) and is documented as one tierlog acts on. Before, it was
accepted, stored and described, and did nothing.

Per listener, ``listener.name.<listener>.max.connection.creation.rate`` (static or dynamic) limits that
listener's own rate beside the broker's, and the inter-broker listener, when there are others, is left
out of the broker-wide rate (Kafka's protectedListener). Before, the per-listener key was refused.

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

from tests.helpers.broker import LISTENING, BrokerProcess
from tests.helpers.raw_client import RawClient
from tests.integration.test_metrics import get, metrics_url, scrape
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


def _set_rate(port: int, value: str | None, key: str = KEY) -> None:
    """Set (or delete) the cluster-wide dynamic value, through IncrementalAlterConfigs."""
    with RawClient(port, client_id="rate") as client:
        body = client.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
            {"resource_type": 4, "resource_name": "", "configs": [
                {"name": key, "config_operation": 0 if value is not None else 1, "value": value}]}],
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


TWO_LISTENERS = {"listeners": "PLAINTEXT://127.0.0.1:0,OTHER://127.0.0.1:0",
                 "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT"}


def _two_listener_broker(tmp_path: Path, overrides: dict[str, str]) -> tuple[BrokerProcess, dict[str, int]]:
    """A broker with listeners PLAINTEXT and OTHER, and their ports (printed in that order)."""
    b = BrokerProcess(tmp_path / "data", {**WINDOWS, **TWO_LISTENERS, "metrics.listener": "http://127.0.0.1:0",
                                          **overrides}).start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ports = list(dict.fromkeys(int(line.strip().rsplit(":", 1)[1])
                                   for line in list(b.stdout_lines) if line.startswith(LISTENING)))
        if len(ports) >= 2:
            return b, dict(zip(("PLAINTEXT", "OTHER"), ports, strict=False))
        time.sleep(0.05)
    b.kill()
    raise AssertionError(f"not both listeners came up: {b.stdout_lines!r}\n{b.stderr_tail()}")


def _waited(broker: BrokerProcess, listener: str) -> float:
    return get(scrape(metrics_url(broker)), "tierlog_listener_connections_accept_throttled_total", listener=listener)


def test_a_listener_limit_slows_that_listener_alone_and_is_dynamic(tmp_path: Path) -> None:
    other_key = "listener.name.other.max.connection.creation.rate"
    broker, ports = _two_listener_broker(tmp_path, {other_key: "5"})
    try:
        limited = _burst(ports["OTHER"], 15)
        assert all(t is not None for t in limited), f"closed instead of delayed: {limited}\n{broker.stderr_tail()}"
        # 15 at once on a listener limited to 5/s: at least 10 wait their turn, the last a second or more.
        assert max(t for t in limited if t is not None) >= 1.0, limited
        assert _waited(broker, "OTHER") >= 5
        assert other_key in broker.log_path.read_text(), broker.stderr_tail()
        # The other listener has no limit of its own and the broker none: nothing of it waits.
        assert all(t is not None for t in _burst(ports["PLAINTEXT"], 15))
        assert _waited(broker, "PLAINTEXT") == 0

        plaintext_key = "listener.name.plaintext.max.connection.creation.rate"
        _set_rate(ports["PLAINTEXT"], "5", plaintext_key)  # cluster-wide, the next connection uses it
        with RawClient(ports["PLAINTEXT"], client_id="describe") as client:
            described = client.call(ApiKey.DESCRIBE_CONFIGS, 1, {"resources": [
                {"resource_type": 4, "resource_name": "", "configuration_keys": None}], "include_synonyms": False})
        assert {c.name: c.value for c in described.results[0].configs}.get(plaintext_key) == "5"
        slowed = _burst(ports["PLAINTEXT"], 15)
        assert all(t is not None for t in slowed), slowed
        assert max(t for t in slowed if t is not None) >= 1.0, slowed
        assert _waited(broker, "PLAINTEXT") >= 5
        _set_rate(ports["PLAINTEXT"], None, plaintext_key)  # deleted: the broker-wide value again (unlimited)
        waited = _waited(broker, "PLAINTEXT")  # (after the admin connection, which may have waited too)
        assert all(t is not None for t in _burst(ports["PLAINTEXT"], 15))
        assert _waited(broker, "PLAINTEXT") == waited
    finally:
        assert broker.stop() == 0, broker.stderr_tail()


def test_the_inter_broker_listener_is_left_out_of_the_broker_wide_rate(tmp_path: Path) -> None:
    """Kafka's protectedListener: with more than one listener, the inter-broker listener's connections
    are neither counted in nor held back by max.connection.creation.rate -- only by its own limit
    (here raised, so nothing of it waits) -- while the other listeners are."""
    broker, ports = _two_listener_broker(tmp_path, {KEY: "5", "inter.broker.listener.name": "OTHER",
                                                    "listener.name.other.max.connection.creation.rate": "1000"})
    try:
        inter = _burst(ports["OTHER"], 15)
        assert all(t is not None for t in inter), inter
        assert _waited(broker, "OTHER") == 0, broker.stderr_tail()
        clients = _burst(ports["PLAINTEXT"], 15)
        assert all(t is not None for t in clients), clients
        assert max(t for t in clients if t is not None) >= 1.0, clients
        samples = scrape(metrics_url(broker))
        assert get(samples, "tierlog_listener_connections_accept_throttled_total", listener="PLAINTEXT") >= 5
        assert get(samples, "tierlog_connections_accept_throttled_total") >= 5
    finally:
        assert broker.stop() == 0, broker.stderr_tail()
