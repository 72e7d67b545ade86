"""The crash loop: an idempotent librdkafka producer (acks=all) and a committing consumer group run
while the broker is SIGKILLed at random moments -- now and then while it is still starting -- and
restarted. After every restart each partition is read back in full (every batch's CRC checked) and:

* every acknowledged record is there, at the offset its acknowledgement gave, exactly once;
* no value (acknowledged or not: each value is unique) appears twice, and each partition holds its
  values in the order they were produced;
* the group's committed offsets are at least the last commit the broker acknowledged.

The figures come back as a :class:`CrashLoopResult`; the test and ``bench/chaos.py`` judge them.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.helpers.raw_client import RawClient
from tests.reliability.harness import ChaosBroker, committed_offsets, create_topic, read_partition

TOPIC = "crash-loop"
GROUP = "crash-loop-group"


@dataclass
class CrashLoopResult:
    kills: int = 0
    kills_while_starting: int = 0
    sent: int = 0
    acked: int = 0
    delivery_failures: int = 0
    producer_fatal_errors: int = 0
    lost: int = 0
    duplicated: int = 0
    out_of_order: int = 0
    wrong_offset: int = 0
    bad_batches: int = 0
    read_errors: list[str] = field(default_factory=list)
    commits: int = 0
    commit_regressions: list[str] = field(default_factory=list)
    records_in_log: int = 0
    restart_seconds: list[float] = field(default_factory=list)
    peak_rss_bytes: int = 0
    seconds: float = 0.0
    failure_reasons: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return (self.lost == 0 and self.duplicated == 0 and self.out_of_order == 0 and self.wrong_offset == 0
                and self.bad_batches == 0 and not self.read_errors and not self.commit_regressions)


class _Producing(threading.Thread):
    """Produces unique values "0", "1", ... at about ``rate`` per second until stopped. A fatal
    producer error (which librdkafka raises when the idempotence guarantee cannot be kept) is
    counted and a new producer takes over."""

    def __init__(self, bootstrap: str, partitions: int, rate: int, config: dict[str, object] | None = None) -> None:
        super().__init__(daemon=True, name="crash-loop-producer")
        self.config = config or {}
        self.bootstrap = bootstrap
        self.partitions = partitions
        self.rate = rate
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        #: partition -> [(offset, value)] in acknowledgement order
        self.acked: dict[int, list[tuple[int, int]]] = {p: [] for p in range(partitions)}
        self.sent = 0
        self.failed = 0
        self.fatal = 0
        self.failure_reasons: Counter[str] = Counter()
        self._fatal_seen = threading.Event()

    def _new_producer(self) -> Producer:
        def on_error(err: KafkaError) -> None:
            if err.fatal():
                self.failure_reasons[f"fatal: {err.str()}"] += 1
                self._fatal_seen.set()

        return Producer({
            "bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "compression.type": "lz4", "message.timeout.ms": 300000,
            "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500, "retry.backoff.ms": 50,
            "retry.backoff.max.ms": 500, "socket.connection.setup.timeout.ms": 5000,
            "error_cb": on_error, "log_level": 0, **self.config,
        })

    def _on_delivery(self, err: KafkaError | None, msg: object) -> None:
        if err is not None:
            with self.lock:
                self.failed += 1
                self.failure_reasons[err.name()] += 1
            return
        with self.lock:
            self.acked[msg.partition()].append((msg.offset(), int(msg.value())))  # type: ignore[attr-defined]

    def run(self) -> None:
        producer = self._new_producer()
        i = 0
        t0 = time.monotonic()
        while not self.stop_event.is_set():
            if self._fatal_seen.is_set():
                self.fatal += 1
                producer.purge()
                producer.flush(0)
                producer = self._new_producer()
                self._fatal_seen.clear()
            due = int((time.monotonic() - t0) * self.rate)
            while i < due and not self.stop_event.is_set():
                try:
                    producer.produce(TOPIC, key=str(i % 97).encode(), value=str(i).encode(),
                                     partition=i % self.partitions, on_delivery=self._on_delivery)
                    i += 1
                    self.sent = i
                except BufferError:
                    break
            producer.poll(0.01)
        # Give everything still queued a chance to be acknowledged (or fail) before judging.
        producer.flush(120)
        self.sent = i

    def snapshot(self) -> dict[int, list[tuple[int, int]]]:
        with self.lock:
            return {p: list(v) for p, v in self.acked.items()}


class _Consuming(threading.Thread):
    """A group member that commits its position synchronously every ``commit_every`` records."""

    def __init__(self, bootstrap: str, commit_every: int = 300) -> None:
        super().__init__(daemon=True, name="crash-loop-consumer")
        self.bootstrap = bootstrap
        self.commit_every = commit_every
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.committed: dict[int, int] = {}  # acknowledged commits
        self.commits = 0
        self.commit_failures = 0

    def run(self) -> None:
        consumer = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000,
            "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500, "log_level": 0,
        })
        consumer.subscribe([TOPIC])
        positions: dict[int, int] = {}
        since_commit = 0
        try:
            while not self.stop_event.is_set():
                for msg in consumer.consume(num_messages=500, timeout=0.2):
                    if msg.error() is None:
                        positions[msg.partition()] = msg.offset() + 1
                        since_commit += 1
                if since_commit >= self.commit_every and positions:
                    self._commit(consumer, dict(positions))
                    since_commit = 0
            if positions:
                self._commit(consumer, dict(positions))
        finally:
            consumer.close()

    def _commit(self, consumer: Consumer, positions: dict[int, int]) -> None:
        try:
            consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in positions.items()], asynchronous=False)
        except KafkaException:
            self.commit_failures += 1
            return
        with self.lock:
            self.commits += 1
            for p, o in positions.items():
                self.committed[p] = max(self.committed.get(p, -1), o)

    def snapshot(self) -> dict[int, int]:
        with self.lock:
            return dict(self.committed)


def verify(broker: ChaosBroker, partitions: int, acked: dict[int, list[tuple[int, int]]],
           committed: dict[int, int], result: CrashLoopResult, lost: set[int], duplicated: set[int]) -> None:
    """Read every partition in full and hold it against what was acknowledged (taken before the read)."""
    total = 0
    with RawClient(broker.port) as client:
        for p in range(partitions):
            read = read_partition(client, TOPIC, p)
            if read.error_code:
                result.read_errors.append(f"partition {p}: error {read.error_code} at offset {read.error_offset}")
            result.bad_batches += len(read.bad_batches)
            values = [int(v) for _, v in read.records if v is not None]
            total += len(values)
            counts = Counter(values)
            duplicated.update(v for v, n in counts.items() if n > 1)
            result.out_of_order += sum(1 for a, b in itertools.pairwise(values) if b <= a)
            by_offset = dict(read.records)
            for offset, value in acked.get(p, []):
                got = by_offset.get(offset)
                if value not in counts:
                    lost.add(value)
                elif got is None or int(got) != value:
                    result.wrong_offset += 1
    result.records_in_log = total
    result.lost, result.duplicated = len(lost), len(duplicated)
    stored = committed_offsets(broker.port, GROUP, TOPIC, partitions)
    for p, offset in committed.items():
        if stored.get(p, -1) < offset:
            result.commit_regressions.append(f"partition {p}: acknowledged commit {offset}, stored {stored.get(p)}")


def run_crash_loop(data_dir: Path, *, kills: int, partitions: int = 3, rate: int = 3000,
                   min_uptime_s: float = 0.5, max_uptime_s: float = 3.0, kill_while_starting: float = 0.15,
                   seed: int | None = None, progress: bool = False, overrides: dict[str, str] | None = None,
                   after_kill: Callable[[], None] | None = None, stop_on_loss: bool = True,
                   broker_log: Path | None = None,
                   after_start: Callable[[ChaosBroker], bool] | None = None,
                   topic_configs: dict[str, str] | None = None,
                   producer_config: dict[str, object] | None = None,
                   broker_env: dict[str, str] | None = None,
                   before_kill: Callable[[ChaosBroker], None] | None = None) -> CrashLoopResult:
    """``before_kill`` runs just before each SIGKILL; ``after_kill`` while the broker is down (the power-loss loop cuts the power there);
    ``after_start`` after each start (once the log is verified): it may change and check more state
    (the power-loss loop creates topics there) and returns whether what it checked held;
    ``stop_on_loss=False`` goes on after a loss (to count what Kafka's behaviour loses)."""
    rng = random.Random(seed)
    result = CrashLoopResult()
    t0 = time.monotonic()
    broker = ChaosBroker(data_dir, {"log.segment.bytes": str(256 << 10), **(overrides or {})}, env=broker_env)
    if broker_log is not None:
        broker.log_path = broker_log
    broker.start()
    create_topic(broker.port, TOPIC, partitions, topic_configs)
    producing = _Producing(broker.bootstrap, partitions, rate, producer_config)
    consuming = _Consuming(broker.bootstrap)
    producing.start()
    consuming.start()
    lost: set[int] = set()
    duplicated: set[int] = set()
    held = after_start(broker) if after_start is not None else True
    try:
        for k in range(kills):
            time.sleep(rng.uniform(min_uptime_s, max_uptime_s))
            result.peak_rss_bytes = max(result.peak_rss_bytes, broker.rss())
            if before_kill is not None:
                before_kill(broker)
            broker.sigkill()
            result.kills += 1
            if after_kill is not None:
                after_kill()
            if rng.random() < kill_while_starting:
                # Killed again while recovering from the first kill.
                broker.kill_while_starting(rng.uniform(0.2, 2.0))
                result.kills += 1
                result.kills_while_starting += 1
            started = time.monotonic()
            broker.start()
            result.restart_seconds.append(time.monotonic() - started)
            acked, committed = producing.snapshot(), consuming.snapshot()
            verify(broker, partitions, acked, committed, result, lost, duplicated)
            if after_start is not None:
                held = after_start(broker) and held
            if progress:
                print(f"kill {k + 1}/{kills}: restart {result.restart_seconds[-1]:.1f} s, "
                      f"{sum(map(len, acked.values()))} acked, {result.records_in_log} in the log, "
                      f"lost {result.lost}, duplicated {result.duplicated}", flush=True)
            if (not result.ok or not held) and stop_on_loss:
                break
    finally:
        producing.stop_event.set()
        consuming.stop_event.set()
        producing.join(180)
        consuming.join(60)
    if broker.alive():
        # One clean restart at the end: the clean-shutdown path must keep it all too.
        assert broker.stop() == 0, broker.stderr_tail()
        broker.start()
        verify(broker, partitions, producing.snapshot(), consuming.snapshot(), result, lost, duplicated)
        broker.stop()
    result.sent = producing.sent
    result.acked = sum(len(v) for v in producing.snapshot().values())
    result.delivery_failures = producing.failed
    result.producer_fatal_errors = producing.fatal
    result.failure_reasons = producing.failure_reasons
    result.commits = consuming.commits
    result.seconds = time.monotonic() - t0
    return result
