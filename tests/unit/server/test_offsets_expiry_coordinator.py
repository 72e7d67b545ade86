"""Offset expiry in the group coordinator of an in-process broker, on a manual clock (the coordinator's
clock is swapped for one the test moves; storage and restarts are real): a KIP-848 group keeps the
offsets of the topics it subscribes to, a Stable classic group too, a standalone consumer's offsets
expire by commit time, an emptied group's empty-since time survives a restart (it is in its group
metadata record), and the offsets of a deleted topic get tombstones."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

from tests.helpers.server import with_broker
from tierlog.clock import SystemClock
from tierlog.server.context import BrokerContext
from tierlog.server.groups.consumer_group import HeartbeatRequest
from tierlog.server.groups.coordinator import GroupCoordinator
from tierlog.server.groups.group import GroupState
from tierlog.testing import ManualClock

RET_MS = 60_000
SETTINGS = {"offsets.retention.minutes": "1", "offsets.retention.check.interval.ms": "3600000",
            "group.initial.rebalance.delay.ms": "0"}


def _subscription(*topics: str) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


async def _classic_member(groups: GroupCoordinator, group_id: str, topics: tuple[str, ...]) -> tuple[str, int]:
    joined = await groups.join(group_id, "", None, "c", "/127.0.0.1", 30_000, 30_000, "consumer",
                               [("range", _subscription(*topics))], False)
    assert joined.error_code == 0, joined
    synced = await groups.sync(group_id, joined.member_id, joined.generation_id, "consumer", "range",
                               {joined.member_id: b""})
    assert synced.error_code == 0, synced
    assert groups.groups[group_id].state is GroupState.STABLE
    return joined.member_id, joined.generation_id


def _offsets(groups: GroupCoordinator, group_id: str) -> set[tuple[str, int]]:
    return set(groups.offsets.get(group_id, {}))


def test_offsets_expire_by_kafka_rules_and_stay_expired_after_a_restart(tmp_path: Path) -> None:
    clock = ManualClock()

    async def first(ctx: BrokerContext) -> None:
        groups = ctx.groups
        assert groups is not None
        groups.clock = clock
        for topic in ("a", "b", "gone"):
            await ctx.io.run(ctx.controller.create_topic, topic, 1, 1, {})

        # A KIP-848 consumer group subscribed to "a" that also committed "b".
        hb = await groups.consumer.heartbeat(HeartbeatRequest("kip848", "", 0, rebalance_timeout_ms=30_000,
                                                              subscribed_topic_names=("a",), owned={}), 0)
        assert hb.error_code == 0, hb
        assert await groups.commit("kip848", hb.member_id, hb.member_epoch,
                                   [("a", 0, 1, -1, None), ("b", 0, 1, -1, None)]) == [0, 0]
        # A Stable classic consumer group subscribed to "a", with offsets of "b" too.
        classic, classic_generation = await _classic_member(groups, "classic", ("a",))
        assert await groups.commit("classic", classic, classic_generation,
                                   [("a", 0, 2, -1, None), ("b", 0, 2, -1, None)]) == [0, 0]
        # A standalone consumer (no group protocol).
        assert await groups.commit("tool", "", -1, [("a", 0, 3, -1, None)]) == [0]
        # A classic group that empties 30 s later.
        member, generation = await _classic_member(groups, "emptied", ("a",))
        assert await groups.commit("emptied", member, generation, [("a", 0, 4, -1, None)]) == [0]
        clock.advance(RET_MS // 2)
        assert groups.leave("emptied", [(member, None)])[0] == 0
        assert groups.heartbeat("classic", classic, classic_generation) == 0
        assert await groups.commit("classic", classic, classic_generation, [("gone", 0, 2, -1, None)]) == [0]
        assert groups.groups["emptied"].state is GroupState.EMPTY

        # Just past the retention since the commits (no await in between: the members stay).
        clock.advance(RET_MS // 2 + 1)
        assert groups.expire_offsets() == 3
        assert _offsets(groups, "kip848") == {("a", 0)}  # subscribed: kept however old
        assert _offsets(groups, "classic") == {("a", 0), ("gone", 0)}
        assert _offsets(groups, "tool") == set()
        assert _offsets(groups, "emptied") == {("a", 0)}  # empty for 30 s only

        await ctx.io.run(ctx.controller.delete_topic, "gone")
        groups.on_topic_deleted("gone")
        assert _offsets(groups, "classic") == {("a", 0)}
        await groups.flush_writes()

    async def second(ctx: BrokerContext) -> None:
        groups = ctx.groups
        assert groups is not None
        # Tombstones: what expired, and the deleted topic's offsets, do not come back.
        assert _offsets(groups, "tool") == set()
        assert _offsets(groups, "kip848") == {("a", 0)}
        assert _offsets(groups, "classic") == {("a", 0)}
        assert _offsets(groups, "emptied") == {("a", 0)}
        groups.clock = clock
        # The group became empty 31 s before the restart (by its record), not at the restart.
        clock.advance(RET_MS // 2)
        assert _offsets(groups, "emptied") == {("a", 0)}
        groups.expire_offsets()
        assert _offsets(groups, "emptied") == set()
        await groups.flush_writes()
        # A topic created again with a deleted one's name starts without the old offsets.
        await ctx.io.run(ctx.controller.create_topic, "gone", 1, 1, {})
        assert groups.fetch("classic", [("gone", 0)]).get(("gone", 0)) is None

    with_broker(tmp_path, first, **SETTINGS)
    with_broker(tmp_path, second, **SETTINGS)


def test_group_metadata_record_carries_the_wall_clock_empty_since(tmp_path: Path) -> None:
    # A wall clock apart from the broker's (whose log checks record timestamps against the real time,
    # within message.timestamp.after.max.ms), at a whole second so the expectation is exact.
    start_ms = SystemClock().wall_ms() // 1000 * 1000 - 60_000
    clock = ManualClock(wall_ms=start_ms)

    async def first(ctx: BrokerContext) -> None:
        groups = ctx.groups
        assert groups is not None
        groups.clock = clock
        await ctx.io.run(ctx.controller.create_topic, "a", 1, 1, {})
        member, generation = await _classic_member(groups, "g", ("a",))
        assert await groups.commit("g", member, generation, [("a", 0, 4, -1, None)]) == [0]
        clock.advance(5_000)
        groups.leave("g", [(member, None)])
        await asyncio.sleep(0)
        await groups.flush_writes()

    async def second(ctx: BrokerContext) -> None:
        groups = ctx.groups
        assert groups is not None
        assert groups._empty_since_ms["g"] == start_ms + 5_000

    with_broker(tmp_path, first, **SETTINGS)
    with_broker(tmp_path, second, **SETTINGS)
