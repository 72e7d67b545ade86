"""Kafka 4.3.1's Java producer with ``transaction.version`` 2 (KIP-890 part 2) against tierlog.

tests/jvm/java/TxnV2Check.java finalizes transaction.version=2 with the Admin client, then runs five
transactions with one producer (the third aborted), each writing two partitions and committing a
group offset -- the producer sends no AddPartitionsToTxn or AddOffsetsToTxn under TV2 (Produce v12
and TxnOffsetCommit v5 add the partitions) and ends each with EndTxn v5. After each end
DescribeTransactions and DescribeProducers must show the same producer id with the epoch one higher
(the bump at Prepare*, carried by the markers), and a read_committed consumer reads exactly the
committed records.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.broker import BrokerProcess
from tests.jvm.kafka import compiled_classes, java_command

TRANSACTIONS = 5


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", {"transaction.state.log.num.partitions": "3"}).start()
    yield b
    if b.alive():
        assert b.stop() == 0, b.stderr_tail()


def test_java_producer_bumps_the_epoch_per_transaction_under_tv2(kafka_jars: None, broker: BrokerProcess) -> None:
    proc = subprocess.run(java_command("TxnV2Check", [broker.bootstrap, "tv2-java", "tv2-java-txn", str(TRANSACTIONS)],
                                       extra_cp=[compiled_classes()]), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"TxnV2Check failed:\n{proc.stdout}\n{proc.stderr[-4000:]}\n{broker.stderr_tail()}"
    ends = [m.groups() for m in re.finditer(r"^epoch: (\w+) (\w+) (\d+) (\d+) (\d+)$", proc.stdout, re.MULTILINE)]
    assert len(ends) == TRANSACTIONS, proc.stdout
    assert [(kind, state) for kind, state, *_ in ends] == [
        ("commit", "CompleteCommit"), ("commit", "CompleteCommit"), ("abort", "CompleteAbort"),
        ("commit", "CompleteCommit"), ("commit", "CompleteCommit")]
    assert len({pid for _, _, pid, _, _ in ends}) == 1, ends
    # initTransactions gives epoch 0; each end bumps it by one, in the coordinator and on the partition.
    assert [(int(coordinator), int(partition)) for *_, coordinator, partition in ends] == [
        (t, t) for t in range(1, TRANSACTIONS + 1)]
    assert "ok: group offset 5" in proc.stdout
    assert "ok: read_committed 40 of 40 committed" in proc.stdout
