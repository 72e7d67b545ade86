"""kafka-python and aiokafka: produce, consume in groups, rebalance when a member leaves, and resume
from committed offsets after the broker restarts."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from tests.helpers.broker import BrokerProcess
from tests.helpers.kafka_python import group_consumer

PARTITIONS = 4


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    finally:
        admin.close()


def kp_produce(bootstrap: str, topic: str, values: range, **config: object) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, **config)
    try:
        futures = [producer.send(topic, key=str(i % 13).encode(), value=str(i).encode()) for i in values]
        producer.flush(30)
        for f in futures:
            f.get(10)
    finally:
        producer.close()


def kp_consume(consumer: KafkaConsumer, count: int, timeout_s: float = 60.0) -> list[int]:
    out: list[int] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            out.extend(int(r.value) for r in records)
    return out


def test_kafka_python_produce_and_group_consume(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name)
    kp_produce(broker.bootstrap, topic_name, range(2000), acks="all", compression_type="gzip")
    consumer = group_consumer(topic_name, bootstrap_servers=broker.bootstrap, group_id=f"g-{topic_name}",
                              auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        got = kp_consume(consumer, 2000)
        consumer.commit()
        assert sorted(got) == list(range(2000))
        committed = sum(consumer.committed(TopicPartition(topic_name, p)) or 0 for p in range(PARTITIONS))
        assert committed == 2000
    finally:
        consumer.close()


class _Polling:
    """A kafka-python consumer polled continuously by its own thread, as an application would."""

    def __init__(self, consumer: KafkaConsumer) -> None:
        self.consumer = consumer
        self.values: list[int] = []
        self.assigned: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for records in self.consumer.poll(timeout_ms=200).values():
                self.values.extend(int(r.value) for r in records)
            self.assigned = {tp.partition for tp in self.consumer.assignment()}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.consumer.close()


def _wait_for(condition: Callable[[], bool], timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def test_kafka_python_two_consumers_split_and_rebalance(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name)
    group = f"g-{topic_name}"

    def member() -> _Polling:
        return _Polling(group_consumer(topic_name, bootstrap_servers=broker.bootstrap, group_id=group,
                                       auto_offset_reset="earliest", session_timeout_ms=10000,
                                       heartbeat_interval_ms=500))

    first, second = member(), member()
    try:
        assert _wait_for(lambda: bool(first.assigned) and bool(second.assigned)
                         and len(first.assigned) + len(second.assigned) == PARTITIONS), (
            first.assigned, second.assigned, broker.stderr_tail())
        assert not (first.assigned & second.assigned)
        assert first.assigned | second.assigned == set(range(PARTITIONS))

        second.close()  # LeaveGroup: the survivor must get every partition
        assert _wait_for(lambda: first.assigned == set(range(PARTITIONS))), (first.assigned, broker.stderr_tail())

        kp_produce(broker.bootstrap, topic_name, range(400))
        assert _wait_for(lambda: len(first.values) >= 400)
        assert sorted(first.values) == list(range(400))
    finally:
        first.close()
        second.close()


def test_aiokafka_produce_and_group_consume(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name)

    async def run() -> list[int]:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True,
                                    compression_type="lz4")
        await producer.start()
        try:
            for i in range(1500):
                await producer.send(topic_name, key=str(i % 11).encode(), value=str(i).encode())
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic_name, bootstrap_servers=broker.bootstrap, group_id=f"g-{topic_name}",
                                    auto_offset_reset="earliest")
        await consumer.start()
        got: list[int] = []
        try:
            deadline = time.monotonic() + 60
            while len(got) < 1500 and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                for records in batches.values():
                    got.extend(int(r.value) for r in records)
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    got = asyncio.run(run())
    assert sorted(got) == list(range(1500))


def test_aiokafka_two_members_rebalance(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name)
    group = f"g-{topic_name}"

    async def run() -> None:
        def member() -> AIOKafkaConsumer:
            return AIOKafkaConsumer(topic_name, bootstrap_servers=broker.bootstrap, group_id=group,
                                    auto_offset_reset="earliest", heartbeat_interval_ms=300)

        first, second = member(), member()
        await first.start()
        await second.start()
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                await asyncio.gather(first.getmany(timeout_ms=100), second.getmany(timeout_ms=100))
                a, b = first.assignment(), second.assignment()
                if a and b and len(a) + len(b) == PARTITIONS:
                    break
            a, b = first.assignment(), second.assignment()
            assert a and b and not (a & b)
            assert {tp.partition for tp in a | b} == set(range(PARTITIONS))
            await second.stop()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(first.assignment()) != PARTITIONS:
                await first.getmany(timeout_ms=200)
            assert {tp.partition for tp in first.assignment()} == set(range(PARTITIONS))
        finally:
            await first.stop()
            await second.stop()

    asyncio.run(run())


def test_committed_offsets_resume_after_restart(own_broker: BrokerProcess, topic_name: str) -> None:
    broker = own_broker
    create_topic(broker.bootstrap, topic_name)
    group = f"g-{topic_name}"
    kp_produce(broker.bootstrap, topic_name, range(1000), acks=1)

    consumer = group_consumer(topic_name, bootstrap_servers=broker.bootstrap, group_id=group,
                              auto_offset_reset="earliest", enable_auto_commit=False, max_poll_records=600)
    first = kp_consume(consumer, 600)
    consumer.commit()
    consumer.close()
    consumed = set(first)
    assert len(consumed) == len(first)

    broker.restart()  # a new process (and port) on the same data directory

    kp_produce(broker.bootstrap, topic_name, range(1000, 1200), acks=1)

    async def rest() -> list[int]:
        c = AIOKafkaConsumer(topic_name, bootstrap_servers=broker.bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        got: list[int] = []
        try:
            deadline = time.monotonic() + 60
            want = 1200 - len(consumed)
            while len(got) < want and time.monotonic() < deadline:
                for records in (await c.getmany(timeout_ms=500)).values():
                    got.extend(int(r.value) for r in records)
            for records in (await c.getmany(timeout_ms=500)).values():
                got.extend(int(r.value) for r in records)
        finally:
            await c.stop()
        return got

    second = asyncio.run(rest())
    # Exactly what was not committed before the restart, nothing twice.
    assert sorted(second) == sorted(set(range(1200)) - consumed)


def test_sigterm_and_sigint_shut_down_cleanly(own_broker: BrokerProcess, topic_name: str) -> None:
    broker = own_broker
    create_topic(broker.bootstrap, topic_name, partitions=1)
    kp_produce(broker.bootstrap, topic_name, range(100), enable_idempotence=True, acks="all")
    for sig in (signal.SIGTERM, signal.SIGINT):
        assert broker.stop(sig) == 0, broker.stderr_tail()
        assert any(line.startswith("tierlog stopped cleanly") for line in broker.stdout_lines)
        data = broker.data_dir
        assert (data / ".kafka_cleanshutdown").exists()
        # The producer state of the idempotent producer was snapshotted at the log end.
        assert (data / f"{topic_name}-0" / "00000000000000000100.snapshot").exists()
        broker.start()
