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
