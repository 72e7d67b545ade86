"""Produce throughput with durable acknowledgements next to Kafka's behaviour, in the same run (issue 21).

Two brokers of the same build on the same disk, one with ``log.durable.acks=all`` (tierlog's
default: an acks=all produce is answered once its batches are fdatasynced, by the log dir's group
commit) and one with ``log.durable.acks=none`` (Kafka's behaviour: answered once appended to the
page cache; ``flush.messages`` / ``flush.ms`` at Kafka's defaults, so never flushed on a timer).
Their runs alternate, ``--runs`` times each; the best run of each is reported. Scenarios
(librdkafka producers, acks=all, idempotent, 1 KiB records, no compression):

* 1 MiB batches from one producer to one partition;
* 16 KiB batches from 8 producers (8 connections), each to a partition of its own;
* 16 KiB batches from 8 producers spread over 100 partitions.

The group commit alone, without clients or the network (what the broker controls, measurable on a
loaded machine where the client runs are CPU-starved): one thread per partition appends a 16 KiB
batch with tierlog's LogManager in this process and waits for its durable sync, one at a time (as
librdkafka's idempotent producer keeps one request in flight per partition), for 8 and 100
partitions; its baseline is the same number of threads each doing ``pwrite`` 16 KiB + ``fdatasync``
on a file of its own.

For the durable runs the group commit's syncs and fdatasyncs per second are read from the
broker's metrics (``tierlog_group_commit_syncs`` / ``tierlog_group_commit_fdatasyncs``). The
baseline of the disk itself is a plain loop of ``pwrite`` + ``fdatasync`` of 16 KiB and of 1 MiB in
the same directory, and one group-commit round of 8 and of 100 files synced three ways (fdatasync
one after the other as GroupCommit does, from 8 threads at once, one syncfs). Target: durable >=
0.5x non-durable with 8 producers.

    python bench/durability.py [--mib 96] [--runs 2] [--dir DIR]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.helpers.broker starts the broker process

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.helpers.broker import BrokerProcess  # noqa: E402

from _common import command_line  # noqa: E402

RECORD_BYTES = 1024


@dataclass(frozen=True)
class Scenario:
    name: str
    producers: int
    partitions: int
    batch_bytes: int


SCENARIOS = (
    Scenario("1 MiB batches, 1 producer, 1 partition", 1, 1, 1 << 20),
    Scenario("16 KiB batches, 8 producers, 8 partitions", 8, 8, 16 << 10),
    Scenario("16 KiB batches, 8 producers, 100 partitions", 8, 100, 16 << 10),
)


@dataclass
class Run:
    mib_per_s: float
    syncs_per_s: float = 0.0
    fdatasyncs_per_s: float = 0.0
    requests_per_sync: float = 0.0
    ms_per_sync: float = 0.0


def fsync_baseline(directory: Path, write_bytes: int, seconds: float) -> tuple[float, float, float]:
    """(syncs per second, median ms, p99 ms) of a pwrite + fdatasync loop appending ``write_bytes``."""
    path = directory / f"fsync-baseline-{write_bytes}"
    data = os.urandom(write_bytes)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    latencies: list[float] = []
    try:
        offset = 0
        t_end = time.perf_counter() + seconds
        while time.perf_counter() < t_end:
            t0 = time.perf_counter()
            os.pwrite(fd, data, offset)
            os.fdatasync(fd)
            latencies.append(time.perf_counter() - t0)
            offset += write_bytes
    finally:
        os.close(fd)
        path.unlink()
    latencies.sort()
    return (len(latencies) / sum(latencies), statistics.median(latencies) * 1000,
            latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000)


def round_strategies(directory: Path, files: int, rounds: int) -> dict[str, float]:
    """Milliseconds per group-commit round of ``files`` files with 16 KiB new in each, by strategy:
    fdatasync one after the other (what GroupCommit does), fdatasync from 8 threads at once, and
    one syncfs of the whole filesystem."""
    libc = ctypes.CDLL(None, use_errno=True)
    fds = [os.open(directory / f"round-{i}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) for i in range(files)]
    data = os.urandom(16 << 10)
    out: dict[str, float] = {}
    try:
        with ThreadPoolExecutor(8) as pool:
            strategies = {
                "sequential fdatasync": lambda: [os.fdatasync(fd) for fd in fds],
                "fdatasync from 8 threads": lambda: list(pool.map(os.fdatasync, fds)),
                "one syncfs": lambda: libc.syncfs(fds[0]),
            }
            times: dict[str, list[float]] = {name: [] for name in strategies}
            for _ in range(rounds):
                for name, sync in strategies.items():  # interleaved, so load hits each alike
                    for fd in fds:
                        os.write(fd, data)
                    t0 = time.perf_counter()
                    sync()
                    times[name].append(time.perf_counter() - t0)
            out = {name: statistics.median(t) * 1000 for name, t in times.items()}
    finally:
        for i, fd in enumerate(fds):
            os.close(fd)
            (directory / f"round-{i}").unlink()
    return out


def group_commit_alone(directory: Path, partitions: int, seconds: float) -> tuple[float, float]:
    """(durable 16 KiB appends per second, p99 ms waited for the sync) through LogManager's group
    commit, one thread per partition with one append in flight."""
    from tierlog.config import LogConfig
    from tierlog.records import SimpleRecord, build_batch
    from tierlog.storage.log_manager import LogManager

    config = LogConfig()
    manager = LogManager([directory / f"group-commit-{partitions}"], lambda _t: config)
    manager.startup_logs()
    logs = [manager.get_or_create_log("bench", p) for p in range(partitions)]
    data = build_batch([SimpleRecord(None, os.urandom(RECORD_BYTES - 24), timestamp=1) for _ in range(16)])
    waits: list[list[float]] = [[] for _ in range(partitions)]
    t_end = time.perf_counter() + seconds

    def run(i: int) -> None:
        while time.perf_counter() < t_end:
            info = logs[i].append_as_leader(data)
            t0 = time.perf_counter()
            manager.sync_future(logs[i], info).result(60)
            waits[i].append(time.perf_counter() - t0)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(partitions)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    manager.shutdown()
    every = sorted(w for ws in waits for w in ws)
    return len(every) / elapsed, every[min(len(every) - 1, int(len(every) * 0.99))] * 1000


def parallel_fdatasync(directory: Path, files: int, seconds: float) -> float:
    """pwrite 16 KiB + fdatasync per second, one thread per file (the disk without the broker)."""
    data = os.urandom(16 << 10)
    counts = [0] * files
    t_end = time.perf_counter() + seconds

    def run(i: int) -> None:
        fd = os.open(directory / f"parallel-{i}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            offset = 0
            while time.perf_counter() < t_end:
                os.pwrite(fd, data, offset)
                os.fdatasync(fd)
                offset += len(data)
                counts[i] += 1
        finally:
            os.close(fd)
            (directory / f"parallel-{i}").unlink()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(files)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - t0)


def metric(url: str, name: str) -> float:
    total = 0.0
    with urllib.request.urlopen(url, timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith((name + "{", name + " ", name + "_total{", name + "_total ")):
                total += float(line.rsplit(" ", 1)[1])
    return total


def metrics_url(broker: BrokerProcess) -> str:
    for line in broker.stdout_lines:
        if line.startswith("tierlog metrics on "):
            return line.strip().rsplit(" ", 1)[1]
    raise SystemExit("the broker printed no metrics address")


def produce(bootstrap: str, topic: str, scenario: Scenario, total_bytes: int) -> float:
    """Seconds from the first record handed to the producers until every one is acknowledged."""
    per_producer = total_bytes // RECORD_BYTES // scenario.producers
    value = os.urandom(RECORD_BYTES)
    failures: list[str] = []
    producers = [Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "compression.type": "none",
        "linger.ms": 5, "batch.size": scenario.batch_bytes, "message.max.bytes": scenario.batch_bytes + 65536,
        "batch.num.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
        "queue.buffering.max.messages": 1_000_000, "log_level": 0,
    }) for _ in range(scenario.producers)]
    for p in producers:
        p.list_topics(topic, timeout=30)  # connected before the clock starts
    # Each producer its own partitions: producer i writes partitions i, i+n, i+2n, ...
    owned = [list(range(i, scenario.partitions, scenario.producers)) or [i % scenario.partitions]
             for i in range(scenario.producers)]

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    def run(i: int) -> None:
        p, parts = producers[i], owned[i]
        chunk = [{"value": value}] * 1000
        sent = 0
        while sent < per_producer:
            for part in parts:
                n = min(len(chunk), per_producer - sent)
                if n <= 0:
                    break
                while True:
                    queued = p.produce_batch(topic, chunk[:n], partition=part, on_delivery=on_delivery)
                    sent += queued
                    if queued == n:
                        break
                    n -= queued
                    p.poll(0.005)  # the local queue is full: wait for acknowledgements
            p.poll(0)
        left = p.flush(600)
        if left:
            failures.append(f"{left} records not delivered")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(scenario.producers)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if failures:
        raise SystemExit(f"{scenario.name}: {len(failures)} delivery failures, first: {failures[0]}")
    return elapsed


def one_run(work: Path, label: str, durable_acks: str, scenario: Scenario, total_bytes: int) -> Run:
    data = work / f"{label}-{durable_acks}"
    broker = BrokerProcess(data, {"log.durable.acks": durable_acks, "metrics.listener": "http://127.0.0.1:0",
                                  "log.segment.bytes": str(256 << 20), "message.max.bytes": str(2 << 20)})
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("durability", num_partitions=scenario.partitions,
                                      replication_factor=1)])["durability"].result(60)
        url = metrics_url(broker)
        before = {n: metric(url, n) for n in ("tierlog_group_commit_syncs", "tierlog_group_commit_fdatasyncs",
                                              "tierlog_group_commit_requests", "tierlog_group_commit_sync_seconds")}
        seconds = produce(broker.bootstrap, "durability", scenario, total_bytes)
        after = {n: metric(url, n) - before[n] for n in before}
    finally:
        broker.stop()
    mib = (total_bytes // RECORD_BYTES // scenario.producers * scenario.producers * RECORD_BYTES) / 2**20
    syncs = after["tierlog_group_commit_syncs"]
    return Run(mib / seconds, syncs / seconds, after["tierlog_group_commit_fdatasyncs"] / seconds,
               after["tierlog_group_commit_requests"] / syncs if syncs else 0.0,
               after["tierlog_group_commit_sync_seconds"] * 1000 / syncs if syncs else 0.0)


def load_line() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.1f} / {five:.1f} / {fifteen:.1f} on {os.cpu_count()} cores"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=96, help="MiB produced per run")
    ap.add_argument("--runs", type=int, default=2, help="runs of each setting per scenario (alternating)")
    ap.add_argument("--only", default="", help="scenario numbers, e.g. 2,3")
    ap.add_argument("--rounds", type=int, default=30, help="rounds of each sync strategy measured")
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each group-commit-alone run")
    ap.add_argument("--dir", default=None, help="where the brokers keep their data (default: the temp dir)")
    args = ap.parse_args()
    print(f"command: {command_line()}", flush=True)
    print(load_line(), flush=True)
    chosen = [SCENARIOS[int(i) - 1] for i in args.only.split(",") if i and i != "0"] if args.only else list(SCENARIOS)
    with tempfile.TemporaryDirectory(prefix="tierlog-durability-", dir=args.dir) as tmp:
        work = Path(tmp)
        for size in (16 << 10, 1 << 20):
            rate, median_ms, p99_ms = fsync_baseline(work, size, 3.0)
            print(f"disk baseline, pwrite {size >> 10} KiB + fdatasync: {rate:,.0f} syncs/s, median {median_ms:.2f} ms, "
                  f"p99 {p99_ms:.2f} ms", flush=True)
        for files in (8, 100):
            strategies = round_strategies(work, files, args.rounds)
            print(f"one round of {files} files with 16 KiB new each, median of {args.rounds}: "
                  + ", ".join(f"{name} {ms:.1f} ms" for name, ms in strategies.items()), flush=True)
        for partitions in (8, 100):
            alone, p99_ms = group_commit_alone(work, partitions, args.seconds)
            raw = parallel_fdatasync(work, partitions, args.seconds)
            print(f"group commit alone, {partitions} partitions, one 16 KiB append in flight each: {alone:,.0f} "
                  f"durable appends/s (p99 wait {p99_ms:.1f} ms)  |  baseline {partitions} threads of pwrite + "
                  f"fdatasync: {raw:,.0f}/s  |  ratio {alone / raw:.2f}", flush=True)
        print(load_line(), flush=True)
        for n, scenario in enumerate(chosen):
            best: dict[str, Run] = {}
            for r in range(args.runs):
                for mode in ("none", "all"):
                    run = one_run(work, f"s{n}-r{r}", mode, scenario, args.mib << 20)
                    print(f"  {scenario.name}, log.durable.acks={mode}, run {r + 1}: {run.mib_per_s:,.1f} MiB/s"
                          + (f", {run.syncs_per_s:,.0f} group commits/s, {run.fdatasyncs_per_s:,.0f} fdatasyncs/s, "
                             f"{run.requests_per_sync:.1f} requests and {run.ms_per_sync:.1f} ms of syncing per group commit"
                             if mode == "all" else ""),
                          flush=True)
                    if mode not in best or run.mib_per_s > best[mode].mib_per_s:
                        best[mode] = run
            durable, fast = best["all"], best["none"]
            print(f"{scenario.name}: durable (all) {durable.mib_per_s:,.1f} MiB/s ({durable.syncs_per_s:,.0f} group "
                  f"commits/s, {durable.fdatasyncs_per_s:,.0f} fdatasyncs/s)  |  baseline Kafka's behaviour (none) "
                  f"{fast.mib_per_s:,.1f} MiB/s  |  ratio {durable.mib_per_s / fast.mib_per_s:.2f}", flush=True)
            print(load_line(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
