"""offsets.retention.minutes against ``tierlog serve`` with real clients: a standalone consumer's
committed offsets expire a minute after their commit and stay gone after a restart (their tombstones
are in ``__consumer_offsets``), while an active KIP-848 consumer group keeps the offsets of the topic
it subscribes to however old their commit is (until it empties). Takes a little over one minute (the least retention)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker import BrokerProcess

pytestmark = pytest.mark.skipif(confluent_kafka.libversion()[1] < 0x020400ff,
                                reason="librdkafka < 2.4 has no group.protocol=consumer")

OVERRIDES = {"offsets.retention.minutes": "1", "offsets.retention.check.interval.ms": "500",
             "group.consumer.heartbeat.interval.ms": "500", "offsets.topic.num.partitions": "2"}


def _committed(bootstrap: str, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return int(c.committed([TopicPartition(topic, 0)], timeout=30)[0].offset)
    finally:
        c.close()


def _wait(condition: Callable[[], bool], what: str, timeout_s: float, step: Callable[[], None]) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        step()
        if condition():
            return
    raise AssertionError(f"timed out waiting for {what}")


def test_expired_offsets_are_gone_after_a_restart_and_an_active_group_keeps_its_own(
        tmp_path: Path, topic_name: str) -> None:
    broker = BrokerProcess(tmp_path / "data", OVERRIDES).start()
    active: Consumer | None = None
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(30)
        active = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "active", "group.protocol": "consumer",
                           "enable.auto.commit": False})
        active.subscribe([topic_name])
        consumer = active
        _wait(lambda: bool(consumer.assignment()), "the KIP-848 member's assignment", 60, lambda: consumer.poll(0.2))
        active.commit(offsets=[TopicPartition(topic_name, 0, 9)], asynchronous=False)
        # Committed after the group's offset: whenever it expires, the group's commit is older.
        tool = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "tool", "enable.auto.commit": False})
        tool.commit(offsets=[TopicPartition(topic_name, 0, 7)], asynchronous=False)
        tool.close()
        assert _committed(broker.bootstrap, "tool", topic_name) == 7

        # The standalone offsets expire a minute after their commit; the member keeps polling.
        _wait(lambda: _committed(broker.bootstrap, "tool", topic_name) < 0, "the standalone offset to expire",
              150, lambda: consumer.poll(0.5))
        assert _committed(broker.bootstrap, "active", topic_name) == 9, broker.stderr_tail()
        # Committed afresh before the member leaves: its first commit is as old as the expired one, and
        # once the group is empty Kafka's rule expires it at the next check (every 500 ms), which may
        # come before the broker stops. The restart below is about what the log keeps, not that rule.
        active.commit(offsets=[TopicPartition(topic_name, 0, 9)], asynchronous=False)
        active.close()
        active = None
        assert broker.stop() == 0, broker.stderr_tail()

        # No expiry check after the restart: what is gone, is gone by its tombstone. (The group that
        # was active is empty now, so by Kafka's rule its old commit would expire at the next check.)
        broker.overrides["offsets.retention.check.interval.ms"] = "3600000"
        broker.start()
        assert _committed(broker.bootstrap, "tool", topic_name) < 0, broker.stderr_tail()
        assert _committed(broker.bootstrap, "active", topic_name) == 9, broker.stderr_tail()
    finally:
        if active is not None:
            active.close()
        if broker.alive():
            broker.stop()
