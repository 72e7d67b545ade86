"""Short versions of the hostile-client scenarios against real ``tierlog serve`` processes; the long
versions run from ``bench/chaos.py``. Each scenario's result carries its own stated bounds (``ok``);
the tests also assert the figures that matter most, so a failure says which one broke."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.harness import ChaosBroker
from tests.reliability.hostile_clients import MIB, connection_flood, connection_limits, fuzz, slow_clients

#: Every test here starts a real broker process.
pytestmark = pytest.mark.integration

#: Timeouts short enough for a test to watch them fire; the memory bound small enough to matter.
HOSTILE_OVERRIDES = {
    "socket.request.receive.timeout.ms": "2000",
    "connections.max.idle.ms": "4000",
    "queued.max.request.bytes": str(32 * MIB),
    # Fuzzed Metadata requests would otherwise create a topic for every random name.
    "auto.create.topics.enable": "false",
}


@pytest.fixture(scope="module")
def hostile_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosBroker]:
    broker = ChaosBroker(tmp_path_factory.mktemp("hostile") / "data", HOSTILE_OVERRIDES).start()
    yield broker
    assert broker.alive(), broker.stderr_tail()
    assert broker.stop() == 0, broker.stderr_tail()


def test_fuzzed_frames_and_mutated_requests(hostile_broker: ChaosBroker, tmp_path: Path) -> None:
    result = fuzz(hostile_broker, 3000, seed=10, failures_dir=tmp_path / "failures",
                  rss_growth_bound_bytes=64 * MIB)
    figures = result.summary()
    assert result.crashes == 0 and result.hangs == 0, figures
    assert result.tracebacks == [], "\n\n".join(result.tracebacks[:3]) + f"\ninputs kept in {result.saved_inputs}"
    assert result.health_failures == [] and result.health_checks >= 3, (result.health_failures, figures)
    assert result.unparseable_responses == [], result.unparseable_responses[:5]
    # The inputs reached the handlers (not only the frame decoder), and hostile ones were refused.
    assert result.responses > 1000 and result.error_responses > 100 and result.closed_by_broker > 100, figures
    assert set(result.inputs_by_kind) == {"valid", "seed", "mutated", "random", "random-body", "truncated",
                                          "bad-prefix"}, figures
    assert result.ok, figures


def test_slow_clients_are_cut_off_and_others_served(hostile_broker: ChaosBroker) -> None:
    result = slow_clients(hostile_broker, half_frame=20, slowloris=4, never_reading=3, fetches_per_reader=3000,
                          partial=30, partial_declared_bytes=64 * MIB, partial_sent_bytes=4 * MIB)
    figures = result.summary()
    assert not result.crashed and result.tracebacks == [], result.tracebacks[:3]
    assert result.health_failures == [] and result.health_checks >= 5, (result.health_failures, figures)
    # Half a request, or a byte a second: closed once the receive timeout (2 s) is up, not before.
    for closes in (result.half_frame_close_s, result.slowloris_close_s):
        assert all(c is not None and 1.9 <= c <= 7.0 for c in closes), figures
    assert max(result.slowloris_bytes_sent) <= 4, figures
    # Pipelined fetches never read: the broker stopped reading them, stayed small, closed them as idle.
    assert max(result.never_reading_requests_taken) < result.never_reading_requests_offered, figures
    assert all(c is not None and c <= 4.0 + 8.0 for c in result.never_reading_close_s), figures
    assert result.never_reading_rss_growth_bytes <= result.never_reading_rss_bound_bytes, figures
    # 30 clients × 4 MiB of 64 MiB requests: without queued.max.request.bytes that is 120 MiB held.
    assert result.partial_rss_growth_bytes <= result.partial_rss_bound_bytes < 120 * MIB, figures
    assert result.ok, figures


def test_hundreds_of_connections_are_all_served(hostile_broker: ChaosBroker) -> None:
    result = connection_flood(hostile_broker, 300)
    figures = result.summary()
    assert result.served == result.served_again == 300 and result.refused == 0, figures
    assert result.broker_fds_peak >= result.broker_fds_start + 300, figures
    assert result.broker_fds_end <= result.broker_fds_start + 2, figures
    assert result.health_failures == [] and result.tracebacks == [], figures
    assert result.ok, figures


def test_connection_limits_refuse_the_excess_and_serve_the_rest(tmp_path: Path) -> None:
    broker = ChaosBroker(tmp_path / "data", {
        "max.connections": "80",
        "max.connections.per.ip": "20",
        # The health probe and the broker-wide part connect from 127.0.0.1; 127.0.0.3 gets its own.
        "max.connections.per.ip.overrides": "127.0.0.1:1000,127.0.0.3:35",
    }).start()
    try:
        result = connection_limits(broker, {"127.0.0.2": 20, "127.0.0.3": 35}, extra=10)
    finally:
        assert broker.stop() == 0, broker.stderr_tail()
    figures = result.summary()
    assert [(a, served, refused) for a, _, _, served, refused in result.per_address] == [
        ("127.0.0.2", 20, 10), ("127.0.0.3", 35, 10)], figures
    # max.connections: everything else is refused (a connection closed just before may still count).
    assert 78 <= result.open_when_refused <= 80 and result.total_refused >= 10, figures
    assert result.reopened_served == result.reopened_expected == 5, figures
    assert result.health_failures == [] and result.tracebacks == [] and 1 <= result.refusal_log_lines <= 3, figures
    assert result.ok, figures
