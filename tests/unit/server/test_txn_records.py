"""__transaction_state records against Kafka's TransactionLogKey/TransactionLogValue layouts (built
by hand here), and the coordinator's rules as pure functions."""

from __future__ import annotations

import struct

import pytest

from tierlog.errors import CorruptRecordError
from tierlog.errors import ErrorCode as Code
from tierlog.server.txn import rules
from tierlog.server.txn.records import (
    TxnLogValue,
    TxnState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for_transactional_id,
)
from tierlog.server.txn.rules import TxnMetadata


def test_key_is_version_0_and_a_string() -> None:
    assert encode_key("tx-1") == b"\x00\x00\x00\x04tx-1"
    assert decode_key(b"\x00\x00\x00\x04tx-1") == "tx-1"
    with pytest.raises(CorruptRecordError):
        decode_key(b"\x00\x01\x00\x04tx-1")


def test_value_v0_golden_bytes() -> None:
    value = TxnLogValue(1000, 3, 60000, TxnState.ONGOING, {"orders": (1, 0)}, 1700000000123, 1700000000000)
    golden = (struct.pack(">hqhib", 0, 1000, 3, 60000, 1)
              + struct.pack(">i", 1) + struct.pack(">h", 6) + b"orders" + struct.pack(">iii", 2, 0, 1)
              + struct.pack(">qq", 1700000000123, 1700000000000))
    assert encode_value(value) == golden
    assert decode_value(golden) == TxnLogValue(1000, 3, 60000, TxnState.ONGOING, {"orders": (0, 1)},
                                               1700000000123, 1700000000000)


def test_empty_state_writes_null_partitions() -> None:
    raw = encode_value(TxnLogValue(5, 0, 1000, TxnState.EMPTY, {}, 10, -1))
    assert raw[2 + 8 + 2 + 4 + 1:][:4] == struct.pack(">i", -1)
    assert decode_value(raw).partitions == {}


def test_value_v1_flexible_with_tagged_fields_is_read() -> None:
    # version 1: compact array (count+1), compact string (len+1), tagged fields after the struct and
    # the record: tag 0 PreviousProducerId, tag 2 ClientTransactionVersion.
    raw = (struct.pack(">hqhib", 1, 77, 2, 30000, 4)
           + bytes([2]) + bytes([2]) + b"t" + bytes([2]) + struct.pack(">i", 3) + bytes([0])
           + struct.pack(">qq", 99, 98)
           + bytes([2]) + bytes([0, 8]) + struct.pack(">q", 76) + bytes([2, 2]) + struct.pack(">h", 1))
    v = decode_value(raw)
    assert (v.producer_id, v.producer_epoch, v.state, v.partitions) == (77, 2, TxnState.COMPLETE_COMMIT, {"t": (3,)})
    assert (v.previous_producer_id, v.client_transaction_version, v.last_update_ms, v.start_ms) == (76, 1, 99, 98)


def test_value_v1_golden_bytes() -> None:
    # Kafka's TransactionLogValue at version 1 (flexible), laid out by hand from
    # transaction-coordinator/src/main/resources/common/message/TransactionLogValue.json: compact
    # nullable array, compact string, each PartitionsSchema ending in an empty tag buffer, then the
    # record's tagged fields in tag order (0 PreviousProducerId, 1 NextProducerId, 2
    # ClientTransactionVersion), each as uvarint tag, uvarint size, value.
    value = TxnLogValue(5000, 32767, 60000, TxnState.PREPARE_COMMIT, {"orders": (1, 0), "a": (7,)},
                        1700000000123, 1700000000000, previous_producer_id=4999, next_producer_id=5001,
                        client_transaction_version=2)
    golden = (struct.pack(">hqhib", 1, 5000, 32767, 60000, 2)
              + bytes([3])  # two topics
              + bytes([2]) + b"a" + bytes([2]) + struct.pack(">i", 7) + bytes([0])
              + bytes([7]) + b"orders" + bytes([3]) + struct.pack(">ii", 0, 1) + bytes([0])
              + struct.pack(">qq", 1700000000123, 1700000000000)
              + bytes([3])
              + bytes([0, 8]) + struct.pack(">q", 4999)
              + bytes([1, 8]) + struct.pack(">q", 5001)
              + bytes([2, 2]) + struct.pack(">h", 2))
    assert encode_value(value, version=1) == golden
    assert decode_value(golden) == TxnLogValue(5000, 32767, 60000, TxnState.PREPARE_COMMIT,
                                               {"a": (7,), "orders": (0, 1)}, 1700000000123, 1700000000000,
                                               4999, 5001, 2)
    # Defaults are left out of the tag buffer; Empty writes a null array (compact length 0).
    empty = TxnLogValue(5000, 3, 60000, TxnState.EMPTY, {}, 10, -1)
    assert encode_value(empty, version=1) == (struct.pack(">hqhib", 1, 5000, 3, 60000, 0) + bytes([0])
                                              + struct.pack(">qq", 10, -1) + bytes([0]))
    assert decode_value(encode_value(empty, version=1)) == empty


def test_partition_is_javas_string_hash() -> None:
    # "tx" hashCode = 't'*31 + 'x' = 116*31 + 120 = 3716
    assert partition_for_transactional_id("tx", 50) == 3716 % 50


def test_state_names_are_kafkas() -> None:
    assert [s.kafka_name for s in TxnState] == ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort",
                                                "CompleteCommit", "CompleteAbort", "Dead", "PrepareEpochFence"]


def meta(state: TxnState, epoch: int = 3) -> TxnMetadata:
    return TxnMetadata("tx", 1000, epoch, 60000, state, {("t", 0)} if state is TxnState.ONGOING else set(), 100, 100,
                       last_producer_epoch=epoch - 1)


def test_init_producer_id_bumps_fences_and_recovers() -> None:
    d = rules.init_producer_id(meta(TxnState.COMPLETE_COMMIT), 1000, -1, -1, 500)
    assert isinstance(d, rules.InitDecision) and d.target.producer_epoch == 4 and d.target.state is TxnState.EMPTY
    # KIP-360: the current id and epoch bump; the previous epoch is a retry (no bump); others are fenced.
    d = rules.init_producer_id(meta(TxnState.EMPTY), 1000, 1000, 3, 500)
    assert isinstance(d, rules.InitDecision) and d.target.producer_epoch == 4
    d = rules.init_producer_id(meta(TxnState.EMPTY), 1000, 1000, 2, 500)
    assert isinstance(d, rules.InitDecision) and d.target.producer_epoch == 3
    assert rules.init_producer_id(meta(TxnState.EMPTY), 1000, 1000, 1, 500) == Code.PRODUCER_FENCED
    assert rules.init_producer_id(meta(TxnState.EMPTY), 1000, 999, 3, 500) == Code.PRODUCER_FENCED
    assert rules.init_producer_id(meta(TxnState.PREPARE_COMMIT), 1000, -1, -1, 500) == Code.CONCURRENT_TRANSACTIONS
    d = rules.init_producer_id(meta(TxnState.ONGOING), 1000, -1, -1, 500)
    assert isinstance(d, rules.InitDecision) and d.fence_ongoing
    d = rules.init_producer_id(meta(TxnState.EMPTY, epoch=rules.MAX_EPOCH - 1), 1000, -1, -1, 500)
    assert isinstance(d, rules.InitDecision) and d.rotate_producer_id and d.target.producer_epoch == 0


def test_end_txn_and_add_partitions_rules() -> None:
    assert rules.end_txn(meta(TxnState.ONGOING), True) is None
    assert rules.end_txn(meta(TxnState.EMPTY), True) == Code.INVALID_TXN_STATE
    assert rules.end_txn(meta(TxnState.COMPLETE_COMMIT), True) == Code.NONE
    assert rules.end_txn(meta(TxnState.COMPLETE_COMMIT), False) == Code.INVALID_TXN_STATE
    assert rules.end_txn(meta(TxnState.PREPARE_ABORT), False) == Code.CONCURRENT_TRANSACTIONS
    assert rules.add_partitions(meta(TxnState.ONGOING), [("t", 0)], 1) is None
    target = rules.add_partitions(meta(TxnState.COMPLETE_ABORT), [("t", 1)], 7)
    assert isinstance(target, TxnMetadata)
    assert (target.state, target.partitions, target.start_ms) == (TxnState.ONGOING, {("t", 1)}, 7)
    assert rules.add_partitions(meta(TxnState.PREPARE_COMMIT), [("t", 1)], 7) == Code.CONCURRENT_TRANSACTIONS
    assert rules.timed_out(meta(TxnState.ONGOING), 100 + 60001)
    assert not rules.timed_out(meta(TxnState.ONGOING), 100 + 60000)
    assert rules.expired(meta(TxnState.COMPLETE_COMMIT), 200, 100)
    assert not rules.expired(meta(TxnState.ONGOING), 10**9, 100)


def test_verification_answers_are_kafkas_per_state_and_version() -> None:
    ongoing = meta(TxnState.ONGOING)
    assert rules.verify_partitions(ongoing, 1000, 3, [("t", 0), ("t", 1)]) == {
        ("t", 0): Code.NONE, ("t", 1): Code.TRANSACTION_ABORTABLE}
    assert rules.verify_partitions(None, 1000, 3, [("t", 0)]) == {("t", 0): Code.INVALID_PRODUCER_ID_MAPPING}
    assert rules.verify_partitions(ongoing, 999, 3, [("t", 0)]) == {("t", 0): Code.INVALID_PRODUCER_ID_MAPPING}
    assert rules.verify_partitions(ongoing, 1000, 2, [("t", 0)]) == {("t", 0): Code.PRODUCER_FENCED}
    # Prepare*: the whole request is CONCURRENT_TRANSACTIONS, even for partitions of the transaction.
    for state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
        preparing = meta(state)
        preparing.partitions = {("t", 0)}
        assert rules.verify_partitions(preparing, 1000, 3, [("t", 0), ("t", 1)]) == {
            ("t", 0): Code.CONCURRENT_TRANSACTIONS, ("t", 1): Code.CONCURRENT_TRANSACTIONS}
    # No transaction open: nothing is in it.
    assert rules.verify_partitions(meta(TxnState.COMPLETE_COMMIT), 1000, 3, [("t", 0)]) == {
        ("t", 0): Code.TRANSACTION_ABORTABLE}
    # What a partition leader tells its client.
    assert rules.verification_error(Code.TRANSACTION_ABORTABLE, abortable_known=False) == Code.INVALID_TXN_STATE
    assert rules.verification_error(Code.TRANSACTION_ABORTABLE, abortable_known=True) == Code.TRANSACTION_ABORTABLE
    assert rules.verification_error(Code.PRODUCER_FENCED, abortable_known=True) == Code.INVALID_PRODUCER_EPOCH
    assert rules.produce_verification_error(Code.TRANSACTION_ABORTABLE, 10) == Code.INVALID_TXN_STATE
    assert rules.produce_verification_error(Code.TRANSACTION_ABORTABLE, 11) == Code.TRANSACTION_ABORTABLE
    assert rules.produce_verification_error(Code.CONCURRENT_TRANSACTIONS, 11) == Code.NOT_ENOUGH_REPLICAS
    assert rules.produce_verification_error(Code.INVALID_PRODUCER_ID_MAPPING, 9) == Code.INVALID_PRODUCER_ID_MAPPING


def test_tv2_end_bumps_the_epoch_and_rotates_the_id_when_exhausted() -> None:
    ongoing = meta(TxnState.ONGOING, epoch=5)
    prepare = rules.prepare_end(ongoing, True, 200, client_transaction_version=2)
    assert (prepare.state, prepare.producer_epoch, prepare.last_producer_epoch) == (TxnState.PREPARE_COMMIT, 6, 5)
    assert prepare.client_transaction_version == 2 and prepare.partitions == {("t", 0)}
    done = rules.complete_end(prepare, 300)
    assert (done.state, done.producer_id, done.producer_epoch, done.partitions) == (
        TxnState.COMPLETE_COMMIT, 1000, 6, set())
    # TV0/TV1 (EndTxn v4 and below): the epoch stays.
    assert rules.prepare_end(ongoing, False, 200, client_transaction_version=0).producer_epoch == 5
    # Exhausted: Prepare* goes to the last epoch with the next id recorded; Complete* hands over at 0.
    last = meta(TxnState.ONGOING, epoch=rules.MAX_EPOCH - 1)
    assert rules.epoch_exhausted(last.producer_epoch)
    prepare = rules.prepare_end(last, True, 200, client_transaction_version=2, next_producer_id=2000)
    assert (prepare.producer_id, prepare.producer_epoch, prepare.next_producer_id) == (1000, rules.MAX_EPOCH, 2000)
    assert prepare.to_value().next_producer_id == 2000
    done = rules.complete_end(prepare, 300)
    assert (done.producer_id, done.producer_epoch, done.last_producer_id, done.next_producer_id) == (2000, 0, 1000, -1)
    # A retry of that EndTxn carries the old id at the epoch before the bump: answered, not fenced.
    assert rules.check_end_txn_producer(done, 1000, rules.MAX_EPOCH - 1) is None
    assert rules.check_end_txn_producer(done, 1000, 7) == Code.INVALID_PRODUCER_ID_MAPPING


def test_tv2_end_txn_epoch_checks() -> None:
    ongoing = meta(TxnState.ONGOING, epoch=5)
    assert rules.check_end_txn_producer(ongoing, 1000, 5) is None
    assert rules.check_end_txn_producer(ongoing, 1000, 4) == Code.PRODUCER_FENCED
    assert rules.check_end_txn_producer(None, 1000, 5) == Code.INVALID_PRODUCER_ID_MAPPING
    ended = rules.complete_end(rules.prepare_end(ongoing, True, 1, client_transaction_version=2), 2)
    # After a TV2 end the producer's own epoch (5) is a retry; with the new one (6) there is no
    # transaction to end, which Kafka answers PRODUCER_FENCED under TV2 (only retries are valid there).
    assert rules.check_end_txn_producer(ended, 1000, 5) is None
    assert rules.end_txn(ended, True) == Code.NONE
    assert rules.check_end_txn_producer(ended, 1000, 4) == Code.PRODUCER_FENCED
    assert rules.check_end_txn_producer(ended, 1000, 6) == Code.PRODUCER_FENCED
    preparing = rules.prepare_end(ongoing, True, 1, client_transaction_version=2)
    assert rules.check_end_txn_producer(preparing, 1000, 5) is None
    assert rules.end_txn(preparing, True) == Code.CONCURRENT_TRANSACTIONS
    assert rules.check_end_txn_producer(preparing, 1000, 6) == Code.PRODUCER_FENCED
