"""Every typed setting the broker's parts take, built from the broker config here and nowhere else
(part of the composition root). The parts below (storage, metadata, the remote tier, the group
coordinator) receive these dataclasses, never a BrokerConfig to read keys from by string; the keys
and their defaults are defined once in ``tierlog.config.keys``."""

from __future__ import annotations

from dataclasses import dataclass

from tierlog.config.broker_config import BrokerConfig
from tierlog.config.settings import RemoteLogManagerSettings, RemoteStorageSettings
from tierlog.metadata.controller import ControllerSettings
from tierlog.metadata.metadata_log import MetadataLogSettings
from tierlog.metadata.snapshot_generator import SnapshotSettings
from tierlog.server.context import RequestSettings
from tierlog.server.groups.assignors import assignor_name
from tierlog.server.groups.consumer_group import ConsumerGroupSettings
from tierlog.server.groups.coordinator import GroupSettings
from tierlog.server.quotas import QuotaWindow
from tierlog.server.txn.coordinator import TxnSettings
from tierlog.storage.cleaner.manager import CleanerSettings
from tierlog.storage.log_manager import LogManagerSettings


def log_manager_settings(config: BrokerConfig) -> LogManagerSettings:
    return LogManagerSettings(
        sanity_check_all_logs=config.get_bool("sanity.check.all.logs.enabled"),
        flush_check_interval_ms=config.get_int("log.flush.scheduler.interval.ms"),
        recovery_point_checkpoint_interval_ms=config.get_int("log.flush.offset.checkpoint.interval.ms"),
        log_start_offset_checkpoint_interval_ms=config.get_int("log.flush.start.offset.checkpoint.interval.ms"),
        lazy_check_interval_ms=config.get_int("log.lazy.check.interval.ms"),
        retention_check_interval_ms=config.get_int("log.retention.check.interval.ms"),
        producer_id_expiration_ms=config.get_int("producer.id.expiration.ms"),
        producer_id_expiration_check_interval_ms=config.get_int("producer.id.expiration.check.interval.ms"),
        recovery_threads_per_data_dir=config.get_int("num.recovery.threads.per.data.dir"),
        unflushed_max_bytes=config.get_int("log.dir.unflushed.max.bytes"),
        node_id=config.node_id,
    )


def controller_settings(config: BrokerConfig) -> ControllerSettings:
    return ControllerSettings(
        node_id=config.node_id,
        default_num_partitions=config.get_int("num.partitions"),
        snapshots=SnapshotSettings(
            max_record_bytes_between_snapshots=config.get_int("metadata.log.max.record.bytes.between.snapshots"),
            max_snapshot_interval_ms=config.get_int("metadata.log.max.snapshot.interval.ms"),
            max_retention_bytes=config.get_int("metadata.max.retention.bytes"),
            max_retention_ms=config.get_int("metadata.max.retention.ms"),
        ),
        log=MetadataLogSettings(segment_bytes=config.get_int("metadata.log.segment.bytes"),
                                segment_ms=config.get_int("metadata.log.segment.ms")),
        topic_defaults=config.topic_defaults(),
    )


def group_settings(config: BrokerConfig) -> GroupSettings:
    return GroupSettings(
        num_partitions=config.get_int("offsets.topic.num.partitions"),
        initial_rebalance_delay_ms=config.get_int("group.initial.rebalance.delay.ms"),
        min_session_timeout_ms=config.get_int("group.min.session.timeout.ms"),
        max_session_timeout_ms=config.get_int("group.max.session.timeout.ms"),
        retention_check_interval_ms=config.get_int("offsets.retention.check.interval.ms"),
        offsets_retention_ms=config.get_int("offsets.retention.minutes") * 60_000,
        segment_bytes=config.get_int("offsets.topic.segment.bytes"),
        consumer=ConsumerGroupSettings(
            session_timeout_ms=config.get_int("group.consumer.session.timeout.ms"),
            heartbeat_interval_ms=config.get_int("group.consumer.heartbeat.interval.ms"),
            assignors=tuple(dict.fromkeys(assignor_name(a) or a for a in config.get_list("group.consumer.assignors"))),
        ),
    )


def txn_settings(config: BrokerConfig) -> TxnSettings:
    return TxnSettings(
        num_partitions=config.get_int("transaction.state.log.num.partitions"),
        segment_bytes=config.get_int("transaction.state.log.segment.bytes"),
        max_timeout_ms=config.get_int("transaction.max.timeout.ms"),
        abort_timed_out_interval_ms=config.get_int("transaction.abort.timed.out.transaction.cleanup.interval.ms"),
        id_expiration_ms=config.get_int("transactional.id.expiration.ms"),
        remove_expired_interval_ms=config.get_int("transactions.remove.expired.transaction.cleanup.interval.ms"),
    )


def cleaner_settings(config: BrokerConfig) -> CleanerSettings:
    return CleanerSettings(
        enable=config.get_bool("log.cleaner.enable"),
        threads=config.get_int("log.cleaner.threads"),
        backoff_ms=config.get_int("log.cleaner.backoff.ms"),
        io_max_bytes_per_second=config.get_float("log.cleaner.io.max.bytes.per.second"),
        io_buffer_size=config.get_int("log.cleaner.io.buffer.size"),
        dedupe_buffer_size=config.get_int("log.cleaner.dedupe.buffer.size"),
        io_buffer_load_factor=config.get_float("log.cleaner.io.buffer.load.factor"),
    )


def request_settings(config: BrokerConfig) -> RequestSettings:
    # Neither key is dynamic: read once at startup, not on every request.
    return RequestSettings(
        auto_create_topics_enable=config.get_bool("auto.create.topics.enable"),
        durable_acks=config.get_str("log.durable.acks"),
    )


def quota_window(config: BrokerConfig) -> QuotaWindow:
    """The sample windows client quotas' rates are measured over."""
    return QuotaWindow(config.get_int("quota.window.num"), config.get_int("quota.window.size.seconds"))


def remote_log_manager_settings(config: BrokerConfig) -> RemoteLogManagerSettings:
    return RemoteLogManagerSettings(
        system_enable=config.get_bool("remote.log.storage.system.enable"),
        task_interval_ms=config.get_int("remote.log.manager.task.interval.ms"),
        custom_metadata_max_bytes=config.get_int("remote.log.metadata.custom.metadata.max.bytes"),
        index_cache_bytes=config.get_int("remote.log.index.file.cache.total.size.bytes"),
        producer_id_expiration_ms=config.get_int("producer.id.expiration.ms"),
        broker_id=config.node_id,
        delete_retry_max_attempts=config.get_int("remote.log.manager.delete.retry.max.attempts"),
        delete_retry_backoff_max_ms=config.get_int("remote.log.manager.delete.retry.backoff.max.ms"),
        compaction_enable=config.get_bool("log.cleaner.enable"),
        compaction_map_bytes=config.get_int("log.cleaner.dedupe.buffer.size"),
        compaction_io_buffer_bytes=config.get_int("log.cleaner.io.buffer.size"),
    )


def remote_storage_settings(config: BrokerConfig) -> RemoteStorageSettings:
    return RemoteStorageSettings(config.get_str("remote.log.storage.manager.class.name"), config.plugin_props,
                                 config.get_str("remote.log.storage.manager.impl.prefix"), config.node_id,
                                 config.log_dirs[0])


@dataclass(frozen=True)
class NetworkSettings:
    """The broker's listeners, request limits and connection limits."""

    listeners: tuple[str, ...]
    advertised_listeners: tuple[str, ...]
    socket_request_max_bytes: int
    socket_request_receive_timeout_ms: int
    connections_max_idle_ms: int
    #: <= 0: no limit on the bytes of requests queued.
    queued_max_request_bytes: int
    queued_max_requests: int
    max_connections: int
    max_connections_per_ip: int
    #: The raw ``max.connections.per.ip.overrides`` (``host:count,...``), parsed where it is used.
    max_connections_per_ip_overrides: str
    metrics_listener: str | None
    console_listener: str | None = None


def network_settings(config: BrokerConfig) -> NetworkSettings:
    return NetworkSettings(
        listeners=config.get_list("listeners"),
        advertised_listeners=config.get_list("advertised.listeners"),
        socket_request_max_bytes=config.get_int("socket.request.max.bytes"),
        socket_request_receive_timeout_ms=config.get_int("socket.request.receive.timeout.ms"),
        connections_max_idle_ms=config.get_int("connections.max.idle.ms"),
        queued_max_request_bytes=config.get_int("queued.max.request.bytes"),
        queued_max_requests=config.get_int("queued.max.requests"),
        max_connections=config.get_int("max.connections"),
        max_connections_per_ip=config.get_int("max.connections.per.ip"),
        max_connections_per_ip_overrides=config.get_str("max.connections.per.ip.overrides"),
        metrics_listener=config.get_optional_str("metrics.listener"),
        console_listener=config.get_optional_str("console.listener"),
    )
