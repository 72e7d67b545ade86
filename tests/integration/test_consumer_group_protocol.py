"""KIP-848 consumer groups (``group.protocol=consumer``) driven by librdkafka through confluent-kafka,
against ``tierlog serve``: members joining and leaving with partitions handed over only after their
previous owner revoked them, consumption continuing throughout, commits with member epochs, the
admin view (ConsumerGroupDescribe, ListGroups) and OffsetDelete."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaTopicPartition
from kafka import errors as kafka_errors

from tests.helpers.broker import BrokerProcess

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


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tierlog.cli.main", *args], capture_output=True, text=True, timeout=60)


def _committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    answer = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
    return {(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions if tp.offset >= 0}


def _commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in offsets.items()])
    admin.alter_consumer_group_offsets([request])[group].result(30)


def test_offset_delete_by_cli_and_kafka_python_with_kafkas_rules(kip848_broker: BrokerProcess, topic_name: str) -> None:
    b = kip848_broker.bootstrap
    other = f"{topic_name}-other"
    _create_topic(b, topic_name, 3)
    _create_topic(b, other, 2)
    _produce(b, topic_name, [f"v{i}" for i in range(30)])
    group = f"od-{uuid.uuid4().hex[:8]}"
    _commit(b, group, {**{(topic_name, p): 5 for p in range(3)}, **{(other, p): 1 for p in range(2)}})

    # An empty group: its offsets can go, one partition or a whole topic.
    out = _cli("groups", "delete-offsets", group, "--topic", topic_name, "--partition", "1",
               "--bootstrap-server", b)
    assert out.returncode == 0, out.stderr
    assert "Successful" in out.stdout
    assert set(_committed(b, group)) == {(topic_name, 0), (topic_name, 2), (other, 0), (other, 1)}
    admin = KafkaAdminClient(bootstrap_servers=b)
    try:
        answer = admin.delete_group_offsets(group, [KafkaTopicPartition(other, 0), KafkaTopicPartition(other, 1)])
        assert all(e is kafka_errors.NoError for e in answer.values()), answer
        assert set(_committed(b, group)) == {(topic_name, 0), (topic_name, 2)}
        with pytest.raises(kafka_errors.GroupIdNotFoundError):
            admin.delete_group_offsets(f"no-such-{group}", [KafkaTopicPartition(topic_name, 0)])
    finally:
        admin.close()

    # While a KIP-848 member subscribes to the topic, its offsets stay (GROUP_SUBSCRIBED_TO_TOPIC);
    # a topic nobody subscribes to may go.
    g = Group(b, topic_name)
    g.group_id = group
    member = Member(g, "od")
    g.members.append(member)
    wait_for(lambda: len(member.owned) == 3, "the member owning the topic", step=g.poll_all)
    refused = _cli("groups", "delete-offsets", group, "--topic", topic_name, "--bootstrap-server", b)
    assert refused.returncode == 1 and "GROUP_SUBSCRIBED_TO_TOPIC" in refused.stdout, refused.stdout + refused.stderr
    assert {(topic_name, 0), (topic_name, 2)} <= set(_committed(b, group))
    unknown = _cli("groups", "delete-offsets", group, "--topic", other, "--partition", "0", "--bootstrap-server", b)
    assert unknown.returncode == 0, unknown.stdout + unknown.stderr
    member.consumer.close()

    # A classic group with an active member: the same rule, from the member's subscription.
    classic = f"od-classic-{uuid.uuid4().hex[:8]}"
    c = Consumer({"bootstrap.servers": b, "group.id": classic, "auto.offset.reset": "earliest"})
    c.subscribe([topic_name])
    wait_for(lambda: c.poll(0.1) is not None and bool(c.assignment()), "the classic member's assignment")
    c.commit(asynchronous=False)
    refused = _cli("groups", "delete-offsets", classic, "--topic", topic_name, "--bootstrap-server", b)
    assert "GROUP_SUBSCRIBED_TO_TOPIC" in refused.stdout, refused.stdout + refused.stderr
    c.close()


def test_a_group_id_is_either_classic_or_consumer(kip848_broker: BrokerProcess, topic_name: str) -> None:
    b = kip848_broker.bootstrap
    _create_topic(b, topic_name, 2)
    _produce(b, topic_name, ["x"])
    g = Group(b, topic_name)
    member = Member(g, "kip848")
    g.members.append(member)
    wait_for(lambda: len(member.owned) == 2, "the consumer-protocol member's assignment", step=g.poll_all)
    errors: list[KafkaError] = []
    classic = Consumer({"bootstrap.servers": b, "group.id": g.group_id, "error_cb": errors.append,
                        "auto.offset.reset": "earliest"})
    classic.subscribe([topic_name])
    failure: list[int] = []

    def step() -> None:
        msg = classic.poll(0.1)
        if msg is not None and msg.error() is not None:
            failure.append(msg.error().code())
        g.poll_all()

    wait_for(lambda: bool(failure) or bool(errors), "the classic member refused", step=step)
    codes = failure + [e.code() for e in errors]
    assert KafkaError.INCONSISTENT_GROUP_PROTOCOL in codes, codes
    assert not classic.assignment()
    classic.close()
    member.consumer.close()


def test_consumer_group_survives_a_broker_restart(tmp_path: Path, topic_name: str) -> None:
    """The group's records in __consumer_offsets are read back: after an unclean restart the member,
    its epoch and its assignment are there (ConsumerGroupDescribe), and the member goes on."""
    b = BrokerProcess(tmp_path / "data", OVERRIDES).start()
    try:
        _create_topic(b.bootstrap, topic_name, 3)
        g = Group(b.bootstrap, topic_name)
        member = Member(g, "survivor")
        g.members.append(member)
        wait_for(lambda: len(member.owned) == 3, "the member's assignment", step=g.poll_all)
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        before = admin.describe_consumer_groups([g.group_id])[g.group_id].result(30)
        b.kill()
        b.start()
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        after = admin.describe_consumer_groups([g.group_id])[g.group_id].result(30)
        assert [m.member_id for m in after.members] == [m.member_id for m in before.members]
        assert sorted(tp.partition for tp in after.members[0].assignment.topic_partitions) == [0, 1, 2]
        member.consumer.close()
    finally:
        b.stop()
