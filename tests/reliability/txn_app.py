"""The consume-transform-produce application of the exactly-once crash loop, as its own process so that
it can be SIGKILLed like the broker:

    python -m tests.reliability.txn_app BOOTSTRAP PARTITIONS

It reads ``eos-in`` (read_committed, offsets of group ``eos-app``), writes ``out-<value>`` to ``eos-out``
in one transaction per batch with ``send_offsets_to_transaction``, rewinds to its committed offsets after
every failed transaction and builds a new producer after a fatal error, as a Kafka Streams task does. A
new process with the same ``transactional.id`` fences the killed one and aborts what it left open. Each
outcome is one line on stdout (``commit``, ``abort``, ``restart ...``) for the harness to count; SIGTERM
ends it after the current transaction.
"""

from __future__ import annotations

import signal
import sys
import threading

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

IN_TOPIC, OUT_TOPIC, GROUP, TXN_ID = "eos-in", "eos-out", "eos-app", "eos-app-0"


def say(line: str) -> None:
    print(line, flush=True)


class App:
    def __init__(self, bootstrap: str, partitions: int) -> None:
        self.bootstrap = bootstrap
        self.partitions = partitions
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
                        say("abort")
                        self._rewind()
                        continue
                    except KafkaException as again:
                        say(f"note abort failed: {again.args[0]}")
                if error.retriable() and not error.fatal() and not error.txn_requires_abort():
                    # A commit whose outcome is unknown: retrying the call finishes it (librdkafka).
                    try:
                        assert self.producer is not None
                        self.producer.commit_transaction(60)
                        say("commit")
                        continue
                    except KafkaException as again:
                        say(f"note commit retry failed: {again.args[0]}")
                say(f"restart after {error}")
                self._close()
            except Exception as e:  # a timeout in the client, a closed handle: start over
                say(f"restart after {type(e).__name__}: {e}")
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
        say("commit")


def main(argv: list[str]) -> int:
    app = App(argv[0], int(argv[1]))
    signal.signal(signal.SIGTERM, lambda *_: app.stop.set())
    say("started")
    app.run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
