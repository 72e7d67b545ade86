"""librdkafka (confluent-kafka): an idempotent producer per compression codec, and a consumer group
that must read back exactly what was produced, in order per partition, without duplicates.

Message count: 100,000 per codec (the issue's figure); TIERLOG_IT_MESSAGES=N runs a different count.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker import BrokerProcess, message_count
from tests.helpers.waits import produce_when_queued

PARTITIONS = 4
MESSAGES = message_count(100_000)


def create_topic(bootstrap: str, name: str, partitions: int, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})])
    futures[name].result(30)


def produce_sequence(bootstrap: str, topic: str, count: int, codec: str) -> dict[int, list[int]]:
    """Produce values "0".."count-1" keyed so they spread over the partitions; returns the sequence
    numbers acknowledged per partition, in acknowledgement order."""
    acked: dict[int, list[int]] = {}
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        if err is not None:
            errors.append(str(err))
            return
        acked.setdefault(msg.partition(), []).append(int(msg.value()))  # type: ignore[attr-defined]

    producer = Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "compression.type": codec,
        "linger.ms": 5,
        "queue.buffering.max.messages": 1_000_000,
    })
    for i in range(count):
        produce_when_queued(producer, topic, key=str(i % 97).encode(), value=str(i).encode(), on_delivery=on_delivery)
        if i % 5000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors[:5]
    return acked


def consume_all(bootstrap: str, topic: str, group: str, count: int, timeout_s: float = 90.0) -> dict[int, list[tuple[int, int]]]:
    """(offset, sequence number) per partition as a group member reads them."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": True,
    })
    consumer.subscribe([topic])
    seen: dict[int, list[tuple[int, int]]] = {}
    got = 0
    deadline = time.monotonic() + timeout_s
    try:
        while got < count and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=10_000, timeout=1.0):
                if msg.error() is not None:
                    assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                    continue
                seen.setdefault(msg.partition(), []).append((msg.offset(), int(msg.value())))
                got += 1
        # Anything beyond the expected count would be a duplicate: give it a moment to show up.
        for msg in consumer.consume(num_messages=10_000, timeout=0.5):
            if msg.error() is None:
                seen.setdefault(msg.partition(), []).append((msg.offset(), int(msg.value())))
    finally:
        consumer.close()
    return seen


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_idempotent_produce_and_group_consume(broker: BrokerProcess, topic_name: str, codec: str) -> None:
    create_topic(broker.bootstrap, topic_name, PARTITIONS)
    acked = produce_sequence(broker.bootstrap, topic_name, MESSAGES, codec)
    assert sum(len(v) for v in acked.values()) == MESSAGES

    seen = consume_all(broker.bootstrap, topic_name, f"group-{topic_name}", MESSAGES)
    values = [v for records in seen.values() for _, v in records]
    assert len(values) == MESSAGES, f"consumed {len(values)} of {MESSAGES}"
    assert len(set(values)) == MESSAGES, "duplicates"
    assert set(values) == set(range(MESSAGES))
    for partition, records in seen.items():
        offsets = [o for o, _ in records]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), f"gap or repeat in partition {partition}"
        # Per-partition order: the log holds each partition's messages in the order they were sent.
        assert [v for _, v in records] == sorted(v for _, v in records)
        assert [v for _, v in records] == acked[partition]


def test_group_resumes_from_committed_offsets_after_restart(own_broker: BrokerProcess, topic_name: str) -> None:
    """librdkafka validates a committed position with OffsetForLeaderEpoch after the restart."""
    broker = own_broker
    create_topic(broker.bootstrap, topic_name, 2)
    produce_sequence(broker.bootstrap, topic_name, 1000, "lz4")
    group = f"group-{topic_name}"

    def read(count: int) -> list[int]:
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([topic_name])
        got: list[int] = []
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=count - len(got), timeout=1.0):
                if msg.error() is None:
                    got.append(int(msg.value()))
        consumer.commit(asynchronous=False)
        if count == left:
            # Nothing is left: anything arriving now was delivered twice.
            got += [int(m.value()) for m in consumer.consume(num_messages=10, timeout=1.0) if m.error() is None]
        consumer.close()
        return got

    left = -1
    first = read(600)
    broker.restart()
    left = 1000 - len(first)
    second = read(left)
    assert sorted(first + second) == list(range(1000))
