"""Transaction requests that make no sense, crafted on a raw socket, each answered with Kafka's code:
EndTxn without a transaction, AddPartitionsToTxn for an unknown topic, TxnOffsetCommit for an unknown
transaction or without AddOffsetsToTxn, stale epochs (PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH for
versions before KIP-588), concurrent EndTxn calls, a transactional batch for a partition outside the
transaction and one with an old producer epoch -- and nothing half-committed."""

from __future__ import annotations

import threading
from typing import Any

from tests.helpers.broker import BrokerProcess
from tests.helpers.raw_client import RawClient
from tierlog.protocol import ApiKey
from tierlog.records import SimpleRecord, build_batch

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
CONCURRENT_TRANSACTIONS = 51
OPERATION_NOT_ATTEMPTED = 55
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
PRODUCER_FENCED = 90


def find_txn_coordinator(c: RawClient, txn_id: str) -> None:
    body = c.call(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": [txn_id]})
    assert body.coordinators[0].error_code == 0, body


def init_pid(c: RawClient, txn_id: str, pid: int = -1, epoch: int = -1) -> tuple[int, int, int]:
    body = c.call(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": txn_id, "transaction_timeout": 60000,
                                              "producer_id": pid, "producer_epoch": epoch})
    return int(body.error_code), int(body.producer_id), int(body.producer_epoch)


def add_partitions(c: RawClient, txn_id: str, pid: int, epoch: int, tps: dict[str, list[int]],
                   version: int = 3) -> dict[tuple[str, int], int]:
    body = c.call(ApiKey.ADD_PARTITIONS_TO_TXN, version, {
        "v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in tps.items()]})
    return {(t.name, r.partition_index): int(r.partition_error_code)
            for t in body.results_by_topic_v3_and_below for r in t.results_by_partition}


def end_txn(c: RawClient, txn_id: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
    body = c.call(ApiKey.END_TXN, version, {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch,
                                            "committed": commit})
    return int(body.error_code)


def txn_offset_commit(c: RawClient, txn_id: str, group: str, pid: int, epoch: int, topic: str) -> int:
    body = c.call(ApiKey.TXN_OFFSET_COMMIT, 3, {
        "transactional_id": txn_id, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
        "generation_id": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                   "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    return int(body.topics[0].partitions[0].error_code)


def produce_txn(c: RawClient, txn_id: str | None, topic: str, pid: int, epoch: int, seq: int) -> Any:
    batch = build_batch([SimpleRecord(b"k", b"v", timestamp=0)], producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq, is_transactional=True)
    body = c.call(ApiKey.PRODUCE, 9, {"transactional_id": txn_id, "acks": -1, "timeout": 30000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    return body.responses[0].partition_responses[0]


def create_topic(c: RawClient, name: str) -> None:
    body = c.call(ApiKey.CREATE_TOPICS, 7, {"topics": [
        {"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout": 30000, "validate_only": False})
    assert body.topics[0].error_code == 0, body


def test_bad_transaction_requests_get_kafkas_codes(broker: BrokerProcess) -> None:
    c = RawClient(broker.port, client_id="txn-errors")
    create_topic(c, "txn-err")
    find_txn_coordinator(c, "bad-1")
    # EndTxn for an id the coordinator never saw.
    assert end_txn(c, "nobody", 12345, 0, True) == INVALID_PRODUCER_ID_MAPPING
    code, pid, epoch = init_pid(c, "bad-1")
    assert (code, epoch) == (NONE, 0) and pid >= 0
    # EndTxn with no transaction open.
    assert end_txn(c, "bad-1", pid, epoch, True) == INVALID_TXN_STATE
    # AddPartitionsToTxn naming an unknown topic: that one UNKNOWN_TOPIC_OR_PARTITION, the rest not tried.
    assert add_partitions(c, "bad-1", pid, epoch, {"txn-err": [0], "no-such-topic": [0]}) == {
        ("txn-err", 0): OPERATION_NOT_ATTEMPTED, ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION}
    # TxnOffsetCommit for an unknown transaction, then for a known one without AddOffsetsToTxn.
    assert txn_offset_commit(c, "nobody", "g", 12345, 0, "txn-err") == INVALID_PRODUCER_ID_MAPPING
    assert txn_offset_commit(c, "bad-1", "g", pid, epoch, "txn-err") == INVALID_TXN_STATE
    # A transactional batch for a partition that is not in the transaction is refused, unwritten.
    assert produce_txn(c, "bad-1", "txn-err", pid, epoch, 0).error_code == INVALID_TXN_STATE
    # Stale epochs after a second InitProducerId.
    code, pid2, epoch2 = init_pid(c, "bad-1", pid, epoch)
    assert (code, pid2, epoch2) == (NONE, pid, 1)
    assert add_partitions(c, "bad-1", pid, 0, {"txn-err": [0]}) == {("txn-err", 0): PRODUCER_FENCED}
    assert add_partitions(c, "bad-1", pid, 0, {"txn-err": [0]}, version=1) == {("txn-err", 0): INVALID_PRODUCER_EPOCH}
    assert end_txn(c, "bad-1", pid, 0, True) == PRODUCER_FENCED
    assert end_txn(c, "bad-1", pid, 0, True, version=1) == INVALID_PRODUCER_EPOCH
    # KIP-360: an InitProducerId naming an epoch that is neither current nor the previous one is fenced.
    assert init_pid(c, "bad-1", pid, 7)[0] == PRODUCER_FENCED
    assert init_pid(c, "bad-1", pid + 1000, 1)[0] == PRODUCER_FENCED
    # A real transaction, then a batch with the old epoch on its partition.
    assert add_partitions(c, "bad-1", pid, 1, {"txn-err": [0]}) == {("txn-err", 0): NONE}
    assert produce_txn(c, "bad-1", "txn-err", pid, 1, 0).error_code == NONE
    assert produce_txn(c, "bad-1", "txn-err", pid, 0, 1).error_code == INVALID_PRODUCER_EPOCH
    # Two EndTxn at once: one ends the transaction, the other gets CONCURRENT_TRANSACTIONS -- or, if it
    # arrives after the end, the answer for a retry (NONE for the same decision, INVALID_TXN_STATE else).
    codes: dict[bool, int] = {}

    def ending(commit: bool) -> None:
        other = RawClient(broker.port, client_id=f"end-{commit}")
        codes[commit] = end_txn(other, "bad-1", pid, 1, commit)

    threads = [threading.Thread(target=ending, args=(commit,)) for commit in (True, False)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(codes.values())[0] == NONE, codes
    assert sorted(codes.values())[1] in (CONCURRENT_TRANSACTIONS, INVALID_TXN_STATE), codes
    won = next(commit for commit, code in codes.items() if code == NONE)
    # Retrying the winner's decision is fine; the other decision is not.
    assert end_txn(c, "bad-1", pid, 1, won) == NONE
    assert end_txn(c, "bad-1", pid, 1, not won) == INVALID_TXN_STATE


def test_transactional_batch_without_transactional_id_is_refused_unwritten(broker: BrokerProcess) -> None:
    """Kafka refuses a Produce request carrying transactional records but no transactional id with
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition -- even with a transaction ongoing for that
    producer on that partition, and even for the partitions whose records are not transactional."""
    c = RawClient(broker.port, client_id="txn-no-id")
    create_topic(c, "txn-no-id")
    find_txn_coordinator(c, "no-id-1")
    code, pid, epoch = init_pid(c, "no-id-1")
    assert code == NONE
    assert add_partitions(c, "no-id-1", pid, epoch, {"txn-no-id": [0]}) == {("txn-no-id", 0): NONE}
    for txn_id in (None, ""):
        answer = produce_txn(c, txn_id, "txn-no-id", pid, epoch, 0)
        assert answer.error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED, answer
    plain = build_batch([SimpleRecord(b"k", b"plain", timestamp=0)])
    mixed = c.call(ApiKey.PRODUCE, 9, {"transactional_id": None, "acks": -1, "timeout": 30000, "topic_data": [
        {"name": "txn-no-id", "partition_data": [
            {"index": 0, "records": build_batch([SimpleRecord(b"k", b"v", timestamp=0)], producer_id=pid,
                                                producer_epoch=epoch, base_sequence=0, is_transactional=True)}]},
        {"name": "txn-err-other", "partition_data": [{"index": 0, "records": plain}]}]})
    assert [p.error_code for r in mixed.responses for p in r.partition_responses] == [
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED] * 2, mixed
    # Nothing was written: the same producer's first transactional batch, sent right, still gets offset 0.
    answer = produce_txn(c, "no-id-1", "txn-no-id", pid, epoch, 0)
    assert (answer.error_code, answer.base_offset) == (NONE, 0), answer
    # A plain batch without a transactional id is of course fine.
    plain_answer = c.call(ApiKey.PRODUCE, 9, {"transactional_id": None, "acks": -1, "timeout": 30000,
                                               "topic_data": [{"name": "txn-no-id", "partition_data": [
                                                   {"index": 0, "records": plain}]}]})
    assert plain_answer.responses[0].partition_responses[0].error_code == NONE
    assert end_txn(c, "no-id-1", pid, epoch, True) == NONE
