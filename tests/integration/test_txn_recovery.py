"""A crash at each step of EndTxn recovers to a complete commit (or abort).

The on-disk state a SIGKILL leaves at each step is built with an in-process broker driving its own
coordinator up to that step -- PrepareCommit written and no marker, PrepareCommit and the marker in
one of two partitions, every marker but no CompleteCommit -- and the process then stops without
running the rest. ``tierlog serve`` on that directory must finish the transaction before it answers
for the id: read_committed consumers see all of its records (or none, for an abort), the pending
offsets become committed, and DescribeTransactions says CompleteCommit.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.helpers.broker import TEST_OVERRIDES, BrokerProcess
from tests.helpers.raw_client import RawClient
from tierlog.config import BrokerConfig
from tierlog.protocol import ApiKey
from tierlog.records import SimpleRecord, build_batch
from tierlog.server import Broker
from tierlog.server.partitions import CONSUMER_OFFSETS_TOPIC
from tierlog.server.txn.records import TxnState
from tierlog.storage.log_manager import LogManagerSettings
from tierlog.storage.producer_state import AppendOrigin

TOPIC, TXN_ID, GROUP = "recover", "tx-recover", "recover-group"
OVERRIDES = {"transaction.state.log.num.partitions": "3"}


def crash_at(data_dir: Path, step: str, commit: bool) -> None:
    async def run() -> None:
        cfg = BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(data_dir), **TEST_OVERRIDES,
                            **OVERRIDES})
        broker = Broker(cfg, LogManagerSettings())
        await broker.start()
        ctx = broker.ctx
        assert ctx is not None and ctx.transactions is not None and ctx.groups is not None
        txn = ctx.transactions
        await ctx.io.run(ctx.controller.create_topic, TOPIC, 2, 1, {})
        code, pid, epoch = await txn.init_producer_id(TXN_ID, 60000, -1, -1)
        assert code == 0
        codes = await txn.add_partitions(TXN_ID, pid, epoch, [(TOPIC, 0), (TOPIC, 1)])
        assert set(codes.values()) == {0}
        assert await txn.add_offsets(TXN_ID, pid, epoch, GROUP) == 0
        for partition in (0, 1):
            batch = build_batch([SimpleRecord(None, f"v{partition}-{i}".encode(), timestamp=int(time.time() * 1000))
                                 for i in range(3)], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                                is_transactional=True)
            [r] = await ctx.io.run(ctx.partitions.append_blocking, [(TOPIC, partition, batch)],
                                   origin=AppendOrigin.CLIENT)
            assert r.error_code == 0
        assert await ctx.groups.txn_commit(GROUP, "", -1, pid, epoch, [(TOPIC, 0, 3, -1, "")]) == [0]
        meta = txn.txns[TXN_ID]
        prepare = meta.copy()
        prepare.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        assert await txn._transition(meta, prepare) == 0
        if step == "one-marker":
            partial = meta.copy()
            partial.partitions = {(TOPIC, 1)}
            assert await txn._write_markers(partial, commit)
        elif step == "all-markers":
            assert await txn._write_markers(meta, commit)
        else:
            assert step == "prepare"
        offsets_tp = (CONSUMER_OFFSETS_TOPIC, ctx.groups.offsets_partition(GROUP))
        assert offsets_tp in meta.partitions
        await broker.stop()

    asyncio.run(run())


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


@pytest.mark.parametrize("step", ["prepare", "one-marker", "all-markers"])
@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_a_crash_during_end_txn_recovers_to_the_decision(tmp_path: Path, step: str, commit: bool) -> None:
    data_dir = tmp_path / "data"
    crash_at(data_dir, step, commit)
    broker = BrokerProcess(data_dir, OVERRIDES).start()
    try:
        c = RawClient(broker.port, client_id="recover-check")
        body = c.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [TXN_ID]})
        state = body.transaction_states[0]
        assert (state.error_code, state.transaction_state) == (0, "CompleteCommit" if commit else "CompleteAbort")
        expected = sorted(f"v{p}-{i}".encode() for p in (0, 1) for i in range(3)) if commit else []
        # Nothing is left open: the LSO is the log end in both partitions. (Like Kafka, recovery sends
        # every marker again; one that ends no open transaction changes nothing.)
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
