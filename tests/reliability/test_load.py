"""A short load: 200 connections on 2,000 partitions (the long version, 1,000 on 10,000, runs from
bench/chaos.py). Every partition is written and read back each round, and the broker's RSS stays
within the bound load.rss_bound states."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.harness import ChaosBroker
from tests.reliability.load import RSS_PER_CONNECTION_BOUND_BYTES, RSS_PER_PARTITION_BOUND_BYTES, load

#: Every test here starts a real broker process.
pytestmark = pytest.mark.integration


def test_two_hundred_connections_on_two_thousand_partitions(tmp_path: Path) -> None:
    broker = ChaosBroker(tmp_path / "data").start()
    try:
        result = load(broker, topics=20, partitions_per_topic=100, connections=200, rounds=2)
    finally:
        # A clean stop writes a producer snapshot and flushes each of the 2,000 logs (two fsyncs
        # each, as Kafka does): tens of seconds that test shutdown, not load.
        broker.kill()
    figures = result.summary()
    assert not result.crashed and result.tracebacks == [], result.tracebacks[:3]
    assert result.errors == [], result.errors[:5]
    assert result.partitions_written == 2000 and result.records_checked == 4000, figures
    assert result.requests == 200 * 2 * 3, figures
    # Idle partitions cost one descriptor each (the active segment's .log), connections one each.
    assert result.fds_after_create <= 2000 + 64 and result.fds_peak <= 2000 + 200 + 64, figures
    growth = result.rss_after_create_bytes - result.rss_idle_bytes
    assert growth <= 2000 * RSS_PER_PARTITION_BOUND_BYTES, figures
    assert result.rss_peak_bytes - result.rss_after_create_bytes <= 200 * RSS_PER_CONNECTION_BOUND_BYTES + (32 << 20), figures
    assert result.rss_peak_bytes <= result.rss_bound_bytes, figures
    assert result.ok, figures
