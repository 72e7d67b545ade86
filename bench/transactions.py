"""Transactions' cost, measured against the same work without them in the same run (issue 17).

Targets: transactional produce (a transaction every 100 ms) ≥ 0.8× the non-transactional produce of
the same records; ``read_committed`` consume ≥ 0.9× ``read_uncommitted`` consume of the same topic.

    python bench/transactions.py [--records 1000000] [--size 100] [--partitions 1] [--txn-ms 100] [--runs 2]

* produce: confluent-kafka (librdkafka) ``produce_batch`` of ``--size``-byte records, acks=all and
  idempotent in both (a transactional producer is always idempotent, so that is the fair baseline);
  transactional: ``begin_transaction`` … ``commit_transaction`` every ``--txn-ms`` ms, timed from the
  first record to the last commit; non-transactional: timed from the first record to ``flush``.
* consume: confluent-kafka ``Consumer.consume`` of the transactional topic (data and commit markers),
  ``isolation.level`` read_committed against read_uncommitted, timed from the first record to the last.

Each figure is the best of ``--runs`` runs, baseline and transactional interleaved (each pair in
alternating order); the broker runs as its
own process and shares the machine's two cores with the client.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from _common import command_line, report
from clients import CONSUMER_TUNING, create_topic, start_broker

CHUNK = 2_000
PRODUCER = {"acks": "all", "enable.idempotence": True, "linger.ms": 5, "batch.size": 1_000_000,
            "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_000_000,
            "compression.type": "none"}


def _producer(bootstrap: str, extra: dict[str, Any]) -> tuple[Producer, list[int]]:
    failed = [0]
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER, **extra,
                         "error_cb": lambda err: print(f"producer error: {err}", file=sys.stderr)})
    return producer, failed


def produce(bootstrap: str, topic: str, records: int, size: int, partitions: int, txn_ms: float | None) -> tuple[float, int]:
    """Records per second, and the number of transactions committed (0 without transactions)."""
    extra = {"transactional.id": f"bench-{topic}"} if txn_ms is not None else {}
    producer, failed = _producer(bootstrap, extra)

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failed[0] += 1

    producer.list_topics(topic, timeout=10)  # connect before the clock starts
    if txn_ms is not None:
        producer.init_transactions(30)
    chunk = [{"value": os.urandom(size)} for _ in range(CHUNK)]
    txns = 0
    start = time.perf_counter()
    if txn_ms is not None:
        producer.begin_transaction()
    txn_start = start
    sent = 0
    while sent < records:
        n = min(CHUNK, records - sent)
        producer.produce_batch(topic, chunk[:n], partition=(sent // CHUNK) % partitions, on_delivery=on_delivery)
        sent += n
        producer.poll(0)
        if txn_ms is not None and (time.perf_counter() - txn_start) * 1000 >= txn_ms:
            producer.commit_transaction(60)
            txns += 1
            producer.begin_transaction()
            txn_start = time.perf_counter()
    if txn_ms is not None:
        producer.commit_transaction(60)
        txns += 1
    left = producer.flush(300)
    elapsed = time.perf_counter() - start
    if left or failed[0]:
        raise SystemExit(f"{left} records not delivered, {failed[0]} failed")
    return records / elapsed, txns


def consume(bootstrap: str, topic: str, records: int, partitions: int, isolation: str) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{topic}-{isolation}",
                         "enable.auto.commit": False, "isolation.level": isolation, **CONSUMER_TUNING})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got, start = 0, 0.0
    deadline = time.monotonic() + 300
    while got < records and time.monotonic() < deadline:
        msgs = consumer.consume(num_messages=10_000, timeout=1.0)
        if msgs and not start:
            start = time.perf_counter()  # the clock starts with the first records
        got += sum(1 for m in msgs if m.error() is None)
    elapsed = time.perf_counter() - start
    consumer.close()
    if got != records:
        raise SystemExit(f"{isolation}: consumed {got} of {records}")
    return got / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100, help="record value size in bytes")
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--txn-ms", type=float, default=100.0, help="length of each transaction")
    ap.add_argument("--runs", type=int, default=2, help="runs of each figure; the best counts")
    ap.add_argument("--data-dir", type=Path, help="where the broker keeps its logs (default: a temp dir)")
    args = ap.parse_args()
    print(f"command: {command_line()}", flush=True)
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="tierlog-bench-txn-"))
    proc, bootstrap = start_broker(data_dir)
    try:
        plain_rates, txn_rates, committed_rates, uncommitted_rates = [], [], [], []
        txn_topic = ""
        for run in range(args.runs):
            plain_topic, txn_topic = f"bench-plain-{run}-{int(time.time())}", f"bench-txn-{run}-{int(time.time())}"
            create_topic(bootstrap, plain_topic, args.partitions)
            create_topic(bootstrap, txn_topic, args.partitions)
            txns = 0
            for transactional in (False, True)[:: 1 if run % 2 == 0 else -1]:  # alternating who goes first
                if transactional:
                    rate, txns = produce(bootstrap, txn_topic, args.records, args.size, args.partitions, args.txn_ms)
                    txn_rates.append(rate)
                else:
                    plain_rates.append(produce(bootstrap, plain_topic, args.records, args.size, args.partitions,
                                               None)[0])
            print(f"run {run + 1}: produce {plain_rates[-1]:,.0f} plain, {txn_rates[-1]:,.0f} transactional "
                  f"records/s ({txns} transactions)", flush=True)
            # Which isolation level reads first alternates run by run (the first read warms the caches).
            for isolation in ("read_uncommitted", "read_committed")[:: 1 if run % 2 == 0 else -1]:
                rate = consume(bootstrap, txn_topic, args.records, args.partitions, isolation)
                (committed_rates if isolation == "read_committed" else uncommitted_rates).append(rate)
            print(f"run {run + 1}: consume {uncommitted_rates[-1]:,.0f} read_uncommitted, "
                  f"{committed_rates[-1]:,.0f} read_committed records/s", flush=True)
        print(f"-- {args.records:,} records of {args.size} bytes, {args.partitions} partition(s), transactions of "
              f"{args.txn_ms:.0f} ms, best of {args.runs}", flush=True)
        report("transactional produce", max(txn_rates), "records/s", "idempotent produce", max(plain_rates))
        report("read_committed consume", max(committed_rates), "records/s", "read_uncommitted consume",
               max(uncommitted_rates))
    finally:
        proc.terminate()
        proc.wait(60)
        if args.data_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
