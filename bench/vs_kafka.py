"""tierlog against Apache Kafka itself, one after the other on this machine, same clients, same workloads
(issue 24 point 5). Prints each figure for both and the tierlog/Kafka ratio.

Apache Kafka 4.3.1 (the jars scripts/_env.sh fetches into build/kafka-jars) runs as one KRaft node in
combined mode, ``-Xmx1g``, default settings apart from what a single node needs, data on the same disk
as tierlog's. Workloads, each with the broker's CPU seconds per GB and its RSS afterwards:

* produce and consume N records of 100 B and of 1 KiB with kcat (librdkafka's C tool; acks=1),
* Kafka's own ``kafka-producer-perf-test`` and ``kafka-consumer-perf-test`` (the Java client),
* produce latency: one record at a time, acks=all, waited for (confluent-kafka): p50 and p99,
* startup after a clean shutdown with ``--startup-segments`` segments (tierlog lazy and eager).

    .venv/bin/python bench/vs_kafka.py                      # about five minutes
    .venv/bin/python bench/vs_kafka.py --records 200000 --startup-segments 2000
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from confluent_kafka import Producer  # noqa: E402
from tests.jvm.kafka import (  # noqa: E402
    CONSUMER_PERF,
    PRODUCER_PERF,
    KafkaBroker,
    java_missing,
    run_tool,
)

from _common import command_line  # noqa: E402
from clients import consume_kcat, cpu_seconds, create_topic, produce_kcat  # noqa: E402


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class Broker:
    name: str
    bootstrap: str
    pid: int
    stop: Callable[[], None]
    figures: dict[str, float] = field(default_factory=dict)


class TierlogProcess:
    def __init__(self, data_dir: Path, *extra: str) -> None:
        self.data_dir = data_dir
        self.extra = extra
        self.proc: subprocess.Popen[str] | None = None
        self.bootstrap = ""

    def start(self) -> float:
        """Seconds from exec to listening."""
        cmd = [sys.executable, "-m", "tierlog.cli.main", "--log-level", "WARNING", "serve",
               "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={self.data_dir}", *self.extra]
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("tierlog listening on "):
                self.bootstrap = line.strip().rsplit(" ", 1)[1]
                elapsed = time.perf_counter() - t0
                import threading

                threading.Thread(target=lambda: [None for _ in self.proc.stdout or ()], daemon=True).start()
                return elapsed
        raise SystemExit("tierlog did not start")

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.terminate()
        self.proc.wait(120)


def kafka_start_seconds(broker: KafkaBroker) -> float:
    t0 = time.perf_counter()
    broker.start()
    return time.perf_counter() - t0


def perf_producer(bootstrap: str, topic: str, records: int, size: int) -> float:
    out = run_tool(PRODUCER_PERF, "--topic", topic, "--num-records", str(records), "--record-size", str(size),
                   "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}", "acks=1",
                   "linger.ms=20", "batch.size=1000000", timeout=600).stdout
    m = re.search(r"\d+ records sent, ([\d.]+) records/sec", out.splitlines()[-1] if out else "")
    if m is None:
        raise SystemExit(f"producer perf test printed no summary:\n{out[-2000:]}")
    return float(m.group(1))


def perf_consumer(bootstrap: str, topic: str, records: int) -> float:
    out = run_tool(CONSUMER_PERF, "--bootstrap-server", bootstrap, "--topic", topic, "--messages", str(records),
                   "--timeout", "60000", timeout=600).stdout
    rows = [line for line in out.splitlines() if re.match(r"^\d{4}-", line)]
    if not rows:
        raise SystemExit(f"consumer perf test printed no result:\n{out[-2000:]}")
    # start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, ...
    return float(rows[-1].split(",")[5])


def latency_ms(bootstrap: str, topic: str, count: int) -> tuple[float, float]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    producer.list_topics(topic, timeout=10)
    samples = []
    for _ in range(count):
        t0 = time.perf_counter()
        producer.produce(topic, value=b"x" * 100, partition=0)
        producer.flush(10)
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return samples[len(samples) // 2], samples[int(len(samples) * 0.99)]


def workloads(b: Broker, records: int, scratch: Path, latency_count: int) -> None:
    for size in (100, 1024):
        for tool in ("kcat", "perf"):
            topic = f"{tool}-{size}"
            create_topic(b.bootstrap, topic, 1)
            cpu0 = cpu_seconds(b.pid)
            rate = (produce_kcat(b.bootstrap, topic, records, size, scratch) if tool == "kcat"
                    else perf_producer(b.bootstrap, topic, records, size))
            gb = records * size / 1e9
            b.figures[f"{tool} produce {size} B (records/s)"] = rate
            b.figures[f"{tool} produce {size} B broker CPU s/GB"] = (cpu_seconds(b.pid) - cpu0) / gb
            cpu0 = cpu_seconds(b.pid)
            rate = consume_kcat(b.bootstrap, topic, records) if tool == "kcat" else perf_consumer(b.bootstrap, topic, records)
            b.figures[f"{tool} consume {size} B (records/s)"] = rate
            b.figures[f"{tool} consume {size} B broker CPU s/GB"] = (cpu_seconds(b.pid) - cpu0) / gb
            print(f"  {b.name}: {tool} {size} B done", flush=True)
    create_topic(b.bootstrap, "latency", 1)
    p50, p99 = latency_ms(b.bootstrap, "latency", latency_count)
    b.figures["produce latency p50 (ms, acks=all)"] = p50
    b.figures["produce latency p99 (ms, acks=all)"] = p99
    b.figures["broker RSS after the workloads (MiB)"] = rss_mib(b.pid)


def fill_segments(bootstrap: str, segments: int) -> None:
    """Many small segments over 100 partitions (segment.bytes = 1 KiB of 10 records each), produced
    through tierlog."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("many", PARTITIONS, 1, config={"segment.bytes": "1024"})])["many"].result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 10,
                         "queue.buffering.max.messages": 2_000_000})
    for _segment in range(segments // PARTITIONS + 1):
        for p in range(PARTITIONS):
            for _ in range(10):
                producer.produce("many", value=b"y" * 90, partition=p)
            producer.poll(0)
        producer.flush(60)


def fill_kafka_segments(kafka: KafkaBroker, segments: int) -> None:
    """The same shape for Kafka, whose segment.bytes cannot go below 1 MiB (KIP-1030): the topic is
    created through Kafka, and with Kafka stopped its partition directories are filled with 1 KiB
    segments in Kafka's own format, written by tierlog's storage engine (Kafka's files, loaded by Kafka
    at its next start). Kafka's own partition.metadata stays."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from tierlog.config import LogConfig
    from tierlog.records import SimpleRecord, build_batch
    from tierlog.storage.loader import LoadOptions, load_log

    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_topics([NewTopic("many", PARTITIONS, 1)])["many"].result(60)
    deadline = time.monotonic() + 60
    while not all((kafka.data_dir / f"many-{p}" / "partition.metadata").exists() for p in range(PARTITIONS)):
        if time.monotonic() > deadline:
            raise SystemExit("Kafka did not create the partition directories of 'many'")
        time.sleep(0.1)
    kafka.stop()
    config = LogConfig.from_props({"segment.bytes": 2048})
    for p in range(PARTITIONS):
        ulog = load_log(kafka.data_dir / f"many-{p}", config, LoadOptions(had_clean_shutdown=False))
        while len(ulog.segments) <= segments // PARTITIONS:
            ulog.append_as_leader(build_batch([SimpleRecord(None, b"y" * 80, timestamp=int(time.time() * 1000))
                                               for _ in range(10)]))
        ulog.close()


PARTITIONS = 100
LOWER_IS_BETTER = ("CPU", "latency", "RSS", "startup")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=500_000)
    p.add_argument("--latency-count", type=int, default=2000)
    p.add_argument("--startup-segments", type=int, default=20_000)
    args = p.parse_args()
    missing = java_missing()
    if missing is not None:
        raise SystemExit(missing)
    if shutil.which("kcat") is None:
        raise SystemExit("kcat is missing (scripts/_env.sh installs it)")
    print(f"command: {command_line()}", flush=True)
    rows: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="vs-kafka-", dir=ROOT / "build") as tmp:
        root = Path(tmp)
        # The Kafka node runs with group.initial.rebalance.delay.ms=0 (tests/jvm/kafka.py): so does tierlog,
        # or the perf consumer's group join would wait 3 s on one side only.
        tl = TierlogProcess(root / "tierlog", "--override", "group.initial.rebalance.delay.ms=0")
        tl.start()
        assert tl.proc is not None
        b = Broker("tierlog", tl.bootstrap, tl.proc.pid, tl.stop)
        workloads(b, args.records, root, args.latency_count)
        if args.startup_segments:
            fill_segments(tl.bootstrap, args.startup_segments)
        tl.stop()
        rows["tierlog"] = b.figures
        if args.startup_segments:
            for label, extra in (("lazy", ("--override", "sanity.check.all.logs.enabled=false")), ("eager", ())):
                again = TierlogProcess(root / "tierlog", *extra)
                b.figures[f"startup with {args.startup_segments} segments, {label} (s)"] = again.start()
                again.stop()
        shutil.rmtree(root / "tierlog")

        kafka = KafkaBroker(root / "kafka", heap="1g")
        kafka.start()
        assert kafka.proc is not None
        k = Broker("kafka", kafka.bootstrap, kafka.proc.pid, lambda: None)
        workloads(k, args.records, root, args.latency_count)
        if args.startup_segments:
            fill_kafka_segments(kafka, args.startup_segments)
        else:
            kafka.stop()
        if args.startup_segments:
            seconds = kafka_start_seconds(kafka)
            k.figures[f"startup with {args.startup_segments} segments, lazy (s)"] = seconds
            k.figures[f"startup with {args.startup_segments} segments, eager (s)"] = seconds
            kafka.stop()
        rows["kafka"] = k.figures

    print()
    print("| figure | tierlog | Kafka 4.3.1 | tierlog/Kafka |")
    print("|---|---|---|---|")
    for name, value in rows["tierlog"].items():
        other = rows["kafka"].get(name, float("nan"))
        ratio = value / other if other else float("nan")
        better = "lower is better" if any(w in name for w in LOWER_IS_BETTER) else ""
        print(f"| {name} | {value:,.2f} | {other:,.2f} | {ratio:.2f} {('(' + better + ')') if better else ''} |")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
