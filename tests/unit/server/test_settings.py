"""The typed settings are built from the broker config in one place (tierlog.server.settings), and each
settings class's defaults are its keys' defaults (#23): a broker config with nothing set builds
exactly the settings a part gets when it is made without any, and a key that is set reaches its field."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tierlog.config import BROKER_DEF, BrokerConfig, Type
from tierlog.config.settings import (
    SETTING_CONVERT,
    SETTING_KEY,
    RemoteLogManagerSettings,
    setting,
    setting_keys,
    with_overrides,
)
from tierlog.errors import ConfigError
from tierlog.metadata import LIVE_METADATA_KEYS
from tierlog.metadata.controller import ControllerSettings
from tierlog.metadata.metadata_log import MetadataLogSettings
from tierlog.metadata.snapshot_generator import SnapshotSettings
from tierlog.server import settings
from tierlog.server.context import RequestSettings
from tierlog.server.groups.consumer_group import ConsumerGroupSettings
from tierlog.server.groups.coordinator import GroupSettings
from tierlog.server.groups.group import Group
from tierlog.server.quotas import QuotaWindow
from tierlog.server.txn.coordinator import TxnSettings
from tierlog.storage.cleaner.manager import CleanerSettings
from tierlog.storage.loader import LoadOptions
from tierlog.storage.log_manager import LogManagerSettings

BUILT_AND_DEFAULT: list[tuple[Any, type]] = [
    (settings.txn_settings, TxnSettings),
    (settings.cleaner_settings, CleanerSettings),
    (settings.request_settings, RequestSettings),
    (settings.group_settings, GroupSettings),
    (settings.log_manager_settings, LogManagerSettings),
    (settings.remote_log_manager_settings, RemoteLogManagerSettings),
    (settings.quota_window, QuotaWindow),
    (settings.network_settings, settings.NetworkSettings),
]


@pytest.mark.parametrize(("build", "cls"), BUILT_AND_DEFAULT, ids=lambda x: getattr(x, "__name__", ""))
def test_defaults_are_the_keys_defaults(build: Any, cls: type) -> None:
    assert build(BrokerConfig()) == cls()


def test_controller_defaults_are_the_keys_defaults() -> None:
    built = settings.controller_settings(BrokerConfig())
    # topic_defaults and group_bounds are what the broker adds: the effective defaults of every topic
    # key, and the broker's bounds of group configs.
    assert dataclasses.replace(built, topic_defaults={}, group_bounds={}) == ControllerSettings()
    assert built.topic_defaults["segment.bytes"] == 1073741824
    assert built.group_bounds["group.consumer.min.session.timeout.ms"] == 45000


def test_defaults_of_parts_below_follow_the_keys() -> None:
    config = BrokerConfig()
    assert LoadOptions().producer_id_expiration_ms == config.get_int("producer.id.expiration.ms")
    assert LoadOptions().sanity_check_all == config.get_bool("sanity.check.all.logs.enabled")
    assert Group("g").initial_rebalance_delay_ms == config.get_int("group.initial.rebalance.delay.ms")


def test_set_keys_reach_their_fields() -> None:
    config = BrokerConfig({
        "transaction.max.timeout.ms": "1234",
        "transaction.remove.expired.transaction.cleanup.interval.ms": "5678",
        "log.cleaner.io.buffer.load.factor": "0.5",
        "log.cleaner.enable": "false",
        "log.durable.acks": "none",
        "auto.create.topics.enable": "false",
        "console.listener": "http://127.0.0.1:0",
    })
    txn = settings.txn_settings(config)
    assert (txn.max_timeout_ms, txn.remove_expired_interval_ms) == (1234, 5678)
    cleaner = settings.cleaner_settings(config)
    assert (cleaner.enable, cleaner.io_buffer_load_factor) == (False, 0.5)
    assert settings.request_settings(config) == RequestSettings(auto_create_topics_enable=False, durable_acks="none")
    assert settings.network_settings(config).console_listener == "http://127.0.0.1:0"
    assert settings.network_settings(BrokerConfig()).console_listener is None


SETTINGS_CLASSES: list[type] = [TxnSettings, CleanerSettings, RequestSettings, GroupSettings, ConsumerGroupSettings,
                                LogManagerSettings, RemoteLogManagerSettings, SnapshotSettings, MetadataLogSettings,
                                ControllerSettings, QuotaWindow, settings.NetworkSettings]
#: The Python type a field read from a key of each type holds (when no conversion is given).
FIELD_TYPES = {Type.INT: {"int"}, Type.LONG: {"int"}, Type.BOOLEAN: {"bool"}, Type.DOUBLE: {"float"},
               Type.STRING: {"str", "str | None"}, Type.LIST: {"tuple[str, ...]"}}


@pytest.mark.parametrize("cls", SETTINGS_CLASSES, ids=lambda c: c.__name__)
def test_each_setting_field_holds_its_keys_type(cls: type) -> None:
    """A field declared ``setting("key")`` is annotated with the type the key parses to, so a field
    of the wrong type fails here, not at the first use of an operator's value."""
    for f in dataclasses.fields(cls):
        name = f.metadata.get(SETTING_KEY)
        if name is None or f.metadata[SETTING_CONVERT] is not None:
            continue
        key = BROKER_DEF.keys[name]
        assert f.type in FIELD_TYPES[key.type], f"{cls.__name__}.{f.name} is {f.type}, key {name} is {key.type}"


def test_every_setting_field_is_read_from_its_key() -> None:
    """Each field declared with a key takes that key's value: every such key set to a value other than
    its default reaches its field through the builders (the builders name no key themselves)."""
    assert setting_keys(settings.NetworkSettings)["console_listener"] == "console.listener"
    config = BrokerConfig({"log.cleaner.threads": "3", "offsets.retention.minutes": "2",
                           "group.consumer.assignors": "org.apache.kafka.coordinator.group.assignor.RangeAssignor",
                           "metadata.max.retention.ms": "1234", "metadata.log.segment.bytes": "4096",
                           "quota.window.num": "4", "max.connections": "9", "num.recovery.threads.per.data.dir": "3",
                           "remote.log.storage.system.enable": "true", "node.id": "7"})
    assert settings.cleaner_settings(config).threads == 3
    groups = settings.group_settings(config)
    assert (groups.offsets_retention_ms, groups.consumer.assignors) == (120_000, ("range",))
    controller = settings.controller_settings(config)
    assert (controller.snapshots.max_retention_ms, controller.log.segment_bytes, controller.node_id) == (1234, 4096, 7)
    assert settings.quota_window(config).num_windows == 4
    assert settings.network_settings(config).max_connections == 9
    assert settings.log_manager_settings(config).recovery_threads_per_data_dir == 3
    remote = settings.remote_log_manager_settings(config)
    assert (remote.system_enable, remote.broker_id) == (True, 7)


def test_dynamic_overrides_go_through_the_same_fields() -> None:
    base = settings.cleaner_settings(BrokerConfig())
    dynamic = {"log.cleaner.threads": "2", "log.cleaner.io.buffer.load.factor": "1", "log.cleaner.enable": "false"}
    changed = with_overrides(base, dynamic.get, keys={"log.cleaner.threads", "log.cleaner.io.buffer.load.factor"})
    assert (changed.threads, changed.io_buffer_load_factor, changed.enable) == (2, 1.0, True)
    assert isinstance(changed.io_buffer_load_factor, float)
    refused: list[str] = []
    kept = with_overrides(base, {"log.cleaner.threads": "many"}.get, on_invalid=lambda e: refused.append(e.key))
    assert (kept, refused) == (base, ["log.cleaner.threads"])
    with pytest.raises(ConfigError, match="log.cleaner.threads"):
        with_overrides(base, {"log.cleaner.threads": "many"}.get)


def test_the_live_metadata_keys_are_the_snapshot_settings() -> None:
    assert set(setting_keys(SnapshotSettings).values()) == LIVE_METADATA_KEYS


def test_a_setting_must_name_a_key_by_its_own_name() -> None:
    with pytest.raises(ValueError, match="use the key's own name"):
        setting("transactions.remove.expired.transaction.cleanup.interval.ms")
    with pytest.raises(ConfigError, match="unknown config key"):
        setting("log.cleaner.threadz")
