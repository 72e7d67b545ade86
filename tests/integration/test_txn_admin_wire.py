"""The transaction admin APIs on a raw socket, field by field: FindCoordinator with key type 1
(TRANSACTION) at v1-v3 (one key) and v4-v6 (several keys, one answer each); ListTransactions' state,
producer-id, duration (v1) and pattern (v2) filters as Kafka's TransactionStateManager applies them;
DescribeProducers' fields before and after a COMMIT marker; and the committed/aborted counters of the
metrics endpoint."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.broker import BrokerProcess
from tests.helpers.raw_client import RawClient
from tests.integration.test_txn_errors import (
    add_partitions,
    create_topic,
    end_txn,
    find_txn_coordinator,
    init_pid,
)
from tierlog.protocol import ApiKey
from tierlog.records import SimpleRecord, build_batch

NONE = 0
INVALID_REQUEST = 42
INVALID_REGULAR_EXPRESSION = 128
TOPIC = "admin-wire"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", {"transaction.state.log.num.partitions": "3",
                                          "metrics.listener": "127.0.0.1:0"}).start()
    yield b
    if b.alive():
        assert b.stop() == 0, b.stderr_tail()


def metric(broker: BrokerProcess, name: str) -> float:
    url = next(line.split()[-1] for line in broker.stdout_lines if line.startswith("tierlog metrics on "))
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return float(next(line.rsplit(" ", 1)[1] for line in text.splitlines() if line.startswith(name + " ")))


def list_txns(c: RawClient, version: int, **filters: Any) -> Any:
    values: dict[str, Any] = {"state_filters": filters.get("states", []),
                              "producer_id_filters": filters.get("pids", [])}
    if version >= 1:
        values["duration_filter"] = filters.get("duration", -1)
    if version >= 2:
        values["transactional_id_pattern"] = filters.get("pattern")
    return c.call(ApiKey.LIST_TRANSACTIONS, version, values)


def listed(body: Any) -> dict[str, tuple[int, str]]:
    assert body.error_code == NONE, body
    return {t.transactional_id: (int(t.producer_id), t.transaction_state) for t in body.transaction_states}


def produce(c: RawClient, txn_id: str, pid: int, epoch: int, ts: int) -> int:
    batch = build_batch([SimpleRecord(None, b"v%d" % i, timestamp=ts) for i in range(3)], producer_id=pid,
                        producer_epoch=epoch, base_sequence=0, is_transactional=True)
    body = c.call(ApiKey.PRODUCE, 9, {"transactional_id": txn_id, "acks": -1, "timeout": 30000, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}]})
    r = body.responses[0].partition_responses[0]
    assert r.error_code == NONE, r
    return int(r.base_offset)


def producer_state(c: RawClient, pid: int) -> Any:
    body = c.call(ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [{"name": TOPIC, "partition_indexes": [0]}]})
    p = body.topics[0].partitions[0]
    assert (p.partition_index, p.error_code) == (0, NONE), p
    [state] = [s for s in p.active_producers if s.producer_id == pid]
    return state


def test_find_coordinator_for_transactions_every_version(broker: BrokerProcess) -> None:
    c = RawClient(broker.port, client_id="admin-wire")
    for version in (1, 2, 3):
        body = c.call(ApiKey.FIND_COORDINATOR, version, {"key": f"tx-{version}", "key_type": 1})
        assert (body.error_code, body.node_id, body.host, body.port) == (NONE, 1, "127.0.0.1", broker.port), body
    for version in (4, 5, 6):
        keys = [f"tx-a-{version}", f"tx-b-{version}", f"tx-c-{version}"]
        body = c.call(ApiKey.FIND_COORDINATOR, version, {"key_type": 1, "coordinator_keys": keys})
        assert [(x.key, x.error_code, x.node_id, x.port) for x in body.coordinators] == [
            (k, NONE, 1, broker.port) for k in keys], body
    # A key type Kafka does not know.
    body = c.call(ApiKey.FIND_COORDINATOR, 4, {"key_type": 9, "coordinator_keys": ["x"]})
    assert [x.error_code for x in body.coordinators] == [INVALID_REQUEST]


def test_list_and_describe_producers_and_counters(broker: BrokerProcess) -> None:
    c = RawClient(broker.port, client_id="admin-wire")
    create_topic(c, TOPIC)
    ids = ["txa-open", "txa-idle", "txb-done"]
    for txn_id in ids:
        find_txn_coordinator(c, txn_id)
    pids = {}
    for txn_id in ids:
        code, pid, epoch = init_pid(c, txn_id)
        assert (code, epoch) == (NONE, 0)
        pids[txn_id] = pid
    # txb-done commits one transaction and aborts another; txa-open leaves one open.
    ts = int(time.time() * 1000)
    assert add_partitions(c, "txb-done", pids["txb-done"], 0, {TOPIC: [0]}) == {(TOPIC, 0): NONE}
    assert end_txn(c, "txb-done", pids["txb-done"], 0, False) == NONE
    assert add_partitions(c, "txa-open", pids["txa-open"], 0, {TOPIC: [0]}) == {(TOPIC, 0): NONE}
    first = produce(c, "txa-open", pids["txa-open"], 0, ts)
    opened_ms = time.time() * 1000
    assert add_partitions(c, "txb-done", pids["txb-done"], 0, {TOPIC: [0]}) == {(TOPIC, 0): NONE}
    assert end_txn(c, "txb-done", pids["txb-done"], 0, True) == NONE
    assert metric(broker, "tierlog_transactions_committed_total") == 1
    assert metric(broker, "tierlog_transactions_aborted_total") == 1
    assert metric(broker, "tierlog_transactions_ongoing") == 1

    everything = {txn_id: (pids[txn_id], state) for txn_id, state in
                  (("txa-open", "Ongoing"), ("txa-idle", "Empty"), ("txb-done", "CompleteCommit"))}
    assert listed(list_txns(c, 0)) == everything
    assert listed(list_txns(c, 0, states=["Ongoing"])) == {"txa-open": everything["txa-open"]}
    body = list_txns(c, 0, states=["CompleteCommit", "Nope"])
    assert listed(body) == {"txb-done": everything["txb-done"]} and list(body.unknown_state_filters) == ["Nope"]
    assert listed(list_txns(c, 0, pids=[pids["txa-idle"], 424242])) == {"txa-idle": everything["txa-idle"]}
    # DurationFilter (v1): listed when started more than that many ms ago -- Kafka's rule, whatever the
    # state; an Empty id has no start (-1), so it always is.
    while time.time() * 1000 - opened_ms < 600:
        time.sleep(0.05)
    assert listed(list_txns(c, 1, duration=300))["txa-open"] == everything["txa-open"]
    long_ago = listed(list_txns(c, 1, duration=3_600_000))
    assert long_ago == {"txa-idle": everything["txa-idle"]}
    assert listed(list_txns(c, 1, duration=-1)) == everything
    # TransactionalIdPattern (v2): a whole-id regular expression; a broken one is refused.
    assert listed(list_txns(c, 2, pattern="txa-.*")) == {k: v for k, v in everything.items() if k.startswith("txa")}
    assert listed(list_txns(c, 2, pattern="txa")) == {}
    assert list_txns(c, 2, pattern="(unclosed").error_code == INVALID_REGULAR_EXPRESSION

    # DescribeProducers: the open transaction's first offset, the last sequence and timestamp, no
    # coordinator epoch before a marker; after the COMMIT marker, no open transaction.
    state = producer_state(c, pids["txa-open"])
    assert (state.producer_epoch, state.last_sequence, state.last_timestamp, state.coordinator_epoch,
            state.current_txn_start_offset) == (0, 2, ts, -1, first)
    assert end_txn(c, "txa-open", pids["txa-open"], 0, True) == NONE
    state = producer_state(c, pids["txa-open"])
    assert (state.producer_epoch, state.last_sequence, state.current_txn_start_offset) == (0, 2, -1)
    assert state.coordinator_epoch >= 0
    assert metric(broker, "tierlog_transactions_committed_total") == 2
    assert metric(broker, "tierlog_transactions_ongoing") == 0
