"""Startup time with many segments after a clean shutdown (seed 003, KIP-263).

Builds a data dir of P partitions × S segments, then opens it with
``sanity.check.all.logs.enabled`` true and false, and the lazy mode again at S/2 segments per
partition to show how it grows with the segment count. Target (issue 2): lazy startup ≤ 1 s at
100,000 segments, growing < 10 % when the segment count doubles.

    python bench/startup.py [--partitions 1000] [--segments 100]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from _common import command_line, report
from tierlog.config import LogConfig
from tierlog.records import SimpleRecord, build_batch
from tierlog.storage.checkpoints import (
    CLEAN_SHUTDOWN,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    CleanShutdownFile,
    OffsetCheckpointFile,
)
from tierlog.storage.log_manager import LogManager, LogManagerSettings

CONFIG = LogConfig(segment_bytes=1 << 30, retention_ms=-1, index_interval_bytes=64)


def build(root: Path, partitions: int, segments: int) -> None:
    """One partition written through the log, then copied: a real Kafka-format layout."""
    template_root = root / "template"
    mgr = LogManager([template_root], lambda t: CONFIG, LogManagerSettings())
    mgr.startup_logs()
    log = mgr.get_or_create_log("bench", 0)
    for s in range(segments):
        for i in range(3):
            recs = [SimpleRecord(b"k", b"v" * 100, timestamp=1_700_000_000_000 + s * 1000 + i)]
            log.append_as_leader(build_batch(recs))
        if s < segments - 1:
            log.roll()
    mgr.shutdown()
    data = root / "data"
    data.mkdir()
    src = template_root / "bench-0"
    end = log.log_end_offset
    for p in range(partitions):
        shutil.copytree(src, data / f"bench-{p}")
    OffsetCheckpointFile(data / RECOVERY_POINT_CHECKPOINT).write({("bench", p): end for p in range(partitions)})
    OffsetCheckpointFile(data / LOG_START_OFFSET_CHECKPOINT).write({})
    shutil.rmtree(template_root)


def open_once(data: Path, check_all: bool) -> tuple[float, int]:
    CleanShutdownFile(data / CLEAN_SHUTDOWN).write(broker_epoch=0)
    mgr = LogManager([data], lambda t: CONFIG, LogManagerSettings(sanity_check_all_logs=check_all))
    t0 = time.perf_counter()
    report_ = mgr.startup_logs()
    elapsed = time.perf_counter() - t0
    segments = report_.segments
    mgr.shutdown()  # writes the clean-shutdown marker again for the next run
    return elapsed, segments


def best(data: Path, check_all: bool, runs: int) -> tuple[float, int]:
    results = [open_once(data, check_all) for _ in range(runs)]
    return min(r[0] for r in results), results[0][1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--segments", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    print(f"command: {command_line()}")
    tmp = Path(tempfile.mkdtemp(prefix="tierlog-startup-"))
    try:
        full = tmp / "full"
        half = tmp / "half"
        t0 = time.perf_counter()
        build(full, args.partitions, args.segments)
        build(half, args.partitions, args.segments // 2)
        print(f"built {args.partitions} partitions x {args.segments} and x {args.segments // 2} segments "
              f"in {time.perf_counter() - t0:.1f} s")
        lazy_full, n_full = best(full / "data", False, args.runs)
        lazy_half, n_half = best(half / "data", False, args.runs)
        eager_full, _ = best(full / "data", True, 1)
        print(f"segments: {n_full} (full), {n_half} (half)")
        report(f"lazy startup at {n_full} segments", lazy_full, "s",
               "sanity.check.all.logs.enabled=true", eager_full, higher_is_better=False)
        report(f"lazy startup at {n_full} segments", lazy_full, "s",
               f"lazy startup at {n_half} segments", lazy_half, higher_is_better=False)
        print(f"growth when segments double: {100 * (lazy_full / lazy_half - 1):+.1f} %")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
