"""The load and the watch of the remote-tier fault scenarios (:mod:`tests.reliability.remote_faults`):
an idempotent producer whose acknowledgements are kept, a filler for the topic that gets deleted, a
reader meeting the remote fetch faults, and the watcher of the copy-before-delete promise."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import KafkaError, Producer

from tests.helpers.raw_client import RawClient
from tests.reliability.harness import read_partition
from tests.reliability.remote_view import finished_coverage, local_base_offsets, read_remote_metadata


class Producing(threading.Thread):
    """To ``topic``: unique values ``<n>:<padding>`` at about ``rate`` per second, acks=all, idempotent."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: int, value_bytes: int) -> None:
        super().__init__(daemon=True, name="remote-faults-producer")
        self.bootstrap, self.topic, self.partitions, self.rate = bootstrap, topic, partitions, rate
        self.padding = b"x" * value_bytes
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.acked: dict[int, list[tuple[int, int]]] = {p: [] for p in range(partitions)}
        self.sent = 0
        self.failed = 0
        self.failure_reasons: Counter[str] = Counter()

    def _on_delivery(self, err: KafkaError | None, msg: object) -> None:
        with self.lock:
            if err is not None:
                self.failed += 1
                self.failure_reasons[err.name()] += 1
                return
            value = int(msg.value().split(b":", 1)[0])  # type: ignore[attr-defined]
            self.acked[msg.partition()].append((msg.offset(), value))  # type: ignore[attr-defined]

    def run(self) -> None:
        producer = Producer({
            "bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
            "batch.size": 8192,
            "message.timeout.ms": 300000, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
            "retry.backoff.ms": 50, "retry.backoff.max.ms": 500, "log_level": 0,
        })
        i = 0
        t0 = time.monotonic()
        while not self.stop_event.is_set():
            due = int((time.monotonic() - t0) * self.rate)
            while i < due and not self.stop_event.is_set():
                try:
                    producer.produce(self.topic, value=b"%d:" % i + self.padding, partition=i % self.partitions,
                                     on_delivery=self._on_delivery)
                except BufferError:
                    break
                i += 1
                self.sent = i
            producer.poll(0.01)
        producer.flush(120)

    def snapshot(self) -> dict[int, list[tuple[int, int]]]:
        with self.lock:
            return {p: list(v) for p, v in self.acked.items()}


class Filling(threading.Thread):
    """Keeps a topic rolling segments (acknowledgements not tracked: the topic is to be deleted)."""

    def __init__(self, bootstrap: str, topic: str, rate: int, value_bytes: int) -> None:
        super().__init__(daemon=True, name="remote-faults-filler")
        self.bootstrap, self.topic, self.rate, self.value = bootstrap, topic, rate, b"d" * value_bytes
        self.stop_event = threading.Event()

    def run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, "batch.size": 8192,
                             "message.timeout.ms": 30000, "log_level": 0})
        t0 = time.monotonic()
        i = 0
        while not self.stop_event.is_set():
            while i < int((time.monotonic() - t0) * self.rate):
                try:
                    producer.produce(self.topic, value=self.value)
                except BufferError:
                    break
                i += 1
            producer.poll(0.01)
        producer.flush(30)


class Watching(threading.Thread):
    """Checks, over and over, that no offset below the first local segment is missing from the
    FINISHED remote segments. The local directory is read first and the metadata after it: a
    correct broker records FINISHED before it deletes, so it can never fail this check, while a
    local deletion of anything the remote tier does not hold fails it for good."""

    def __init__(self, data_dir: Path, topic: str, partitions: int, interval_s: float = 0.02) -> None:
        super().__init__(daemon=True, name="remote-faults-watcher")
        self.data_dir, self.topic, self.partitions, self.interval_s = data_dir, topic, partitions, interval_s
        self.stop_event = threading.Event()
        self.checks = 0
        #: The most local segments a partition had at once: the copy backlog plus the active one.
        self.max_local_segments = 0
        self.violations: list[str] = []
        self.error: BaseException | None = None

    def check_once(self) -> None:
        bases = {p: local_base_offsets(self.data_dir, self.topic, p) for p in range(self.partitions)}
        segments = read_remote_metadata(self.data_dir, self.topic)
        self.max_local_segments = max([self.max_local_segments, *(len(local) for local in bases.values())])
        for p, local in bases.items():
            if not local or local[0] == 0:
                continue
            covered = finished_coverage(segments, p)
            if covered < local[0]:
                self.violations.append(f"partition {p}: local log starts at {local[0]} but the remote tier "
                                       f"holds only [0, {covered}) in FINISHED segments")
        self.checks += 1

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                self.check_once()
                if len(self.violations) > 20:
                    return
                self.stop_event.wait(self.interval_s)
        except BaseException as e:  # reported by the scenario, never swallowed
            self.error = e


class Reading(threading.Thread):
    """Reads partition 0 from offset 0 again and again while the faults go on, so remote fetches
    meet them; counts the errors the broker answered (the final read judges the data)."""

    def __init__(self, port: int, topic: str) -> None:
        super().__init__(daemon=True, name="remote-faults-reader")
        self.port, self.topic = port, topic
        self.stop_event = threading.Event()
        self.errors = 0
        self.bad_batches = 0
        self.passes = 0

    def run(self) -> None:
        offset = 0
        while not self.stop_event.is_set():
            try:
                with RawClient(self.port, timeout=10) as client:
                    read = read_partition(client, self.topic, 0, offset, max_bytes=64 << 10)
            except (OSError, AssertionError):
                self.stop_event.wait(0.2)  # the broker is being killed
                continue
            self.bad_batches += len(read.bad_batches)
            if read.error_code:
                self.errors += 1
                offset = read.error_offset or 0
                self.stop_event.wait(0.05)
                continue
            self.passes += 1
            offset = 0
            self.stop_event.wait(0.2)
