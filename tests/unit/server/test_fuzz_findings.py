"""Requests the fuzz scenario (tests/reliability/hostile_clients.py) found the handlers failing on
with a traceback; each now gets Kafka's answer."""

from __future__ import annotations

import datetime
import struct
import uuid
from pathlib import Path
from typing import Any, cast

import pytest

from tests.helpers.server import call, with_broker
from tierlog.protocol import (
    ApiKey,
    MalformedRequestError,
    build_request,
    encode_request,
    encode_response,
    parse_request,
)
from tierlog.server.context import BrokerContext


def test_metadata_v10_and_v11_by_topic_id_or_null_name_is_an_invalid_request(tmp_path: Path) -> None:
    async def test(ctx: BrokerContext) -> None:
        for version in (10, 11):
            body = await call(ctx, ApiKey.METADATA, version, {"topics": [
                {"name": None, "topic_id": uuid.uuid4()}, {"name": "t", "topic_id": None}],
                "allow_auto_topic_creation": False})
            assert [(t.name, t.error_code) for t in body.topics] == [("", 42), ("t", 42)]
            encode_response(ApiKey.METADATA, version, 1, body)  # and it can be sent
        body = await call(ctx, ApiKey.METADATA, 12, {"topics": [{"name": None, "topic_id": uuid.uuid4()}],
                                                     "allow_auto_topic_creation": False})
        assert body.topics[0].error_code == 100  # v12 asks by id: UNKNOWN_TOPIC_ID

    with_broker(tmp_path, test)


def test_an_int64_duration_beyond_what_python_can_hold_is_a_malformed_request() -> None:
    marker = 0x010203040506  # ms: a value timedelta holds exactly, easy to find in the encoding
    body = build_request(ApiKey.OFFSET_COMMIT, 2, {"group_id": "g", "generation_id_or_member_epoch": -1,
                                                   "member_id": "", "retention_time": datetime.timedelta(
                                                       milliseconds=marker), "topics": []})
    frame = encode_request(ApiKey.OFFSET_COMMIT, 2, 1, "c", body)[4:]
    where = frame.index(struct.pack(">q", marker))
    assert parse_request(frame).body.retention_time == datetime.timedelta(milliseconds=marker)
    for huge in (2**63 - 1, -(2**63)):
        with pytest.raises(MalformedRequestError, match="out of range"):
            parse_request(frame[:where] + struct.pack(">q", huge) + frame[where + 8:])


def test_a_new_client_id_on_every_request_does_not_grow_the_broker_for_ever() -> None:
    import asyncio

    from tierlog.protocol import ParsedRequest, build_request, request_header_version
    from tierlog.server.connection import ClientInfo
    from tierlog.server.dispatcher import MAX_VERSIONS_SEEN, Dispatcher

    async def handler(ctx: Any, request: ParsedRequest, client: ClientInfo) -> None:
        return None

    dispatcher = Dispatcher(cast(Any, None), {int(ApiKey.API_VERSIONS): handler})
    body = build_request(ApiKey.API_VERSIONS, 3, {"client_software_name": "f", "client_software_version": "1"})
    request = ParsedRequest(int(ApiKey.API_VERSIONS), 3, 1, "x", request_header_version(ApiKey.API_VERSIONS, 3), body)

    async def run() -> None:
        for i in range(MAX_VERSIONS_SEEN + 500):
            await dispatcher.route(request, ClientInfo("c", "h", 1, client_id=f"random-{i}"))

    asyncio.run(run())
    assert len(dispatcher.versions_seen) == MAX_VERSIONS_SEEN


def test_empty_groups_without_offsets_are_removed_and_stay_removed_after_a_restart(tmp_path: Path) -> None:
    import asyncio
    import time

    settings = {"group.min.session.timeout.ms": "10", "group.initial.rebalance.delay.ms": "0",
                "offsets.retention.check.interval.ms": "200"}

    async def first(ctx: BrokerContext) -> None:
        groups = ctx.groups
        assert groups is not None
        # A client cycling through group ids: each join completes a generation, then its member
        # never heartbeats again.
        for i in range(30):
            result = await groups.join(f"random-{i}", "", None, "c", "/127.0.0.1", 100, 100, "consumer",
                                       [("range", b"")], False)
            assert result.error_code == 0
        await ctx.io.run(ctx.controller.create_topic, "t", 1, 1, {})
        assert await groups.commit("keeper", "", -1, [("t", 0, 5, -1, None)]) == [0]
        # Generous: the members' 100 ms sessions and the 200 ms retention pass take seconds at load
        # average 20 on 2 cores (the 10 s this waited before failed there).
        deadline = time.monotonic() + 60
        while len(groups.groups) > 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert sorted(groups.groups) == ["keeper"]
        # No wait for the tombstones: the broker's stop waits for background appends.

    async def second(ctx: BrokerContext) -> None:
        assert ctx.groups is not None
        # The tombstones keep the removed groups' records from bringing them back.
        assert not [g for g in ctx.groups.groups if g.startswith("random-")]
        assert ctx.groups.offsets["keeper"][("t", 0)].offset == 5

    with_broker(tmp_path, first, **settings)
    with_broker(tmp_path, second, **{**settings, "offsets.retention.check.interval.ms": "600000"})
