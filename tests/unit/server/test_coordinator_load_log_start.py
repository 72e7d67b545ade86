"""The group and transaction coordinators' loads on a real in-process broker, with the log start of
their internal topic's partition moved (as DeleteRecords or retention moves it) between the moment a
load picked its offset and its read: the load goes on from the new log start instead of failing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.server import with_broker
from tierlog.server.broker import _transaction_coordinator
from tierlog.server.context import BrokerContext
from tierlog.server.groups.coordinator import GroupCoordinator
from tierlog.server.partitions import CONSUMER_OFFSETS_TOPIC
from tierlog.server.settings import group_settings
from tierlog.server.txn.records import TRANSACTION_STATE_TOPIC
from tierlog.storage.log import UnifiedLog

ONE_PARTITION = {"offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1"}


def move_log_start_before_first_read(ulog: UnifiedLog, new_start: int, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Forced interleaving: the load's first read of ``ulog`` finds the log start moved to
    ``new_start`` (what DeleteRecords does) after the load took the old one as its first offset.
    Returns the offsets the load read at."""
    real_read = ulog.read_bytes
    reads: list[int] = []

    def read_bytes(offset: int, *args: Any, **kwargs: Any) -> bytes:
        reads.append(offset)
        if len(reads) == 1:
            assert offset < new_start
            assert ulog.maybe_increment_log_start_offset(new_start, "DeleteRecords")
        return real_read(offset, *args, **kwargs)

    monkeypatch.setattr(ulog, "read_bytes", read_bytes)
    return reads


def test_group_load_goes_on_from_a_log_start_moved_during_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def test(ctx: BrokerContext) -> None:
        assert ctx.groups is not None
        await ctx.io.run(ctx.controller.create_topic, "orders", 1, 1, {})
        assert await ctx.groups.commit("gone", "", -1, [("orders", 0, 3, 0, None)]) == [0]
        ulog = ctx.log_manager.get_log(CONSUMER_OFFSETS_TOPIC, 0)
        assert ulog is not None
        first_kept = ulog.log_end_offset
        assert await ctx.groups.commit("kept", "", -1, [("orders", 0, 7, 0, "m")]) == [0]
        assert ulog.high_watermark > first_kept

        reads = move_log_start_before_first_read(ulog, first_kept, monkeypatch)
        loaded = GroupCoordinator(ctx.partitions, ctx.controller, ctx.io, ctx.clock, group_settings(ctx.config))
        await loaded.start()  # raised OffsetOutOfRangeError before
        try:
            assert reads[:2] == [0, first_kept]
            assert {tp: (v.offset, v.metadata) for tp, v in loaded.fetch("kept", None).items()} == {
                ("orders", 0): (7, "m")}
            assert loaded.fetch("gone", None) == {}  # its record was deleted before the load read it
        finally:
            await loaded.stop()

    with_broker(tmp_path, test, **ONE_PARTITION)


def test_transaction_load_goes_on_from_a_log_start_moved_during_it(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    async def test(ctx: BrokerContext) -> None:
        assert ctx.transactions is not None
        code, gone_pid, _ = await ctx.transactions.init_producer_id("gone", 60_000, -1, -1)
        assert code == 0
        ulog = ctx.log_manager.get_log(TRANSACTION_STATE_TOPIC, 0)
        assert ulog is not None
        first_kept = ulog.log_end_offset
        code, kept_pid, kept_epoch = await ctx.transactions.init_producer_id("kept", 60_000, -1, -1)
        assert code == 0 and ulog.high_watermark > first_kept

        reads = move_log_start_before_first_read(ulog, first_kept, monkeypatch)
        loaded = _transaction_coordinator(ctx)
        await loaded.start()  # raised OffsetOutOfRangeError before
        try:
            assert reads[:2] == [0, first_kept]
            kept = loaded.txns["kept"]
            assert (kept.producer_id, kept.producer_epoch) == (kept_pid, kept_epoch)
            assert "gone" not in loaded.txns and gone_pid != kept_pid
        finally:
            await loaded.stop()

    with_broker(tmp_path, test, **ONE_PARTITION)
