"""Transaction version 2 (KIP-890 part 2) on a raw socket.

With ``transaction.version`` finalized at 2 (UpdateFeatures, as ``kafka-features.sh upgrade`` does): a
transactional Produce v12 adds its partition to the transaction itself and TxnOffsetCommit v5 the
group's offsets partition (no AddPartitionsToTxn/AddOffsetsToTxn); EndTxn v5 bumps the producer
epoch at each end and answers the id and epoch to go on with; the markers carry the bumped epoch, so
a batch of the ended transaction still in flight is fenced; a retried EndTxn v5 (the epoch before the
bump) is answered as Kafka does; the state records are TransactionLogValue version 1 with
ClientTransactionVersion 2. An EndTxn v4 on the same cluster keeps the epoch (a TV0/TV1 client).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from tests.helpers.broker import BrokerProcess
from tests.helpers.raw_client import RawClient
from tests.integration.test_txn_errors import add_partitions, create_topic, find_txn_coordinator, init_pid
from tierlog.protocol import ApiKey
from tierlog.records import SimpleRecord, build_batch, iter_batches
from tierlog.server.txn.records import (
    TRANSACTION_STATE_TOPIC,
    TxnState,
    decode_key,
    decode_value,
    partition_for_transactional_id,
)

NONE = 0
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
TXN_ID, TOPIC, GROUP = "tv2-raw", "tv2", "tv2-group"
OVERRIDES = {"transaction.state.log.num.partitions": "3"}


def end_txn_v5(c: RawClient, pid: int, epoch: int, commit: bool) -> tuple[int, int, int]:
    body = c.call(ApiKey.END_TXN, 5, {"transactional_id": TXN_ID, "producer_id": pid, "producer_epoch": epoch,
                                      "committed": commit})
    return int(body.error_code), int(body.producer_id), int(body.producer_epoch)


def produce(c: RawClient, version: int, pid: int, epoch: int, seq: int, values: list[bytes]) -> int:
    now_ms = int(time.time() * 1000)  # not 0: time retention would delete the segment
    batch = build_batch([SimpleRecord(None, v, timestamp=now_ms) for v in values], producer_id=pid,
                        producer_epoch=epoch, base_sequence=seq, is_transactional=True)
    body = c.call(ApiKey.PRODUCE, version, {"transactional_id": TXN_ID, "acks": -1, "timeout": 30000, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}]})
    return int(body.responses[0].partition_responses[0].error_code)


def txn_offset_commit_v5(c: RawClient, pid: int, epoch: int, offset: int) -> int:
    body = c.call(ApiKey.TXN_OFFSET_COMMIT, 5, {
        "transactional_id": TXN_ID, "group_id": GROUP, "producer_id": pid, "producer_epoch": epoch,
        "generation_id": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                   "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    return int(body.topics[0].partitions[0].error_code)


def describe(c: RawClient) -> Any:
    return c.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [TXN_ID]}).transaction_states[0]


def producer_on_partition(c: RawClient, pid: int) -> Any:
    body = c.call(ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [{"name": TOPIC, "partition_indexes": [0]}]})
    [state] = [p for p in body.topics[0].partitions[0].active_producers if p.producer_id == pid]
    return state


def state_records(data_dir: Path) -> list[bytes]:
    """The raw values of TXN_ID's records in its ``__transaction_state`` partition, in order."""
    d = data_dir / f"{TRANSACTION_STATE_TOPIC}-{partition_for_transactional_id(TXN_ID, 3)}"
    return [r.value for seg in sorted(d.glob("*.log")) for _, records in iter_batches(seg.read_bytes())
            for r in records if r.key is not None and r.value is not None and decode_key(r.key) == TXN_ID]


def read_committed(bootstrap: str) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "tv2-reader", "isolation.level": "read_committed",
                  "enable.auto.commit": False})
    try:
        end = c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)[1]
        c.assign([TopicPartition(TOPIC, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while c.position([TopicPartition(TOPIC, 0)])[0].offset < end and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got.append(m.value())
        return got
    finally:
        c.close()


def test_transaction_version_2_on_the_wire(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", OVERRIDES).start()
    try:
        run(broker)
    finally:
        assert broker.stop() == 0, broker.stderr_tail()


def run(broker: BrokerProcess) -> None:
    c = RawClient(broker.port, client_id="tv2")
    body = c.call(ApiKey.UPDATE_FEATURES, 1, {"timeout": 5000, "validate_only": False, "feature_updates": [
        {"feature": "transaction.version", "max_version_level": 2, "upgrade_type": 1}]})
    assert body.error_code == NONE, body
    versions = c.call(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    assert {f.name: f.max_version_level for f in versions.finalized_features}["transaction.version"] == 2
    assert {k.api_key: k.max_version for k in versions.api_keys}[ApiKey.END_TXN] == 5
    create_topic(c, TOPIC)
    find_txn_coordinator(c, TXN_ID)
    code, pid, epoch = init_pid(c, TXN_ID)
    assert (code, epoch) == (NONE, 0)

    # Transaction 1: no AddPartitionsToTxn, no AddOffsetsToTxn -- Produce v12 and TxnOffsetCommit v5 add them.
    assert produce(c, 12, pid, 0, 0, [b"c1", b"c2"]) == NONE
    assert txn_offset_commit_v5(c, pid, 0, 2) == NONE
    d = describe(c)
    assert d.transaction_state == "Ongoing" and {t.topic for t in d.topics} == {TOPIC, "__consumer_offsets"}
    assert end_txn_v5(c, pid, 0, True) == (NONE, pid, 1)
    # The COMMIT marker carries the bumped epoch: the partition's producer is at epoch 1, no transaction open.
    state = producer_on_partition(c, pid)
    assert (state.producer_epoch, state.current_txn_start_offset) == (1, -1)
    # A retry of that EndTxn (the epoch before the bump) is answered with the outcome; aborting it is not.
    assert end_txn_v5(c, pid, 0, True) == (NONE, pid, 1)
    assert end_txn_v5(c, pid, 0, False)[0] == INVALID_TXN_STATE
    # A batch of the ended transaction arriving late is fenced, and starts nothing.
    assert produce(c, 12, pid, 0, 2, [b"late"]) == INVALID_PRODUCER_EPOCH
    assert describe(c).transaction_state == "CompleteCommit"

    # Transaction 2 under epoch 1 (sequences restart at 0), aborted: epoch 2.
    assert produce(c, 12, pid, 1, 0, [b"a1"]) == NONE
    assert end_txn_v5(c, pid, 1, False) == (NONE, pid, 2)
    assert (producer_on_partition(c, pid).producer_epoch, describe(c).producer_epoch) == (2, 2)

    # A TV0/TV1 client on the same cluster: AddPartitionsToTxn, Produce v11, EndTxn v4 -- no bump.
    assert add_partitions(c, TXN_ID, pid, 2, {TOPIC: [0]}) == {(TOPIC, 0): NONE}
    assert produce(c, 11, pid, 2, 0, [b"c3"]) == NONE
    body = c.call(ApiKey.END_TXN, 4, {"transactional_id": TXN_ID, "producer_id": pid, "producer_epoch": 2,
                                      "committed": True})
    assert body.error_code == NONE and describe(c).producer_epoch == 2
    assert read_committed(broker.bootstrap) == [b"c1", b"c2", b"c3"]

    # The state log: version 1 values (transaction.version >= 1), the TV2 ends with
    # ClientTransactionVersion 2 and the bumped epochs.
    raws = state_records(broker.data_dir)
    assert all(raw[:2] == b"\x00\x01" for raw in raws)
    ends = [(v.state, v.producer_epoch, v.client_transaction_version) for v in map(decode_value, raws)
            if v.state is not TxnState.ONGOING and v.state is not TxnState.EMPTY]
    assert ends == [(TxnState.PREPARE_COMMIT, 1, 2), (TxnState.COMPLETE_COMMIT, 1, 2),
                    (TxnState.PREPARE_ABORT, 2, 2), (TxnState.COMPLETE_ABORT, 2, 2),
                    (TxnState.PREPARE_COMMIT, 2, 0), (TxnState.COMPLETE_COMMIT, 2, 0)]
