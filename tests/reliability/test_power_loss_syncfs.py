"""A power cut after produces of many partitions at once, each request's files synced by one
``syncfs`` (storage/group_commit.py), under the page-cache shim: every acknowledged record is there
after the restart. kafka-python sends a batch of every ready partition in one request, as Java's
producer does; the shim's journal shows the syncfs calls that covered them."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker import BrokerProcess
from tests.reliability.pageshim import PageShim, read_journal, unavailable
from tierlog.storage.group_commit import syncfs_stands_in

UNAVAILABLE = unavailable()
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(UNAVAILABLE is not None, reason=f"page-cache shim cannot run: {UNAVAILABLE}"),
    pytest.mark.skipif(not syncfs_stands_in(Path(tempfile.gettempdir())),
                       reason="syncfs standing in for fdatasyncs needs Linux 5.8+ and the temp dir on ext4, XFS or Btrfs"),
]

PARTITIONS = 8
ROUNDS = 6


def test_a_power_cut_keeps_what_a_shared_syncfs_acknowledged(tmp_path: Path) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    data = tmp_path / "data"
    data.mkdir()
    shim = PageShim(tmp_path, data)
    broker = BrokerProcess(shim.root, {"log.durable.acks": "all"}, env=shim.env()).start()
    acked: set[bytes] = set()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("t", num_partitions=PARTITIONS, replication_factor=1)])["t"].result(30)
        del admin  # (it would go on reconnecting to the killed broker)
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=200, retries=0)
        try:
            producer.partitions_for("t")
            for r in range(ROUNDS):
                sent = {f"r{r}-p{p}".encode(): producer.send("t", value=f"r{r}-p{p}".encode(), partition=p)
                        for p in range(PARTITIONS)}
                producer.flush(30)
                acked |= {value for value, f in sent.items() if f.get(30).offset >= 0}
            # acks=1 is answered on append, its sync not waited for: the cut may drop it.
            tail = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1, linger_ms=0)
            tail.send("t", value=b"tail", partition=0).get(30)
            tail.close(5)
        finally:
            producer.close(5)
    finally:
        broker.kill()  # SIGKILL: the page cache keeps what was written; the cut drops what was not synced
    assert len(acked) == PARTITIONS * ROUNDS, broker.stderr_tail()
    kinds = Counter(chr(r.kind) for r in read_journal(shim.journal))  # (the cut empties the journal)
    report = shim.power_cut()
    restarted = BrokerProcess(shim.root, {"log.durable.acks": "all"}).start()
    try:
        consumer = KafkaConsumer(bootstrap_servers=restarted.bootstrap, enable_auto_commit=False,
                                 consumer_timeout_ms=15_000)
        try:
            consumer.assign([TopicPartition("t", p) for p in range(PARTITIONS)])
            consumer.seek_to_beginning()
            got = [m.value for m in consumer]
        finally:
            consumer.close()
        missing = acked - set(got)
        assert not missing, f"acknowledged, lost at the cut ({report}): {sorted(missing)}\n{restarted.stderr_tail()}"
        assert len([v for v in got if v != b"tail"]) == len(acked)  # nothing twice
        # ... and syncfs is what made them durable: the requests of many partitions were synced by it.
        assert kinds["F"] >= 1, f"no syncfs reached the shim: {report}, journal {kinds}\n{broker.stderr_tail()}"
    finally:
        assert restarted.stop() == 0, restarted.stderr_tail()
