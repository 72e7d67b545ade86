"""A SIGKILL at each step of EndTxn recovers to the decision: a complete commit (or abort).

A real ``tierlog serve`` is started with ``TIERLOG_TEST_CRASH_AT`` naming one of the coordinator's
crash steps -- PrepareCommit/PrepareAbort written and no marker; the first partition's marker written
and the others not; every marker written and no Complete* record -- and a confluent-kafka
transactional producer writes to two partitions, adds its group's offsets and commits (or aborts).
The broker SIGKILLs itself at that step. The files it leaves are checked to hold exactly that step
(the last state record is Prepare*, and 0, 1 or 3 of the three partitions hold a marker). A broker
started again on the directory must finish the transaction before it answers for the id:
read_committed consumers see all of its records (or none, for an abort), the LSO is back at the log
end, the pending offsets are committed (or dropped), DescribeTransactions says CompleteCommit (or
CompleteAbort), and so does the last record of the id in ``__transaction_state``.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker import BrokerProcess
from tests.helpers.raw_client import RawClient
from tierlog.protocol import ApiKey
from tierlog.records import iter_batches
from tierlog.server.broker import CRASH_AT_ENV
from tierlog.server.groups.records import partition_for_group
from tierlog.server.partitions import CONSUMER_OFFSETS_TOPIC
from tierlog.server.txn.coordinator import CRASH_STEPS
from tierlog.server.txn.records import (
    TRANSACTION_STATE_TOPIC,
    TxnLogValue,
    TxnState,
    decode_key,
    decode_value,
    partition_for_transactional_id,
)

TOPIC, TXN_ID, GROUP = "recover", "tx-recover", "recover-group"
STATE_PARTITIONS, OFFSETS_PARTITIONS = 3, 10
OVERRIDES = {"transaction.state.log.num.partitions": str(STATE_PARTITIONS),
             "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS)}
#: The markers on disk when the broker died at each step (of the transaction's three partitions).
MARKERS_AT_CRASH = {"end-txn-after-prepare": 0, "end-txn-between-markers": 1, "end-txn-before-complete": 3}


def batches(partition_dir: Path) -> list[tuple[bool, list[tuple[bytes | None, bytes | None]]]]:
    """(is control, [(key, value)]) of every batch in the partition's segment files, in order."""
    out = []
    for segment in sorted(partition_dir.glob("*.log")):
        for header, records in iter_batches(segment.read_bytes()):
            out.append((header.is_control, [(r.key, r.value) for r in records]))
    return out


def markers_in(data_dir: Path, tp: tuple[str, int]) -> int:
    return sum(1 for control, _ in batches(data_dir / f"{tp[0]}-{tp[1]}") if control)


def last_state(data_dir: Path) -> TxnLogValue:
    """The last value of TXN_ID in its ``__transaction_state`` partition, read from the files."""
    partition = partition_for_transactional_id(TXN_ID, STATE_PARTITIONS)
    values = [decode_value(v) for _, records in batches(data_dir / f"{TRANSACTION_STATE_TOPIC}-{partition}")
              for k, v in records if k is not None and v is not None and decode_key(k) == TXN_ID]
    assert values, "no state record of the transactional id on disk"
    return values[-1]


def run_transaction_into_crash(broker: BrokerProcess, commit: bool) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(TOPIC, 2, 1)]).values():
        f.result(30)
    group = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": TXN_ID, "linger.ms": 5,
                  "transaction.timeout.ms": 60000})
    try:
        p.init_transactions(30)
        p.begin_transaction()
        for partition in (0, 1):
            for i in range(3):
                p.produce(TOPIC, f"v{partition}-{i}".encode(), partition=partition)
        assert p.flush(30) == 0
        p.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 3)], group.consumer_group_metadata(), 30)
        with pytest.raises(KafkaException):
            # The broker dies inside this call; the client's retries then time out.
            if commit:
                p.commit_transaction(8)
            else:
                p.abort_transaction(8)
    finally:
        group.close()
    assert broker.proc is not None
    assert broker.proc.wait(30) == -signal.SIGKILL, broker.stderr_tail()


def read_committed(bootstrap: str) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "isolation.level": "read_committed",
                  "enable.auto.commit": False})
    try:
        ends = [c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1] for p in (0, 1)]
        c.assign([TopicPartition(TOPIC, p, 0) for p in (0, 1)])
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
            positions = c.position([TopicPartition(TOPIC, p) for p in (0, 1)])
            if all(tp.offset >= end for tp, end in zip(positions, ends, strict=True)):
                break
        return sorted(got)
    finally:
        c.close()


@pytest.mark.parametrize("step", CRASH_STEPS)
@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_a_sigkill_during_end_txn_recovers_to_the_decision(tmp_path: Path, step: str, commit: bool) -> None:
    data_dir = tmp_path / "data"
    crashing = BrokerProcess(data_dir, OVERRIDES, env={CRASH_AT_ENV: step}).start()
    try:
        run_transaction_into_crash(crashing, commit)
    finally:
        crashing.kill()
    assert f"SIGKILL at {step}" in crashing.stderr_tail(200)

    # The files hold exactly the step the broker died at.
    prepared = last_state(data_dir)
    assert prepared.state is (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT)
    offsets_tp = (CONSUMER_OFFSETS_TOPIC, partition_for_group(GROUP, OFFSETS_PARTITIONS))
    assert set(prepared.partitions.items()) == {(TOPIC, (0, 1)), (offsets_tp[0], (offsets_tp[1],))}
    tps = [offsets_tp, (TOPIC, 0), (TOPIC, 1)]
    assert sum(markers_in(data_dir, tp) for tp in tps) == MARKERS_AT_CRASH[step]

    broker = BrokerProcess(data_dir, OVERRIDES).start()
    try:
        with RawClient(broker.port, client_id="recover-check") as c:
            body = c.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [TXN_ID]})
        state = body.transaction_states[0]
        assert (state.error_code, state.transaction_state) == (0, "CompleteCommit" if commit else "CompleteAbort"), \
            broker.stderr_tail()
        expected = sorted(f"v{p}-{i}".encode() for p in (0, 1) for i in range(3)) if commit else []
        # Nothing is left open: the LSO is the log end in both partitions.
        stable = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x", "isolation.level": "read_committed"})
        everything = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "y"})
        try:
            lsos = [stable.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1] for p in (0, 1)]
            hws = [everything.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1] for p in (0, 1)]
            assert lsos == hws and min(lsos) >= 4, (lsos, hws)
        finally:
            stable.close()
            everything.close()
        assert read_committed(broker.bootstrap) == expected
        group = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP, "enable.auto.commit": False})
        try:
            committed = group.committed([TopicPartition(TOPIC, 0)], timeout=10)[0].offset
        finally:
            group.close()
        assert committed == (3 if commit else -1001)
    finally:
        assert broker.stop() == 0, broker.stderr_tail()
    # Every partition of the transaction holds its marker, and the state log ends in Complete*.
    assert all(markers_in(data_dir, tp) >= 1 for tp in tps)
    done = last_state(data_dir)
    assert done.state is (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)
    assert (done.producer_id, done.partitions) == (prepared.producer_id, {})
