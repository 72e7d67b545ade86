"""Render time of each web console page with 10,000 partitions (issue #25's budget: < 200 ms).

An in-process broker (tiering on, as ``tierlog serve`` runs by default) gets 100 topics of 100
partitions each, every one with remote.storage.enable=true; one partition of the first topic holds a few hundred records in 1 KiB segments so
its timeline and the messages page have something to draw; one consumer group has committed offsets
on every partition (put into the coordinator's map directly: committing 10,000 offsets through a
client is not what is measured). Each page is rendered through the console's router, as the HTTP
thread does, ``--runs`` times; the median and the worst are printed. The sampler's pass (which walks
every partition's tiering status off the page path) is timed too.

    .venv/bin/python bench/console.py
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tierlog.config import BrokerConfig
from tierlog.records import SimpleRecord, build_batch
from tierlog.server.broker import Broker
from tierlog.server.console import Console
from tierlog.server.groups.records import OffsetValue
from tierlog.storage.log_manager import LogManagerSettings

BUDGET_MS = 200.0


async def run(args: argparse.Namespace, data: Path) -> int:
    config = BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(data),
                           "offsets.topic.num.partitions": "1", "log.retention.check.interval.ms": "3600000",
                           "remote.log.storage.system.enable": "true"})
    broker = Broker(config, LogManagerSettings())
    await broker.start()
    try:
        ctx = broker.ctx
        assert ctx is not None and ctx.groups is not None
        started = time.perf_counter()
        per_topic = args.partitions // args.topics
        for t in range(args.topics):
            configs = {"remote.storage.enable": "true", **({"segment.bytes": "1024"} if t == 0 else {})}
            await ctx.io.run(ctx.controller.create_topic, f"topic-{t:03d}", per_topic, 1, configs)
        print(f"created {args.topics} topics x {per_topic} partitions in {time.perf_counter() - started:.1f} s")
        for i in range(300):
            batch = build_batch([SimpleRecord(f"k{i}".encode(), b'{"n": %d, "pad": "%s"}' % (i, b"x" * 60))])
            results = await ctx.io.run(ctx.partitions.append_blocking, [("topic-000", 0, batch)])
            assert results[0].error_code == 0
        ctx.groups.offsets["bench-group"] = {
            (f"topic-{t:03d}", p): OffsetValue(0) for t in range(args.topics) for p in range(per_topic)}
        console = Console(ctx, broker.metrics.requests)
        sample_ms = []
        for _ in range(3):
            t0 = time.perf_counter()
            await asyncio.to_thread(console.sampler.sample)
            sample_ms.append((time.perf_counter() - t0) * 1000)
        pages = [("overview", "/"), ("topic (20 of 100 partitions)", "/topic?name=topic-050"),
                 ("topic with segments", "/topic?name=topic-000"), ("tiering (50 of 10,000 partitions)", "/tiering"),
                 ("consumer groups", "/groups"), ("group, 10,000 partitions", "/group?id=bench-group"),
                 ("messages (10 records)", "/messages?topic=topic-000&partition=0&offset=100&count=10"),
                 ("metadata", "/metadata")]
        worst_median = 0.0
        print(f"{'page':34} {'median ms':>10} {'max ms':>8}")
        for name, path in pages:
            times = []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                status, _, body = await asyncio.to_thread(console.render, path)
                times.append((time.perf_counter() - t0) * 1000)
                assert status == 200, (path, body[:300])
            median = statistics.median(times)
            worst_median = max(worst_median, median)
            print(f"{name:34} {median:10.1f} {max(times):8.1f}")
        print(f"{'sampler pass (off the page path)':34} {statistics.median(sample_ms):10.1f} {max(sample_ms):8.1f}")
        verdict = "within" if worst_median < BUDGET_MS else "OVER"
        print(f"slowest page median {worst_median:.1f} ms: {verdict} the {BUDGET_MS:.0f} ms budget")
        return 0 if worst_median < BUDGET_MS else 1
    finally:
        await broker.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tierlog-bench-console-") as tmp:
        return asyncio.run(run(args, Path(tmp) / "data"))


if __name__ == "__main__":
    sys.exit(main())
