"""tierlog reads Kafka's transactional data (issue 24 with issue 17): a partition Apache Kafka 4.3.1
wrote with a transactional producer -- committed and aborted transactions, their control batches and
its ``.txnindex`` -- is served by ``tierlog serve`` read_committed with the committed records only and
read_uncommitted with all of them; ``tierlog dump-log`` reads Kafka's ``.txnindex`` as Kafka does."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

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


def test_kafkas_transactions_are_served_read_committed(kafka_jars: None, tmp_path: Path) -> None:
    theirs = _write_with_kafka(tmp_path / "kafka")
    txn_indexes = sorted(p for p in theirs.iterdir() if p.suffix == ".txnindex" and p.stat().st_size)
    assert txn_indexes, sorted(p.name for p in theirs.iterdir())

    def entries(text: str) -> list[str]:
        return [line.strip() for line in text.splitlines() if line.startswith("version:")]

    assert entries(tierlog_dump(txn_indexes)) == entries(kafka_dump(txn_indexes))
    assert len(entries(kafka_dump(txn_indexes))) == 3

    data = tmp_path / "tierlog"
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
    broker.start()
    try:
        committed = _read(broker.bootstrap, "read_committed")
        assert committed == [b"commit-%d-%d" % (r, i) for r in (0, 2, 4) for i in range(10)]
        everything = _read(broker.bootstrap, "read_uncommitted")
        assert len(everything) == 60
    finally:
        assert broker.stop() == 0, broker.stderr_tail()
