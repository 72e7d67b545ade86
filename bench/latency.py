"""Produce and end-to-end latency against ``tierlog serve`` -- and against Apache Kafka itself -- next to
a loopback round trip.

Issue 22's targets on the 2-core machine: produce latency p99 <= 5 ms and end-to-end (produce ->
a consumer receives) p99 <= 10 ms, at 50 % of the maximum throughput measured with the same settings,
``acks=all`` (so, with tierlog's default ``log.durable.acks=all``, after the group commit's fsync),
``linger.ms=0``.

    python bench/latency.py [--size 1024] [--seconds 10] [--data-dir DIR] [--override KEY=VALUE]
    python bench/latency.py --against-kafka [--rate 10000] [--java-producer] [--trace-stats]
                                                     # tierlog none, tierlog default, Kafka 4.3.1

With ``--against-kafka`` the same phases run one after the other against tierlog with
``log.durable.acks=none`` (Kafka's acknowledge-on-append), tierlog with its defaults (plus any
``--override``) and Apache Kafka 4.3.1 (one KRaft node, ``-Xmx1g``, started as bench/vs_kafka.py starts
it; the jars scripts/_env.sh fetches), and a table puts the three side by side with the load average.

0. warm-up: an unmeasured maximum phase of ``--warm-up-seconds`` against every broker (Kafka's JIT).
1. maximum: one confluent-kafka producer hands records to librdkafka in chunks (``produce_batch``)
   as fast as it can for ``--seconds`` with the settings above; records acknowledged per second.
2. latency: the same producer paced at half that rate (each 1 ms tick hands the records due by then
   to librdkafka in one ``produce_batch``); each record's value carries its send time; produce
   latency = delivery report - send, for every ``--sample-every``-th record (the others have no
   Python callback, so serving delivery reports does not cost the send loop a core); a consumer in
   its own process (so the two do not share a GIL; both read CLOCK_MONOTONIC) takes records in
   chunks and timestamps the same sample: end to end = arrival - send. Both start after a warm-up
   record. librdkafka's own statistics (every second) split the time: ``int_latency`` (produce() to
   the record put into a request), ``rtt`` (a request's round trip to the broker), records per
   produce request; ``--trace-stats`` prints them for each second.
3. with ``--java-producer``: Kafka's ``kafka-producer-perf-test`` (the Java client, its own pacing)
   at the same rate, the same settings: a producer that is not Python, as a check on the bench.
4. baseline: a request of the same size and a 16-byte answer through a loopback TCP socket between
   two threads of one process, as many times, p50/p99/p99.9 of the round trip.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from _common import command_line, perf_producer_command  # noqa: E402
from clients import cpu_seconds, create_topic, start_broker  # noqa: E402

STAMP = struct.Struct(">d")
#: The one record sent before the clock starts (shorter than a stamp, so never mistaken for one).
WARM_UP = b"warm-up"
#: Records handed to librdkafka per ``produce_batch`` call in the maximum phase.
CHUNK = 1000


def percentiles(samples_s: list[float]) -> tuple[float, float, float]:
    """p50, p99 and p99.9 in milliseconds (nearest rank)."""
    ordered = sorted(samples_s)
    if not ordered:
        return float("nan"), float("nan"), float("nan")

    def rank(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    return rank(0.50), rank(0.99), rank(0.999)


def producer_config(bootstrap: str) -> dict[str, object]:
    return {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "enable.idempotence": True,
            "compression.type": "none", "queue.buffering.max.kbytes": 1_000_000}


def maximum_rate(bootstrap: str, topic: str, size: int, seconds: float) -> float:
    """Records acknowledged per second, handed over ``CHUNK`` at a time with no Python callback per
    record (only failures are reported), so the Python loop is not what is measured."""
    failed = 0

    def on_error(err: object, _msg: object) -> None:
        nonlocal failed
        if err is not None:
            failed += 1

    producer = Producer({**producer_config(bootstrap), "delivery.report.only.error": True, "on_delivery": on_error})
    producer.list_topics(topic, timeout=10)
    producer.produce(topic, WARM_UP, partition=0)  # InitProducerId and the connection before the clock
    producer.flush(30)
    chunk = [{"value": os.urandom(size)} for _ in range(CHUNK)]
    queued = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        n = producer.produce_batch(topic, chunk, partition=0)
        queued += n
        if n < len(chunk):  # the client's queue is full: the rest of the chunk is dropped and resent later
            for m in chunk:
                m.pop("_error", None)
            producer.poll(0.001)
        else:
            producer.poll(0)
    producer.flush(120)
    return (queued - failed) / (time.perf_counter() - start)


@dataclass
class ClientStats:
    """From librdkafka's statistics (one JSON document per second) of the paced producer: the
    partition leader's broker entry, windowed histograms in microseconds."""
    rtt_p50_ms: list[float] = field(default_factory=list)
    rtt_p99_ms: list[float] = field(default_factory=list)
    rtt_max_ms: list[float] = field(default_factory=list)
    int_latency_p99_ms: list[float] = field(default_factory=list)
    produce_requests: int = 0
    #: one line per statistics document, printed with ``--trace-stats``
    trace: list[str] = field(default_factory=list)

    def take(self, doc: str) -> None:
        stats = json.loads(doc)
        for b in stats.get("brokers", {}).values():
            if b.get("nodeid", -1) < 0 or not b.get("req", {}).get("Produce"):
                continue  # the bootstrap entry, or a broker that got no produce request
            rtt, internal, outbuf = b["rtt"], b["int_latency"], b["outbuf_latency"]
            if rtt["cnt"]:
                self.rtt_p50_ms.append(rtt["p50"] / 1000)
                self.rtt_p99_ms.append(rtt["p99"] / 1000)
                self.rtt_max_ms.append(rtt["max"] / 1000)
            if internal["cnt"]:
                self.int_latency_p99_ms.append(internal["p99"] / 1000)
            requests = b["req"]["Produce"] - self.produce_requests
            self.produce_requests = b["req"]["Produce"]
            self.trace.append(
                f"produce() to request p50/p99 {internal['p50'] / 1000:.2f}/{internal['p99'] / 1000:.2f} ms, "
                f"in the output buffer p99 {outbuf['p99'] / 1000:.2f} ms, round trip p50/p99/max {rtt['p50'] / 1000:.2f}/"
                f"{rtt['p99'] / 1000:.2f}/{rtt['max'] / 1000:.2f} ms, {requests:,} produce requests, in flight now {b['waitresp_cnt']}, "
                f"records in the client {stats.get('msg_cnt', 0):,}")

    def summary(self, records: int) -> str:
        if not self.rtt_p50_ms:
            return "librdkafka statistics: no produce round trips reported"
        per = records / self.produce_requests if self.produce_requests else float("nan")
        return (f"librdkafka statistics (per second): request round trip p50 {median(self.rtt_p50_ms):.2f} ms "
                f"(median), p99 {max(self.rtt_p99_ms):.2f} ms (worst second), longest {max(self.rtt_max_ms):.2f} ms; produce() to request p99 "
                f"{max(self.int_latency_p99_ms, default=float('nan')):.2f} ms (worst second); "
                f"{self.produce_requests:,} produce requests, {per:,.1f} records each")


@dataclass
class Paced:
    produce_s: list[float]
    end_to_end_s: list[float]
    sent: int
    producer_cpu_s: float
    consumer_cpu_s: float
    #: the most records seen waiting in the producer's queue, and how often it was full
    queued: int
    full: int
    client: ClientStats
    #: records that arrived at the consumer (sampled or not)
    received: int = 0


def consumer_process(bootstrap: str, topic: str, every: int, warm: Event, expected: Synchronized, stop: Event,
                     out: Connection) -> None:
    """A consumer in its own process (its Python does not share the producer's GIL): arrival - send
    time of every ``every``-th record after the warm-up one, until ``expected`` (once set) have arrived
    or ``stop``; sends them, the count and its CPU seconds back."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"latency-{topic}", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 100, "fetch.min.bytes": 1})
    end_offset = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    consumer.assign([TopicPartition(topic, 0, end_offset)])
    end_to_end_s: list[float] = []
    received = 0
    t0 = os.times()
    while not stop.is_set() and not 0 <= expected.value <= received:
        # What has arrived, without waiting (consume(N, timeout) would wait for N records or the
        # timeout and add that wait to the first records); when nothing has, wait for one record.
        msgs = consumer.consume(1000, 0)
        if not msgs:
            one = consumer.poll(0.1)
            msgs = [one] if one is not None else []
        now = time.monotonic()
        for msg in msgs:
            if msg.error() is not None:
                continue
            if received == 0 and (msg.value() or b"") == WARM_UP:
                warm.set()
                continue
            if received % every == 0:
                end_to_end_s.append(now - STAMP.unpack_from(msg.value() or b"")[0])
            received += 1
    t1 = os.times()
    consumer.close()
    out.send((end_to_end_s, received, t1.user + t1.system - t0.user - t0.system))


def own_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def paced(bootstrap: str, topic: str, size: int, seconds: float, rate: float, every: int) -> Paced:
    """Produce at ``rate`` records/s for ``seconds``; each value starts with its send time
    (CLOCK_MONOTONIC, which the consumer's process shares)."""
    client = ClientStats()
    producer = Producer({**producer_config(bootstrap), "statistics.interval.ms": 1000, "stats_cb": client.take})
    producer.list_topics(topic, timeout=10)
    spawn = multiprocessing.get_context("spawn")  # no fork of a process running librdkafka's threads
    warm, stop, expected = spawn.Event(), spawn.Event(), spawn.Value("q", -1)
    receive, send = spawn.Pipe(duplex=False)
    reader = spawn.Process(target=consumer_process, args=(bootstrap, topic, every, warm, expected, stop, send),
                           daemon=True)
    reader.start()
    produce_s: list[float] = []
    try:
        # Warm up before the clock: the idempotent producer's InitProducerId, its connection and the
        # consumer's first fetch otherwise hold the first records for hundreds of milliseconds.
        while not warm.is_set():
            producer.produce(topic, WARM_UP, partition=0)
            producer.flush(30)
            if not warm.wait(5) and not reader.is_alive():
                raise SystemExit("the consumer process ended before it received the warm-up record")
        padding = os.urandom(max(0, size - STAMP.size))
        total = int(seconds * rate)
        sent = full = queued = 0

        def delivered(sent_at: float, err: object, _msg: object) -> None:
            if err is None:
                produce_s.append(time.monotonic() - sent_at)

        cpu0 = own_cpu_seconds()
        start = time.monotonic()
        # Each tick hands the records due by now to librdkafka in one call (they leave together, so
        # they carry one send time), then serves delivery reports for up to 1 ms.
        while (now := time.monotonic()) - start < seconds:
            due = min(int((now - start) * rate) + 1, total)
            if due > sent:
                value = STAMP.pack(now) + padding
                batch: list[dict[str, object]] = [{"value": value} for _ in range(due - sent)]
                for i in range(-sent % every, len(batch), every):
                    batch[i]["callback"] = partial(delivered, now)
                while batch:
                    n = producer.produce_batch(topic, batch, partition=0)
                    sent += n
                    if n == len(batch):
                        break
                    # the client's queue is full: the wait counts in these records' latency
                    full += 1
                    batch = [m for m in batch if m.pop("_error", None) is not None]
                    producer.poll(0.001)
            queued = max(queued, len(producer))
            producer.poll(0.001)
        producer.flush(60)
        producer_cpu_s = own_cpu_seconds() - cpu0
        expected.value = sent
        if not receive.poll(30):
            stop.set()  # what arrived so far; main() says how many did not
        end_to_end_s, received, consumer_cpu_s = receive.recv()
    finally:
        stop.set()
        reader.join(10)
        if reader.is_alive():  # blocked sending its results to a parent that failed before reading them
            reader.terminate()
            reader.join()
    return Paced(produce_s, end_to_end_s, sent, producer_cpu_s, consumer_cpu_s, queued, full, client, received)


def loopback_round_trips(size: int, count: int) -> list[float]:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def echo() -> None:
        conn, _ = server.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            while True:
                got = 0
                while got < size:
                    chunk = conn.recv(size - got)
                    if not chunk:
                        return
                    got += len(chunk)
                conn.sendall(b"x" * 16)

    thread = threading.Thread(target=echo)
    thread.start()
    request = os.urandom(size)
    out = []
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(count):
            t0 = time.perf_counter()
            client.sendall(request)
            got = 0
            while got < 16:
                got += len(client.recv(16 - got))
            out.append(time.perf_counter() - t0)
    thread.join()
    server.close()
    return out


#: Issue 22's p99 targets in milliseconds.
PRODUCE_P99_TARGET_MS = 5.0
END_TO_END_P99_TARGET_MS = 10.0


def line(name: str, samples_s: list[float], target_p99_ms: float | None = None) -> str:
    p50, p99, p999 = percentiles(samples_s)
    text = f"{name}: p50 {p50:.2f} ms, p99 {p99:.2f} ms, p99.9 {p999:.2f} ms ({len(samples_s):,} samples)"
    if target_p99_ms is not None:
        verdict = "met" if p99 <= target_p99_ms else "NOT met"
        text += f"  |  target p99 <= {target_p99_ms:g} ms: {verdict}"
    return text


def by_quarter(samples_s: list[float]) -> str:
    """p99 of each quarter of ``samples_s`` in ms: whether a tail is spread or one stall."""
    n = len(samples_s) // 4
    return ", ".join(f"{percentiles(samples_s[i * n:(i + 1) * n])[1]:.1f}" for i in range(4))


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" ({os.cpu_count()} cores)"


def java_producer(bootstrap: str, topic: str, size: int, seconds: float, rate: float) -> str:
    """kafka-producer-perf-test at ``rate`` for ``seconds`` with this bench's producer settings; its
    summary line (latency percentiles in whole milliseconds, from send() to the callback)."""
    props = {"acks": "all", "linger.ms": "0", "enable.idempotence": "true", "compression.type": "none"}
    cmd = perf_producer_command(bootstrap, topic, int(rate * seconds), size, props, throughput=rate)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds * 10 + 120)
    last = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    if out.returncode or "records sent" not in last:
        return f"kafka-producer-perf-test exited {out.returncode}: {(out.stderr or out.stdout)[-500:]}"
    return last


@dataclass
class Target:
    """A broker the phases run against."""
    name: str
    bootstrap: str
    pid: int
    stop: Callable[[], None]


@dataclass
class Result:
    name: str
    load_start: float
    load_end: float
    top: float
    rate: float
    run: Paced
    broker_cores: float
    seconds: float
    java: str = ""


def run_phases(target: Target, args: argparse.Namespace) -> Result:
    load_start = os.getloadavg()[0]
    topic = f"latency-{int(time.time())}"
    create_topic(target.bootstrap, topic, 1)
    if args.warm_up_seconds:
        # Unmeasured: the JVM's JIT (Kafka) and the page cache of a fresh log, the same for every broker.
        maximum_rate(target.bootstrap, topic, args.size, args.warm_up_seconds)
    top = maximum_rate(target.bootstrap, topic, args.size, args.seconds)
    print(f"[{target.name}] maximum: {top:,.0f} records/s of {args.size} B ({top * args.size / 1e6:,.1f} MB/s; "
          f"acks=all, linger.ms=0, one idempotent producer)", flush=True)
    # The maximum's writes are still being written back; start the paced phase without them.
    os.sync()
    rate = args.rate or top / 2
    every = args.sample_every or max(1, round(rate / 10_000))
    cpu0, wall0 = cpu_seconds(target.pid), time.perf_counter()
    run = paced(target.bootstrap, topic, args.size, args.seconds, rate, every)
    wall = time.perf_counter() - wall0
    broker_cores = (cpu_seconds(target.pid) - cpu0) / wall
    print(f"[{target.name}] at {rate / top:.0%} of the maximum: {rate:,.0f} records/s planned for {args.seconds:g} s, "
          f"{run.sent:,} records sent ({run.sent / args.seconds:,.0f}/s), latency of every {every}-th; CPU meanwhile: "
          f"broker {broker_cores:.2f} cores, producer process {run.producer_cpu_s / args.seconds:.2f}, "
          f"consumer process {run.consumer_cpu_s / wall:.2f}", flush=True)
    print(f"[{target.name}] producer queue: at most {run.queued:,} records waiting or not yet reported (sampled every "
          f"tick), full {run.full:,} times (a queue that grows means the broker and clients did not keep up with "
          "this rate: latency is then queueing)", flush=True)
    print(f"[{target.name}] {run.client.summary(run.sent)}", flush=True)
    if args.trace_stats:
        for i, text in enumerate(run.client.trace):
            print(f"[{target.name}]   second {i + 1}: {text}")
    print(f"[{target.name}] " + line("produce latency (delivery report)", run.produce_s, PRODUCE_P99_TARGET_MS))
    print(f"[{target.name}] " + line("end to end (produce -> consumer receives)", run.end_to_end_s,
                                     END_TO_END_P99_TARGET_MS))
    over = sum(1 for x in run.produce_s if x * 1000 > PRODUCE_P99_TARGET_MS)
    print(f"[{target.name}] produce latency over {PRODUCE_P99_TARGET_MS:g} ms: {over:,} sampled records "
          f"({over / max(1, len(run.produce_s)):.2%}); p99 of each quarter of the phase (delivery order): "
          f"{by_quarter(run.produce_s)}", flush=True)
    if run.received < run.sent:
        print(f"[{target.name}] end to end: only {run.received:,} of {run.sent:,} records arrived within 30 s")
    result = Result(target.name, load_start, os.getloadavg()[0], top, rate, run, broker_cores, wall)
    if args.java_producer:
        java_topic = f"{topic}-java"
        create_topic(target.bootstrap, java_topic, 1)
        result.java = java_producer(target.bootstrap, java_topic, args.size, args.seconds, rate)
        print(f"[{target.name}] kafka-producer-perf-test at {rate:,.0f}/s: {result.java}", flush=True)
    return result


def tierlog_target(name: str, data_dir: Path, overrides: dict[str, str]) -> Target:
    proc, addresses = start_broker(data_dir, overrides)

    def stop() -> None:
        proc.terminate()
        proc.wait(60)

    return Target(name, addresses[0], proc.pid, stop)


def kafka_target(home: Path) -> Target:
    from tests.jvm.kafka import KafkaBroker, java_missing

    missing = java_missing()
    if missing is not None:
        raise SystemExit(missing)
    kafka = KafkaBroker(home, heap="1g")
    kafka.start()
    assert kafka.proc is not None

    def stop() -> None:
        kafka.stop()

    return Target("Kafka 4.3.1", kafka.bootstrap, kafka.proc.pid, stop)


def java_percentiles(summary: str) -> str:
    m = re.search(r"(\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th", summary)
    return f"{m[1]} / {m[3]} / {m[4]}" if m else "—"


def table(results: list[Result]) -> None:
    """The runs side by side (markdown)."""
    rows: list[tuple[str, Callable[[Result], str]]] = [
        ("load average (1 min) at start / end", lambda r: f"{r.load_start:.2f} / {r.load_end:.2f}"),
        ("maximum (records/s)", lambda r: f"{r.top:,.0f}"),
        ("paced rate (records/s)", lambda r: f"{r.rate:,.0f} ({r.rate / r.top:.0%})"),
        ("producer queue high mark (records)", lambda r: f"{r.run.queued:,}"),
        ("produce p50 / p99 / p99.9 (ms)", lambda r: " / ".join(f"{x:.2f}" for x in percentiles(r.run.produce_s))),
        ("end to end p50 / p99 / p99.9 (ms)",
         lambda r: " / ".join(f"{x:.2f}" for x in percentiles(r.run.end_to_end_s))),
        ("request round trip p50 / worst-second p99 / longest (ms)",
         lambda r: f"{median(r.run.client.rtt_p50_ms):.2f} / {max(r.run.client.rtt_p99_ms):.2f} / "
         f"{max(r.run.client.rtt_max_ms):.2f}"
         if r.run.client.rtt_p50_ms else "—"),
        ("records per produce request",
         lambda r: f"{r.run.sent / r.run.client.produce_requests:,.1f}" if r.run.client.produce_requests else "—"),
        ("CPU: broker / producer / consumer (cores)",
         lambda r: f"{r.broker_cores:.2f} / {r.run.producer_cpu_s / r.seconds:.2f} / {r.run.consumer_cpu_s / r.seconds:.2f}"),
    ]
    if any(r.java for r in results):
        rows.append(("kafka-producer-perf-test at the same rate: p50 / p99 / p99.9 (ms, whole ms)",
                     lambda r: java_percentiles(r.java)))
    print()
    print("| figure | " + " | ".join(r.name for r in results) + " |")
    print("|---|" + "---|" * len(results))
    for name, cell in rows:
        print(f"| {name} | " + " | ".join(cell(r) for r in results) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=1024, help="record value size in bytes")
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    ap.add_argument("--data-dir", type=Path, help="where the brokers keep their logs (default: a temp dir)")
    ap.add_argument("--rate", type=float, help="records/s of the latency phase instead of half the measured maximum "
                    "(the maximum is still measured and printed)")
    ap.add_argument("--warm-up-seconds", type=float, default=5.0,
                    help="an unmeasured maximum phase first, against every broker (Kafka's JIT)")
    ap.add_argument("--sample-every", type=int, help="latency of every N-th record (default: ~10,000 samples/s)")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a tierlog setting, e.g. log.durable.acks=none (repeatable)")
    ap.add_argument("--against-kafka", action="store_true",
                    help="run against tierlog log.durable.acks=none, tierlog's defaults and Apache Kafka 4.3.1")
    ap.add_argument("--trace-stats", action="store_true",
                    help="print librdkafka's statistics of the paced producer for each second")
    ap.add_argument("--java-producer", action="store_true",
                    help="also run kafka-producer-perf-test at the same rate against each broker")
    args = ap.parse_args()
    overrides = dict(o.split("=", 1) for o in args.override)
    print(f"command: {command_line()}", flush=True)
    print(f"load average at start: {load_average()}", flush=True)
    root = args.data_dir or Path(tempfile.mkdtemp(prefix="tierlog-bench-latency-"))
    starters: list[tuple[str, Callable[[Path], Target]]]
    if args.against_kafka:
        starters = [
            ("tierlog none", lambda d: tierlog_target("tierlog `none`", d, {**overrides, "log.durable.acks": "none"})),
            ("tierlog default", lambda d: tierlog_target(
                "tierlog " + (" ".join(f"`{k}={v}`" for k, v in overrides.items()) or "defaults"), d, overrides)),
            ("kafka", kafka_target),
        ]
    else:
        starters = [("tierlog", lambda d: tierlog_target(
            "tierlog " + (" ".join(f"`{k}={v}`" for k, v in overrides.items()) or "defaults"), d, overrides))]
    results = []
    try:
        for dirname, start in starters:
            target = start(root / dirname)
            try:
                results.append(run_phases(target, args))
            finally:
                target.stop()
                if args.data_dir is None:
                    shutil.rmtree(root / dirname, ignore_errors=True)
        baseline = loopback_round_trips(args.size, 20_000)
        print(line(f"baseline: loopback TCP round trip of {args.size} B", baseline))
        p99_base = percentiles(baseline)[1]
        for r in results:
            print(f"[{r.name}] p99 over the baseline's p99: produce {percentiles(r.run.produce_s)[1] / p99_base:.1f}x, "
                  f"end to end {percentiles(r.run.end_to_end_s)[1] / p99_base:.1f}x")
        table(results)
        print(f"load average at end: {load_average()}", flush=True)
    finally:
        if args.data_dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
