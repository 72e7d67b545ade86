"""OffsetCommit's checks on a classic group in Kafka's order (ClassicGroup.validateOffsetCommit): the
member and its generation before the group's state. librdkafka's 0113 ``v_commit_during_rebalance``
commits from a consumer whose generation a rebalance has just replaced and accepts only success or
ILLEGAL_GENERATION; answering REBALANCE_IN_PROGRESS there (the state checked first) failed it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.helpers.server import with_broker
from tierlog.errors import ErrorCode
from tierlog.server.context import BrokerContext
from tierlog.server.groups.group import GroupState

SETTINGS = {"group.initial.rebalance.delay.ms": "0"}
OFFSET = [("t", 0, 5, -1, None)]


def test_commit_checks_member_and_generation_before_the_rebalance_state(tmp_path: Path) -> None:
    async def run(ctx: BrokerContext) -> None:
        groups = ctx.groups
        assert groups is not None
        await ctx.io.run(ctx.controller.create_topic, "t", 1, 1, {})
        protocols = [("range", b"")]
        a = await groups.join("g", "", None, "c", "/127.0.0.1", 30_000, 30_000, "consumer", protocols, False)
        assert a.error_code == 0, a
        synced = await groups.sync("g", a.member_id, a.generation_id, "consumer", "range", {a.member_id: b""})
        assert synced.error_code == 0
        old_generation = a.generation_id
        assert await groups.commit("g", a.member_id, old_generation, OFFSET) == [ErrorCode.NONE]

        # A second member joins and the first rejoins: a new generation, waiting for the leader's sync.
        b, a2 = await asyncio.gather(
            groups.join("g", "", None, "c", "/127.0.0.1", 30_000, 30_000, "consumer", protocols, False),
            groups.join("g", a.member_id, None, "c", "/127.0.0.1", 30_000, 30_000, "consumer", protocols, False))
        assert b.error_code == 0 and a2.error_code == 0, (b, a2)
        assert groups.groups["g"].state is GroupState.COMPLETING_REBALANCE
        assert a2.generation_id == old_generation + 1

        # The generation before the rebalance: ILLEGAL_GENERATION, as Kafka answers.
        assert await groups.commit("g", a.member_id, old_generation, OFFSET) == [ErrorCode.ILLEGAL_GENERATION]
        # The current generation, rebalance not completed yet: REBALANCE_IN_PROGRESS.
        assert await groups.commit("g", a.member_id, a2.generation_id, OFFSET) == [ErrorCode.REBALANCE_IN_PROGRESS]
        # An unknown member: UNKNOWN_MEMBER_ID whatever the state.
        assert await groups.commit("g", "nobody", a2.generation_id, OFFSET) == [ErrorCode.UNKNOWN_MEMBER_ID]
        # No member id and no generation (v0-style) into a group with members: UNKNOWN_MEMBER_ID.
        assert await groups.commit("g", "", -1, OFFSET) == [ErrorCode.UNKNOWN_MEMBER_ID]
        assert groups.offsets["g"][("t", 0)].offset == 5

    with_broker(tmp_path, run, **SETTINGS)
