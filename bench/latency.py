"""Produce and end-to-end latency against ``tierlog serve``, next to a loopback round trip.

Issue 22's targets on the 2-core machine: produce latency p99 <= 5 ms and end-to-end (produce ->
a consumer receives) p99 <= 10 ms, at 50 % of the maximum throughput measured with the same settings,
``acks=all`` (so, with tierlog's default ``log.durable.acks=all``, after the group commit's fsync),
``linger.ms=0``.

    python bench/latency.py [--size 1024] [--seconds 10] [--data-dir DIR] [--override KEY=VALUE]

1. maximum: one confluent-kafka producer sends as fast as it can for ``--seconds`` with the settings
   above; records acknowledged per second.
2. latency: the same producer paced at half that rate; each record's value carries its send time;
   produce latency = delivery report - send; a consumer in its own process (so the two do not
   share a GIL; both read CLOCK_MONOTONIC) timestamps each record as it arrives: end to end =
   arrival - send. Both start after a warm-up record has gone through.
3. baseline: a request of the same size and a 16-byte answer through a loopback TCP socket between
   two threads of one process, as many times, p50/p99/p99.9 of the round trip.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from _common import command_line
from clients import cpu_seconds, create_topic, start_broker

STAMP = struct.Struct(">d")
#: The one record sent before the clock starts (shorter than a stamp, so never mistaken for one).
WARM_UP = b"warm-up"


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
    producer = Producer(producer_config(bootstrap))
    producer.list_topics(topic, timeout=10)
    value = os.urandom(size)
    acked = 0
    producer.produce(topic, WARM_UP, partition=0)  # InitProducerId and the connection before the clock
    producer.flush(30)

    def delivered(err: object, _msg: object) -> None:
        nonlocal acked
        if err is None:
            acked += 1

    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        try:
            producer.produce(topic, value, partition=0, on_delivery=delivered)
        except BufferError:
            producer.poll(0.001)
        producer.poll(0)
    producer.flush(60)
    return acked / (time.perf_counter() - start)


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


def consumer_process(bootstrap: str, topic: str, warm: Event, expected: Synchronized, stop: Event,
                     out: Connection) -> None:
    """A consumer in its own process (its Python does not share the producer's GIL): arrival - send
    time of each record after the warm-up one, until ``expected`` (once set) have arrived or ``stop``;
    sends them and its CPU seconds back."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"latency-{topic}", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 100, "fetch.min.bytes": 1})
    end_offset = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    consumer.assign([TopicPartition(topic, 0, end_offset)])
    end_to_end_s: list[float] = []
    t0 = os.times()
    # One record per poll(): a consume(num_messages=N) call waits for N records or its timeout and
    # would add that wait to the first records of each batch.
    while not stop.is_set() and not 0 <= expected.value <= len(end_to_end_s):
        msg = consumer.poll(0.1)
        if msg is None or msg.error() is not None:
            continue
        value = msg.value() or b""
        if value == WARM_UP:
            warm.set()
        else:
            end_to_end_s.append(time.monotonic() - STAMP.unpack_from(value)[0])
    t1 = os.times()
    consumer.close()
    out.send((end_to_end_s, t1.user + t1.system - t0.user - t0.system))


def own_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def paced(bootstrap: str, topic: str, size: int, seconds: float, rate: float) -> Paced:
    """Produce at ``rate`` records/s for ``seconds``; each value starts with its send time
    (CLOCK_MONOTONIC, which the consumer's process shares)."""
    producer = Producer(producer_config(bootstrap))
    producer.list_topics(topic, timeout=10)
    spawn = multiprocessing.get_context("spawn")  # no fork of a process running librdkafka's threads
    warm, stop, expected = spawn.Event(), spawn.Event(), spawn.Value("q", -1)
    receive, send = spawn.Pipe(duplex=False)
    reader = spawn.Process(target=consumer_process, args=(bootstrap, topic, warm, expected, stop, send), daemon=True)
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
        sent = full = queued = 0

        def delivered(err: object, msg: object) -> None:
            if err is None:
                value = msg.value() or b""  # type: ignore[attr-defined]
                produce_s.append(time.monotonic() - STAMP.unpack_from(value)[0])

        cpu0 = own_cpu_seconds()
        start = time.monotonic()
        # Each tick sends the records due by now, then serves delivery reports for up to 1 ms: a
        # wake-up per record cost the Python loop 0.6-1 core at 10,000 records/s on this machine.
        while (now := time.monotonic()) - start < seconds:
            due = min(int((now - start) * rate) + 1, int(seconds * rate))
            while sent < due:
                value = STAMP.pack(time.monotonic()) + padding
                while True:
                    try:
                        producer.produce(topic, value, partition=0, on_delivery=delivered)
                        break
                    except BufferError:  # the client's queue is full: the wait counts in this record's latency
                        full += 1
                        producer.poll(0.001)
                sent += 1
            queued = max(queued, len(producer))
            producer.poll(0.001)
        producer.flush(60)
        producer_cpu_s = own_cpu_seconds() - cpu0
        expected.value = sent
        if not receive.poll(30):
            stop.set()  # what arrived so far; main() says how many did not
        end_to_end_s, consumer_cpu_s = receive.recv()
    finally:
        stop.set()
        reader.join(10)
        if reader.is_alive():  # blocked sending its results to a parent that failed before reading them
            reader.terminate()
            reader.join()
    return Paced(produce_s, end_to_end_s, sent, producer_cpu_s, consumer_cpu_s, queued, full)


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=1024, help="record value size in bytes")
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    ap.add_argument("--data-dir", type=Path, help="where the broker keeps its logs (default: a temp dir)")
    ap.add_argument("--rate", type=float, help="records/s of the latency phase instead of half the measured maximum "
                    "(the maximum is still measured and printed)")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker setting, e.g. log.durable.acks=none (repeatable)")
    args = ap.parse_args()
    overrides = dict(o.split("=", 1) for o in args.override)
    print(f"command: {command_line()}", flush=True)
    print(f"load average at start: {load_average()}", flush=True)
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="tierlog-bench-latency-"))
    proc, addresses = start_broker(data_dir, overrides)
    bootstrap = addresses[0]
    try:
        topic = f"latency-{int(time.time())}"
        create_topic(bootstrap, topic, 1)
        top = maximum_rate(bootstrap, topic, args.size, args.seconds)
        print(f"maximum: {top:,.0f} records/s of {args.size} B ({top * args.size / 1e6:,.1f} MB/s; acks=all, "
              f"linger.ms=0, one idempotent producer; broker {overrides or 'defaults'})", flush=True)
        # The maximum's writes are still being written back; start the paced phase without them.
        os.sync()
        cpu0, wall0 = cpu_seconds(proc.pid), time.perf_counter()
        rate = args.rate or top / 2
        run = paced(bootstrap, topic, args.size, args.seconds, rate)
        wall = time.perf_counter() - wall0
        produce_s, end_to_end_s, sent = run.produce_s, run.end_to_end_s, run.sent
        print(f"at {rate / top:.0%} of the maximum: {rate:,.0f} records/s planned for {args.seconds:g} s, "
              f"{sent:,} records sent ({sent / args.seconds:,.0f}/s); CPU meanwhile: broker "
              f"{(cpu_seconds(proc.pid) - cpu0) / wall:.2f} cores, producer process {run.producer_cpu_s / args.seconds:.2f}, "
              f"consumer process {run.consumer_cpu_s / wall:.2f}", flush=True)
        print(f"producer queue: at most {run.queued:,} records waiting (sampled every tick), full {run.full:,} times "
              "(a queue that grows means the broker and clients did not keep up with this rate: latency is then queueing)",
              flush=True)
        baseline = loopback_round_trips(args.size, max(1000, min(sent, 20_000)))
        print(line("produce latency (delivery report)", produce_s, PRODUCE_P99_TARGET_MS))
        print(line("end to end (produce -> consumer receives)", end_to_end_s, END_TO_END_P99_TARGET_MS))
        print(line(f"baseline: loopback TCP round trip of {args.size} B", baseline))
        over = sum(1 for x in produce_s if x * 1000 > PRODUCE_P99_TARGET_MS)
        print(f"produce latency over {PRODUCE_P99_TARGET_MS:g} ms: {over:,} records ({over / max(1, len(produce_s)):.2%}); "
              f"p99 of each quarter of the phase (delivery order): {by_quarter(produce_s)}")
        if len(end_to_end_s) < sent:
            print(f"end to end: only {len(end_to_end_s):,} of {sent:,} records arrived within 30 s")
        p99_produce, p99_e2e, p99_base = percentiles(produce_s)[1], percentiles(end_to_end_s)[1], percentiles(baseline)[1]
        print(f"p99 over the baseline's p99: produce {p99_produce / p99_base:.1f}x, end to end {p99_e2e / p99_base:.1f}x")
        print(f"load average at end: {load_average()}", flush=True)
    finally:
        proc.terminate()
        proc.wait(60)
        if args.data_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
