"""tierlog against Apache Kafka itself, one after the other on this machine in one run, same clients, same
workloads (issue 24 point 5). Prints each figure for both, with the 1-minute load average when it was taken
(the machine is shared), and the tierlog/Kafka ratios.

Apache Kafka 4.3.1 (the jars scripts/_env.sh fetches into build/kafka-jars) runs as one KRaft node in
combined mode, ``-Xmx1g``, default settings apart from what a single node needs, data on the same disk
as tierlog's. tierlog runs twice: with ``log.durable.acks=all`` (its default: acks=all is answered once
the batch is fsynced) and ``none`` (Kafka's behaviour: answered once appended to the page cache).
Workloads, each with the broker's CPU seconds per GB and its RSS afterwards:

* produce and consume N records of 100 B and of 1 KiB with kcat (librdkafka's C tool; acks=1),
* Kafka's own ``kafka-producer-perf-test`` (acks=1) and ``kafka-consumer-perf-test`` (the Java client),
* produce latency: one record at a time, acks=all, waited for (confluent-kafka): p50 and p99,
* startup after a clean shutdown with ``--startup-segments`` segments over 100 partitions (tierlog lazy
  and eager vs Kafka), the starts timed back to back (see :func:`startup_figures`).

    .venv/bin/python bench/vs_kafka.py                      # about ten minutes
    .venv/bin/python bench/vs_kafka.py --records 200000 --startup-segments 2000
    .venv/bin/python bench/vs_kafka.py --skip-workloads --startup-segments 100000
"""

from __future__ import annotations

import argparse
import os
import re
import resource
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
    KafkaBroker,
    java_missing,
    run_tool,
)

from _common import command_line, perf_producer_command, perf_producer_rate  # noqa: E402
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
    #: Each figure with the 1-minute load average when it was taken (this machine is shared).
    figures: dict[str, tuple[float, float]] = field(default_factory=dict)

    def record(self, name: str, value: float) -> None:
        load = os.getloadavg()[0]
        self.figures[name] = (value, load)
        print(f"  {self.name}: {name} = {value:,.2f} (load {load:.1f})", flush=True)


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
        self.proc.wait(SLOW_S)


#: Starting or stopping either broker with 100,000 segments on a loaded machine can take minutes.
SLOW_S = 1800.0


def kafka_start_seconds(broker: KafkaBroker) -> float:
    """Seconds from exec to "Kafka Server started" in its log (polled every 0.2 s)."""
    t0 = time.perf_counter()
    broker.start(timeout_s=SLOW_S)
    return time.perf_counter() - t0


def perf_producer(bootstrap: str, topic: str, records: int, size: int) -> float:
    cmd = perf_producer_command(bootstrap, topic, records, size,
                                {"acks": "1", "linger.ms": "20", "batch.size": "1000000"})
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode:
        raise SystemExit(f"producer perf test exited {out.returncode}:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return perf_producer_rate(out.stdout)


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
            b.record(f"{tool} produce {size} B (records/s, acks=1)", rate)
            b.record(f"{tool} produce {size} B broker CPU s/GB", (cpu_seconds(b.pid) - cpu0) / gb)
            cpu0 = cpu_seconds(b.pid)
            rate = consume_kcat(b.bootstrap, topic, records) if tool == "kcat" else perf_consumer(b.bootstrap, topic, records)
            b.record(f"{tool} consume {size} B (records/s)", rate)
            b.record(f"{tool} consume {size} B broker CPU s/GB", (cpu_seconds(b.pid) - cpu0) / gb)
    create_topic(b.bootstrap, "latency", 1)
    p50, p99 = latency_ms(b.bootstrap, "latency", latency_count)
    b.record("produce latency p50 (ms, acks=all)", p50)
    b.record("produce latency p99 (ms, acks=all)", p99)
    b.record("broker RSS after the workloads (MiB)", rss_mib(b.pid))


def build_template(root: Path, segments: int) -> Path:
    """One partition of ``segments`` segments (one batch of 10 records of 80 B each, ~1 KiB), written by
    tierlog's storage engine in Kafka's format; it is copied into every partition of both brokers."""
    from tierlog.config import LogConfig
    from tierlog.records import SimpleRecord, build_batch
    from tierlog.storage.loader import LoadOptions, load_log

    template = root / "template-0"
    template.mkdir(parents=True)
    ulog = load_log(template, LogConfig.from_props({"segment.bytes": 1 << 30}), LoadOptions(had_clean_shutdown=False))
    now_ms = int(time.time() * 1000)  # within the default 7-day retention
    for s in range(segments):
        ulog.append_as_leader(build_batch([SimpleRecord(None, b"y" * 80, timestamp=now_ms) for _ in range(10)]))
        if s < segments - 1:
            ulog.roll()
    ulog.close()
    return template


def fill_partitions(data_dir: Path, template: Path) -> None:
    """Copy the template's files into each ``many-P`` directory the broker created (its own
    partition.metadata, which holds the topic id, stays)."""
    files = [f for f in template.iterdir() if f.name != "partition.metadata"]
    for p in range(PARTITIONS):
        target = data_dir / f"many-{p}"
        for old in target.iterdir():
            if old.name != "partition.metadata":
                old.unlink()
        for f in files:
            shutil.copy2(f, target / f.name)


def wait_for_dirs(data_dir: Path) -> None:
    deadline = time.monotonic() + 60
    while not all((data_dir / f"many-{p}" / "partition.metadata").exists() for p in range(PARTITIONS)):
        if time.monotonic() > deadline:
            raise SystemExit(f"the partition directories of 'many' did not appear in {data_dir}")
        time.sleep(0.1)


def create_many(bootstrap: str, data_dir: Path) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result is in
    admin.create_topics([NewTopic("many", PARTITIONS, 1)])["many"].result(60)
    wait_for_dirs(data_dir)


def open_files_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


PARTITIONS = 100
LOWER_IS_BETTER = ("CPU", "latency", "RSS", "startup")
#: tierlog's two durability settings: its default (acks=all answered once fsynced) and Kafka's behaviour.
DURABLE = ("all", "none")


def load1() -> float:
    return os.getloadavg()[0]


Figure = tuple[float, float]  # value, 1-minute load average when it was taken


def startup_figures(args: argparse.Namespace, root: Path, rows: dict[str, dict[str, Figure]]) -> None:
    """Both brokers hold the same 100-partition topic filled with the same segments; each has been started
    once on them and stopped cleanly (so each starts after its own clean shutdown, with the files in the
    page cache), then the starts are timed back to back, tierlog lazy, tierlog eager, Kafka, ``--startup-runs``
    times; each figure is the best of its runs, with the load average of that run."""
    n = args.startup_segments
    per_partition = -(-n // PARTITIONS)
    t0 = time.perf_counter()
    template = build_template(root, per_partition)
    print(f"template partition of {per_partition} segments built in {time.perf_counter() - t0:.1f} s", flush=True)

    tl_dir = root / "tierlog-startup"
    tl = TierlogProcess(tl_dir)
    tl.start()
    create_many(tl.bootstrap, tl_dir)
    tl.stop()
    fill_partitions(tl_dir, template)
    kafka = KafkaBroker(root / "kafka-startup", heap="1g")
    kafka.start()
    create_many(kafka.bootstrap, kafka.data_dir)
    kafka.stop(timeout=SLOW_S)
    fill_partitions(kafka.data_dir, template)
    shutil.rmtree(template)
    print(f"{PARTITIONS} partitions x {per_partition} segments copied to both brokers "
          f"({time.perf_counter() - t0:.1f} s so far); open-file limit {open_files_limit()}", flush=True)

    def start_tierlog(extra: tuple[str, ...]) -> float:
        proc = TierlogProcess(tl_dir, *extra)
        seconds = proc.start()
        proc.stop()
        return seconds

    def start_kafka() -> float:
        seconds = kafka_start_seconds(kafka)
        kafka.stop(timeout=SLOW_S)
        return seconds

    modes: dict[str, Callable[[], float]] = {
        "tierlog, lazy": lambda: start_tierlog(("--override", "sanity.check.all.logs.enabled=false")),
        "tierlog, eager": lambda: start_tierlog(("--override", "sanity.check.all.logs.enabled=true")),
        "kafka": start_kafka,
    }
    failed: dict[str, str] = {}
    print("warm-up starts (each broker loads the copied files once and stops cleanly)", flush=True)
    for name in ("tierlog, eager", "kafka"):
        try:
            print(f"  {name}: {modes[name]():.2f} s (load {load1():.1f})", flush=True)
        except (AssertionError, SystemExit) as e:
            failed[name] = why_not_started(name, e, kafka)
            print(f"  {name}: did not start: {failed[name]}", flush=True)
    best: dict[str, Figure] = {}
    for run in range(args.startup_runs):
        for name, start in modes.items():
            if name in failed or (name == "tierlog, lazy" and "tierlog, eager" in failed):
                continue
            load = load1()
            try:
                seconds = start()
            except (AssertionError, SystemExit) as e:
                failed[name] = why_not_started(name, e, kafka)
                print(f"  run {run + 1} {name}: did not start: {failed[name]}", flush=True)
                continue
            print(f"  run {run + 1} {name}: {seconds:.2f} s (load {load:.1f})", flush=True)
            if name not in best or seconds < best[name][0]:
                best[name] = (seconds, load)
    # Startup does not depend on log.durable.acks: the figures stand in the default's column only.
    label = f"startup with {n:,} segments (s)"
    for mode in ("lazy", "eager"):
        if f"tierlog, {mode}" in best:
            rows["tierlog all"][f"{label}, tierlog {mode}"] = best[f"tierlog, {mode}"]
        if "kafka" in best:
            rows["kafka"][f"{label}, tierlog {mode}"] = best["kafka"]
    for name, why in failed.items():
        print(f"NOTE: {name} did not start with {n:,} segments: {why}", flush=True)


def why_not_started(name: str, error: BaseException, kafka: KafkaBroker) -> str:
    if name == "kafka":
        text = kafka.log_tail(400)
        if "Too many open files" in text:
            return (f"Too many open files: Kafka keeps each segment's .log open, and this machine's open-file "
                    f"limit is {open_files_limit()} (hard {resource.getrlimit(resource.RLIMIT_NOFILE)[1]})")
        return text.splitlines()[-1] if text else str(error)
    return str(error)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=500_000)
    p.add_argument("--latency-count", type=int, default=2000)
    p.add_argument("--startup-segments", type=int, default=20_000)
    p.add_argument("--startup-runs", type=int, default=2)
    p.add_argument("--skip-workloads", action="store_true", help="only the startup figures")
    args = p.parse_args()
    missing = java_missing()
    if missing is not None:
        raise SystemExit(missing)
    if shutil.which("kcat") is None:
        raise SystemExit("kcat is missing (scripts/_env.sh installs it)")
    print(f"command: {command_line()}", flush=True)
    print(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores",
          flush=True)
    rows: dict[str, dict[str, Figure]] = {f"tierlog {d}": {} for d in DURABLE} | {"kafka": {}}
    (ROOT / "build").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="vs-kafka-", dir=ROOT / "build") as tmp:
        root = Path(tmp)
        if not args.skip_workloads:
            for durable in DURABLE:
                # The Kafka node runs with group.initial.rebalance.delay.ms=0 (tests/jvm/kafka.py): so does
                # tierlog, or the perf consumer's group join would wait 3 s on one side only.
                tl = TierlogProcess(root / f"tierlog-{durable}", "--override", "group.initial.rebalance.delay.ms=0",
                                    "--override", f"log.durable.acks={durable}")
                tl.start()
                assert tl.proc is not None
                b = Broker(f"tierlog {durable}", tl.bootstrap, tl.proc.pid, tl.stop)
                workloads(b, args.records, root, args.latency_count)
                tl.stop()
                rows[b.name] = dict(b.figures)
                shutil.rmtree(root / f"tierlog-{durable}")
            kafka = KafkaBroker(root / "kafka", heap="1g")
            kafka.start()
            assert kafka.proc is not None
            k = Broker("kafka", kafka.bootstrap, kafka.proc.pid, lambda: None)
            workloads(k, args.records, root, args.latency_count)
            kafka.stop()
            rows["kafka"] = dict(k.figures)
            shutil.rmtree(root / "kafka")
        if args.startup_segments:
            startup_figures(args, root, rows)

    print()
    print("| figure | tierlog `log.durable.acks=all` (default) | tierlog `none` (Kafka's behaviour) | Kafka 4.3.1 "
          "| all/Kafka | none/Kafka |")
    print("|---|---|---|---|---|---|")
    names = list(dict.fromkeys([*rows["tierlog all"], *rows["tierlog none"], *rows["kafka"]]))
    nan = (float("nan"), float("nan"))
    for name in names:
        kafka_value = rows["kafka"].get(name, nan)
        cells, ratios = [], []
        for key in ("tierlog all", "tierlog none", "kafka"):
            if name in rows[key]:
                value, load = rows[key][name]
                cells.append(f"{value:,.2f} (load {load:.1f})")
            else:
                cells.append("—")
        for key in ("tierlog all", "tierlog none"):
            value = rows[key].get(name, nan)[0]
            ratios.append(f"{value / kafka_value[0]:.2f}" if name in rows[key] and name in rows["kafka"]
                          and kafka_value[0] else "—")
        better = " (lower is better)" if any(w in name for w in LOWER_IS_BETTER) else ""
        print(f"| {name}{better} | {' | '.join(cells)} | {' | '.join(ratios)} |")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
