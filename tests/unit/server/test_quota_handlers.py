"""DescribeClientQuotas / AlterClientQuotas handlers and the controller mutation quota of CreateTopics
(KIP-599) against an in-process broker."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.server import call, with_broker
from tierlog.errors import ErrorCode
from tierlog.protocol import ApiKey
from tierlog.server.context import BrokerContext
from tierlog.server.quotas import QuotaType


def _set(entity: list[tuple[str, str | None]], key: str, value: float) -> dict[str, object]:
    return {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
            "ops": [{"key": key, "value": value, "remove": False}]}


def test_alter_describe_and_errors(tmp_path: Path) -> None:
    async def test(ctx: BrokerContext) -> None:
        got = await call(ctx, ApiKey.ALTER_CLIENT_QUOTAS, 1, {"validate_only": False, "entries": [
            _set([("user", "alice"), ("client-id", None)], "consumer_byte_rate", 5000.0),
            _set([("user", "bob")], "producer_byte_rate", 1.5),  # a byte rate is a whole number
            _set([], "producer_byte_rate", 1.0),
        ]})
        assert [int(e.error_code) for e in got.entries] == [0, ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST]
        got = await call(ctx, ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"strict": False, "components": [
            {"entity_type": "client-id", "match_type": 1, "match": None}]})
        assert int(got.error_code) == 0
        assert [[(e.entity_type, e.entity_name) for e in entry.entity] for entry in got.entries] == [
            [("client-id", None), ("user", "alice")]]
        assert [(v.key, float(v.value)) for v in got.entries[0].values] == [("consumer_byte_rate", 5000.0)]
        got = await call(ctx, ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"strict": False, "components": [
            {"entity_type": "user", "match_type": 0, "match": None}]})
        assert int(got.error_code) == ErrorCode.INVALID_REQUEST
    with_broker(tmp_path, test)


def test_create_topics_over_mutation_quota_is_throttled(tmp_path: Path) -> None:
    async def test(ctx: BrokerContext) -> None:
        got = await call(ctx, ApiKey.ALTER_CLIENT_QUOTAS, 1, {"validate_only": False, "entries": [
            _set([("client-id", "unit")], "controller_mutation_rate", 1.0)]})
        assert int(got.entries[0].error_code) == 0
        topics = [{"name": f"t{i}", "num_partitions": 5, "replication_factor": 1, "assignments": [], "configs": []}
                  for i in range(2)]
        got = await call(ctx, ApiKey.CREATE_TOPICS, 7, {"topics": topics, "timeout": 30000, "validate_only": False})
        # Burst 1/s x 2 windows x 1 s = 2: the first topic overdraws it (allowed once), the second is refused.
        assert [int(t.error_code) for t in got.topics] == [0, ErrorCode.THROTTLING_QUOTA_EXCEEDED]
        assert "t0" in ctx.image.topics_by_name and "t1" not in ctx.image.topics_by_name
    with_broker(tmp_path, test, **{"quota.window.num": "2", "quota.window.size.seconds": "1"})



def test_request_percentage_puts_throttle_time_in_the_response(tmp_path: Path) -> None:
    from tierlog.protocol import ParsedRequest, build_request, request_header_version
    from tierlog.protocol.build import to_millis
    from tierlog.server.connection import ClientInfo
    from tierlog.server.dispatcher import Dispatcher
    from tierlog.server.handlers import all_handlers

    async def test(ctx: BrokerContext) -> None:
        await call(ctx, ApiKey.ALTER_CLIENT_QUOTAS, 1, {"validate_only": False, "entries": [
            _set([("user", None)], "request_percentage", 0.0001)]})
        dispatcher = Dispatcher(ctx, all_handlers())
        body = build_request(ApiKey.DESCRIBE_CLUSTER, 0, {"include_cluster_authorized_operations": False})
        request = ParsedRequest(int(ApiKey.DESCRIBE_CLUSTER), 0, 1, "busy", request_header_version(
            ApiKey.DESCRIBE_CLUSTER, 0), body)
        client = ClientInfo("c", "127.0.0.1", 1, "busy")
        reply = await dispatcher.route(request, client)
        # Any handling time is far over 0.0001% of a thread: throttled, capped at one window (1 s).
        assert 0 < to_millis(reply.throttle_time) <= 1000  # type: ignore[union-attr]
        assert client.throttle_ms == to_millis(reply.throttle_time)  # type: ignore[union-attr]
        assert ctx.quotas is not None and ctx.quotas.throttled_total[QuotaType.REQUEST] == 1
    with_broker(tmp_path, test)
