"""Admin handlers called in-process on a real broker context: configs, topics, partitions, records."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.helpers.server import append_durably, call, with_broker
from tierlog.protocol import ApiKey
from tierlog.records import SimpleRecord, build_batch
from tierlog.server.context import BrokerContext


def create(name: str, partitions: int = 1, configs: dict[str, str] | None = None, validate_only: bool = False) -> dict[str, Any]:
    return {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": -1, "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
            "timeout": 1000, "validate_only": validate_only}


def describe(name: str, keys: list[str] | None = None, resource_type: int = 2) -> dict[str, Any]:
    return {"resources": [{"resource_type": resource_type, "resource_name": name, "configuration_keys": keys}],
            "include_synonyms": True, "include_documentation": True}


def test_create_describe_and_alter_topic_configs(tmp_path: Path) -> None:
    async def test(ctx: BrokerContext) -> None:
        checked = await call(ctx, ApiKey.CREATE_TOPICS, 7, create("t", 3, {"retention.min.timestamp": "5"}, True))
        assert checked.topics[0].error_code == 0 and "t" not in ctx.image.topics_by_name
        made = (await call(ctx, ApiKey.CREATE_TOPICS, 7, create("t", 3, {"retention.min.timestamp": "5"}))).topics[0]
        assert (made.error_code, made.num_partitions, made.replication_factor) == (0, 3, 1)
        assert made.topic_id is not None
        floor = next(c for c in made.configs if c.name == "log.retention.min.timestamp")
        assert (floor.value, floor.config_source) == ("5", 1)
        assert ctx.log_manager.get_log("t", 2) is not None

        result = (await call(ctx, ApiKey.DESCRIBE_CONFIGS, 4, describe("t", ["retention.ms", "log.retention.min.timestamp"]))).results[0]
        by_name = {c.name: c for c in result.configs}
        assert by_name["retention.ms"].value == str(48 * 3_600_000)
        assert by_name["retention.ms"].config_source == 4  # from the broker's log.retention.hours
        assert [s.name for s in by_name["retention.ms"].synonyms] == ["log.retention.hours", "retention.ms"]
        assert by_name["log.retention.min.timestamp"].documentation

        alter = {"resources": [{"resource_type": 2, "resource_name": "t", "configs": [
            {"name": "cleanup.policy", "config_operation": 2, "value": "compact"},
            {"name": "log.retention.min.timestamp", "config_operation": 1, "value": None}]}], "validate_only": False}
        assert (await call(ctx, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, alter)).responses[0].error_code == 0
        assert dict(ctx.image.topic_configs("t")) == {"cleanup.policy": "delete,compact"}
        ulog = ctx.log_manager.get_log("t", 0)
        assert ulog is not None and ulog.config.cleanup_policy == ("delete", "compact")

        legacy = {"resources": [{"resource_type": 2, "resource_name": "t", "configs": [
            {"name": "segment.bytes", "value": "-5"}]}], "validate_only": False}
        refused = (await call(ctx, ApiKey.ALTER_CONFIGS, 2, legacy)).responses[0]
        assert refused.error_code == 40 and "segment.bytes" in refused.error_message
        legacy["resources"][0]["configs"] = [{"name": "segment.bytes", "value": "100000"}]
        assert (await call(ctx, ApiKey.ALTER_CONFIGS, 2, legacy)).responses[0].error_code == 0
        # The legacy API replaces the whole set.
        assert dict(ctx.image.topic_configs("t")) == {"segment.bytes": "100000"}

    with_broker(tmp_path, test)


def test_topic_errors_partitions_records_and_broker_configs(tmp_path: Path) -> None:
    async def test(ctx: BrokerContext) -> None:
        assert (await call(ctx, ApiKey.CREATE_TOPICS, 7, create("a"))).topics[0].error_code == 0
        assert (await call(ctx, ApiKey.CREATE_TOPICS, 7, create("a"))).topics[0].error_code == 36
        assert (await call(ctx, ApiKey.CREATE_TOPICS, 7, create("bad/name"))).topics[0].error_code == 17
        assert (await call(ctx, ApiKey.CREATE_TOPICS, 7, create("c", 1, {"nope": "1"}))).topics[0].error_code == 40

        grow = {"topics": [{"name": "a", "count": 4, "assignments": None}], "timeout": 1000, "validate_only": False}
        assert (await call(ctx, ApiKey.CREATE_PARTITIONS, 3, grow)).results[0].error_code == 0
        assert ctx.image.topics_by_name["a"].num_partitions == 4
        assert (await call(ctx, ApiKey.CREATE_PARTITIONS, 3, grow)).results[0].error_code == 37

        now = int(time.time() * 1000)
        batch = build_batch([SimpleRecord(None, b"v", timestamp=now) for _ in range(10)])
        await append_durably(ctx, [("a", 0, batch)])
        purge = {"topics": [{"name": "a", "partitions": [{"partition_index": 0, "offset": 4},
                                                           {"partition_index": 1, "offset": 7}]}], "timeout": 1000}
        parts = (await call(ctx, ApiKey.DELETE_RECORDS, 2, purge)).topics[0].partitions
        assert [(p.low_watermark, p.error_code) for p in parts] == [(4, 0), (-1, 1)]

        listed = await call(ctx, ApiKey.LIST_OFFSETS, 9, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "a", "partitions": [{"partition_index": 0, "timestamp": t, "current_leader_epoch": -1}
                                         for t in (-2, -1, -3, now, now + 1)]}]})
        # Max timestamp: all records share one; the first record holding it (Kafka >= 3.8, KAFKA-16310)
        # that is still in the log (DeleteRecords moved the start to 4).
        assert [(p.offset, p.error_code) for p in listed.topics[0].partitions] == [(4, 0), (10, 0), (4, 0), (4, 0), (-1, 0)]

        epochs = await call(ctx, ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {"replica_id": -1, "topics": [
            {"topic": "a", "partitions": [{"partition": 0, "current_leader_epoch": 0, "leader_epoch": 0},
                                          {"partition": 0, "current_leader_epoch": 5, "leader_epoch": 0}]}]})
        first, fenced = epochs.topics[0].partitions
        assert (first.error_code, first.leader_epoch, first.end_offset) == (0, 0, 10)
        assert fenced.error_code == 75

        brokers = (await call(ctx, ApiKey.DESCRIBE_CONFIGS, 4, describe("1", ["log.retention.hours", "node.id"], 4))).results[0]
        assert {c.name: (c.value, c.read_only, c.config_source) for c in brokers.configs} == {
            "log.retention.hours": ("48", False, 4), "node.id": ("1", True, 5)}
        other = (await call(ctx, ApiKey.DESCRIBE_CONFIGS, 4, describe("7", None, 4))).results[0]
        assert other.error_code == 42

        gone = await call(ctx, ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": "a", "topic_id": None},
                                                                    {"name": "zzz", "topic_id": None}], "timeout": 1000})
        assert [r.error_code for r in gone.responses] == [0, 3]
        assert ctx.log_manager.get_log("a", 0) is None

    with_broker(tmp_path, test)


def test_dynamic_broker_defaults_reach_topics_without_overrides(tmp_path: Path) -> None:
    async def test(ctx: BrokerContext) -> None:
        await call(ctx, ApiKey.CREATE_TOPICS, 7, create("plain"))
        await call(ctx, ApiKey.CREATE_TOPICS, 7, create("own", 1, {"retention.ms": "1000"}))
        change = {"resources": [{"resource_type": 4, "resource_name": "", "configs": [
            {"name": "log.retention.ms", "config_operation": 0, "value": "3600000"}]}], "validate_only": False}
        assert (await call(ctx, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, change)).responses[0].error_code == 0
        plain, own = ctx.log_manager.get_log("plain", 0), ctx.log_manager.get_log("own", 0)
        assert plain is not None and own is not None
        assert (plain.config.retention_ms, own.config.retention_ms) == (3_600_000, 1000)
        entry = (await call(ctx, ApiKey.DESCRIBE_CONFIGS, 4, describe("plain", ["retention.ms"]))).results[0].configs[0]
        assert (entry.value, entry.config_source) == ("3600000", 3)
        assert [(s.name, s.source) for s in entry.synonyms] == [("log.retention.ms", 3), ("log.retention.hours", 4),
                                                                 ("retention.ms", 5)]
        # This broker's own setting wins over the cluster-wide one.
        change["resources"][0]["resource_name"] = "1"
        change["resources"][0]["configs"][0]["value"] = "7200000"
        assert (await call(ctx, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, change)).responses[0].error_code == 0
        assert plain.config.retention_ms == 7_200_000

    with_broker(tmp_path, test)


def test_group_configs_described_with_broker_synonyms_and_refused_by_kafkas_rules(tmp_path: Path) -> None:
    async def test(ctx: BrokerContext) -> None:
        result = (await call(ctx, ApiKey.DESCRIBE_CONFIGS, 4, describe("g", None, 32))).results[0]
        assert result.error_code == 0
        by_name = {c.name: c for c in result.configs}
        assert len(by_name) == 17
        # The broker's group.consumer.session.timeout.ms (set in its config) is the default.
        session = by_name["consumer.session.timeout.ms"]
        assert (session.value, session.config_source, session.read_only) == ("50000", 4, False)
        assert [(s.name, s.value, s.source) for s in session.synonyms] == [
            ("group.consumer.session.timeout.ms", "50000", 4), ("group.consumer.session.timeout.ms", "45000", 5)]
        reset = by_name["share.auto.offset.reset"]
        assert (reset.value, reset.config_source) == ("latest", 5) and reset.documentation

        legacy = {"resources": [{"resource_type": 32, "resource_name": "g", "configs": [
            {"name": "consumer.session.timeout.ms", "value": "55000"}]}], "validate_only": False}
        assert (await call(ctx, ApiKey.ALTER_CONFIGS, 2, legacy)).responses[0].error_code == 0
        session = {c.name: c for c in (await call(ctx, ApiKey.DESCRIBE_CONFIGS, 4, describe(
            "g", ["consumer.session.timeout.ms"], 32))).results[0].configs}["consumer.session.timeout.ms"]
        assert (session.value, session.config_source) == ("55000", 8)  # GROUP_CONFIG
        assert [s.source for s in session.synonyms] == [8, 4, 5]

        incremental = {"resources": [{"resource_type": 32, "resource_name": "g", "configs": [
            {"name": "consumer.heartbeat.interval.ms", "config_operation": 0, "value": "16000"}]}],
            "validate_only": False}
        refused = (await call(ctx, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, incremental)).responses[0]
        assert (refused.error_code, refused.error_message) == (
            40, "consumer.heartbeat.interval.ms must be less than or equal to group.consumer.max.heartbeat.interval.ms")
        incremental["resources"][0]["resource_name"] = ""
        empty = (await call(ctx, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, incremental)).responses[0]
        assert (empty.error_code, empty.error_message) == (42, "Default group resources are not allowed.")
        described = (await call(ctx, ApiKey.DESCRIBE_CONFIGS, 4, describe("", None, 32))).results[0]
        assert (described.error_code, described.error_message) == (42, "Group name must not be empty")

    with_broker(tmp_path, test, **{"group.consumer.session.timeout.ms": "50000"})


def test_group_configs_need_the_group_acls(tmp_path: Path) -> None:
    async def test(ctx: BrokerContext) -> None:
        assert (await call(ctx, ApiKey.DESCRIBE_CONFIGS, 4, describe("g", None, 32))).results[0].error_code == 30
        alter = {"resources": [{"resource_type": 32, "resource_name": "g", "configs": [
            {"name": "consumer.session.timeout.ms", "config_operation": 0, "value": "50000"}]}], "validate_only": False}
        refused = (await call(ctx, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, alter)).responses[0]
        assert refused.error_code == 30  # GROUP_AUTHORIZATION_FAILED
        assert dict(ctx.image.group_configs("g")) == {}

    with_broker(tmp_path, test, **{"authorizer.class.name": "tierlog.StandardAuthorizer"})


def test_list_config_resources(tmp_path: Path) -> None:
    async def test(ctx: BrokerContext) -> None:
        await call(ctx, ApiKey.CREATE_TOPICS, 7, create("t"))
        alter = {"resources": [{"resource_type": 32, "resource_name": "g", "configs": [
            {"name": "consumer.session.timeout.ms", "config_operation": 0, "value": "50000"}]}], "validate_only": False}
        assert (await call(ctx, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, alter)).responses[0].error_code == 0
        every = await call(ctx, ApiKey.LIST_CONFIG_RESOURCES, 1, {"resource_types": []})
        assert every.error_code == 0
        assert [(r.resource_type, r.resource_name) for r in every.config_resources] == [
            (32, "g"), (8, str(ctx.node_id)), (4, str(ctx.node_id)), (2, "t")]
        groups = await call(ctx, ApiKey.LIST_CONFIG_RESOURCES, 1, {"resource_types": [32]})
        assert [r.resource_name for r in groups.config_resources] == ["g"]
        # v0 (ListClientMetricsResources) lists client-metrics subscriptions only; tierlog has none.
        assert (await call(ctx, ApiKey.LIST_CONFIG_RESOURCES, 0, {})).config_resources == ()
        unknown = await call(ctx, ApiKey.LIST_CONFIG_RESOURCES, 1, {"resource_types": [99]})
        assert (unknown.error_code, unknown.config_resources) == (35, ())  # UNSUPPORTED_VERSION
        # Deleting a group's last config drops it from the list.
        alter["resources"][0]["configs"][0].update(config_operation=1, value=None)
        assert (await call(ctx, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, alter)).responses[0].error_code == 0
        groups = await call(ctx, ApiKey.LIST_CONFIG_RESOURCES, 1, {"resource_types": [32]})
        assert groups.config_resources == ()

    with_broker(tmp_path, test)
