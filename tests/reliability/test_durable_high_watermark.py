"""With durable acknowledgements a record is committed once it is fsynced, so the high watermark --
what consumers read up to, what ListOffsets answers as "latest", what wakes a long-polling fetch --
waits for the fsync (Kafka's consumers read only up to the high watermark, which moves when the
ISR holds the record; tierlog's one replica holds it once it is on disk).

The fsync is held, not slowed: the page-cache shim's ``hold-fsync`` makes the broker's fdatasync
wait until ``clear`` (tests/reliability/pageshim.c), so the window in which a record is appended
but not yet durable lasts exactly as long as the test needs, on any load."""

from __future__ import annotations

import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KTopicPartition

from tests.helpers.broker import TEST_OVERRIDES, BrokerProcess
from tests.helpers.waits import wait_until
from tests.reliability.harness import RawClient, create_topic, fetch_request
from tests.reliability.pageshim import PageShim, unavailable
from tierlog.errors import ErrorCode
from tierlog.protocol import ApiKey

UNAVAILABLE = unavailable()
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(UNAVAILABLE is not None, reason=f"page-cache shim cannot run: {UNAVAILABLE}")]

#: How long the long-polling fetch may wait: far longer than its wake-up may take on a loaded box.
LONG_POLL_MS = 120_000


def _gauge(url: str, name: str, topic: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + "{") and f'topic="{topic}"' in line:
                return int(float(line.rsplit(" ", 1)[1]))
    return -1


OFFSETS_PARTITIONS = int(TEST_OVERRIDES["offsets.topic.num.partitions"])


def _partitions(url: str, topic: str) -> int:
    """How many of ``topic``'s partitions have a log, by the broker's log-end-offset gauges."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        return sum(1 for line in resp.read().decode().splitlines()
                   if line.startswith("tierlog_log_end_offset{") and f'topic="{topic}"' in line)


def _latest(port: int, isolation_level: int) -> int:
    with RawClient(port) as c:
        body = c.call(ApiKey.LIST_OFFSETS, 5, {"replica_id": -1, "isolation_level": isolation_level, "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]})
    p = body.topics[0].partitions[0]
    assert p.error_code == ErrorCode.NONE, body
    return int(p.offset)


def _fetch(port: int, offset: int, max_wait_ms: int) -> Any:
    request = fetch_request("t", 0, offset, 1 << 20)
    request.update(max_wait=max_wait_ms, min_bytes=1)
    with RawClient(port, timeout=max_wait_ms / 1000 + 60) as c:
        body = c.call(ApiKey.FETCH, 11, request)
    return body.responses[0].partitions[0]


def test_consumers_see_a_record_only_once_it_is_fsynced(tmp_path: Path) -> None:
    shim = PageShim(tmp_path, tmp_path / "mnt")
    (tmp_path / "mnt").mkdir()
    broker = BrokerProcess(shim.root / "data", {"log.durable.acks": "all", "metrics.listener": "http://127.0.0.1:0"},
                           env=shim.env())
    broker.log_path = tmp_path / "broker.log"  # off the shim's root
    broker.start()
    durable = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0, "log_level": 0})
    on_append = Producer({"bootstrap.servers": broker.bootstrap, "acks": 1, "linger.ms": 0, "log_level": 0})
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 100, "log_level": 0})
    try:
        url = next(line.strip().rsplit(" ", 1)[1] for line in broker.stdout_lines
                   if line.startswith("tierlog metrics on "))
        create_topic(broker.port, "t", 1)
        delivered: dict[bytes, int] = {}

        def report(err: Any, msg: Any) -> None:
            assert err is None, err
            delivered[msg.value()] = msg.offset()

        durable.produce("t", b"a", partition=0, on_delivery=report)
        assert durable.flush(60) == 0 and delivered == {b"a": 0}, broker.stderr_tail()
        consumer.assign([KTopicPartition("t", 0, 0)])
        got: list[tuple[int, bytes]] = []

        def consumed(n: int) -> bool:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append((msg.offset(), msg.value()))
            return len(got) >= n

        assert wait_until(lambda: consumed(1), 60), broker.stderr_tail()
        assert got == [(0, b"a")]
        # The consumer's FindCoordinator has the broker create the offsets topic: its logs' fsyncs
        # must be done before every fsync is held (else their creation waits on the hold too).
        assert wait_until(lambda: _partitions(url, "__consumer_offsets") == OFFSETS_PARTITIONS, 60), \
            broker.stderr_tail()

        assert shim.command("hold-fsync") == "ok"
        # A fetch long-polling at the end of the log, sent before the next record is appended.
        long_poll: dict[str, Any] = {}

        def poll_long() -> None:
            started = time.monotonic()
            long_poll["partition"] = _fetch(broker.port, 1, LONG_POLL_MS)
            long_poll["returned"] = time.monotonic()
            long_poll["waited_s"] = long_poll["returned"] - started

        poller = threading.Thread(target=poll_long, daemon=True)
        poller.start()
        durable.produce("t", b"b", partition=0, on_delivery=report)
        durable.poll(0)
        # Appended (the log end moved) but its fdatasync is held: not acknowledged, not readable.
        assert wait_until(lambda: _gauge(url, "tierlog_log_end_offset", "t") == 2, 60), broker.stderr_tail()
        # acks=1 is answered on append, yet its record is no more committed than the first.
        on_append.produce("t", b"c", partition=0, on_delivery=report)
        assert on_append.flush(60) == 0 and delivered.get(b"c") == 2, (delivered, broker.stderr_tail())
        assert b"b" not in delivered
        # The broker waits out the fetch's max wait and serves nothing past offset 1: the high
        # watermark and ListOffsets "latest" (either isolation level) stay at the last fsynced offset.
        p = _fetch(broker.port, 1, 1000)
        assert p.error_code == ErrorCode.NONE and not p.records, p
        assert (p.high_watermark, p.last_stable_offset) == (1, 1), p
        assert _latest(broker.port, 0) == 1 and _latest(broker.port, 1) == 1
        assert _gauge(url, "tierlog_log_high_watermark", "t") == 1
        assert not consumed(2) and got == [(0, b"a")]
        assert poller.is_alive(), long_poll  # the long poll saw the appends and kept waiting

        released = time.monotonic()
        assert shim.command("clear") == "ok"
        assert durable.flush(60) == 0 and delivered.get(b"b") == 1, broker.stderr_tail()
        poller.join(LONG_POLL_MS / 1000 + 30)
        assert "partition" in long_poll, broker.stderr_tail()
        woken = long_poll["partition"]
        assert woken.error_code == ErrorCode.NONE and woken.records, woken
        # b's sync (held) covered only b; c's is the next one, so the first wake-up may see either.
        assert woken.high_watermark in (2, 3), woken
        # Woken by the fsync that moved the high watermark, not by its max wait running out.
        assert long_poll["returned"] >= released
        assert long_poll["waited_s"] < LONG_POLL_MS / 1000 / 2, long_poll
        assert wait_until(lambda: consumed(3), 60), broker.stderr_tail()
        assert got == [(0, b"a"), (1, b"b"), (2, b"c")]
        assert _latest(broker.port, 0) == 3
        assert broker.stop() == 0, broker.stderr_tail()
    finally:
        shim.command("clear")
        consumer.close()
        broker.kill()
