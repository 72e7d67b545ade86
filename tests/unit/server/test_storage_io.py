"""Appends on the event loop (StorageIO.try_inline): only writes into the page cache, and never when
that would mean waiting (a held log lock, a log not yet open, an fsync by flush.messages)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.server import call, with_broker
from tierlog.errors import ErrorCode
from tierlog.protocol import ApiKey
from tierlog.records import SimpleRecord, build_batch
from tierlog.server.context import BrokerContext
from tierlog.server.storage_io import InlineGate, StorageIO
from tierlog.testing import ManualClock


def test_the_gate_allows_small_calls_and_pauses_after_a_slow_one() -> None:
    gate = InlineGate(max_bytes=100, slow_ns=10, pause_ns=1000)
    assert gate.allows(100, 0) and not gate.allows(101, 0)
    gate.took(10, 50, waited=True)  # not slower than the bound
    assert gate.allows(1, 50)
    gate.took(500, 55, waited=False)  # slow only because other processes had the CPU meanwhile
    assert gate.allows(1, 55)
    gate.took(11, 60, waited=True)
    assert not gate.allows(1, 60) and not gate.allows(1, 1059)
    assert gate.allows(1, 1060)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def io(clock: ManualClock) -> Iterator[StorageIO]:
    """A pool of one whose inline calls take up to 10 bytes, count as slow past 5 ms and then pause
    for 100 ms."""
    io = StorageIO(1, clock=clock, gate=InlineGate(max_bytes=10, slow_ns=5_000_000, pause_ns=100_000_000))
    yield io
    io.shutdown()


def _slow(clock: ManualClock, answer: str) -> Callable[[], str]:
    """A call taking 6 ms of ``clock``, slept in the kernel as a write throttled by the disk would."""
    def call() -> str:
        clock.advance(6)  # ms
        time.sleep(0.001)
        return answer

    return call


def test_try_inline_times_the_call_and_passes_on_a_decline(clock: ManualClock, io: StorageIO) -> None:
    assert io.try_inline(11, lambda: "too big") is None
    assert io.try_inline(1, lambda: None) is None  # the call declined
    assert io.try_inline(1, _slow(clock, "done")) == "done"
    assert io.try_inline(1, lambda: "paused") is None
    clock.advance(100)
    assert io.try_inline(1, lambda: "again") == "again"


def _batch(i: int) -> bytes:
    return build_batch([SimpleRecord(b"k", f"v{i}".encode(), timestamp=int(time.time() * 1000))])


async def _produce(ctx: BrokerContext, topic: str, records: bytes) -> Any:
    """The answer of partition 0 of ``topic`` to a produce of ``records``."""
    answer = await call(ctx, ApiKey.PRODUCE, 9, {"acks": 1, "timeout": 30000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
    return answer.responses[0].partition_responses[0]


@contextmanager
def _held_by_another_thread(lock: Any) -> Iterator[None]:
    """``lock`` taken by another thread (a flush, the cleaner, retention) for the ``with`` body."""
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            taken.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    taken.wait(10)
    try:
        yield
    finally:
        release.set()
        holder.join()


def test_appends_run_on_the_loop_only_when_they_would_not_wait(tmp_path: Path) -> None:
    async def test(ctx: BrokerContext) -> None:
        await ctx.io.run(ctx.controller.create_topic, "t", 1, 1, {})
        await ctx.io.run(ctx.controller.create_topic, "flushed", 1, 1, {"flush.messages": "1"})
        items: list[tuple[str, int, bytes | memoryview | None]] = [("t", 0, _batch(0))]
        # A partition with no log open: creating one is file work, left to the pool.
        assert ctx.partitions.append_if_writes_only([("t", 7, _batch(0))]) is None
        answer = await _produce(ctx, "t", _batch(1))
        assert (answer.error_code, answer.base_offset) == (ErrorCode.NONE, 0)
        # Open and idle: appended here, on the loop's thread.
        [result] = ctx.partitions.append_if_writes_only(items) or []
        assert (result.error_code, result.base_offset) == (ErrorCode.NONE, 1)
        # Its lock held by another thread (a flush, the cleaner): declined without waiting for it.
        ulog = ctx.log_manager.get_log("t", 0)
        assert ulog is not None
        with _held_by_another_thread(ulog.lock):
            assert ctx.partitions.append_if_writes_only(items) is None
        # flush.messages asks for an fsync after appends: never on the loop. The pool still appends.
        answer = await _produce(ctx, "flushed", _batch(0))
        assert answer.error_code == ErrorCode.NONE
        assert ctx.partitions.append_if_writes_only([("flushed", 0, _batch(2))]) is None
        # Every produce's records are there, in order, whichever thread appended them.
        answer = await _produce(ctx, "t", _batch(3))
        assert answer.base_offset == 2 and ulog.log_end_offset == 3

    with_broker(tmp_path, test)


def test_the_first_append_of_a_new_epoch_is_left_to_the_pool(tmp_path: Path) -> None:
    """A new partition's first batch starts its leader epoch, which writes and fsyncs the epoch
    checkpoint: not on the loop. The batches after it are only writes again."""
    async def test(ctx: BrokerContext) -> None:
        await ctx.io.run(ctx.controller.create_topic, "fresh", 3, 1, {})
        items: list[tuple[str, int, bytes | memoryview | None]] = [("fresh", p, _batch(p)) for p in range(3)]
        ulog = ctx.log_manager.get_log("fresh", 1)
        assert ulog is not None and ulog.appends_write_only and ulog.leader_epoch_cache.latest_epoch is None
        assert ctx.partitions.append_if_writes_only(items) is None
        assert all(log.log_end_offset == 0 for log in ctx.log_manager.all_logs().values())  # none touched
        results = await ctx.io.run(ctx.partitions.append_blocking, items)
        assert [r.base_offset for r in results] == [0, 0, 0]
        assert ulog.leader_epoch_cache.latest_epoch == ctx.partitions.leader_epoch("fresh", 1)
        again = ctx.partitions.append_if_writes_only([("fresh", p, _batch(p)) for p in range(3)])
        assert again is not None and [r.base_offset for r in again] == [1, 1, 1]

    with_broker(tmp_path, test)


def _records(result: Any) -> bytes:
    """A read result's bytes, whether copied or a file slice (read through its own descriptor)."""
    import os

    records = result.records
    return records if isinstance(records, bytes) else os.pread(records.fd, records.size, records.position)


async def _read_inline_when_free(ctx: BrokerContext, specs: list[Any], max_bytes: int) -> list[Any]:
    """read_if_local's answer once it reads: None is also its right answer while a background
    thread (a group commit's sync moving the high watermark, the flush scheduler) holds a log's
    lock for a moment, so the test waits for a free moment (bounded) instead of asserting on the
    first try; a read that never runs inline still fails here."""
    deadline = time.monotonic() + 10.0
    while True:
        inline = ctx.partitions.read_if_local(specs, max_bytes)
        if inline is not None:
            return inline
        assert time.monotonic() < deadline, "read_if_local declined every try for 10 s"
        await asyncio.sleep(0.005)


def test_reads_run_on_the_loop_only_from_open_local_logs_whose_lock_is_free(tmp_path: Path) -> None:
    """Fetch reads on the event loop (PartitionManager.read_if_local): the same results as the
    pool's read_blocking, and declined without reading when a log is not open or another thread
    holds a log's lock (retention deleting segments, an append on the pool)."""
    from tierlog.server.partitions import SENDFILE_MIN_BYTES, ReadSpec

    async def test(ctx: BrokerContext) -> None:
        await ctx.io.run(ctx.controller.create_topic, "r", 2, 1, {})
        big = build_batch([SimpleRecord(None, bytes(1000), timestamp=int(time.time() * 1000)) for _ in range(400)])
        assert len(big) >= SENDFILE_MIN_BYTES  # this one leaves as a file slice
        for records in (_batch(0), big, _batch(1)):
            assert (await _produce(ctx, "r", records)).error_code == ErrorCode.NONE
        ulog = ctx.log_manager.get_log("r", 0)
        assert ulog is not None
        await ctx.io.run(ulog.flush)  # the high watermark follows the fsync (log.durable.acks)
        assert ulog.high_watermark == 402
        for fetch_offset, max_bytes in ((0, 100), (1, 1 << 20), (0, 1 << 20), (401, 1 << 20), (402, 1 << 20), (999, 1 << 20)):
            specs = [ReadSpec("r", 0, fetch_offset, max_bytes), ReadSpec("r", 1, 0, max_bytes)]
            inline = await _read_inline_when_free(ctx, specs, max_bytes)
            pooled = await ctx.io.run(ctx.partitions.read_blocking, specs, max_bytes)
            try:
                assert [(r.error_code, r.high_watermark, r.last_stable_offset, r.log_start_offset, _records(r))
                        for r in inline] == [
                    (r.error_code, r.high_watermark, r.last_stable_offset, r.log_start_offset, _records(r))
                    for r in pooled], (fetch_offset, max_bytes)
            finally:
                for r in (*inline, *pooled):
                    r.release()
        # A partition whose log is not open (or does not exist): left to the pool, which answers it.
        assert ctx.partitions.read_if_local([ReadSpec("r", 0, 0, 1 << 20), ReadSpec("r", 9, 0, 1)], 1 << 20) is None
        with _held_by_another_thread(ulog.lock):
            assert ctx.partitions.read_if_local([ReadSpec("r", 1, 0, 1), ReadSpec("r", 0, 0, 1 << 20)], 1 << 20) is None

    with_broker(tmp_path, test)


def test_reads_and_appends_pause_their_inline_calls_separately(clock: ManualClock, io: StorageIO) -> None:
    """A slow inline append (the disk throttling writers) keeps appends off the loop for a while,
    not a fetch's reads of cached index pages; and the other way round."""
    io.read_gate = InlineGate(slow_ns=5_000_000, pause_ns=100_000_000)
    assert io.try_inline(1, _slow(clock, "slow")) == "slow"
    assert io.try_inline(1, lambda: "append") is None
    assert io.try_inline_read(lambda: "read") == "read"
    clock.advance(100)
    assert io.try_inline_read(_slow(clock, "slow")) == "slow"
    assert io.try_inline_read(lambda: "read") is None
    assert io.try_inline(1, lambda: "append") == "append"
