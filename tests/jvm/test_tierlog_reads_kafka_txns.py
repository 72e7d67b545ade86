"""tierlog reads Kafka's transactional data (issue 24 with issue 17): a partition Apache Kafka 4.3.1
wrote with a transactional producer -- committed and aborted transactions, their control batches and
its ``.txnindex`` -- is served by ``tierlog serve`` read_committed with the committed records only and
read_uncommitted with all of them; ``tierlog dump-log`` reads Kafka's ``.txnindex`` as Kafka does; and
Spark's ``format("tierlog")`` reads the same files at rest with ``kafka.isolation.level=read_committed``
as only the committed records (and all 60 without it)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker import BrokerProcess
from tests.jvm.dumps import kafka_dump, tierlog_dump
from tests.jvm.kafka import KafkaBroker

TOPIC = "from-kafka-txn"


def _write_with_kafka(home: Path) -> Path:
    kafka = KafkaBroker(home)
    kafka.start()
    try:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1, config={"retention.ms": "-1"})])[TOPIC].result(60)
        producer = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": "kafka-side", "linger.ms": 2})
        producer.init_transactions(60)
        for round_no in range(6):
            producer.begin_transaction()
            for i in range(10):
                producer.produce(TOPIC, value=b"%s-%d-%d" % (b"abort" if round_no % 2 else b"commit", round_no, i),
                                 partition=0)
            producer.flush(60)
            (producer.abort_transaction if round_no % 2 else producer.commit_transaction)(60)
        assert kafka.stop() in (0, 143), kafka.log_tail()
    finally:
        kafka.kill()
    return kafka.data_dir / f"{TOPIC}-0"


def _read(bootstrap: str, isolation: str) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{isolation}", "enable.auto.commit": False,
                  "isolation.level": isolation, "enable.partition.eof": True})
    out: list[bytes] = []
    try:
        c.assign([TopicPartition(TOPIC, 0, 0)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == -191:  # _PARTITION_EOF: everything read
                    break
                raise AssertionError(m.error())
            out.append(m.value())
    finally:
        c.close()
    return out


@pytest.fixture(scope="module")
def kafka_written(kafka_jars: None, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(Kafka's partition directory, a tierlog data dir whose partition holds copies of its files),
    built once for the module; tests copy the data dir before using it."""
    home = tmp_path_factory.mktemp("kafka-txn")
    theirs = _write_with_kafka(home / "kafka")
    data = home / "tierlog"
    broker = BrokerProcess(data).start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1, config={"retention.ms": "-1"})])[TOPIC].result(30)
    assert broker.stop() == 0, broker.stderr_tail()
    ours = data / f"{TOPIC}-0"
    for f in ours.iterdir():
        if f.name != "partition.metadata":
            f.unlink()
    for f in theirs.iterdir():
        if f.name != "partition.metadata":
            shutil.copy2(f, ours / f.name)
    return theirs, data


def test_kafkas_transactions_are_served_read_committed(kafka_written: tuple[Path, Path], tmp_path: Path) -> None:
    theirs, prepared = kafka_written
    txn_indexes = sorted(p for p in theirs.iterdir() if p.suffix == ".txnindex" and p.stat().st_size)
    assert txn_indexes, sorted(p.name for p in theirs.iterdir())

    def entries(text: str) -> list[str]:
        return [line.strip() for line in text.splitlines() if line.startswith("version:")]

    assert entries(tierlog_dump(txn_indexes)) == entries(kafka_dump(txn_indexes))
    assert len(entries(kafka_dump(txn_indexes))) == 3

    data = tmp_path / "tierlog"
    shutil.copytree(prepared, data)
    broker = BrokerProcess(data).start()
    try:
        committed = _read(broker.bootstrap, "read_committed")
        assert committed == [b"commit-%d-%d" % (r, i) for r in (0, 2, 4) for i in range(10)]
        everything = _read(broker.bootstrap, "read_uncommitted")
        assert len(everything) == 60
    finally:
        assert broker.stop() == 0, broker.stderr_tail()


@pytest.fixture
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark", reason="the Spark read needs pyspark (pip install -e '.[dev]')")
    from tierlog.pipeline import spark_session

    session = spark_session("local[1]", app_name="tierlog-kafka-txns", conf={"spark.ui.enabled": "false"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.mark.spark
def test_spark_reads_kafkas_transactions_read_committed(kafka_written: tuple[Path, Path], tmp_path: Path,
                                                       spark: Any) -> None:
    data = tmp_path / "tierlog"
    shutil.copytree(kafka_written[1], data)

    def values(**options: str) -> list[bytes]:
        r = spark.read.format("tierlog").option("path", str(data)).option("subscribe", TOPIC)
        for k, v in options.items():
            r = r.option(k, v)
        return [bytes(row[0]) for row in r.load().orderBy("offset").select("value").collect()]

    committed = values(**{"kafka.isolation.level": "read_committed"})
    assert committed == [b"commit-%d-%d" % (r, i) for r in (0, 2, 4) for i in range(10)]
    everything = values()
    assert len(everything) == 60 and set(everything) - set(committed) == {
        b"abort-%d-%d" % (r, i) for r in (1, 3, 5) for i in range(10)}
