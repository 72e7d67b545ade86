"""The consume-transform-produce application of the exactly-once crash loop, as its own process so that
it can be SIGKILLed like the broker:

    python -m tests.reliability.txn_app BOOTSTRAP PARTITIONS

It reads ``eos-in`` (read_committed, offsets of group ``eos-app``), writes ``out-<value>`` to ``eos-out``
in one transaction per batch with ``send_offsets_to_transaction``, rewinds to its committed offsets after
every failed transaction and builds a new producer after a fatal error, as a Kafka Streams task does. A
new process with the same ``transactional.id`` fences the killed one and aborts what it left open. Each
outcome is one line on stdout (``commit``, ``abort``, ``restart ...``) for the harness to count; SIGTERM
ends it after the current transaction.

librdkafka (2.16) can block in ``send_offsets_to_transaction`` long past its timeout when the broker
restarted during the transaction: the request to the group coordinator waits for a broker state change
that no longer comes once every connection is up again (confluentinc/librdkafka#5456: the timeout of a
coordinator request is never checked). The application cannot interrupt that call, so a watchdog ends
the process (``hang ...``, exit status 3) when a call stays blocked ``HANG_MARGIN_S`` past its own
timeout, as a crash; the harness starts a new process, which fences the stuck producer's epoch.
``TIERLOG_TXN_APP_DEBUG`` sets librdkafka's ``debug`` (e.g. ``eos,broker,protocol``) to see it happen.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

IN_TOPIC, OUT_TOPIC, GROUP, TXN_ID = "eos-in", "eos-out", "eos-app", "eos-app-0"
#: How long the transactional calls may take (librdkafka answers a retriable timeout error after it).
CALL_TIMEOUT_S = 60.0
#: How long past its timeout a call may stay blocked before the watchdog ends the process.
HANG_MARGIN_S = 15.0
HANG_EXIT_STATUS = 3


def say(line: str) -> None:
    print(line, flush=True)


class Watchdog:
    """Ends the process when a watched call is still blocked ``HANG_MARGIN_S`` after its timeout."""

    def __init__(self) -> None:
        self._call: tuple[str, float] | None = None
        threading.Thread(target=self._run, name="watchdog", daemon=True).start()

    @contextmanager
    def watch(self, what: str, timeout_s: float = CALL_TIMEOUT_S) -> Iterator[None]:
        self._call = (what, time.monotonic() + timeout_s + HANG_MARGIN_S)
        try:
            yield
        finally:
            self._call = None

    def _run(self) -> None:
        while True:
            time.sleep(1.0)
            call = self._call
            if call is not None and time.monotonic() > call[1]:
                say(f"hang: {call[0]} still blocked {HANG_MARGIN_S:.0f}s past its timeout; exiting")
                os._exit(HANG_EXIT_STATUS)


class App:
    def __init__(self, bootstrap: str, partitions: int) -> None:
        self.bootstrap = bootstrap
        self.partitions = partitions
        self.stop = threading.Event()
        self.producer: Producer | None = None
        self.consumer: Consumer | None = None
        self.watchdog = Watchdog()

    def _open(self) -> None:
        config = {"bootstrap.servers": self.bootstrap, "transactional.id": TXN_ID, "linger.ms": 5,
                  "transaction.timeout.ms": 10000, "message.timeout.ms": 10000}
        if os.environ.get("TIERLOG_TXN_APP_DEBUG"):
            config["debug"] = os.environ["TIERLOG_TXN_APP_DEBUG"]
        self.producer = Producer(config)
        with self.watchdog.watch("init_transactions"):
            self.producer.init_transactions(CALL_TIMEOUT_S)
        self.consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                                  "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
        self._rewind()

    def _rewind(self) -> None:
        """Start again from the committed offsets (what the last committed transaction consumed)."""
        assert self.consumer is not None
        with self.watchdog.watch("committed"):
            committed = self.consumer.committed([TopicPartition(IN_TOPIC, p) for p in range(self.partitions)],
                                                timeout=CALL_TIMEOUT_S)
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
                        with self.watchdog.watch("abort_transaction"):
                            self.producer.abort_transaction(CALL_TIMEOUT_S)
                        say("abort")
                        self._rewind()
                        continue
                    except KafkaException as again:
                        say(f"note abort failed: {again.args[0]}")
                if error.retriable() and not error.fatal() and not error.txn_requires_abort():
                    # A commit whose outcome is unknown: retrying the call finishes it (librdkafka).
                    try:
                        assert self.producer is not None
                        with self.watchdog.watch("commit_transaction (retried)"):
                            self.producer.commit_transaction(CALL_TIMEOUT_S)
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
        with self.watchdog.watch("send_offsets_to_transaction"):
            producer.send_offsets_to_transaction([tp for tp in positions if tp.offset >= 0],
                                                 consumer.consumer_group_metadata(), CALL_TIMEOUT_S)
        with self.watchdog.watch("commit_transaction"):
            producer.commit_transaction(CALL_TIMEOUT_S)
        say("commit")


def main(argv: list[str]) -> int:
    app = App(argv[0], int(argv[1]))
    signal.signal(signal.SIGTERM, lambda *_: app.stop.set())
    say("started")
    app.run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
