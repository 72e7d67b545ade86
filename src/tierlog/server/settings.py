"""Every typed setting the broker's parts take, built from the broker config here and nowhere else
(part of the composition root). The parts below (storage, metadata, the remote tier, the group
coordinator) receive these dataclasses, never a BrokerConfig to read keys from by string.

Each settings dataclass names its keys once, on its fields (``tierlog.config.settings.setting``);
:func:`build_settings` reads them. What is left here is what no single key gives: the node id (from
``node.id`` or the older ``broker.id``), nested settings, the topic defaults and the plugin's
properties."""

from __future__ import annotations

from dataclasses import dataclass

from tierlog.config.broker_config import BrokerConfig
from tierlog.config.group_keys import GROUP_BOUND_BROKER_KEYS
from tierlog.config.settings import RemoteLogManagerSettings, RemoteStorageSettings, build_settings, setting
from tierlog.metadata.controller import ControllerSettings
from tierlog.metadata.metadata_log import MetadataLogSettings
from tierlog.metadata.snapshot_generator import SnapshotSettings
from tierlog.server.context import RequestSettings
from tierlog.server.groups.consumer_group import ConsumerGroupSettings
from tierlog.server.groups.coordinator import GroupSettings
from tierlog.server.quotas import QuotaWindow
from tierlog.server.txn.coordinator import TxnSettings
from tierlog.storage.cleaner.manager import CleanerSettings
from tierlog.storage.log_manager import LogManagerSettings


def log_manager_settings(config: BrokerConfig) -> LogManagerSettings:
    return build_settings(LogManagerSettings, config, node_id=config.node_id)


def controller_settings(config: BrokerConfig) -> ControllerSettings:
    return build_settings(ControllerSettings, config, node_id=config.node_id,
                          snapshots=build_settings(SnapshotSettings, config),
                          log=build_settings(MetadataLogSettings, config), topic_defaults=config.topic_defaults(),
                          group_bounds={key: config.get_int(key) for key in GROUP_BOUND_BROKER_KEYS})


def group_settings(config: BrokerConfig) -> GroupSettings:
    return build_settings(GroupSettings, config, consumer=build_settings(ConsumerGroupSettings, config))


def txn_settings(config: BrokerConfig) -> TxnSettings:
    return build_settings(TxnSettings, config)


def cleaner_settings(config: BrokerConfig) -> CleanerSettings:
    return build_settings(CleanerSettings, config)


def request_settings(config: BrokerConfig) -> RequestSettings:
    # Neither key is dynamic: read once at startup, not on every request.
    return build_settings(RequestSettings, config)


def quota_window(config: BrokerConfig) -> QuotaWindow:
    """The sample windows client quotas' rates are measured over."""
    return build_settings(QuotaWindow, config)


def remote_log_manager_settings(config: BrokerConfig) -> RemoteLogManagerSettings:
    return build_settings(RemoteLogManagerSettings, config, broker_id=config.node_id)


def remote_storage_settings(config: BrokerConfig) -> RemoteStorageSettings:
    return RemoteStorageSettings(config.get_str("remote.log.storage.manager.class.name"), config.plugin_props,
                                 config.get_str("remote.log.storage.manager.impl.prefix"), config.node_id,
                                 config.log_dirs[0])


@dataclass(frozen=True)
class NetworkSettings:
    """The broker's listeners, request limits and connection limits."""

    listeners: tuple[str, ...] = setting("listeners")
    advertised_listeners: tuple[str, ...] = setting("advertised.listeners")
    socket_request_max_bytes: int = setting("socket.request.max.bytes")
    socket_request_receive_timeout_ms: int = setting("socket.request.receive.timeout.ms")
    connections_max_idle_ms: int = setting("connections.max.idle.ms")
    #: <= 0: no limit on the bytes of requests queued.
    queued_max_request_bytes: int = setting("queued.max.request.bytes")
    queued_max_requests: int = setting("queued.max.requests")
    max_connections: int = setting("max.connections")
    max_connections_per_ip: int = setting("max.connections.per.ip")
    #: The raw ``max.connections.per.ip.overrides`` (``host:count,...``), parsed where it is used.
    max_connections_per_ip_overrides: str = setting("max.connections.per.ip.overrides")
    #: Also dynamic (per broker or cluster-wide): the broker reads the current value per connection.
    max_connection_creation_rate: int = setting("max.connection.creation.rate")
    metrics_listener: str | None = setting("metrics.listener")
    console_listener: str | None = setting("console.listener")


def network_settings(config: BrokerConfig) -> NetworkSettings:
    return build_settings(NetworkSettings, config)
