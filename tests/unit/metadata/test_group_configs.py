"""Group configs (the GROUP config resource, Kafka's GroupConfig): Kafka's validation rules and
messages, ConfigRecords of resource type 32 that survive a restart and are in metadata snapshots."""

from __future__ import annotations

import pytest

from tests.helpers.metadata import Env, make_settings
from tierlog.config.group_keys import GROUP_BOUND_BROKER_KEYS, GROUP_DEF, check_group_configs, duration_ms
from tierlog.config.keys import BROKER_DEF
from tierlog.errors import ConfigError
from tierlog.metadata.configs import AlterConfigOp, AlterConfigOpType
from tierlog.metadata.errors import InvalidRequestError
from tierlog.metadata.records import ConfigResourceType
from tierlog.metadata.snapshot import load_snapshot

GROUP = ConfigResourceType.GROUP
#: Kafka's defaults of the broker's bounds.
BOUNDS = {key: int(BROKER_DEF.require(key).default) for key in GROUP_BOUND_BROKER_KEYS}  # type: ignore[arg-type]


def _kafka_bound(key: str) -> int:
    return BOUNDS[key]


def test_the_keys_are_kafkas() -> None:
    # Kafka 4.3.1's GroupConfig.configNames(), in its order.
    assert list(GROUP_DEF.keys) == [
        "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms", "consumer.assignment.interval.ms",
        "share.session.timeout.ms", "share.heartbeat.interval.ms", "share.record.lock.duration.ms",
        "share.delivery.count.limit", "share.partition.max.record.locks", "share.auto.offset.reset",
        "share.isolation.level", "share.renew.acknowledge.enable", "share.assignment.interval.ms",
        "streams.session.timeout.ms", "streams.heartbeat.interval.ms", "streams.num.standby.replicas",
        "streams.initial.rebalance.delay.ms", "streams.assignment.interval.ms"]


@pytest.mark.parametrize(("configs", "message"), [
    # Kafka 4.3.1's GroupConfig.validate answers, each an InvalidConfigurationException (INVALID_CONFIG).
    ({"consumer.session.timeout.ms": "40000"},
     "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"),
    ({"consumer.session.timeout.ms": "60001"},
     "consumer.session.timeout.ms must be less than or equal to group.consumer.max.session.timeout.ms"),
    ({"consumer.heartbeat.interval.ms": "20000"},
     "consumer.heartbeat.interval.ms must be less than or equal to group.consumer.max.heartbeat.interval.ms"),
    ({"streams.num.standby.replicas": "3"},
     "streams.num.standby.replicas must be less than or equal to group.streams.max.standby.replicas"),
    ({"share.record.lock.duration.ms": "1000"},
     "share.record.lock.duration.ms must be greater than or equal to group.share.min.record.lock.duration.ms"),
])
def test_bounds_refused_with_kafkas_message(configs: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_group_configs(configs, _kafka_bound)
    assert str(info.value) == message
    assert info.value.error_code == 40  # INVALID_CONFIG


def test_session_must_exceed_heartbeat() -> None:
    bounds = {**BOUNDS, "group.consumer.min.session.timeout.ms": 1000, "group.consumer.min.heartbeat.interval.ms": 1000}
    check_group_configs({"consumer.session.timeout.ms": "2000", "consumer.heartbeat.interval.ms": "1000"}, bounds.get)
    with pytest.raises(ConfigError, match="^consumer.session.timeout.ms must be greater than "
                                          "consumer.heartbeat.interval.ms$"):
        check_group_configs({"consumer.session.timeout.ms": "2000", "consumer.heartbeat.interval.ms": "2000"},
                            bounds.get)  # type: ignore[arg-type]


@pytest.mark.parametrize(("key", "value", "ok"), [
    ("consumer.session.timeout.ms", "50000", True), ("consumer.session.timeout.ms", " 50000 ", True),
    ("consumer.session.timeout.ms", "abc", False), ("consumer.session.timeout.ms", "0", False),
    ("share.auto.offset.reset", "earliest", True), ("share.auto.offset.reset", "by_duration:PT1H", True),
    ("share.auto.offset.reset", "EARLIEST", False), ("share.auto.offset.reset", "by_duration:-PT1H", False),
    ("share.auto.offset.reset", "by_duration:x", False), ("share.auto.offset.reset", "bogus", False),
    ("share.isolation.level", "read_committed", True), ("share.isolation.level", "READ_COMMITTED", False),
    ("share.renew.acknowledge.enable", "TRUE", True), ("share.renew.acknowledge.enable", "yes", False),
])
def test_values_as_kafka_parses_them(key: str, value: str, ok: bool) -> None:
    # Which of these Kafka 4.3.1's GroupConfig.validate accepts (checked against its jar).
    if ok:
        check_group_configs({key: value}, _kafka_bound)
    else:
        with pytest.raises(ConfigError):
            check_group_configs({key: value}, _kafka_bound)


def test_iso_durations() -> None:
    assert duration_ms("PT1H") == 3_600_000
    assert duration_ms("P1DT0.5S") == 86_400_500
    assert duration_ms("-PT1M") == -60_000
    assert duration_ms("PT") is None and duration_ms("P") is None and duration_ms("1H") is None


def test_group_configs_recorded_checked_kept_and_snapshotted(env: Env) -> None:
    c = env.open(make_settings(group_bounds=BOUNDS))
    # A group need not exist to have configs.
    assert c.incremental_alter_configs(GROUP, "g1", [AlterConfigOp("consumer.session.timeout.ms", value="50000")]) == {
        "consumer.session.timeout.ms": "50000"}
    c.alter_configs(GROUP, "g2", {"share.isolation.level": "read_committed"})
    with pytest.raises(ConfigError, match="did you mean consumer.session.timeout.ms"):
        c.incremental_alter_configs(GROUP, "g1", [AlterConfigOp("consumer.sesion.timeout.ms", value="1")])
    with pytest.raises(ConfigError, match="must be greater than or equal to"):
        c.incremental_alter_configs(GROUP, "g1", [AlterConfigOp("consumer.session.timeout.ms", value="1000")])
    with pytest.raises(ConfigError, match="only allowed for list configs"):
        c.incremental_alter_configs(GROUP, "g1", [AlterConfigOp("consumer.session.timeout.ms",
                                                                AlterConfigOpType.APPEND, "1")])
    with pytest.raises(InvalidRequestError, match="Default group resources are not allowed"):
        c.incremental_alter_configs(GROUP, "", [AlterConfigOp("consumer.session.timeout.ms", value="50000")])
    # validate_only records nothing.
    c.incremental_alter_configs(GROUP, "g3", [AlterConfigOp("consumer.session.timeout.ms", value="50000")],
                                validate_only=True)
    assert dict(c.image.group_configs("g3")) == {}
    assert dict(c.image.group_configs("g1")) == {"consumer.session.timeout.ms": "50000"}

    snap = c.snapshot_now()
    assert snap is not None
    assert dict(load_snapshot(snap.path).image.group_configs("g2")) == {"share.isolation.level": "read_committed"}
    c2 = env.reopen(c)
    assert dict(c2.image.group_configs("g1")) == {"consumer.session.timeout.ms": "50000"}
    c2.incremental_alter_configs(GROUP, "g1", [AlterConfigOp("consumer.session.timeout.ms", AlterConfigOpType.DELETE)])
    assert dict(env.reopen(c2).image.group_configs("g1")) == {}
