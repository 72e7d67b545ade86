"""Log compaction through ``tierlog serve`` with real clients: confluent-kafka produces keyed updates
and tombstones to a compacted topic, the broker's cleaner thread compacts it, and a consumer reading
the topic from the start gets back exactly the model's table; a null key is refused with
INVALID_RECORD; ``tierlog cleaner status`` and the Prometheus metrics show the cleaning. The broker
restarts on the compacted log and serves the same table."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker import BrokerProcess
from tests.helpers.waits import produce_when_queued, wait_until

METRICS_LINE = "tierlog metrics on "
KEYS = 200
UPDATES = 6000


@pytest.fixture
def cleaner_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", {
        "log.cleaner.backoff.ms": "200",
        "metrics.listener": "http://127.0.0.1:0",
        "log.segment.delete.delay.ms": "0",
    }).start()
    yield b
    if b.alive():
        assert b.stop() == 0, b.stderr_tail()


def _produce(bootstrap: str, topic: str, model: dict[bytes, bytes | None]) -> None:
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "batch.size": 4096})
    rng = random.Random(18)
    for i in range(UPDATES):
        key = b"key-%d" % rng.randrange(KEYS)
        value = None if rng.random() < 0.1 else b"value-%d-" % i + b"x" * rng.randrange(50)
        produce_when_queued(producer, topic, key=key, value=value, on_delivery=on_delivery)
        model[key] = value
    assert producer.flush(60) == 0
    assert not errors, errors[:5]


def _read_table(bootstrap: str, topic: str) -> tuple[dict[bytes, bytes | None], int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    table: dict[bytes, bytes | None] = {}
    records = 0
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return table, records
                raise AssertionError(msg.error())
            table[msg.key()] = msg.value()
            records += 1
    finally:
        consumer.close()
    raise AssertionError("the consumer did not reach the end of the topic")


def _live(table: dict[bytes, bytes | None]) -> dict[bytes, bytes]:
    return {k: v for k, v in table.items() if v is not None}


def _status(broker: BrokerProcess, topic: str) -> dict[str, object] | None:
    out = subprocess.run([sys.executable, "-m", "tierlog.cli.main", "cleaner", "status", "--data-dir",
                          str(broker.data_dir), "--json"], capture_output=True, text=True, check=True)
    for line in out.stdout.splitlines():
        row = json.loads(line)
        if row["topic"] == topic:
            return row  # type: ignore[no-any-return]
    return None


def test_compacted_topic_reads_back_as_the_model(cleaner_broker: BrokerProcess, topic_name: str) -> None:
    admin = AdminClient({"bootstrap.servers": cleaner_broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, num_partitions=1, replication_factor=1, config={
        "cleanup.policy": "compact", "segment.bytes": "16384", "min.cleanable.dirty.ratio": "0.1",
        "delete.retention.ms": "3600000"})])[topic_name].result(30)
    model: dict[bytes, bytes | None] = {}
    _produce(cleaner_broker.bootstrap, topic_name, model)

    # Wait for the cleaner thread to have cleaned the partition (the status file says so).
    deadline = time.monotonic() + 90
    row = None
    while time.monotonic() < deadline:
        row = _status(cleaner_broker, topic_name)
        if row is not None and isinstance(row.get("cleanings"), int) and row["cleanings"] >= 1:
            break
        time.sleep(0.2)
    assert row is not None and row["cleanings"] >= 1, cleaner_broker.stderr_tail()
    assert isinstance(row["checkpoint"], int) and row["checkpoint"] > 0

    # Compaction removed the superseded updates. The first cleaning may have run while the producer
    # was still writing and covered only the segments closed by then; the later ones follow once
    # their dirty ratio reaches 0.1, so wait for the log to shrink (the table must hold throughout).
    def table_holds_and_log_shrank() -> bool:
        table, records = _read_table(cleaner_broker.bootstrap, topic_name)
        assert _live(table) == _live(model)
        for key, value in model.items():
            if value is None:
                assert table.get(key) is None  # a tombstone (kept for delete.retention.ms) or nothing
        return records < UPDATES / 2

    assert wait_until(table_holds_and_log_shrank, 90, 0.5), cleaner_broker.stderr_tail()

    # A null key is refused on a compacted topic (INVALID_RECORD).
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": cleaner_broker.bootstrap, "retries": 0})
    producer.produce(topic_name, key=None, value=b"no key", on_delivery=lambda err, _m: errors.append(err))
    producer.flush(30)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.INVALID_RECORD

    url = next(line.strip()[len(METRICS_LINE):] for line in cleaner_broker.stdout_lines
               if line.startswith(METRICS_LINE))
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    assert "tierlog_log_cleaner_max_dirty_percent" in text
    assert "tierlog_log_cleaner_time_since_last_run_ms" in text
    assert f'tierlog_log_cleaner_dirty_ratio{{partition="0",topic="{topic_name}"}}' in text

    cleaner_broker.restart()
    table_after, _ = _read_table(cleaner_broker.bootstrap, topic_name)
    assert _live(table_after) == _live(model)
