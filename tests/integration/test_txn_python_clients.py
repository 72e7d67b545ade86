"""Transactional producers of kafka-python and aiokafka against the broker: a committed and an aborted
transaction (the committed one also carrying consumer offsets), read back by the same library's
read_committed consumer -- committed records only, and committed offsets only from the committed
transaction -- while read_uncommitted shows that the aborted records were written."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import OffsetAndMetadata as AioOffsetAndMetadata
from aiokafka.structs import TopicPartition as AioTopicPartition
from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from tests.helpers.broker import BrokerProcess

TXN_OVERRIDES = {"transaction.state.log.num.partitions": "3"}
SOURCE = "txn-py-source"


@pytest.fixture
def txn_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", TXN_OVERRIDES).start()
    yield b
    if b.alive():
        assert b.stop() == 0, b.stderr_tail()


def create_topics(bootstrap: str, *names: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(n, num_partitions=1, replication_factor=1) for n in names])
    finally:
        admin.close()


def kp_read(bootstrap: str, topic: str, isolation: str, expect: int, timeout_s: float = 30) -> list[bytes]:
    """Read from offset 0 until ``expect`` records or the consumer stands at the end offset it sees."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        end = c.end_offsets([tp])[tp]
        got: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and (len(got) < expect or c.position(tp) < end):
            for records in c.poll(timeout_ms=300).values():
                got.extend(r.value for r in records)
        return got
    finally:
        c.close()


def test_kafka_python_transactions_with_read_committed(txn_broker: BrokerProcess) -> None:
    out = "txn-kp-out"
    create_topics(txn_broker.bootstrap, out, SOURCE)
    producer = KafkaProducer(bootstrap_servers=txn_broker.bootstrap, transactional_id="kp-txn")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(10):
            producer.send(out, value=f"c{i}".encode(), partition=0)
        producer.send_offsets_to_transaction({TopicPartition(SOURCE, 0): OffsetAndMetadata(10, "", -1)}, "kp-group")
        producer.commit_transaction()
        producer.begin_transaction()
        for i in range(5):
            producer.send(out, value=f"a{i}".encode(), partition=0)
        producer.flush()
        producer.send_offsets_to_transaction({TopicPartition(SOURCE, 0): OffsetAndMetadata(99, "", -1)}, "kp-group")
        producer.abort_transaction()
    finally:
        producer.close()
    assert kp_read(txn_broker.bootstrap, out, "read_committed", 10) == [f"c{i}".encode() for i in range(10)]
    assert sorted(kp_read(txn_broker.bootstrap, out, "read_uncommitted", 15)) == sorted(
        [f"c{i}".encode() for i in range(10)] + [f"a{i}".encode() for i in range(5)])
    group = KafkaConsumer(bootstrap_servers=txn_broker.bootstrap, group_id="kp-group", enable_auto_commit=False)
    try:
        committed = group.committed(TopicPartition(SOURCE, 0))
    finally:
        group.close()
    assert committed == 10


async def _aiokafka_round(bootstrap: str, out: str) -> tuple[list[bytes], list[bytes], int | None]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio-txn")
    await producer.start()
    try:
        async with producer.transaction():
            for i in range(10):
                await producer.send(out, value=f"c{i}".encode(), partition=0)
            await producer.send_offsets_to_transaction(
                {AioTopicPartition(SOURCE, 0): AioOffsetAndMetadata(10, "")}, "aio-group")
        await producer.begin_transaction()
        for i in range(5):
            await producer.send(out, value=f"a{i}".encode(), partition=0)
        await producer.send_offsets_to_transaction(
            {AioTopicPartition(SOURCE, 0): AioOffsetAndMetadata(99, "")}, "aio-group")
        await producer.abort_transaction()
    finally:
        await producer.stop()

    async def read(isolation: str, expect: int) -> list[bytes]:
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False)
        await c.start()
        try:
            tp = AioTopicPartition(out, 0)
            c.assign([tp])
            c.seek(tp, 0)
            end = (await c.end_offsets([tp]))[tp]
            got: list[bytes] = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and (len(got) < expect or await c.position(tp) < end):
                for records in (await c.getmany(timeout_ms=300)).values():
                    got.extend(r.value for r in records if r.value is not None)
            return got
        finally:
            await c.stop()

    committed_view = await read("read_committed", 10)
    everything = await read("read_uncommitted", 15)
    group = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id="aio-group", enable_auto_commit=False)
    await group.start()
    try:
        offset = await group.committed(AioTopicPartition(SOURCE, 0))
    finally:
        await group.stop()
    return committed_view, everything, offset


def test_aiokafka_transactions_with_read_committed(txn_broker: BrokerProcess) -> None:
    out = "txn-aio-out"
    create_topics(txn_broker.bootstrap, out, SOURCE)
    committed_view, everything, offset = asyncio.run(_aiokafka_round(txn_broker.bootstrap, out))
    assert committed_view == [f"c{i}".encode() for i in range(10)]
    assert sorted(everything) == sorted([f"c{i}".encode() for i in range(10)] + [f"a{i}".encode() for i in range(5)])
    assert offset == 10
