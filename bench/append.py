"""Append throughput through the log next to a raw write() of the same bytes in the same run.

Target (issue 2): ≥ 70 % of raw for 1 MiB batches.

    python bench/append.py [--mib 256] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import best_of, command_line, report  # noqa: E402

from tierlog.config import LogConfig  # noqa: E402
from tierlog.records import SimpleRecord, build_batch  # noqa: E402
from tierlog.storage.loader import LoadOptions, load_log  # noqa: E402


def make_batches(batch_bytes: int, record_bytes: int, count: int) -> list[bytes]:
    per_batch = max(1, batch_bytes // (record_bytes + 20))
    out = []
    for i in range(count):
        payload = os.urandom(record_bytes)
        out.append(build_batch([SimpleRecord(None, payload, timestamp=1_700_000_000_000 + i) for _ in range(per_batch)]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=128, help="MiB appended per run")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    print(f"command: {command_line()}")
    total = args.mib << 20
    for label, batch_bytes, record_bytes in (("1 MiB batches, 1 KiB records", 1 << 20, 1024),
                                             ("1 MiB batches, 100 B records", 1 << 20, 100),
                                             ("16 KiB batches, 1 KiB records", 16 << 10, 1024)):
        distinct = make_batches(batch_bytes, record_bytes, 16)
        n = total // len(distinct[0])
        batches = [distinct[i % len(distinct)] for i in range(n)]
        nbytes = sum(len(b) for b in batches)
        tmp = Path(tempfile.mkdtemp(prefix="tierlog-bench-"))
        try:
            def raw() -> None:
                p = tmp / "raw.bin"
                with open(p, "wb", buffering=0) as f:
                    for b in batches:
                        f.write(b)

            def through_log() -> None:
                d = tmp / "t-0"
                log = load_log(d, LogConfig(segment_bytes=1 << 30, retention_ms=-1), LoadOptions())
                for b in batches:
                    log.append_as_leader(b)
                # Neither side fsyncs inside the timing: both measure write() into the page cache.
                log.flush = lambda offset=None: None  # type: ignore[method-assign]
                log.producer_state.flush_snapshots = lambda: None  # type: ignore[method-assign]

            through_log()  # warm-up: loads the compiled record walk once
            # Alternate the two so disk writeback and machine noise hit both alike.
            t_raw = t_log = float("inf")
            for _ in range(args.runs):
                for fn, clean in ((raw, lambda: (tmp / "raw.bin").unlink(missing_ok=True)),
                                  (through_log, lambda: shutil.rmtree(tmp / "t-0", ignore_errors=True))):
                    clean()
                    os.sync()  # start each timed run with no dirty pages from the last one
                    t = best_of(1, fn)
                    if fn is raw:
                        t_raw = min(t_raw, t)
                    else:
                        t_log = min(t_log, t)
            print(f"-- {label}: {n} batches, {nbytes / 1e6:.0f} MB")
            report("append through the log", nbytes / t_log / 1e6, "MB/s", "raw write()", nbytes / t_raw / 1e6)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
