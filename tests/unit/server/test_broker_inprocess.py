"""The composition root in-process: start, serve through the handlers' services, stop cleanly,
start again on the same directory and find topics, records and committed offsets where they were."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.helpers.server import config
from tierlog.records import SimpleRecord, build_batch, iter_batches
from tierlog.server import Broker
from tierlog.server.partitions import CONSUMER_OFFSETS_TOPIC, ReadSpec
from tierlog.storage.log_manager import LogManagerSettings


def test_restart_keeps_topics_records_and_committed_offsets(tmp_path: Path) -> None:
    async def first_run() -> None:
        broker = Broker(config(tmp_path), LogManagerSettings())
        bound = await broker.start()
        assert bound[0].port > 0
        ctx = broker.ctx
        assert ctx is not None and ctx.groups is not None
        await ctx.io.run(ctx.controller.create_topic, "orders", 2, 1, {"retention.ms": "-1"})
        now = int(time.time() * 1000)
        batch = build_batch([SimpleRecord(b"k", f"v{i}".encode(), timestamp=now) for i in range(5)])
        results = await ctx.io.run(ctx.partitions.append_blocking, [("orders", 1, batch)])
        assert (results[0].error_code, results[0].base_offset) == (0, 0)
        refused = await ctx.io.run(ctx.partitions.append_blocking, [(CONSUMER_OFFSETS_TOPIC, 0, batch)])
        assert refused[0].error_code == 17  # clients may not write the internal topic
        codes = await ctx.groups.commit("g1", "", -1, [("orders", 1, 3, 0, "note"), ("nope", 0, 1, -1, None)])
        assert codes == [0, 3]
        await broker.stop()

    async def second_run() -> None:
        broker = Broker(config(tmp_path), LogManagerSettings())
        await broker.start()
        ctx = broker.ctx
        assert ctx is not None and ctx.groups is not None
        assert ctx.image.topics_by_name["orders"].num_partitions == 2
        committed = ctx.groups.fetch("g1", None)
        assert {tp: (v.offset, v.leader_epoch, v.metadata) for tp, v in committed.items()} == {
            ("orders", 1): (3, 0, "note")}
        reads = await ctx.io.run(ctx.partitions.read_blocking, [ReadSpec("orders", 1, 0, 1 << 20)], 1 << 20)
        assert reads[0].high_watermark == 5
        data = reads[0].records
        assert isinstance(data, bytes)
        assert [r.value for _, rs in iter_batches(data) for r in rs] == [f"v{i}".encode() for i in range(5)]
        # Deleting the topic through the controller removes its logs.
        await ctx.io.run(ctx.controller.delete_topic, "orders")
        assert ctx.log_manager.get_log("orders", 1) is None
        await broker.stop()

    asyncio.run(first_run())
    assert (tmp_path / "data" / ".kafka_cleanshutdown").exists()
    asyncio.run(second_run())
    assert not (tmp_path / "data" / "orders-1").exists()
