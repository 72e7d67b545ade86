"""Produce and end-to-end latency against ``tierlog serve``, next to a loopback round trip.

Issue 22's targets on the 2-core machine: produce latency p99 <= 5 ms and end-to-end (produce ->
a consumer receives) p99 <= 10 ms, at 50 % of the maximum throughput measured with the same settings,
``acks=all`` (so, with tierlog's default ``log.durable.acks=all``, after the group commit's fsync),
``linger.ms=0``.

    python bench/latency.py [--size 1024] [--seconds 10] [--data-dir DIR]

1. maximum: one confluent-kafka producer sends as fast as it can for ``--seconds`` with the settings
   above; records acknowledged per second.
2. latency: the same producer paced at half that rate; each record's value carries its send time;
   produce latency = delivery report - send; a consumer in the same process (its own librdkafka
   threads) timestamps each record as it arrives: end to end = arrival - send.
3. baseline: a request of the same size and a 16-byte answer through a loopback TCP socket between
   two threads of one process, as many times, p50/p99/p99.9 of the round trip.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from _common import command_line
from clients import create_topic, start_broker

STAMP = struct.Struct(">d")


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


def paced(bootstrap: str, topic: str, size: int, seconds: float, rate: float) -> tuple[list[float], list[float], int]:
    """(produce latencies, end-to-end latencies, records sent) at ``rate`` records/s."""
    producer = Producer(producer_config(bootstrap))
    producer.list_topics(topic, timeout=10)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"latency-{topic}", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 100, "fetch.min.bytes": 1})
    end_offset = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    consumer.assign([TopicPartition(topic, 0, end_offset)])
    produce_s: list[float] = []
    end_to_end_s: list[float] = []
    stop = threading.Event()

    def consume() -> None:
        while not stop.is_set():
            for msg in consumer.consume(num_messages=1000, timeout=0.1):
                if msg.error() is None:
                    value = msg.value() or b""
                    end_to_end_s.append(time.perf_counter() - STAMP.unpack_from(value)[0])

    reader = threading.Thread(target=consume)
    reader.start()
    padding = os.urandom(max(0, size - STAMP.size))
    interval = 1.0 / rate
    sent = 0

    def delivered(err: object, msg: object) -> None:
        if err is None:
            value = msg.value() or b""  # type: ignore[attr-defined]
            produce_s.append(time.perf_counter() - STAMP.unpack_from(value)[0])

    start = time.perf_counter()
    while (now := time.perf_counter()) - start < seconds:
        due = start + sent * interval
        if now < due:
            producer.poll(min(due - now, 0.001))
            continue
        producer.produce(topic, STAMP.pack(time.perf_counter()) + padding, partition=0, on_delivery=delivered)
        sent += 1
        producer.poll(0)
    producer.flush(60)
    deadline = time.monotonic() + 30
    while len(end_to_end_s) < sent and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    reader.join()
    consumer.close()
    return produce_s, end_to_end_s, sent


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


def line(name: str, samples_s: list[float]) -> str:
    p50, p99, p999 = percentiles(samples_s)
    return f"{name}: p50 {p50:.2f} ms, p99 {p99:.2f} ms, p99.9 {p999:.2f} ms ({len(samples_s):,} samples)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=1024, help="record value size in bytes")
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    ap.add_argument("--data-dir", type=Path, help="where the broker keeps its logs (default: a temp dir)")
    args = ap.parse_args()
    print(f"command: {command_line()}", flush=True)
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="tierlog-bench-latency-"))
    proc, bootstrap = start_broker(data_dir)
    try:
        topic = f"latency-{int(time.time())}"
        create_topic(bootstrap, topic, 1)
        top = maximum_rate(bootstrap, topic, args.size, args.seconds)
        print(f"maximum: {top:,.0f} records/s of {args.size} B (acks=all, linger.ms=0, one producer)", flush=True)
        produce_s, end_to_end_s, sent = paced(bootstrap, topic, args.size, args.seconds, top / 2)
        print(f"at 50 %: {sent:,} records at {top / 2:,.0f} records/s", flush=True)
        baseline = loopback_round_trips(args.size, max(1000, min(sent, 20_000)))
        print(line("produce latency (delivery report)", produce_s))
        print(line("end to end (produce -> consumer receives)", end_to_end_s))
        print(line(f"baseline loopback round trip of {args.size} B", baseline))
        p99_produce, p99_e2e, p99_base = percentiles(produce_s)[1], percentiles(end_to_end_s)[1], percentiles(baseline)[1]
        print(f"p99 over the baseline's p99: produce {p99_produce / p99_base:.1f}x, end to end {p99_e2e / p99_base:.1f}x "
              "(targets: produce p99 <= 5 ms, end to end p99 <= 10 ms)")
    finally:
        proc.terminate()
        proc.wait(60)
        if args.data_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
