"""Scan throughput of ``spark.read.format("tierlog")`` next to ``spark.read.parquet`` of the same rows,
in the same Spark session and run.

A topic of ``--records`` 100-byte records (random values, so neither side gains from compression or
dictionary encoding; null keys) is written once through UnifiedLog into ``--dir`` and reused by later
runs; the same rows are written to Parquet by Spark from the data source itself. Each scan
materialises every column (``write.format("noop")``); rounds alternate, best and median of
``--rounds`` are printed with the CPU seconds each scan cost the JVM and the Python workers (read
from /proc: on a shared machine, the figure that other load changes least). Printed apart: a job's
fixed cost, the Spark session's start (JVM and session) and the first job (Python worker start),
which every ``tierlog spark`` job pays before it scans. Target (issue 26): tierlog ≥ 1.0× the
Parquet scan.

Also timed in the same rounds, when its jar is built: ``tierlog.pipeline.read`` with the JVM reader
(jvm/spark-reader: planned in this process, read by a Java DataSource V2 reader; each round plans
again, as each ``format("tierlog")`` round does).

Run: .venv/bin/python bench/spark_scan.py [--records 5000000] [--partitions 2] [--master local[*]]

``--s3-only``: instead, the remote read. The topic is tiered to S3 (moto's server on 127.0.0.1,
started here: absolute figures measure moto) as the broker tiers it, manifests included; then each
round reads every remote segment the way an executor does (planned from the manifests, fetched
through the S3 plugin, CRCs checked and decoded to Arrow) against a plain ranged GET of the same
objects with obstore (bytes only), alternating. Target: remote read >= 0.8x the plain GET.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tierlog.config import LogConfig
from tierlog.records import SimpleRecord, build_batch
from tierlog.storage.loader import LoadOptions, load_log

TOPIC = "scan"
VALUE_BYTES = 100
PER_BATCH = 1000
T0 = 1_700_000_000_000


def write_topic(data: Path, records: int, partitions: int, codec: int) -> None:
    marker = data / "bench.json"
    wanted = {"records": records, "partitions": partitions, "codec": codec}
    if marker.exists() and json.loads(marker.read_text()) == wanted:
        return
    shutil.rmtree(data, ignore_errors=True)
    rng = np.random.default_rng(7)
    per_partition = records // partitions
    config = LogConfig.from_props({"segment.bytes": 64 << 20, "retention.ms": -1})
    started = time.perf_counter()
    for p in range(partitions):
        ulog = load_log(data / f"{TOPIC}-{p}", config, LoadOptions())
        written = 0
        while written < per_partition:
            n = min(PER_BATCH, per_partition - written)
            values = rng.integers(0, 256, size=(n, VALUE_BYTES), dtype=np.uint8)
            batch = [SimpleRecord(None, values[i].tobytes(), (), T0 + written + i) for i in range(n)]
            ulog.append_as_leader(build_batch(batch, compression=codec))
            written += n
        ulog.close()
    marker.write_text(json.dumps(wanted))
    print(f"wrote {records} records in {time.perf_counter() - started:.1f}s", file=sys.stderr)


def _ready_made_source() -> type:
    """A data source answering every read with Arrow batches decoded once per worker process and
    cached: what is left is the cost of Spark's Python data source path itself. Defined here (and
    shipped to the workers by value) because it is a measuring device, not a product feature."""
    from pyspark.sql.datasource import InputPartition

    from tierlog.pipeline.source import TierlogBatchReader, TierlogDataSource, _read

    class ReadyMadeReader(TierlogBatchReader):
        def read(self, partition: InputPartition) -> Any:
            # Kept in a module of the worker: this class travels by value with each task, so a
            # dict closed over here would be a new, empty one every time.
            import tierlog.pipeline.reader as kept

            cache: dict[object, list[object]] = kept.__dict__.setdefault("_bench_ready_made", {})
            key = partition.value
            if key not in cache:
                cache[key] = list(_read(self.options, partition))
            return iter(cache[key])

    class ReadyMade(TierlogDataSource):
        @classmethod
        def name(cls) -> str:
            return "tierlog_ready_made"

        def reader(self, schema: Any) -> Any:
            return ReadyMadeReader(self._options(streaming=False))

    return ReadyMade


def s3_vs_get(data: Path, rounds: int) -> int:
    """The remote read against a plain GET of the same objects (see the module docstring)."""
    import logging
    import socket

    import obstore
    from moto.server import ThreadedMotoServer

    from tierlog.pipeline.options import parse_options, plan_ranges, resolve
    from tierlog.pipeline.reader import read_range
    from tierlog.tiered.backends.s3 import S3RemoteStorageManager
    from tierlog.tiered.manifest import ManifestPublisher
    from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager
    from tierlog.tiered.remote_log_manager import RemoteLogManager, RemoteLogManagerConfig

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        import boto3

        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket="bench-scan")
        props = {"s3.bucket": "bench-scan", "s3.endpoint": endpoint, "s3.prefix": "tier"}
        config = LogConfig.from_props({"segment.bytes": 64 << 20, "retention.ms": -1, "remote.storage.enable": True})
        logs = {}
        for d in sorted(data.glob(f"{TOPIC}-*")):
            ulog = load_log(d, config, LoadOptions(had_clean_shutdown=True))
            ulog.roll()  # every record in a closed segment: all of it is tierable
            logs[(TOPIC, int(d.name.rsplit("-", 1)[1]))] = ulog
        rsm = S3RemoteStorageManager()
        rsm.configure(props)
        meta = data.parent / "s3-remote-log-metadata"
        shutil.rmtree(meta, ignore_errors=True)

        class Logs:
            def all_logs(self) -> dict[tuple[str, int], Any]:
                return logs

            def get_log(self, topic: str, partition: int) -> Any:
                return logs.get((topic, partition))

        rlm = RemoteLogManager(RemoteLogManagerConfig(system_enable=True), Logs(), rsm,
                               ManifestPublisher(FileRemoteLogMetadataManager(meta, sync=False), rsm),
                               index_cache_dir=data.parent / "s3-index-cache")
        copied = rlm.copy_all()
        rlm.close()
        for ulog in logs.values():
            ulog.close()
        options = {"subscribe": TOPIC, "tail": "none", "remote.log.storage.manager.class.name":
                   "tierlog.tiered.backends.s3.S3RemoteStorageManager", **{f"rsm.config.{k}": v for k, v in props.items()}}
        opts = parse_options(options)
        parts = opts.partitions(opts.discover())
        ranges = plan_ranges(parts, resolve(opts.starting, "starting", parts, opts),
                             resolve(opts.ending, "ending", parts, opts), opts)
        assert ranges and all(r.is_remote for r in ranges), ranges
        reader = S3RemoteStorageManager()
        reader.configure(props)
        keys = [(reader.key_base(r.remote) + ".log", r.remote.segment_size_in_bytes) for r in ranges if r.remote]
        total_bytes = sum(size for _, size in keys)

        def remote_read() -> int:
            return sum(b.num_rows for r in ranges for b in read_range(r, include_headers=False, spec=opts.remote))

        def plain_get() -> int:
            return sum(len(obstore.get_range(reader.store, key, start=0, end=size)) for key, size in keys)

        rows = remote_read()
        assert plain_get() == total_bytes
        def run_remote() -> None:
            assert remote_read() == rows

        def run_get() -> None:
            assert plain_get() == total_bytes

        times: dict[str, list[float]] = {"remote": [], "get": []}
        for _ in range(rounds):  # alternating, so a burst of other load hits both
            times["remote"].append(timed(run_remote))
            times["get"].append(timed(run_get))
        t_remote, t_get = min(times["remote"]), min(times["get"])
        mib = total_bytes / (1 << 20)
        print(f"remote tier: {copied} segments, {mib:.0f} MiB, {rows} rows, S3 on moto (127.0.0.1), best of {rounds}")
        print(f"remote read (fetch through the plugin, decode):  {t_remote:6.2f} s  {mib / t_remote:7.1f} MiB/s  "
              f"(all rounds: {', '.join(f'{t:.2f}' for t in times['remote'])})")
        print(f"plain ranged GET of the same objects:             {t_get:6.2f} s  {mib / t_get:7.1f} MiB/s  "
              f"(all rounds: {', '.join(f'{t:.2f}' for t in times['get'])})")
        print(f"ratio remote/GET: {t_get / t_remote:.2f}x (target >= 0.8x)")
        return 0
    finally:
        server.stop()


def timed(action: Callable[[], None]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def cpu_seconds() -> tuple[float, float]:
    """CPU seconds so far of this process's descendants: (the JVM, the Python workers and daemons),
    reaped children included. (0, 0) where /proc is missing."""
    ticks = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[tuple[int, str, list[str]]]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        children.setdefault(int(rest[1]), []).append((int(entry), name, rest))
    jvm = python = 0.0
    stack = [os.getpid()]
    while stack:
        for pid, name, rest in children.get(stack.pop(), []):
            used = sum(int(x) for x in rest[11:15]) / ticks  # utime, stime, cutime, cstime
            if "java" in name:
                jvm += used
            else:
                python += used
            stack.append(pid)
    return jvm, python


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--partitions", type=int, default=2, help="topic partitions")
    parser.add_argument("--codec", type=int, default=0, help="batch compression id (0 none … 4 zstd)")
    parser.add_argument("--dir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "tierlog-spark-scan")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting")
    parser.add_argument("--ceiling", action="store_true",
                        help="also time a data source that yields the same Arrow batches ready-made (decoded once "
                             "per worker and cached): the cost of the Python data source path alone")
    parser.add_argument("--s3-only", action="store_true",
                        help="the remote read on S3 (moto) against a plain GET of the same objects, no Spark")
    args = parser.parse_args()
    print("command:", " ".join([sys.executable, *sys.argv]))

    data = args.dir / "data"
    write_topic(data, args.records, args.partitions, args.codec)
    if args.s3_only:
        return s3_vs_get(data, args.rounds)

    from tierlog.pipeline import spark_session

    started = time.perf_counter()
    spark = spark_session(args.master, app_name="tierlog-bench", conf={
        "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false", "spark.driver.memory": "6g",
        "spark.sql.session.timeZone": "UTC", **dict(c.split("=", 1) for c in args.conf)})
    t_session = time.perf_counter() - started
    spark.sparkContext.setLogLevel("ERROR")
    # The first job starts the Python worker daemons (and imports tierlog there): a fixed cost too.
    def first_job() -> None:
        one = spark.read.format("tierlog").option("path", str(data)).option("assign", json.dumps({TOPIC: [0]})) \
            .option("endingOffsets", json.dumps({TOPIC: {"0": 1}})).load()
        assert one.count() == 1

    t_first_job = timed(first_job)
    source = spark.read.format("tierlog").option("path", str(data)).option("subscribe", TOPIC)
    parquet_dir = args.dir / "parquet"
    if not (parquet_dir / "_SUCCESS").exists() or (args.dir / "parquet.stamp").read_text() != (data / "bench.json").read_text():
        source.load().write.mode("overwrite").parquet(str(parquet_dir))
        (args.dir / "parquet.stamp").write_text((data / "bench.json").read_text())

    def scan_tierlog() -> None:
        source.load().write.format("noop").mode("overwrite").save()

    def scan_parquet() -> None:
        spark.read.parquet(str(parquet_dir)).write.format("noop").mode("overwrite").save()

    from tierlog.pipeline.jvm import FallBack, read

    def scan_jvm() -> None:
        read(spark, str(data), jvm=True, subscribe=TOPIC).write.format("noop").mode("overwrite").save()

    try:
        jvm_count = read(spark, str(data), jvm=True, subscribe=TOPIC).count()
    except FallBack as e:
        print(f"JVM reader not timed: {e}")
        jvm_count = None

    def scan_ready_made() -> None:
        spark.read.format("tierlog_ready_made").option("path", str(data)).option("subscribe", TOPIC).load() \
            .write.format("noop").mode("overwrite").save()

    if args.ceiling:
        spark.dataSource.register(_ready_made_source())
    count = source.load().count()
    assert count == args.records - args.records % args.partitions, count
    scan_tierlog()  # warm-up: Python workers, the compiled decoder, the page cache
    scan_parquet()
    if jvm_count is not None:
        assert jvm_count == count, (jvm_count, count)
        scan_jvm()  # warm-up: the JIT
    # Rounds alternate between the two scans, so a burst of other load on the machine hits both.
    times: dict[str, list[float]] = {"tierlog": [], "parquet": [], "ready-made": [], "jvm": []}
    cpu: dict[str, list[tuple[float, float]]] = {"tierlog": [], "parquet": [], "ready-made": [], "jvm": []}
    if args.ceiling:
        scan_ready_made()
        scan_ready_made()  # every worker has its cache filled
    scans = {"tierlog": scan_tierlog, "parquet": scan_parquet, **({"jvm": scan_jvm} if jvm_count is not None else {}),
             **({"ready-made": scan_ready_made} if args.ceiling else {})}
    for _ in range(args.rounds):
        for name, scan in scans.items():
            before = cpu_seconds()
            times[name].append(timed(scan))
            after = cpu_seconds()
            cpu[name].append((after[0] - before[0], after[1] - before[1]))
    t_tierlog, t_parquet = min(times["tierlog"]), min(times["parquet"])
    splits = source.load().rdd.getNumPartitions()
    spark.stop()
    rate_t = count / t_tierlog
    rate_p = count / t_parquet
    print(f"rows: {count} ({VALUE_BYTES}-byte values, codec {args.codec}), {splits} input partitions, "
          f"master {args.master}, best of {args.rounds}, load average {os.getloadavg()[0]:.1f}")
    print(f"fixed cost of a job: session start (JVM, SparkSession) {t_session:.2f} s, "
          f"first job (Python workers) {t_first_job:.2f} s")

    def cpu_line(name: str) -> str:
        jvm = statistics.median(c[0] for c in cpu[name])
        python = statistics.median(c[1] for c in cpu[name])
        return (f"median {statistics.median(times[name]):.2f} s; CPU s median: JVM {jvm:.2f}, "
                f"Python workers {python:.2f}")

    print(f"tierlog data source: {t_tierlog:6.2f} s  {rate_t / 1e6:6.2f} M rows/s   "
          f"(all rounds: {', '.join(f'{t:.2f}' for t in times['tierlog'])}; {cpu_line('tierlog')})")
    print(f"parquet scan:        {t_parquet:6.2f} s  {rate_p / 1e6:6.2f} M rows/s   "
          f"(all rounds: {', '.join(f'{t:.2f}' for t in times['parquet'])}; {cpu_line('parquet')})")
    if jvm_count is not None:
        t_jvm = min(times["jvm"])
        print(f"JVM reader (read()):  {t_jvm:6.2f} s  {count / t_jvm / 1e6:6.2f} M rows/s   "
              f"(all rounds: {', '.join(f'{t:.2f}' for t in times['jvm'])}; {cpu_line('jvm')})")
        pairs = [p / j for p, j in zip(times["parquet"], times["jvm"], strict=True)]
        print(f"ratio JVM reader/parquet: {count / t_jvm / rate_p:.2f}x best, "
              f"{statistics.median(times['parquet']) / statistics.median(times['jvm']):.2f}x median; per round "
              f"{', '.join(f'{x:.2f}' for x in pairs)} (target >= 1.0x); JVM reader/format('tierlog') "
              f"{statistics.median(times['tierlog']) / statistics.median(times['jvm']):.2f}x median")
    if args.ceiling:
        t_ready = min(times["ready-made"])
        print(f"ready-made batches:  {t_ready:6.2f} s  {count / t_ready / 1e6:6.2f} M rows/s   "
              f"(all rounds: {', '.join(f'{t:.2f}' for t in times['ready-made'])}; {cpu_line('ready-made')}; "
              f"{count / t_ready / rate_p:.2f}x parquet: the Python data source path's own ceiling)")
    ratio_median = statistics.median(times["parquet"]) / statistics.median(times["tierlog"])
    print(f"ratio tierlog/parquet: {rate_t / rate_p:.2f}x best, {ratio_median:.2f}x median (target >= 1.0x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
