"""Spark's own Kafka source as the peer of ``format("tierlog")`` (issue 24 point 4): the same offsets
of a topic whose older segments are only in the remote tier, read through the broker with
``format("kafka")`` (spark-sql-kafka, build/spark-kafka-jars) and at rest with ``format("tierlog")``,
give identical DataFrames -- same schema, same rows."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker import BrokerProcess
from tests.jvm.kafka import SPARK_KAFKA_JARS

pytest.importorskip("pyspark", reason="the Spark peer test needs pyspark (pip install -e '.[dev]')")

TOPIC = "spark-peer"
COUNT = 4000


@pytest.fixture(scope="module")
def tiered_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("tierlog") / "data", {
        "remote.log.manager.task.interval.ms": "200", "log.retention.check.interval.ms": "200",
        "log.segment.delete.delay.ms": "0"}).start()
    yield b
    if b.alive():
        assert b.stop() == 0, b.stderr_tail()


def local_bases(data: Path) -> list[int]:
    return sorted(int(p.stem) for p in (data / f"{TOPIC}-0").glob("*.log"))


def test_format_kafka_and_format_tierlog_return_the_same_rows(tiered_broker: BrokerProcess) -> None:
    if not list(SPARK_KAFKA_JARS.glob("spark-sql-kafka*.jar")):
        pytest.skip(f"Spark's Kafka source jars are missing from {SPARK_KAFKA_JARS} (scripts/_env.sh fetches them)")
    broker, data = tiered_broker, tiered_broker.data_dir
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1, config={
        "segment.bytes": "16384", "retention.ms": "-1", "remote.storage.enable": "true",
        "local.retention.bytes": "1"})])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.num.messages": 50,
                         "compression.type": "zstd"})
    base_ts = int(time.time() * 1000) - 3_600_000
    for i in range(COUNT):
        producer.produce(TOPIC, key=None if i % 7 == 0 else b"k%d" % (i % 13), value=b"v%06d" % i + bytes(i % 50),
                         partition=0, timestamp=base_ts + i)
    assert producer.flush(60) == 0
    deadline = time.monotonic() + 60
    while local_bases(data)[0] < COUNT // 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert local_bases(data)[0] >= COUNT // 2, "the older half of the topic never moved to the remote tier only"

    out = subprocess.run([sys.executable, str(Path(__file__).parent / "spark_peer_job.py"), broker.bootstrap,
                          str(data), TOPIC, str(SPARK_KAFKA_JARS), str(COUNT)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["schema_kafka"] == got["schema_tierlog"], got
    assert got["kafka_rows"] == got["tierlog_rows"] == COUNT, got
    assert got["only_kafka"] == got["only_tierlog"] == 0, got
    assert got["first"][0]["offset"] == 0, got


def test_a_streaming_query_switches_sources_on_one_checkpoint(tiered_broker: BrokerProcess, tmp_path: Path) -> None:
    """Both sources keep offsets in Spark's Kafka format ({"topic": {"0": n}}): a query that ran on
    format("kafka") goes on with format("tierlog") from where it stopped -- no record twice, none lost."""
    if not list(SPARK_KAFKA_JARS.glob("spark-sql-kafka*.jar")):
        pytest.skip(f"Spark's Kafka source jars are missing from {SPARK_KAFKA_JARS} (scripts/_env.sh fetches them)")
    broker, data = tiered_broker, tiered_broker.data_dir
    topic = "spark-switch"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"segment.bytes": "16384"})])[topic].result(30)

    def produce(first: int, count: int) -> None:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.num.messages": 50})
        for i in range(first, first + count):
            producer.produce(topic, value=b"v%06d" % i, partition=0)
        assert producer.flush(60) == 0

    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"

    def phase(source: str) -> None:
        proc = subprocess.run([sys.executable, str(Path(__file__).parent / "spark_switch_job.py"), source,
                               broker.bootstrap, str(data), topic, str(SPARK_KAFKA_JARS), str(checkpoint), str(out)],
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-4000:]

    produce(0, 1500)
    phase("kafka")
    produce(1500, 1000)
    phase("tierlog")
    import pyarrow.parquet as pq

    rows = pq.read_table(out).to_pydict()
    assert sorted(rows["offset"]) == list(range(2500))
    assert sorted(rows["value"]) == [f"v{i:06d}" for i in range(2500)]
