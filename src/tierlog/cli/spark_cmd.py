"""``tierlog spark JOB``: the maintenance jobs on Spark (``usage``, ``verify``, ``export``), reading a
data directory and its remote tier offline — beside a running broker or a stopped one.

PySpark is imported only when a job runs, so ``tierlog --help`` and the other commands stay fast."""

from __future__ import annotations

import argparse
import json
import re
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tierlog._util.extras import MissingExtraError
from tierlog.clock import SYSTEM_CLOCK
from tierlog.errors import TierlogError

JOBS = ("usage", "verify", "retention-preview", "rebuild-snapshots", "export", "compact")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("spark", help="maintenance jobs on Spark: usage, verify, retention-preview, rebuild-snapshots, export, compact",
                       description="Run a maintenance job over a data directory and its remote tier on Spark. "
                                   "usage: bytes, records and segments per partition, local and remote. "
                                   "verify: CRCs, offsets, indexes and producer snapshots of every segment. "
                                   "retention-preview: what time, size and timestamp-floor retention would "
                                   "delete now, per tier. "
                                   "rebuild-snapshots: create missing producer snapshots of closed segments "
                                   "(on a cleanly stopped broker's data). "
                                   "export: topics to Parquet partitioned by topic and date, an archive each run appends "
                                   "the new offsets to (or --mode mirror). "
                                   "compact: compact the remote tier of compacted topics on the executors; the "
                                   "running broker swaps the new segments in (docs/operations.md).")
    p.add_argument("job", choices=JOBS, metavar="JOB", help=", ".join(JOBS))
    p.add_argument("--path", action="append", default=[], metavar="DIR",
                   help="a log directory (repeatable or comma-separated); default: the config's log.dirs, or ./tierlog-data without --config")
    p.add_argument("--config", type=Path, help="server.properties (log.dirs and the remote tier's settings)")
    p.add_argument("--remote", action="append", default=[], metavar="KEY=VALUE",
                   help="a remote-tier setting, e.g. rsm.config.dir=/data-remote (repeatable)")
    p.add_argument("--topic", action="append", default=[], help="only these topics (repeatable); export needs one")
    p.add_argument("--output", help="export: the Parquet directory")
    p.add_argument("--mode", choices=("archive", "mirror"), default="archive",
                   help="export: archive (default) appends only offsets not exported before and never deletes "
                        "a row; mirror makes each date written equal to what the log holds now")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT",
                   help="export: the broker that serves the offsets the remote tier does not hold, read with the "
                        "Kafka protocol (tail=broker); needed on a cluster, whose executors cannot see --path")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="retention-preview: a topic config to assume for every topic, e.g. retention.ms=3600000")
    p.add_argument("--now", type=int, help="retention-preview: the time to evaluate at, in ms (default: now)")
    p.add_argument("--dry-run", action="store_true", help="rebuild-snapshots: list what is missing, write nothing")
    p.add_argument("--force", action="store_true",
                   help="rebuild-snapshots: write even without the clean-shutdown marker (never beside a running broker); "
                        "compact: compact every compacted partition, however little of it is dirty")
    p.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS",
                   help="compact: how long to wait for the broker to swap the new segments in (default 120)")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark conf setting (repeatable), e.g. spark.tierlog.s3.access.key.id=... or "
                        "spark.hadoop.fs.s3a.endpoint=...: the object store's settings and credentials reach "
                        "the executors with the job")
    p.add_argument("--json", action="store_true", help="one JSON object per line instead of a table")
    p.add_argument("--verbose", action="store_true",
                   help="on an error, the whole stack trace (Java and Python) and Spark's own log; "
                        "without it, one line")
    p.set_defaults(func=run)


def _options(args: argparse.Namespace) -> dict[str, str]:
    options: dict[str, str] = {}
    paths = [d for item in args.path for d in item.split(",") if d]
    if not paths and args.config is None:
        # As `tierlog serve` and `tierlog tier status` without a config: the embedded default dirs.
        from tierlog.config.broker_config import BrokerConfig

        paths = [str(d) for d in BrokerConfig().log_dirs]
    if paths:
        options["path"] = ",".join(paths)
    if args.config is not None:
        options["config"] = str(args.config)
    for item in args.remote:
        key, sep, value = item.partition("=")
        if not sep:
            raise TierlogError(f"--remote {item!r} is not KEY=VALUE")
        options[key.strip()] = value.strip()
    # The jobs read every topic; the option parser wants a selection, which the jobs then ignore.
    options["subscribePattern"] = ".*"
    return options


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    cells = [[str(c).upper() for c in columns]] + [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def _cell(value: object) -> str:
    if isinstance(value, list):
        return "; ".join(map(str, value)) or "-"
    return "-" if value is None else str(value)


#: The last "module.Name: message" line of a Python traceback (inside a PythonException's text, or a
#: Java exception's message that carries one).
_PYTHON_ERROR = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?(\w*(?:Error|Exception|Exit)): (.+)$")
_WRAPPERS = ("PythonException", "Py4JJavaError", "SparkException", "AnalysisException", "Exception")


def one_line(e: BaseException) -> str:
    """What went wrong, in one line, from an error however Spark wrapped it: a Python exception raised
    in a worker arrives as a PythonException (or a Py4JJavaError) whose text holds the worker's
    traceback; the line wanted is that traceback's last ``Type: message``."""
    if isinstance(e, TierlogError | OSError | MissingExtraError):
        return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    text = str(e)
    java = getattr(e, "java_exception", None)
    if java is not None:
        try:
            text += "\n" + str(java.toString())
        except Exception:  # the JVM may be gone already
            pass
    found = None
    for line in text.splitlines():
        m = _PYTHON_ERROR.match(line.strip())
        if m and m.group(1) not in _WRAPPERS:
            found = m.group(2).strip()
    if found:
        return found
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(e).__name__)
    return first


def run(args: argparse.Namespace) -> int:
    try:
        from tierlog.pipeline import jobs
        from tierlog.pipeline.options import conf_options, parse_options, with_defaults

        raw = _options(args)
        topics = args.topic or None
        if args.job == "export" and (not args.output or not args.topic):
            raise TierlogError("export needs --output DIR and at least one --topic")
        conf = {"spark.ui.showConsoleProgress": "false" if args.json else "true"}
        for item in args.conf:
            key, sep, value = item.partition("=")
            if not sep:
                raise TierlogError(f"--conf {item!r} is not KEY=VALUE")
            conf[key.strip()] = value.strip()
        from pyspark.sql import SparkSession

        from tierlog.pipeline import spark_session
        from tierlog.pipeline.source import session_conf

        # A session that already exists (a notebook, a test) is used and left running.
        owned = SparkSession.getActiveSession() is None
        spark = spark_session(args.master, app_name=f"tierlog-{args.job}", conf=conf)
        if owned:
            # A failed task is reported once, by this command, as one line: not by Spark's log too.
            spark.sparkContext.setLogLevel("WARN" if args.verbose else "OFF")
        try:
            # The session's spark.tierlog.* and S3A settings under the command's own options.
            opts = parse_options(with_defaults(conf_options({**session_conf(spark), **conf}), raw))
            if args.job == "usage":
                rows = jobs.usage(spark, opts.paths, opts.remote, topics)
                columns = ["topic", "partition", "local_segments", "local_records", "local_bytes",
                           "remote_segments", "remote_records", "remote_bytes"]
            elif args.job == "retention-preview":

                from tierlog.config.broker_config import BrokerConfig, parse_overrides

                broker = BrokerConfig.from_file(args.config) if args.config is not None else None
                config_for = jobs.topic_configs(opts.paths, broker, parse_overrides(args.override))
                now_ms = args.now if args.now is not None else SYSTEM_CLOCK.wall_ms()
                rows = jobs.retention_preview(spark, opts.paths, opts.remote, config_for, now_ms, topics)
                columns = ["topic", "partition", "tier", "base_offset", "end_offset", "size_bytes",
                           "largest_timestamp_ms", "reason"]
            elif args.job == "rebuild-snapshots":
                unclean = jobs.stopped_cleanly(opts.paths)
                if unclean and not args.dry_run and not args.force:
                    raise TierlogError(
                        f"{', '.join(unclean)} has no clean-shutdown marker: a broker may be running there. "
                        "Stop it cleanly first (or --dry-run to look, --force if you are sure)")
                from tierlog.config.broker_config import BrokerConfig
                from tierlog.config.settings import build_settings
                from tierlog.storage.log_manager import LogManagerSettings

                broker = BrokerConfig.from_file(args.config) if args.config is not None else BrokerConfig()
                rows = jobs.rebuild_snapshots(spark, opts.paths, opts.remote,
                                              build_settings(LogManagerSettings, broker).producer_id_expiration_ms,
                                              dry_run=args.dry_run, topics=topics)
                columns = ["topic", "partition", "segment", "snapshot", "producers", "written"]
            elif args.job == "compact":
                from tierlog.config.broker_config import BrokerConfig
                from tierlog.config.settings import RemoteLogManagerSettings, build_settings
                from tierlog.pipeline.compact import CompactionSettings, compact

                broker = BrokerConfig.from_file(args.config) if args.config is not None else BrokerConfig()
                rlm = build_settings(RemoteLogManagerSettings, broker, broker_id=broker.node_id)
                settings = CompactionSettings(rlm.compaction_map_bytes, rlm.compaction_io_buffer_bytes,
                                              broker.node_id, rlm.compaction_job_lease_ms)
                rows = compact(spark, opts.paths, opts.remote, jobs.topic_configs(opts.paths, broker), settings,
                               SYSTEM_CLOCK, force=args.force, topics=topics, timeout_s=args.timeout)
                columns = ["topic", "partition", "sources", "segments_written", "records_read", "records_kept",
                           "bytes_read", "bytes_written", "swapped", "results", "error"]
            elif args.job == "verify":
                rows = jobs.verify(spark, opts.paths, opts.remote, topics)
                columns = ["topic", "partition", "tier", "base_offset", "batches", "ok", "problems", "skipped"]
            else:
                source = {"kafka.bootstrap.servers": args.bootstrap_server} if args.bootstrap_server else None
                if jobs.on_cluster(spark) and source is None and not conf_options(session_conf(spark)).get(
                        "kafka.bootstrap.servers"):
                    raise TierlogError(
                        f"export on a cluster ({args.master}) reads the offsets the remote tier does not hold "
                        "through the broker, since the executors cannot see --path: give --bootstrap-server HOST:PORT "
                        "(or --conf spark.tierlog.kafka.bootstrap.servers=HOST:PORT)")
                written = jobs.export(spark, opts.paths, opts.remote, args.topic, args.output, mode=args.mode,
                                      options=source)
                rows = [{"topics": ",".join(args.topic), "output": args.output, "rows": written}]
                columns = ["topics", "output", "rows"]
        finally:
            if owned:
                spark.stop()
    except Exception as e:
        if args.verbose:
            traceback.print_exc()
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 1
    if args.json:
        for row in rows:
            print(json.dumps(row, sort_keys=True))
    else:
        print(_table(rows, columns) if rows else "nothing found")
    if args.job == "verify" and not all(r["ok"] for r in rows):
        return 3  # damage found: distinct from a failure to run
    return 0
