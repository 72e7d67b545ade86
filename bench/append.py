"""Append throughput through the log next to a raw write() of the same bytes in the same run.

Targets: issue 2, ≥ 70 % of raw for 1 MiB batches; issue 22, ≥ 0.85 of a raw write() plus CRC-32C of
the same bytes for 1 MiB batches (the least a validating broker must do: Kafka's LogValidator checks
every produced batch's CRC before it writes) and ≥ 0.5 of raw write() for 16 KiB batches (per-append
overhead ≤ 8 µs), from a producer without a producer id and from an idempotent one (Java's default:
its batches also pass the producer-state checks). Each case prints its target and whether it is met, and the per-append overhead in
wall time and in the CPU time of the timing thread, which holds better on a shared machine. Each
side times its appends only: the raw file is opened and the log created (partition directory, index files, checkpoints) before the clock
starts, and neither is closed inside the timing.

    python bench/append.py [--mib 128] [--runs 5] [--dir /dev/shm] [--only-16k]
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import tempfile
import time
from pathlib import Path

import crc32c

from _common import command_line, report
from tierlog._util.crc import crc32c_small as batch_crc32c
from tierlog.config import LogConfig
from tierlog.records import SimpleRecord, build_batch
from tierlog.records.header import CRC, CRC_START, LAST_OFFSET_DELTA, PRODUCER_ID
from tierlog.storage.loader import LoadOptions, load_log


def make_batches(batch_bytes: int, record_bytes: int, count: int) -> list[bytes]:
    per_batch = max(1, batch_bytes // (record_bytes + 20))
    out = []
    for i in range(count):
        payload = os.urandom(record_bytes)
        out.append(build_batch([SimpleRecord(None, payload, timestamp=1_700_000_000_000 + i) for _ in range(per_batch)]))
    return out


def idempotent(batches: list[bytes]) -> list[bytes]:
    """The batches as one idempotent producer sends them (what Java clients do by default): producer
    id 1000, epoch 0, each batch's base sequence following the last one's, the CRC recomputed."""
    out, sequence = [], 0
    for b in batches:
        batch = bytearray(b)
        struct.pack_into(">qhi", batch, PRODUCER_ID, 1000, 0, sequence)
        struct.pack_into(">I", batch, CRC, crc32c.crc32c(memoryview(batch)[CRC_START:]))
        sequence += struct.unpack_from(">i", batch, LAST_OFFSET_DELTA)[0] + 1
        out.append(bytes(batch))
    return out


#: (wall seconds, CPU seconds of the timing thread) of one timed loop.
Timing = tuple[float, float]


def raw_write(tmp: Path, batches: list[bytes]) -> Timing:
    with open(tmp / "raw.bin", "wb", buffering=0) as f:
        t0, c0 = time.perf_counter(), time.thread_time()
        for b in batches:
            f.write(b)
        return time.perf_counter() - t0, time.thread_time() - c0


def raw_write_crc(tmp: Path, batches: list[bytes]) -> Timing:
    """write() of each batch after a CRC-32C of the bytes a batch's CRC covers (from offset 21 on),
    computed by the function the broker itself uses (fastcrc where installed): a baseline with a
    slower CRC than the broker's would flatter the ratio."""
    with open(tmp / "raw.bin", "wb", buffering=0) as f:
        t0, c0 = time.perf_counter(), time.thread_time()
        for b in batches:
            batch_crc32c(memoryview(b)[21:])
            f.write(b)
        return time.perf_counter() - t0, time.thread_time() - c0


def through_log(tmp: Path, batches: list[bytes]) -> Timing:
    log = load_log(tmp / "t-0", LogConfig(segment_bytes=1 << 30, retention_ms=-1), LoadOptions())
    try:
        # Neither side fsyncs inside the timing: both measure writes into the page cache.
        t0, c0 = time.perf_counter(), time.thread_time()
        for b in batches:
            log.append_as_leader(b)
        return time.perf_counter() - t0, time.thread_time() - c0
    finally:
        log.close(sync=False)


def clean(tmp: Path) -> None:
    (tmp / "raw.bin").unlink(missing_ok=True)
    shutil.rmtree(tmp / "t-0", ignore_errors=True)
    os.sync()  # start each timed run with no dirty pages from the last one


def measure(tmp: Path, batches: list[bytes], runs: int) -> tuple[Timing, Timing, Timing]:
    """The best wall time and the best CPU time of each side."""
    through_log(tmp, batches)  # warm-up: loads the compiled record walk once
    inf = float("inf")
    t_raw, t_crc, t_log = (inf, inf), (inf, inf), (inf, inf)
    # Alternate the three so disk writeback and machine noise hit them alike.
    for _ in range(runs):
        clean(tmp)
        t_raw = _best(t_raw, raw_write(tmp, batches))
        clean(tmp)
        t_crc = _best(t_crc, raw_write_crc(tmp, batches))
        clean(tmp)
        t_log = _best(t_log, through_log(tmp, batches))
    return t_raw, t_crc, t_log


def _best(a: Timing, b: Timing) -> Timing:
    return min(a[0], b[0]), min(a[1], b[1])


def target(batch_bytes: int, raw: Timing, crc: Timing, log: Timing) -> str:
    """Issue 22's target for this batch size and whether this run meets it, in wall time and in CPU
    time (the CPU ratio moves less on a shared machine)."""
    goal, baseline, base = (0.85, "raw write() + CRC-32C", crc) if batch_bytes >= 1 << 20 else (0.5, "raw write()", raw)
    wall, cpu = base[0] / log[0], base[1] / log[1]
    return (f">= {goal} of {baseline}: wall-time ratio {wall:.2f} ({'met' if wall >= goal else 'NOT met'}), "
            f"CPU-time ratio {cpu:.2f} ({'met' if cpu >= goal else 'NOT met'})")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" ({os.cpu_count()} cores)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=128, help="MiB appended per run")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where to write (default: the temp dir; /dev/shm takes the disk out)")
    ap.add_argument("--only-16k", action="store_true", help="only the 16 KiB batches (the per-append overhead)")
    args = ap.parse_args()
    print(f"command: {command_line()}")
    print(f"load average at start: {load_average()}", flush=True)
    print(f"CRC-32C of the baseline (the broker's): {batch_crc32c.__module__}.{batch_crc32c.__name__}")
    total = args.mib << 20
    cases = (("1 MiB batches, 1 KiB records", 1 << 20, 1024, False),
             ("1 MiB batches, 100 B records", 1 << 20, 100, False),
             ("16 KiB batches, 1 KiB records", 16 << 10, 1024, False),
             ("16 KiB batches, 1 KiB records, idempotent producer", 16 << 10, 1024, True))
    for label, batch_bytes, record_bytes, with_producer_id in cases[2:] if args.only_16k else cases:
        distinct = make_batches(batch_bytes, record_bytes, 16)
        n = total // len(distinct[0])
        batches = [distinct[i % len(distinct)] for i in range(n)]
        if with_producer_id:
            batches = idempotent(batches)  # every batch its own sequence: n distinct batches
        nbytes = sum(len(b) for b in batches)
        tmp = Path(tempfile.mkdtemp(prefix="tierlog-bench-", dir=args.dir))
        try:
            raw, crc, log = measure(tmp, batches, args.runs)
            (t_raw, cpu_raw), (t_crc, cpu_crc), (t_log, cpu_log) = raw, crc, log
            print(f"-- {label}: {n} batches, {nbytes / 1e6:.0f} MB")
            report("append through the log", nbytes / t_log / 1e6, "MB/s", "raw write()", nbytes / t_raw / 1e6)
            report("append through the log", nbytes / t_log / 1e6, "MB/s", "raw write() + CRC-32C",
                   nbytes / t_crc / 1e6)
            print(f"   issue 22's target: {target(batch_bytes, raw, crc, log)}")
            print(f"   per append: log {t_log / n * 1e6:.1f} µs, raw write() {t_raw / n * 1e6:.1f} µs, "
                  f"overhead {(t_log - t_raw) / n * 1e6:.1f} µs")
            # CPU time of the timing thread: what holds on a shared machine, where wall time also
            # counts the time other processes had the core.
            print(f"   CPU per append: log {cpu_log / n * 1e6:.1f} µs, raw write() {cpu_raw / n * 1e6:.1f} µs, "
                  f"write() + CRC-32C {cpu_crc / n * 1e6:.1f} µs, "
                  f"overhead {(cpu_log - cpu_raw) / n * 1e6:.1f} µs")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"load average at end: {load_average()}")


if __name__ == "__main__":
    main()
