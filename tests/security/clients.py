"""Produce, consume in a group and an admin call with each real client, given its security settings."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
import uuid
from typing import Any

TIMEOUT_S = 60.0
KCAT = shutil.which("kcat")


def confluent_roundtrip(bootstrap: str, conf: dict[str, str], topic: str, count: int = 20) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    base = {"bootstrap.servers": bootstrap, **conf}
    admin = AdminClient(base)
    futures = admin.create_topics([NewTopic(topic, num_partitions=2)])
    futures[topic].result(TIMEOUT_S)
    producer = Producer({**base, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode())
    assert producer.flush(TIMEOUT_S) == 0
    consumer = Consumer({**base, "group.id": f"g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: set[bytes] = set()
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.add(msg.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert got == {f"v{i}".encode() for i in range(count)}


def kafka_python_roundtrip(bootstrap: str, kwargs: dict[str, Any], topic: str, count: int = 20) -> None:
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    from tests.helpers.kafka_python import group_consumer

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **kwargs)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, **kwargs)
    for i in range(count):
        producer.send(topic, f"v{i}".encode())
    producer.flush(TIMEOUT_S)
    producer.close()
    consumer = group_consumer(topic, bootstrap_servers=bootstrap, group_id=f"g-{uuid.uuid4().hex[:8]}",
                              auto_offset_reset="earliest", consumer_timeout_ms=int(TIMEOUT_S * 1000), **kwargs)
    got: set[bytes] = set()
    try:
        for msg in consumer:
            got.add(msg.value)
            if len(got) == count:
                break
        consumer.commit()
    finally:
        consumer.close()
    assert got == {f"v{i}".encode() for i in range(count)}


def aiokafka_roundtrip(bootstrap: str, kwargs: dict[str, Any], topic: str, count: int = 20) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **kwargs)
        await producer.start()
        try:
            for i in range(count):
                await producer.send_and_wait(topic, f"v{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"g-{uuid.uuid4().hex[:8]}",
                                    auto_offset_reset="earliest", **kwargs)
        await consumer.start()
        got: set[bytes] = set()
        try:
            async with asyncio.timeout(TIMEOUT_S):
                while len(got) < count:
                    msg = await consumer.getone()
                    got.add(msg.value)
            await consumer.commit()
        finally:
            await consumer.stop()
        assert got == {f"v{i}".encode() for i in range(count)}

    asyncio.run(run())


def kcat_roundtrip(bootstrap: str, props: dict[str, str], topic: str, count: int = 10) -> None:
    assert KCAT is not None, "kcat is not on PATH"
    x = [arg for k, v in props.items() for arg in ("-X", f"{k}={v}")]
    lines = "\n".join(f"v{i}" for i in range(count)) + "\n"
    produced = subprocess.run([KCAT, "-b", bootstrap, *x, "-P", "-t", topic], input=lines, text=True,
                              timeout=TIMEOUT_S, capture_output=True)
    assert produced.returncode == 0, produced.stderr
    out = subprocess.run([KCAT, "-b", bootstrap, *x, "-C", "-t", topic, "-o", "beginning", "-e", "-q"],
                         text=True, check=True, timeout=TIMEOUT_S, capture_output=True).stdout
    assert sorted(out.split()) == sorted(f"v{i}" for i in range(count))
