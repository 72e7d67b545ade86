"""KIP-890 part 1 verification on a raw socket, with Kafka's codes per version.

AddPartitionsToTxn v4+ carries several transactions in one request, each either adding partitions or
(``verify_only``) asking whether they are in the transaction already. The coordinator answers a
partition outside the transaction TRANSACTION_ABORTABLE (TransactionCoordinator.
handleVerifyPartitionsInTransaction). A partition leader translates that for its client
(AddPartitionsToTxnManager): a transactional Produce before v11 and a TxnOffsetCommit before v4 get
INVALID_TXN_STATE, newer ones TRANSACTION_ABORTABLE, and PRODUCER_FENCED reaches them as
INVALID_PRODUCER_EPOCH. Nothing refused is written.
"""

from __future__ import annotations

from typing import Any

from tests.helpers.broker import BrokerProcess
from tests.helpers.raw_client import RawClient
from tests.integration.test_txn_errors import create_topic, find_txn_coordinator, init_pid
from tierlog.protocol import ApiKey
from tierlog.records import SimpleRecord, build_batch

NONE = 0
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
PRODUCER_FENCED = 90
TRANSACTION_ABORTABLE = 120


def txn(txn_id: str, pid: int, epoch: int, tps: dict[str, list[int]], verify_only: bool) -> dict[str, Any]:
    return {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch, "verify_only": verify_only,
            "topics": [{"name": t, "partitions": ps} for t, ps in tps.items()]}


def add_batched(c: RawClient, version: int, transactions: list[dict[str, Any]]) -> dict[str, dict[tuple[str, int], int]]:
    body = c.call(ApiKey.ADD_PARTITIONS_TO_TXN, version, {"transactions": transactions})
    assert body.error_code == NONE, body
    return {r.transactional_id: {(t.name, p.partition_index): int(p.partition_error_code)
                                 for t in r.topic_results for p in t.results_by_partition}
            for r in body.results_by_transaction}


def produce(c: RawClient, version: int, txn_id: str, topic: str, pid: int, epoch: int, seq: int) -> int:
    batch = build_batch([SimpleRecord(b"k", b"v", timestamp=0)], producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq, is_transactional=True)
    body = c.call(ApiKey.PRODUCE, version, {"transactional_id": txn_id, "acks": -1, "timeout": 30000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    return int(body.responses[0].partition_responses[0].error_code)


def txn_offset_commit(c: RawClient, version: int, txn_id: str, pid: int, epoch: int, topic: str) -> int:
    body = c.call(ApiKey.TXN_OFFSET_COMMIT, version, {
        "transactional_id": txn_id, "group_id": "verify-group", "producer_id": pid, "producer_epoch": epoch,
        "generation_id": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                   "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    return int(body.topics[0].partitions[0].error_code)


def log_end(c: RawClient, topic: str) -> int:
    body = c.call(ApiKey.LIST_OFFSETS, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    return int(body.topics[0].partitions[0].offset)


def test_batched_add_partitions_with_verify_only_answers_kafkas_codes(broker: BrokerProcess) -> None:
    c = RawClient(broker.port, client_id="txn-verify")
    for topic in ("ver-a", "ver-b"):
        create_topic(c, topic)
    for txn_id in ("ver-1", "ver-2"):
        find_txn_coordinator(c, txn_id)
    code1, pid1, epoch1 = init_pid(c, "ver-1")
    code2, pid2, epoch2 = init_pid(c, "ver-2")
    assert (code1, code2) == (NONE, NONE)
    for version in (4, 5):
        # One request, four transactions: ver-1 adds ver-a; ver-2 only verifies (nothing added yet); an
        # id the coordinator never saw; ver-1 again under a stale epoch.
        first = add_batched(c, version, [txn("ver-1", pid1, epoch1, {"ver-a": [0]}, False),
                                         txn("ver-2", pid2, epoch2, {"ver-a": [0], "ver-b": [0]}, True),
                                         txn(f"nobody-{version}", 4242, 0, {"ver-a": [0]}, True)])
        assert first == {"ver-1": {("ver-a", 0): NONE},
                         "ver-2": {("ver-a", 0): TRANSACTION_ABORTABLE, ("ver-b", 0): TRANSACTION_ABORTABLE},
                         f"nobody-{version}": {("ver-a", 0): INVALID_PRODUCER_ID_MAPPING}}
        # Verify-only answers per partition: what was added is in, the rest is not, and verifying
        # added nothing (ver-2 is still outside both).
        second = add_batched(c, version, [txn("ver-1", pid1, epoch1, {"ver-a": [0], "ver-b": [0]}, True),
                                          txn("ver-2", pid2, epoch2, {"ver-b": [0]}, True)])
        assert second == {"ver-1": {("ver-a", 0): NONE, ("ver-b", 0): TRANSACTION_ABORTABLE},
                          "ver-2": {("ver-b", 0): TRANSACTION_ABORTABLE}}
        fenced = add_batched(c, version, [txn("ver-1", pid1, epoch1 + 7, {"ver-a": [0]}, True)])
        assert fenced == {"ver-1": {("ver-a", 0): PRODUCER_FENCED}}
        describe = c.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["ver-2"]}).transaction_states[0]
        assert describe.transaction_state == "Empty" and list(describe.topics) == []

    # A transactional batch for ver-b, which is not in ver-1's transaction: Produce v9 and v10 know no
    # TRANSACTION_ABORTABLE, v11 does; nothing is written.
    before = log_end(c, "ver-b")
    assert produce(c, 9, "ver-1", "ver-b", pid1, epoch1, 0) == INVALID_TXN_STATE
    assert produce(c, 10, "ver-1", "ver-b", pid1, epoch1, 0) == INVALID_TXN_STATE
    assert produce(c, 11, "ver-1", "ver-b", pid1, epoch1, 0) == TRANSACTION_ABORTABLE
    # A stale epoch is INVALID_PRODUCER_EPOCH to a producer, whatever the version.
    assert produce(c, 11, "ver-1", "ver-a", pid1, epoch1 + 3, 0) == INVALID_PRODUCER_EPOCH
    assert log_end(c, "ver-b") == before
    # TxnOffsetCommit without AddOffsetsToTxn: the offsets partition is not in the transaction.
    assert txn_offset_commit(c, 3, "ver-1", pid1, epoch1, "ver-a") == INVALID_TXN_STATE
    assert txn_offset_commit(c, 4, "ver-1", pid1, epoch1, "ver-a") == TRANSACTION_ABORTABLE
    # The partition that was added takes the batch.
    assert produce(c, 11, "ver-1", "ver-a", pid1, epoch1, 0) == NONE
