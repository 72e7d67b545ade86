"""Kafka reads tierlog's transactional files (issue 24 with issue 17): a topic written by a
transactional producer through ``tierlog serve`` -- committed and aborted transactions -- dumped by
Kafka 4.3.1's DumpLogSegments and by ``tierlog dump-log`` with the same values: the control batches'
COMMIT and ABORT markers in the ``.log`` and the aborted transactions in the ``.txnindex``."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker import BrokerProcess
from tests.jvm.dumps import assert_same_values, kafka_dump, parse_dump, tierlog_dump

TOPIC = "peer-txn"


@pytest.fixture(scope="module")
def txn_data(kafka_jars: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("tierlog-txn") / "data"
    broker = BrokerProcess(data).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1, config={"segment.bytes": "4000", "retention.ms": "-1"})])[
            TOPIC].result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "peer-txn-1",
                             "linger.ms": 2})
        producer.init_transactions(30)
        for round_no in range(6):
            producer.begin_transaction()
            for i in range(20):
                producer.produce(TOPIC, key=b"k%d" % i, value=b"round-%d-%d" % (round_no, i), partition=0)
            if round_no % 2:
                producer.flush(30)  # written first, so the abort has records (and a .txnindex entry) to undo
                producer.abort_transaction(30)
            else:
                producer.commit_transaction(30)
    finally:
        assert broker.stop() == 0, broker.stderr_tail()
    return data / f"{TOPIC}-0"


def test_txn_index_and_markers_read_by_kafka_as_tierlog_reads_them(txn_data: Path) -> None:
    txn_indexes = sorted(p for p in txn_data.iterdir() if p.suffix == ".txnindex" and p.stat().st_size)
    assert txn_indexes, f"tierlog wrote no transaction index entries in {sorted(txn_data.iterdir())}"
    def entries(text: str) -> list[str]:  # a .txnindex entry: "version: 0 producerId: ... lastStableOffset: ..."
        return [line.strip() for line in text.splitlines() if line.startswith("version:")]

    kafka = entries(kafka_dump(txn_indexes))
    assert len(kafka) == 3, kafka  # three aborted transactions
    assert entries(tierlog_dump(txn_indexes)) == kafka
    logs = sorted(p for p in txn_data.iterdir() if p.suffix == ".log")
    kafka_log = kafka_dump(logs, "--deep-iteration", "--print-data-log")
    assert kafka_log.count("endTxnMarker: COMMIT") == 3 and kafka_log.count("endTxnMarker: ABORT") == 3
    assert_same_values(parse_dump(kafka_log), parse_dump(tierlog_dump(logs, "--deep-iteration", "--print-data-log")),
                       ignore=frozenset({"timestamp"}))
