"""Damage the broker must survive above the storage layer: a damaged partition.metadata, producer ids a
damaged metadata log forgot handing out, and a damaged remote-tier segment."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from tests.helpers.server import append_durably, config
from tierlog.errors import CorruptRecordError, TierlogError
from tierlog.ids import random_uuid
from tierlog.records import SimpleRecord, build_batch, iter_batches
from tierlog.records.header import iter_headers, set_base_offset
from tierlog.server import Broker
from tierlog.server.partitions import ReadSpec
from tierlog.storage.checkpoints import PARTITION_METADATA, likely_damaged_copy
from tierlog.storage.log_manager import LogManagerSettings
from tierlog.tiered.reader import TieredReader
from tierlog.tiered.remote_reader import RemoteFetchInfo


def records(n: int, producer_id: int = -1) -> bytes:
    now = int(time.time() * 1000)
    return build_batch([SimpleRecord(b"k", f"v{i}".encode(), timestamp=now) for i in range(n)],
                       producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                       base_sequence=0 if producer_id >= 0 else -1)


def test_a_topic_id_a_few_bits_off_is_a_damaged_copy_and_another_topic_is_not() -> None:
    topic_id = random_uuid()
    damaged = bytearray(topic_id)
    damaged[3] ^= 0x24
    damaged[11] ^= 0x81
    assert likely_damaged_copy(bytes(damaged), topic_id)
    assert not likely_damaged_copy(topic_id, topic_id)
    assert sum(likely_damaged_copy(random_uuid(), topic_id) for _ in range(2000)) == 0


def test_a_flipped_character_in_partition_metadata_keeps_the_partition(tmp_path: Path) -> None:
    async def run(second: bool) -> list[bytes | None]:
        broker = Broker(config(tmp_path), LogManagerSettings())
        await broker.start()
        ctx = broker.ctx
        assert ctx is not None
        if not second:
            await ctx.io.run(ctx.controller.create_topic, "orders", 1, 1, {"retention.ms": "-1"})
            # Durable (as acks=all is by default): readable once fsynced, which the answer waits for.
            results = await ctx.io.run(ctx.partitions.append_blocking, [("orders", 0, records(4))], durable=True)
            assert results[0].error_code == 0 and results[0].synced is not None
            await asyncio.wrap_future(results[0].synced)
        reads = await ctx.io.run(ctx.partitions.read_blocking, [ReadSpec("orders", 0, 0, 1 << 20)], 1 << 20)
        data = reads[0].records
        assert isinstance(data, bytes)
        await broker.stop()
        return [r.value for _, rs in iter_batches(data) for r in rs]

    assert len(asyncio.run(run(False))) == 4
    path = tmp_path / "data" / "orders-0" / PARTITION_METADATA
    text = path.read_text()
    at = text.index("topic_id: ") + 14
    path.write_text(text[:at] + ("A" if text[at] != "A" else "B") + text[at + 1 :])
    assert asyncio.run(run(True)) == [f"v{i}".encode() for i in range(4)]
    assert path.read_text() == text  # rewritten from the metadata


def test_producer_ids_held_by_the_logs_are_not_handed_out_again(tmp_path: Path) -> None:
    async def run(first: bool) -> int:
        broker = Broker(config(tmp_path), LogManagerSettings())
        await broker.start()
        ctx = broker.ctx
        assert ctx is not None
        if first:
            await ctx.io.run(ctx.controller.create_topic, "orders", 1, 1, {"retention.ms": "-1"})
            # An id the metadata does not know it handed out (its allocation lost with a damaged
            # metadata log): the partition's producer state holds it.
            results = await ctx.io.run(ctx.partitions.append_blocking, [("orders", 0, records(3, producer_id=42))])
            assert results[0].error_code == 0
        pid = -1 if first else await ctx.io.run(ctx.producer_ids.next_blocking)
        await broker.stop()
        return pid

    asyncio.run(run(True))
    assert asyncio.run(run(False)) == 43


class _Remote:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int, **_: Any) -> Any:
        return RemoteFetchInfo(self.data, None)


def _remote_chain() -> bytearray:
    out = bytearray()
    for base in (0, 3, 6):
        b = bytearray(records(3))
        set_base_offset(b, 0, base)
        out += b
    return out


def test_a_damaged_remote_segment_is_served_up_to_the_damage_and_not_beyond() -> None:
    data = _remote_chain()
    third = [h.position for h in iter_headers(data)][2]
    data[third + 70] ^= 0x08
    reader = TieredReader(_Remote(bytes(data)))
    ulog = cast(Any, SimpleNamespace(log_start_offset=100, topic="orders", partition=0))
    served = reader.read_remote(ulog, 0, 1 << 20, True)
    assert served is not None and served.records == bytes(data[:third])
    first = bytearray(data)
    first[70] ^= 0x08
    reader = TieredReader(_Remote(bytes(first)))
    with pytest.raises(CorruptRecordError):
        reader.read_remote(ulog, 0, 1 << 20, True)


@pytest.mark.parametrize("damage", ["flip", "cut"])
def test_a_topic_a_damaged_metadata_log_lost_is_restored_from_its_logs(tmp_path: Path, damage: str) -> None:
    async def run(create: bool) -> tuple[bytes, dict[str, str], list[bytes | None]]:
        broker = Broker(config(tmp_path), LogManagerSettings())
        await broker.start()
        ctx = broker.ctx
        assert ctx is not None
        if create:
            await ctx.io.run(ctx.controller.create_topic, "orders", 2, 1, {"retention.ms": "3600000"})
            [result] = await ctx.io.run(ctx.partitions.append_blocking, [("orders", 1, records(4))], durable=True)
            assert result.error_code == 0 and result.synced is not None
            await asyncio.wrap_future(result.synced)  # readable once fsynced
        topic = ctx.image.topics_by_name["orders"]
        reads = await ctx.io.run(ctx.partitions.read_blocking, [ReadSpec("orders", 1, 0, 1 << 20)], 1 << 20)
        data = reads[0].records
        assert isinstance(data, bytes)
        configs = dict(ctx.image.topic_configs("orders"))
        await broker.stop()
        return topic.topic_id, configs, [r.value for _, rs in iter_batches(data) for r in rs]

    topic_id, _, values = asyncio.run(run(True))
    assert len(values) == 4
    mlog = next((tmp_path / "data").glob("__cluster_metadata-0/*.log"))
    data = bytearray(mlog.read_bytes())
    after_bootstrap = [h.position for h in iter_headers(bytes(data))][1]
    if damage == "flip":
        data[after_bootstrap + 70] ^= 0x10  # recovery cuts the metadata log here: the topic is gone from it
    else:
        del data[after_bootstrap:]  # cut at a batch boundary: nothing for recovery to notice
    mlog.write_bytes(bytes(data))
    restored_id, configs, restored = asyncio.run(run(False))
    assert (restored_id, restored) == (topic_id, values)
    assert configs.get("retention.ms") == "-1"  # the configs are lost: nothing is deleted meanwhile


def test_committed_offsets_load_around_a_damaged_consumer_offsets_segment(tmp_path: Path) -> None:
    from tierlog.server.groups.records import partition_for_group
    from tierlog.server.partitions import CONSUMER_OFFSETS_TOPIC

    groups = [f"g{i}" for i in range(20)]
    damaged_group = next(g for g in groups if partition_for_group(g, 3) == partition_for_group(f"{g}-later", 3))
    damaged = partition_for_group(damaged_group, 3)
    intact = next(g for g in groups if partition_for_group(g, 3) != damaged)

    async def run(first: bool) -> dict[str, int]:
        broker = Broker(config(tmp_path), LogManagerSettings())
        await broker.start()  # before the fix, damage here stopped the start
        ctx = broker.ctx
        assert ctx is not None and ctx.groups is not None
        if first:
            await ctx.io.run(ctx.controller.create_topic, "orders", 1, 1, {})
            for group in (damaged_group, intact):
                assert await ctx.groups.commit(group, "", -1, [("orders", 0, 7, 0, None)]) == [0]
            # Enough commits after it that the startup check of the segment's end does not reach it.
            for n in range(200):
                assert await ctx.groups.commit(f"{damaged_group}-later", "", -1, [("orders", 0, n, 0, None)]) == [0]
        found = {g: v.offset for g in (damaged_group, intact) for v in ctx.groups.fetch(g, None).values()}
        await broker.stop()
        return found

    assert asyncio.run(run(True)) == {damaged_group: 7, intact: 7}
    segment = next((tmp_path / "data" / f"{CONSUMER_OFFSETS_TOPIC}-{damaged}").glob("*.log"))
    data = bytearray(segment.read_bytes())
    data[70] ^= 0x01  # inside the first batch: its CRC fails
    segment.write_bytes(bytes(data))
    assert asyncio.run(run(False)) == {intact: 7}


def _cluster_id(tmp_path: Path) -> str:
    """The cluster id a broker on ``tmp_path`` starts with."""
    async def run() -> str:
        broker = Broker(config(tmp_path), LogManagerSettings())
        await broker.start()
        assert broker.ctx is not None
        found = broker.ctx.cluster_id
        await broker.stop()
        return found

    return asyncio.run(run())


def test_a_damaged_meta_properties_keeps_the_cluster_id_and_is_written_again(tmp_path: Path) -> None:
    from tierlog.storage.checkpoints import META_PROPERTIES, MetaProperties

    first = _cluster_id(tmp_path)
    path = tmp_path / "data" / META_PROPERTIES
    text = path.read_text()
    path.write_text(text.replace("node.id=", "node.id=\x11"))  # unreadable: node.id is not a number
    with pytest.raises(TierlogError):
        MetaProperties.read(path)
    assert _cluster_id(tmp_path) == first
    assert MetaProperties.read(path).cluster_id == first  # readable again
    assert _cluster_id(tmp_path) == first


@pytest.mark.parametrize("damage", ["cut", "malformed"])
def test_a_meta_properties_that_lost_its_cluster_id_says_so_and_stays_stable_after(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str) -> None:
    from tierlog.storage.checkpoints import META_PROPERTIES, MetaProperties

    first = _cluster_id(tmp_path)
    path = tmp_path / "data" / META_PROPERTIES
    text = path.read_text()
    if damage == "cut":
        path.write_text(text[:20])  # the comment lines only: the only copy of the id is gone
    else:
        at = text.index("cluster.id=") + 14
        path.write_text(text[:at] + "\xd3" + text[at + 1 :])  # still parses, but is no Uuid
    second = _cluster_id(tmp_path)
    assert second != first
    assert any("cluster id is lost" in r.getMessage() and second in r.getMessage()
               for r in caplog.records if r.levelname == "ERROR")
    assert MetaProperties.read(path).cluster_id == second
    assert _cluster_id(tmp_path) == second


def test_a_damaged_local_batch_is_served_from_its_remote_copy(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A closed segment damaged on disk after it was tiered: reads of it come from the remote tier,
    byte for byte what was written; damage the remote tier does not hold still answers CORRUPT_MESSAGE."""
    props = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "data"),
             "offsets.topic.num.partitions": "1", "log.retention.check.interval.ms": "3600000",
             "remote.log.storage.system.enable": "true", "remote.log.manager.task.interval.ms": "3600000",
             "rsm.config.dir": str(tmp_path / "remote")}

    async def run(first: bool) -> list[tuple[int, bytes, int]]:
        from tierlog.config.broker_config import BrokerConfig

        broker = Broker(BrokerConfig(props), LogManagerSettings())
        await broker.start()
        try:
            ctx = broker.ctx
            assert ctx is not None and ctx.remote_log_manager is not None
            if first:
                await ctx.io.run(ctx.controller.create_topic, "r", 1, 1,
                                 {"segment.bytes": "1024", "retention.ms": "-1", "remote.storage.enable": "true"})
                for i in range(30):
                    ok = await append_durably(ctx, [("r", 0, records(1))])
                    assert ok[0].error_code == 0, i
                await ctx.io.run(ctx.remote_log_manager.copy_all)
                for _ in range(20):  # a closed segment the remote tier does not have yet
                    assert (await append_durably(ctx, [("r", 0, records(1))]))[0].error_code == 0
            ulog = ctx.log_manager.get_log("r", 0)
            assert ulog is not None
            out = []
            for offset in (0, 10, ulog.segments.base_offsets[-2]):
                [r] = await ctx.io.run(ctx.partitions.read_blocking, [ReadSpec("r", 0, offset, 1 << 20)], 1 << 20)
                data = r.records if isinstance(r.records, bytes) or r.records is None else r.records.read()
                out.append((offset, bytes(data or b""), r.error_code))
            return out
        finally:
            await broker.stop()

    before = asyncio.run(run(True))
    assert all(code == 0 and data for _, data, code in before)
    segments = sorted((tmp_path / "data" / "r-0").glob("*.log"))
    assert len(segments) >= 3
    for seg in (segments[0], segments[-2]):  # a tiered segment, and a closed one not tiered
        raw = bytearray(seg.read_bytes())
        raw[70] ^= 0x10  # inside the first batch's records: its CRC no longer matches
        seg.write_bytes(bytes(raw))
    caplog.set_level("WARNING")
    after = asyncio.run(run(False))
    assert after[0] == before[0]  # served whole from the remote copy
    assert after[1] == before[1]
    assert after[2][2] == 2 and after[2][1] == b""  # CORRUPT_MESSAGE: no copy anywhere
    assert sum("from the remote tier: the local copy" in m for m in caplog.messages) == 1
