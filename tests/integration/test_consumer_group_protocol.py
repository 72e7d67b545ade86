"""KIP-848 consumer groups (``group.protocol=consumer``) driven by librdkafka through confluent-kafka,
against ``tierlog serve``: members joining and leaving with partitions handed over only after their
previous owner revoked them, consumption continuing throughout, commits with member epochs, the
admin view (ConsumerGroupDescribe, ListGroups) and OffsetDelete."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.conftest import BrokerProcess

PARTITIONS = 6
#: Short heartbeats so hand-overs take a fraction of a second rather than Kafka's 5 s.
OVERRIDES = {"group.consumer.heartbeat.interval.ms": "300", "group.consumer.session.timeout.ms": "10000"}

pytestmark = pytest.mark.skipif(confluent_kafka.libversion()[1] < 0x020400ff,
                                reason="librdkafka < 2.4 has no group.protocol=consumer")


@pytest.fixture(scope="module")
def kip848_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(Path(tmp_path_factory.mktemp("kip848")) / "data", OVERRIDES).start()
    yield b
    assert b.stop() == 0, b.stderr_tail()


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 60.0, step: Callable[[], None] | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if step is not None:
            step()
        if condition():
            return
        if step is None:
            time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def _produce(bootstrap: str, topic: str, values: list[str]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, v in enumerate(values):
        p.produce(topic, v.encode(), key=str(i).encode())
    assert p.flush(30) == 0


class Member:
    """A consumer whose ownership is tracked from its rebalance callbacks; ``Group.check`` asserts
    after every callback that no partition has two owners."""

    def __init__(self, group: Group, name: str) -> None:
        self.group = group
        self.name = name
        self.owned: set[tuple[str, int]] = set()
        self.consumer = Consumer({"bootstrap.servers": group.bootstrap, "group.id": group.group_id,
                                  "group.protocol": "consumer", "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False, "client.id": name})
        self.consumer.subscribe([group.topic], on_assign=self._assigned, on_revoke=self._revoked,
                                on_lost=self._revoked)

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.owned |= {(tp.topic, tp.partition) for tp in partitions}
        self.group.check()

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.owned -= {(tp.topic, tp.partition) for tp in partitions}
        self.group.check()

    def poll(self) -> None:
        msg = self.consumer.poll(0.05)
        if msg is None:
            return
        assert msg.error() is None or msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
        if msg.error() is None:
            assert (msg.topic(), msg.partition()) in self.owned, f"{self.name} read a partition it does not own"
            self.group.seen.add(msg.value().decode())


class Group:
    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.group_id = f"kip848-{uuid.uuid4().hex[:8]}"
        self.members: list[Member] = []
        self.seen: set[str] = set()
        self.checks = 0

    def check(self) -> None:
        self.checks += 1
        owners: dict[tuple[str, int], str] = {}
        for m in self.members:
            for tp in m.owned:
                assert tp not in owners, f"{tp} owned by {owners[tp]} and {m.name} at once"
                owners[tp] = m.name

    def poll_all(self) -> None:
        for m in self.members:
            m.poll()

    def covered_by(self, *members: Member) -> bool:
        owned = [len(m.owned) for m in members]
        return sum(owned) == PARTITIONS and max(owned) - min(owned) <= 1 and all(
            not m.owned for m in self.members if m not in members)


def test_members_join_and_leave_with_each_partition_owned_once(kip848_broker: BrokerProcess, topic_name: str) -> None:
    b = kip848_broker.bootstrap
    _create_topic(b, topic_name, PARTITIONS)
    first = [f"a{i}" for i in range(300)]
    _produce(b, topic_name, first)
    g = Group(b, topic_name)
    a, c = Member(g, "m1"), Member(g, "m2")
    g.members += [a, c]
    wait_for(lambda: g.covered_by(a, c) and set(first) <= g.seen, "two members sharing the partitions", step=g.poll_all)

    third = Member(g, "m3")
    g.members.append(third)
    second = [f"b{i}" for i in range(300)]
    _produce(b, topic_name, second)
    wait_for(lambda: g.covered_by(a, c, third) and set(second) <= g.seen, "three members sharing the partitions",
             step=g.poll_all)

    admin = AdminClient({"bootstrap.servers": b})
    described = admin.describe_consumer_groups([g.group_id])[g.group_id].result(30)
    assert len(described.members) == 3
    assigned = [(tp.topic, tp.partition) for m in described.members for tp in m.assignment.topic_partitions]
    assert sorted(assigned) == sorted((topic_name, p) for p in range(PARTITIONS)), assigned
    listed = admin.list_consumer_groups().result(30)
    types = {x.group_id: x.type for x in listed.valid}
    assert types[g.group_id] == confluent_kafka.ConsumerGroupType.CONSUMER

    # One member leaves (epoch -1 on close): the two others take its partitions and go on consuming.
    c.consumer.commit(asynchronous=False)
    c.consumer.close()
    c.owned.clear()
    g.members.remove(c)
    third_batch = [f"c{i}" for i in range(300)]
    _produce(b, topic_name, third_batch)
    wait_for(lambda: g.covered_by(a, third) and set(third_batch) <= g.seen, "two members after one left",
             step=g.poll_all)
    assert g.checks >= 6
    for m in (a, third):
        m.consumer.commit(asynchronous=False)  # OffsetCommit v9+ with the member epoch
    committed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g.group_id)])[g.group_id].result(30)
    assert sum(tp.offset for tp in committed.topic_partitions) == 900
    for m in (a, third):
        m.consumer.close()
