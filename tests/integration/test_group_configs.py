"""Group configs (Kafka's GroupConfig on the GROUP config resource, type 32) through confluent-kafka's
AdminClient against ``tierlog serve``: set, described, deleted, Kafka's INVALID_CONFIG for a bad key or
value, kept across a restart, and acted on by the KIP-848 consumer groups (the heartbeat interval a
member is told, the session timeout it is removed after)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from confluent_kafka.error import KafkaException

from tests.helpers.broker import BrokerProcess
from tests.helpers.raw_client import RawClient
from tests.helpers.waits import wait_until
from tierlog.protocol import ApiKey

GROUP = ConfigResource.Type.GROUP


def _group(name: str, *ops: tuple[str, str | None, AlterConfigOpType]) -> ConfigResource:
    return ConfigResource(GROUP, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=op) for key, value, op in ops])


def _alter(admin: AdminClient, resource: ConfigResource) -> None:
    admin.incremental_alter_configs([resource])[resource].result(30)


def _describe(admin: AdminClient, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(GROUP, name)
    return admin.describe_configs([resource], request_timeout=30)[resource].result(30)  # type: ignore[no-any-return]


def _refusal(admin: AdminClient, resource: ConfigResource) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        _alter(admin, resource)
    error: KafkaError = info.value.args[0]
    return error


def test_group_configs_set_describe_delete_and_refusals(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    name = f"cfg-{uuid.uuid4().hex[:8]}"

    # A group that does not exist is described with every key at its default (as Kafka does).
    entries = _describe(admin, name)
    assert len(entries) == 17, sorted(entries)
    assert entries["consumer.session.timeout.ms"].value == "45000"
    assert entries["consumer.session.timeout.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert entries["share.auto.offset.reset"].value == "latest"

    _alter(admin, _group(name, ("consumer.session.timeout.ms", "50000", AlterConfigOpType.SET),
                         ("share.isolation.level", "read_committed", AlterConfigOpType.SET)))
    entries = _describe(admin, name)
    assert entries["consumer.session.timeout.ms"].value == "50000"
    assert entries["consumer.session.timeout.ms"].source == ConfigSource.GROUP_CONFIG.value
    assert entries["share.isolation.level"].value == "read_committed"

    # Kafka's answers: INVALID_CONFIG for an unknown key, a value that does not parse, one outside the
    # broker's bounds (group.consumer.min.session.timeout.ms is 45000) and a non-list APPEND.
    unknown = _refusal(admin, _group(name, ("consumer.sesion.timeout.ms", "50000", AlterConfigOpType.SET)))
    assert unknown.code() == KafkaError.INVALID_CONFIG, unknown
    assert "did you mean consumer.session.timeout.ms" in unknown.str()
    for value in ("abc", "0"):
        bad = _refusal(admin, _group(name, ("consumer.session.timeout.ms", value, AlterConfigOpType.SET)))
        assert bad.code() == KafkaError.INVALID_CONFIG, bad
    low = _refusal(admin, _group(name, ("consumer.session.timeout.ms", "40000", AlterConfigOpType.SET)))
    assert low.code() == KafkaError.INVALID_CONFIG, low
    assert ("consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"
            in low.str())
    bad = _refusal(admin, _group(name, ("share.auto.offset.reset", "by_duration:-PT1H", AlterConfigOpType.SET)))
    assert bad.code() == KafkaError.INVALID_CONFIG, bad
    append = _refusal(admin, _group(name, ("consumer.session.timeout.ms", "1", AlterConfigOpType.APPEND)))
    assert append.code() == KafkaError.INVALID_CONFIG, append
    assert _describe(admin, name)["consumer.session.timeout.ms"].value == "50000"  # nothing changed

    _alter(admin, _group(name, ("consumer.session.timeout.ms", None, AlterConfigOpType.DELETE)))
    entries = _describe(admin, name)
    assert entries["consumer.session.timeout.ms"].value == "45000"
    assert entries["consumer.session.timeout.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert entries["share.isolation.level"].value == "read_committed"


def _heartbeat(client: RawClient, group_id: str, member_id: str, epoch: int, topics: list[str]) -> object:
    return client.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, {
        "group_id": group_id, "member_id": member_id, "member_epoch": epoch, "instance_id": None,
        "rack_id": None, "rebalance_timeout": 30000, "subscribed_topic_names": topics,
        "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": [] if epoch == 0 else None})


def _members(client: RawClient, group_id: str) -> int:
    body = client.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": [group_id],
                                                           "include_authorized_operations": False})
    return len(body.groups[0].members)


def test_group_configs_survive_restart_and_are_acted_on(tmp_path: Path) -> None:
    # Bounds that let a test see a short session timeout take effect (Kafka's minimum is 45 s).
    broker = BrokerProcess(tmp_path / "data", {"group.consumer.min.session.timeout.ms": "1000",
                                               "group.consumer.min.heartbeat.interval.ms": "500"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        _alter(admin, _group("short", ("consumer.session.timeout.ms", "2000", AlterConfigOpType.SET),
                             ("consumer.heartbeat.interval.ms", "700", AlterConfigOpType.SET)))
        broker.restart()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        entries = _describe(admin, "short")
        assert entries["consumer.session.timeout.ms"].value == "2000", broker.stderr_tail()
        assert entries["consumer.heartbeat.interval.ms"].value == "700"

        client = RawClient(broker.port)
        short = _heartbeat(client, "short", str(uuid.uuid4()), 0, ["t"])
        plain = _heartbeat(client, "plain", str(uuid.uuid4()), 0, ["t"])
        assert short.error_code == 0 and plain.error_code == 0, (short, plain)  # type: ignore[attr-defined]
        assert short.heartbeat_interval == timedelta(milliseconds=700)  # type: ignore[attr-defined]
        assert plain.heartbeat_interval == timedelta(milliseconds=5000)  # type: ignore[attr-defined]
        # Neither member heartbeats again: the short group's session (2 s) expires, the other's (45 s) not.
        assert wait_until(lambda: _members(client, "short") == 0, 30), broker.stderr_tail()
        assert _members(client, "plain") == 1
    finally:
        broker.stop()
