"""Transactions end to end with confluent-kafka (librdkafka): a transactional producer's commits and
aborts seen through read_committed consumers, transactional offsets (send_offsets_to_transaction)
visible only once committed, zombie fencing of two producers sharing a transactional.id, a
transaction left open past its timeout aborted by the broker, state surviving restarts, and Kafka's
error codes for requests that make no sense."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker import BrokerProcess

TXN_OVERRIDES = {
    "transaction.state.log.num.partitions": "3",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
}


def metric(broker: BrokerProcess, line_start: str) -> float:
    """The value of the first metrics line starting with ``line_start``."""
    url = next(line.split()[-1] for line in broker.stdout_lines if line.startswith("tierlog metrics on "))
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return float(next(line.rsplit(" ", 1)[1] for line in text.splitlines() if line.startswith(line_start)))


@pytest.fixture
def txn_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", TXN_OVERRIDES).start()
    yield b
    if b.alive():
        assert b.stop() == 0, b.stderr_tail()


def create_topic(bootstrap: str, name: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(30)


def txn_producer(bootstrap: str, txn_id: str, **extra: object) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5, **extra})
    p.init_transactions(30)
    return p


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str = "read_committed",
             expect: int | None = None, timeout_s: float = 30) -> list[bytes]:
    """Every record up to the end offsets the consumer sees (the LSO for read_committed)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                  "isolation.level": isolation, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        tps = [TopicPartition(topic, p, 0) for p in range(partitions)]
        ends = [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
        c.assign(tps)
        got: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
            positions = c.position([TopicPartition(topic, p) for p in range(partitions)])
            done = all(pos.offset >= end for pos, end in zip(positions, ends, strict=True))
            if done and (expect is None or len(got) >= expect):
                break
        return got
    finally:
        c.close()


def test_commit_and_abort_seen_by_read_committed(txn_broker: BrokerProcess) -> None:
    bs = txn_broker.bootstrap
    create_topic(bs, "orders")
    p = txn_producer(bs, "tx-orders")
    p.begin_transaction()
    for i in range(10):
        p.produce("orders", value=f"aborted-{i}".encode(), partition=i % 2)
    p.flush(10)
    p.abort_transaction(30)
    p.begin_transaction()
    for i in range(10):
        p.produce("orders", value=f"committed-{i}".encode(), partition=i % 2)
    p.commit_transaction(30)
    committed = sorted(f"committed-{i}".encode() for i in range(10))
    assert sorted(read_all(bs, "orders", 2, expect=10)) == committed
    everything = read_all(bs, "orders", 2, "read_uncommitted", expect=20)
    assert len(everything) == 20  # read_uncommitted sees the aborted records (markers are never records)
    # The state is in __transaction_state and the markers in the logs: a restart changes nothing.
    txn_broker.restart()
    assert sorted(read_all(txn_broker.bootstrap, "orders", 2, expect=10)) == committed
    p2 = txn_producer(txn_broker.bootstrap, "tx-orders")  # the id is known: same producer id, next epoch
    p2.begin_transaction()
    p2.produce("orders", value=b"after-restart", partition=0)
    p2.commit_transaction(30)
    assert sorted(read_all(txn_broker.bootstrap, "orders", 2, expect=11)) == sorted([*committed, b"after-restart"])


def test_open_transaction_holds_the_lso_and_offsets_commit_with_it(txn_broker: BrokerProcess) -> None:
    bs = txn_broker.bootstrap
    create_topic(bs, "in", 1)
    create_topic(bs, "out", 1)
    p = txn_producer(bs, "tx-eos")
    p.begin_transaction()
    p.produce("out", value=b"o1", partition=0)
    p.flush(10)
    # Open: read_committed sees the LSO stop before it, read_uncommitted sees the record.
    c = Consumer({"bootstrap.servers": bs, "group.id": "eos-group", "isolation.level": "read_committed",
                  "enable.auto.commit": False})
    try:
        assert c.get_watermark_offsets(TopicPartition("out", 0), timeout=10)[1] == 0
        assert read_all(bs, "out", 1, "read_uncommitted", expect=1) == [b"o1"]
        meta = c.consumer_group_metadata()
        p.send_offsets_to_transaction([TopicPartition("in", 0, 42)], meta, 30)
        # Pending until the transaction commits: librdkafka fetches with require_stable and retries on
        # UNSTABLE_OFFSET_COMMIT, so while the transaction is open the call cannot complete.
        with pytest.raises(KafkaException) as pending:
            c.committed([TopicPartition("in", 0)], timeout=2)
        assert pending.value.args[0].code() == KafkaError._TIMED_OUT
        p.commit_transaction(30)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            committed = c.committed([TopicPartition("in", 0)], timeout=10)
            if committed[0].offset == 42:
                break
            time.sleep(0.1)
        assert committed[0].offset == 42
        assert read_all(bs, "out", 1, expect=1) == [b"o1"]
    finally:
        c.close()
    # Aborted offsets are dropped.
    p.begin_transaction()
    p.produce("out", value=b"o2", partition=0)
    c2 = Consumer({"bootstrap.servers": bs, "group.id": "eos-group", "enable.auto.commit": False})
    try:
        p.send_offsets_to_transaction([TopicPartition("in", 0, 99)], c2.consumer_group_metadata(), 30)
        p.abort_transaction(30)
        assert c2.committed([TopicPartition("in", 0)], timeout=10)[0].offset == 42
    finally:
        c2.close()
    txn_broker.restart()  # committed and aborted offsets read back from __consumer_offsets as they were
    c3 = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": "eos-group", "enable.auto.commit": False})
    try:
        assert c3.committed([TopicPartition("in", 0)], timeout=10)[0].offset == 42
    finally:
        c3.close()


def test_zombie_producer_is_fenced(txn_broker: BrokerProcess) -> None:
    bs = txn_broker.bootstrap
    create_topic(bs, "zombies", 1)
    old = txn_producer(bs, "tx-shared")
    old.begin_transaction()
    old.produce("zombies", value=b"zombie", partition=0)
    old.flush(10)
    # A second instance with the same id: its init aborts the old one's open transaction.
    new = txn_producer(bs, "tx-shared")
    new.begin_transaction()
    new.produce("zombies", value=b"live", partition=0)
    new.commit_transaction(30)
    with pytest.raises(KafkaException) as raised:
        old.produce("zombies", value=b"zombie-2", partition=0)
        old.commit_transaction(30)
    error = raised.value.args[0]
    assert error.fatal() or error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                             KafkaError.INVALID_PRODUCER_EPOCH), error
    assert read_all(bs, "zombies", 1, expect=1) == [b"live"]


def test_transaction_open_past_its_timeout_is_aborted(tmp_path: Path) -> None:
    txn_broker = BrokerProcess(tmp_path / "data", {**TXN_OVERRIDES, "metrics.listener": "127.0.0.1:0"}).start()
    try:
        check_timeout_abort(txn_broker)
    finally:
        assert txn_broker.stop() == 0, txn_broker.stderr_tail()


def check_timeout_abort(txn_broker: BrokerProcess) -> None:
    bs = txn_broker.bootstrap
    create_topic(bs, "slow", 1)
    p = txn_producer(bs, "tx-slow", **{"transaction.timeout.ms": 1000})
    p.begin_transaction()
    p.produce("slow", value=b"never", partition=0)
    p.flush(10)
    c = Consumer({"bootstrap.servers": bs, "group.id": "lso", "isolation.level": "read_committed"})
    try:
        deadline = time.monotonic() + 30
        lso = 0
        while time.monotonic() < deadline:
            lso = c.get_watermark_offsets(TopicPartition("slow", 0), timeout=10)[1]
            if lso >= 2:  # the record and the broker's ABORT marker
                break
            time.sleep(0.1)
        assert lso == 2
    finally:
        c.close()
    assert read_all(bs, "slow", 1) == []
    assert metric(txn_broker, "tierlog_transactions_timed_out_total") == 1
    assert metric(txn_broker, 'tierlog_log_lso_lag_offsets{partition="0",topic="slow"}') == 0
    assert metric(txn_broker, "tierlog_transactions_ongoing") == 0
    with pytest.raises(KafkaException):
        p.commit_transaction(10)


def test_transaction_timeout_above_the_maximum_is_refused(txn_broker: BrokerProcess) -> None:
    p = Producer({"bootstrap.servers": txn_broker.bootstrap, "transactional.id": "tx-long",
                  "transaction.timeout.ms": 3_600_000})
    with pytest.raises(KafkaException) as raised:
        p.init_transactions(20)
    assert raised.value.args[0].code() == KafkaError.INVALID_TRANSACTION_TIMEOUT


def tierlog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tierlog.cli.main", *args], capture_output=True, text=True,
                          timeout=60)


def test_cli_lists_describes_and_aborts_a_hanging_transaction(txn_broker: BrokerProcess) -> None:
    bs = txn_broker.bootstrap
    create_topic(bs, "hanging", 1)
    p = txn_producer(bs, "tx-cli")
    p.begin_transaction()
    p.produce("hanging", value=b"stuck", partition=0)
    p.flush(10)
    listed = tierlog("transactions", "list", "--bootstrap-server", bs, "--json")
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert {"transactional_id": "tx-cli", "producer_id": rows[0]["producer_id"], "state": "Ongoing"} in rows
    only_empty = tierlog("transactions", "list", "--bootstrap-server", bs, "--state", "Empty", "--json")
    assert "tx-cli" not in only_empty.stdout
    described = tierlog("transactions", "describe", "tx-cli", "--bootstrap-server", bs, "--json")
    assert described.returncode == 0, described.stderr
    info = json.loads(described.stdout)
    assert (info["state"], info["partitions"], info["producer_epoch"]) == ("Ongoing", ["hanging-0"], 0)
    missing = tierlog("transactions", "describe", "nobody", "--bootstrap-server", bs)
    assert missing.returncode != 0 and "TRANSACTIONAL_ID_NOT_FOUND" in missing.stderr
    aborted = tierlog("transactions", "abort", "--bootstrap-server", bs, "--topic", "hanging", "--partition", "0",
                      "--start-offset", "0")
    assert aborted.returncode == 0, aborted.stderr
    c = Consumer({"bootstrap.servers": bs, "group.id": "cli-lso", "isolation.level": "read_committed"})
    try:
        assert c.get_watermark_offsets(TopicPartition("hanging", 0), timeout=10)[1] == 2  # record + ABORT
    finally:
        c.close()
    assert read_all(bs, "hanging", 1) == []
    wrong = tierlog("transactions", "abort", "--bootstrap-server", bs, "--topic", "hanging", "--partition", "0",
                    "--start-offset", "7")
    assert wrong.returncode != 0 and "no open transaction starts at offset 7" in wrong.stderr


def test_read_committed_from_the_remote_tier(tmp_path: Path) -> None:
    """Transactions whose data moved to the remote tier (local segments deleted): a read_committed
    consumer from offset 0 gets the aborted transactions from the uploaded .txnindex files, or from
    the local ones when an ABORT marker is still local."""
    broker = BrokerProcess(tmp_path / "data", {**TXN_OVERRIDES, "remote.log.manager.task.interval.ms": "200",
                                               "log.retention.check.interval.ms": "200",
                                               "log.segment.delete.delay.ms": "0"}).start()
    try:
        bs = broker.bootstrap
        admin = AdminClient({"bootstrap.servers": bs})
        admin.create_topics([NewTopic("tiered-txn", 1, 1, config={
            "segment.bytes": "16384", "retention.ms": "-1", "remote.storage.enable": "true",
            "local.retention.bytes": "1"})])["tiered-txn"].result(30)
        p = txn_producer(bs, "tx-tiered")
        committed: list[bytes] = []
        for round_ in range(24):
            p.begin_transaction()
            values = [f"r{round_}-{i}-".encode() + b"x" * 200 for i in range(40)]
            for v in values:
                p.produce("tiered-txn", value=v, partition=0)
            if round_ % 2:
                p.commit_transaction(30)
                committed += values
            else:
                p.flush(10)
                p.abort_transaction(30)
        part = tmp_path / "data" / "tiered-txn-0"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and min(int(f.stem) for f in part.glob("*.log")) < 600:
            time.sleep(0.1)
        assert min(int(f.stem) for f in part.glob("*.log")) >= 600, "segments were not tiered and deleted"
        got = read_all(bs, "tiered-txn", 1, expect=len(committed), timeout_s=60)
        assert sorted(got) == sorted(committed)
    finally:
        assert broker.stop() == 0, broker.stderr_tail()
