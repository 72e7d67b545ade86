"""Fetch long polls on a real in-process broker: a high watermark that moves between a fetch's read
and its wait still wakes the fetch (no lost wake-up)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.server import call, with_broker
from tierlog.protocol import ApiKey
from tierlog.records import SimpleRecord, build_batch, iter_batches
from tierlog.server.context import BrokerContext
from tierlog.storage.log import UnifiedLog

#: A long poll far longer than the test waits for its answer: a fetch that sleeps it out fails.
MAX_WAIT_MS = 60_000
#: How long the fetch may take to answer once its record is readable (generous for a loaded box).
ANSWER_WITHIN_S = 15.0


def fetch_values(topic: str, offset: int) -> dict[str, Any]:
    return {"replica_id": -1, "max_wait": MAX_WAIT_MS, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset, "current_leader_epoch": -1,
                                                        "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}


def test_a_high_watermark_moving_between_read_and_wait_wakes_the_fetch(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    async def test(ctx: BrokerContext) -> None:
        await ctx.io.run(ctx.controller.create_topic, "t", 1, 1, {})
        ulog = ctx.log_manager.get_log("t", 0)
        assert ulog is not None and ulog.hw_follows_durable  # log.durable.acks=all: the fsync moves the HW
        batch = build_batch([SimpleRecord(b"k", b"late", timestamp=int(time.time() * 1000))])

        # The broker's own high watermark listener (it schedules the wake-up on the event loop),
        # wrapped so the hook below knows the wake-up is queued before it lets the read return.
        real_listener = ulog.on_high_watermark_advanced
        assert real_listener is not None
        notified = threading.Event()

        def listener(advanced: UnifiedLog) -> None:
            real_listener(advanced)
            notified.set()

        monkeypatch.setattr(ulog, "on_high_watermark_advanced", listener)

        # Forced interleaving: the fetch's first read finds the partition empty; then, before the
        # read returns to the fetch (so before it can start waiting), a record is appended and
        # fsynced and the high watermark moves past it.
        real_read = ctx.partitions.read_blocking
        reads: list[int] = []

        def read_then_append(*args: Any, **kwargs: Any) -> Any:
            results = real_read(*args, **kwargs)
            reads.append(sum(r.size for r in results))
            if len(reads) == 1:
                appended = ctx.partitions.append_blocking([("t", 0, batch)], durable=True)
                assert appended[0].error_code == 0 and appended[0].synced is not None
                appended[0].synced.result(timeout=30)
                assert notified.wait(30) and ulog.high_watermark == 1
            return results

        monkeypatch.setattr(ctx.partitions, "read_blocking", read_then_append)
        # The interleaving needs the read on the pool's thread (a read on the event loop holds the
        # log's lock and the loop: the high watermark's wake-up is queued behind it, after the
        # waiter registered before the read).
        monkeypatch.setattr(ctx.partitions, "read_if_local", lambda *args, **kwargs: None)
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            body = await asyncio.wait_for(call(ctx, ApiKey.FETCH, 11, fetch_values("t", 0)), ANSWER_WITHIN_S)
        except TimeoutError:
            pytest.fail(f"the fetch slept through the high watermark's move (reads: {reads})")
        took_s = loop.time() - started
        part = body.responses[0].partitions[0]
        assert (part.error_code, part.high_watermark) == (0, 1)
        assert [r.value for _, rs in iter_batches(bytes(part.records)) for r in rs] == [b"late"]
        assert reads[0] == 0 and len(reads) == 2, reads
        assert took_s < MAX_WAIT_MS / 1000 / 4

    with_broker(tmp_path, test)


def test_a_sync_wakes_the_loop_only_for_partitions_a_fetch_waits_on(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The group commit of a produce of many partitions moves as many high watermarks: only those a
    long-polling fetch waits on schedule a wake-up on the event loop; a waiting fetch is still woken."""
    async def test(ctx: BrokerContext) -> None:
        await ctx.io.run(ctx.controller.create_topic, "t", 2, 1, {})
        loop = asyncio.get_running_loop()
        scheduled: list[Any] = []
        real = loop.call_soon_threadsafe

        def counting(callback: Any, *args: Any, **kwargs: Any) -> Any:
            if callback == ctx.partitions.waiters.notify:
                scheduled.append(args[0])
            return real(callback, *args, **kwargs)

        monkeypatch.setattr(loop, "call_soon_threadsafe", counting)

        def produce() -> None:
            now_ms = int(time.time() * 1000)
            appended = ctx.partitions.append_blocking(
                [("t", p, build_batch([SimpleRecord(None, b"v", timestamp=now_ms)])) for p in (0, 1)], durable=True)
            for a in appended:
                assert a.error_code == 0 and a.synced is not None
                a.synced.result(timeout=30)

        await ctx.io.run(produce)
        logs = [ctx.log_manager.get_log("t", p) for p in (0, 1)]
        assert [ulog.high_watermark if ulog else None for ulog in logs] == [1, 1]
        assert scheduled == []  # nobody waited: no wake-up
        waiter: asyncio.Future[None] = loop.create_future()
        ctx.partitions.waiters.add([("t", 1)], waiter)
        await ctx.io.run(produce)
        await asyncio.wait_for(waiter, ANSWER_WITHIN_S)
        assert scheduled == [[("t", 1)]]  # partition 1's waiter woken; partition 0 scheduled nothing

    with_broker(tmp_path, test)
