"""Exactly once under crashes: a consume-transform-produce application (confluent-kafka, a
transaction per batch with ``send_offsets_to_transaction``) runs while the broker is SIGKILLed at
random moments; afterwards the output topic read ``read_committed`` must hold every input record
exactly once. The application rewinds to its committed offsets after every failed transaction (and
builds a new producer after a fatal error), as a Kafka Streams task does.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.reliability.harness import ChaosBroker, create_topic, wait_until

IN_TOPIC, OUT_TOPIC, GROUP, TXN_ID = "eos-in", "eos-out", "eos-app", "eos-app-0"


@dataclass
class TxnLoopResult:
    inputs: int
    kills: int = 0
    commits: int = 0
    aborts: int = 0
    fatal_restarts: int = 0
    lost: int = 0
    duplicated: int = 0
    finished: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.finished and self.lost == 0 and self.duplicated == 0


class _App:
    def __init__(self, bootstrap: str, partitions: int, result: TxnLoopResult) -> None:
        self.bootstrap = bootstrap
        self.partitions = partitions
        self.result = result
        self.stop = threading.Event()
        self.producer: Producer | None = None
        self.consumer: Consumer | None = None

    def _open(self) -> None:
        self.producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": TXN_ID, "linger.ms": 5,
                                  "transaction.timeout.ms": 10000, "message.timeout.ms": 10000})
        self.producer.init_transactions(60)
        self.consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                                  "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
        self._rewind()

    def _rewind(self) -> None:
        """Start again from the committed offsets (what the last committed transaction consumed)."""
        assert self.consumer is not None
        committed = self.consumer.committed([TopicPartition(IN_TOPIC, p) for p in range(self.partitions)], timeout=60)
        self.consumer.assign([TopicPartition(IN_TOPIC, tp.partition, tp.offset if tp.offset >= 0 else 0)
                              for tp in committed])

    def _close(self) -> None:
        if self.consumer is not None:
            try:
                self.consumer.close()
            except Exception:
                pass
        self.consumer = self.producer = None

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                if self.producer is None:
                    self._open()
                self._one_transaction()
            except KafkaException as e:
                error = e.args[0]
                if self.producer is not None and not error.fatal() and error.txn_requires_abort():
                    try:
                        self.producer.abort_transaction(60)
                        self.result.aborts += 1
                        self._rewind()
                        continue
                    except KafkaException as again:
                        self.result.notes.append(f"abort failed: {again.args[0]}")
                if error.retriable() and not error.fatal() and not error.txn_requires_abort():
                    # A commit whose outcome is unknown: retrying the call finishes it (librdkafka).
                    try:
                        assert self.producer is not None
                        self.producer.commit_transaction(60)
                        self.result.commits += 1
                        continue
                    except KafkaException as again:
                        self.result.notes.append(f"commit retry failed: {again.args[0]}")
                self.result.fatal_restarts += 1
                self.result.notes.append(f"restart after {error}")
                self._close()
            except Exception as e:  # a timeout in the client, a closed handle: start over
                self.result.fatal_restarts += 1
                self.result.notes.append(f"restart after {type(e).__name__}: {e}")
                self._close()
        self._close()

    def _one_transaction(self) -> None:
        consumer, producer = self.consumer, self.producer
        assert consumer is not None and producer is not None
        messages = [m for m in consumer.consume(50, 0.5) if m.error() is None]
        if not messages:
            return
        producer.begin_transaction()
        for m in messages:
            producer.produce(OUT_TOPIC, value=b"out-" + m.value(), partition=m.partition())
        positions = consumer.position([TopicPartition(IN_TOPIC, p) for p in range(self.partitions)])
        producer.send_offsets_to_transaction([tp for tp in positions if tp.offset >= 0],
                                             consumer.consumer_group_metadata(), 60)
        producer.commit_transaction(60)
        self.result.commits += 1


def _committed_total(bootstrap: str, partitions: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(IN_TOPIC, p) for p in range(partitions)], timeout=10)
        return sum(max(tp.offset, 0) for tp in got)
    except KafkaException:
        return -1
    finally:
        c.close()


def _read_output(bootstrap: str, partitions: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-verifier", "isolation.level": "read_committed",
                  "enable.auto.commit": False})
    try:
        ends = [c.get_watermark_offsets(TopicPartition(OUT_TOPIC, p), timeout=30)[1] for p in range(partitions)]
        c.assign([TopicPartition(OUT_TOPIC, p, 0) for p in range(partitions)])
        out: list[bytes] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                if m.error() is None:
                    out.append(m.value())
            positions = c.position([TopicPartition(OUT_TOPIC, p) for p in range(partitions)])
            if all(tp.offset >= end for tp, end in zip(positions, ends, strict=True)):
                break
        return out
    finally:
        c.close()


def run_txn_loop(data_dir: Path, *, inputs: int, kills: int, partitions: int = 2, max_uptime_s: float = 3.0,
                 seed: int = 0, timeout_s: float = 240.0) -> TxnLoopResult:
    rng = random.Random(seed)
    result = TxnLoopResult(inputs)
    broker = ChaosBroker(data_dir, {"transaction.state.log.num.partitions": "3",
                                    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}).start()
    try:
        create_topic(broker.port, IN_TOPIC, partitions)
        create_topic(broker.port, OUT_TOPIC, partitions)
        p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5})
        for i in range(inputs):
            p.produce(IN_TOPIC, value=f"{i}".encode(), partition=i % partitions)
        assert p.flush(60) == 0
        app = _App(broker.bootstrap, partitions, result)
        worker = threading.Thread(target=app.run, daemon=True)
        worker.start()
        deadline = time.monotonic() + timeout_s
        while result.kills < kills and time.monotonic() < deadline:
            time.sleep(rng.uniform(0.5, max_uptime_s))
            broker.sigkill()
            result.kills += 1
            broker.start()
        result.finished = wait_until(lambda: _committed_total(broker.bootstrap, partitions) >= inputs,
                                     max(deadline - time.monotonic(), 10))
        app.stop.set()
        worker.join(120)
        counts = Counter(_read_output(broker.bootstrap, partitions))
        expected = {f"out-{i}".encode() for i in range(inputs)}
        result.lost = len(expected - set(counts))
        result.duplicated = sum(n - 1 for n in counts.values() if n > 1) + sum(
            n for v, n in counts.items() if v not in expected)
        return result
    finally:
        if broker.alive():
            broker.stop()
