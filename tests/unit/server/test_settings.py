"""The typed settings are built from the broker config in one place (tierlog.server.settings), and each
settings class's defaults are its keys' defaults (#23): a broker config with nothing set builds
exactly the settings a part gets when it is made without any, and a key that is set reaches its field."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tierlog.config import BrokerConfig
from tierlog.config.settings import RemoteLogManagerSettings
from tierlog.metadata.controller import ControllerSettings
from tierlog.server import settings
from tierlog.server.context import RequestSettings
from tierlog.server.groups.coordinator import GroupSettings
from tierlog.server.groups.group import Group
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
]


@pytest.mark.parametrize(("build", "cls"), BUILT_AND_DEFAULT, ids=lambda x: getattr(x, "__name__", ""))
def test_defaults_are_the_keys_defaults(build: Any, cls: type) -> None:
    assert build(BrokerConfig()) == cls()


def test_controller_defaults_are_the_keys_defaults() -> None:
    built = settings.controller_settings(BrokerConfig())
    # topic_defaults is what the broker adds: the effective defaults of every topic key.
    assert dataclasses.replace(built, topic_defaults={}) == ControllerSettings()
    assert built.topic_defaults["segment.bytes"] == 1073741824


def test_defaults_of_parts_below_follow_the_keys() -> None:
    config = BrokerConfig()
    assert LoadOptions().producer_id_expiration_ms == config.get_int("producer.id.expiration.ms")
    assert LoadOptions().sanity_check_all == config.get_bool("sanity.check.all.logs.enabled")
    assert Group("g").initial_rebalance_delay_ms == config.get_int("group.initial.rebalance.delay.ms")


def test_set_keys_reach_their_fields() -> None:
    config = BrokerConfig({
        "transaction.max.timeout.ms": "1234",
        "transactions.remove.expired.transaction.cleanup.interval.ms": "5678",
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
