"""Static group membership (KIP-345) with real clients: a consumer with a ``group.instance.id`` that
restarts within its session timeout gets its partitions back without a rebalance (the other member
sees no revocation), a second consumer with the same instance id fences the first, an admin removes a
static member by instance id, and a restarted broker still knows the static members."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from kafka.admin import KafkaAdminClient, MemberToRemove

from tests.helpers.broker import BrokerProcess
from tests.helpers.kafka_python import group_consumer
from tests.integration.test_python_clients import create_topic

SESSION_MS = 30_000


def wait_for(condition: Callable[[], bool], what: str, broker: BrokerProcess, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}; broker log:\n{broker.stderr_tail(60)}")


class Member:
    """A confluent-kafka consumer polled on its own thread, recording its rebalance callbacks and errors."""

    def __init__(self, bootstrap: str, group: str, topic: str, instance: str) -> None:
        self.events: list[tuple[str, frozenset[int]]] = []
        self.errors: list[KafkaError] = []
        self.assigned: frozenset[int] = frozenset()
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": instance,
            "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "range", "error_cb": self.errors.append,
        })
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self.assigned = frozenset(p.partition for p in partitions)
        self.events.append(("assign", self.assigned))

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self.events.append(("revoke", frozenset(p.partition for p in partitions)))
        self.assigned = frozenset()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                msg = self.consumer.poll(0.2)
            except KafkaException as e:  # a fatal error (as a fenced instance is) raises from poll
                self.errors.append(e.args[0])
                return
            if msg is not None and msg.error() is not None:
                self.errors.append(msg.error())
                if msg.error().fatal():
                    return

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.consumer.close()  # a static member does not send LeaveGroup: its place stays for it


class Described:
    """kafka-python's DescribeGroups answer of one group."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.state: str = raw["group_state"]
        self.members = [(m["member_id"], m["group_instance_id"], repr(m["member_assignment"]))
                        for m in raw["members"]]

    def member_of(self, instance: str) -> str:
        return next(m for m, i, _ in self.members if i == instance)


def describe(bootstrap: str, group: str) -> Described:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return Described(admin.describe_groups([group])[group])
    finally:
        admin.close()


def test_static_member_restart_keeps_partitions_without_a_rebalance(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name)
    group = f"g-{topic_name}"
    a = Member(broker.bootstrap, group, topic_name, "instance-a")
    b = Member(broker.bootstrap, group, topic_name, "instance-b")
    try:
        wait_for(lambda: len(a.assigned) == 2 and len(b.assigned) == 2, "both members assigned", broker)
        a_events, b_partitions = list(a.events), b.assigned
        described = describe(broker.bootstrap, group)
        assert described.state == "Stable"
        assert sorted(i for _, i, _ in described.members) == ["instance-a", "instance-b"]
        old_b_member = described.member_of("instance-b")

        b.close()
        b = Member(broker.bootstrap, group, topic_name, "instance-b")  # restarts well within 30 s
        wait_for(lambda: b.assigned == b_partitions, "the restarted member's old partitions", broker)
        time.sleep(2)  # several heartbeats of a: a rebalance would show up as a revocation now
        assert a.events == a_events, f"the other member saw a rebalance: {a.events}"
        assert not a.errors and not b.errors, (a.errors, b.errors)
        described = describe(broker.bootstrap, group)
        assert described.state == "Stable"
        new_b_member = described.member_of("instance-b")
        assert new_b_member != old_b_member and new_b_member.startswith("instance-b-")
    finally:
        a.close()
        b.close()


def test_duplicate_instance_id_fences_the_older_consumer(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name)
    group = f"g-{topic_name}"
    first = Member(broker.bootstrap, group, topic_name, "twin")
    second = None
    try:
        wait_for(lambda: len(first.assigned) == 4, "the first consumer assigned", broker)
        second = Member(broker.bootstrap, group, topic_name, "twin")
        # librdkafka reports FENCED_INSTANCE_ID as a fatal error (_FATAL, with the broker's reason).
        wait_for(lambda: any(e.code() in (KafkaError.FENCED_INSTANCE_ID, KafkaError._FATAL)
                             and "Static consumer fenced" in e.str() for e in first.errors),
                 "the first consumer fenced", broker)
        assert not second.errors, second.errors
    finally:
        first.close()
        if second is not None:
            second.close()


def test_kafka_python_static_member_and_admin_removal_by_instance_id(broker: BrokerProcess,
                                                                      topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name)
    group = f"g-{topic_name}"
    consumer = group_consumer(topic_name, bootstrap_servers=broker.bootstrap, group_id=group,
                              group_instance_id="kp-static", session_timeout_ms=SESSION_MS,
                              auto_offset_reset="earliest")
    try:
        wait_for(lambda: bool(consumer.poll(timeout_ms=200) is not None and consumer.assignment()),
                 "kafka-python's static member assigned", broker)
        described = describe(broker.bootstrap, group)
        assert [i for _, i, _ in described.members] == ["kp-static"]
        assert described.member_of("kp-static").startswith("kp-static-")

        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            result = admin.remove_group_members(group, [MemberToRemove(group_instance_id="kp-static"),
                                                        MemberToRemove(group_instance_id="nobody")])
        finally:
            admin.close()
        by_instance = {m.group_instance_id: error.errno for m, error in result.items()} \
            if all(isinstance(k, MemberToRemove) for k in result) else {k: v.errno for k, v in result.items()}
        assert by_instance == {"kp-static": 0, "nobody": KafkaError.UNKNOWN_MEMBER_ID}
        assert "kp-static" not in [i for _, i, _ in describe(broker.bootstrap, group).members]
    finally:
        consumer.close()


def test_static_members_survive_a_broker_restart(own_broker: BrokerProcess, topic_name: str) -> None:
    create_topic(own_broker.bootstrap, topic_name)
    group = f"g-{topic_name}"
    a = Member(own_broker.bootstrap, group, topic_name, "keep-a")
    try:
        wait_for(lambda: len(a.assigned) == 4, "the member assigned", own_broker)
        before = describe(own_broker.bootstrap, group)
    finally:
        a.close()  # no LeaveGroup: the member stays in the group until its session ends
    own_broker.restart()
    after = describe(own_broker.bootstrap, group)
    # Restored from __consumer_offsets: the same generation's member, instance id and assignment.
    assert after.state == "Stable"
    assert after.members == before.members and [i for _, i, _ in after.members] == ["keep-a"]
