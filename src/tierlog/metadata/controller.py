"""The single-node controller: validates commands, appends their records to the metadata log as one
batch, applies them to the image and tells listeners (Kafka's QuorumController, one voter).

Every command runs under one lock: validation reads the current image, and the records it produces
are appended and applied before the next command looks. Records are replayed into a delta before they
are written, so a command that would not apply never reaches the log.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tierlog.clock import SYSTEM_CLOCK, Clock
from tierlog.config.broker_config import BrokerConfig
from tierlog.config.definition import Value
from tierlog.config.settings import setting, with_overrides
from tierlog.errors import KafkaStorageError, TierlogError, UnknownTopicOrPartitionError
from tierlog.ids import METADATA_TOPIC, ONE_UUID, ZERO_UUID, random_uuid
from tierlog.metadata.configs import (
    AlterConfigOp,
    apply_ops,
    canonical_configs,
    check_group_resource,
    check_topic_configs,
    diff_records,
    validate_broker_resource_name,
    validate_group_resource_name,
)
from tierlog.metadata.delta import MetadataDelta
from tierlog.metadata.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    NotControllerError,
    TopicExistsError,
)
from tierlog.metadata.features import (
    LATEST_METADATA_VERSION,
    FeatureUpdate,
    UpgradeType,
    metadata_version_name,
    plan_feature_updates,
)
from tierlog.metadata.image import METADATA_VERSION_FEATURE, MetadataImage, MetadataProvenance, TopicImage
from tierlog.metadata.metadata_log import (
    METADATA_LOG_DIR_NAME,
    LoadResult,
    MetadataLog,
    MetadataLogSettings,
)
from tierlog.metadata.policy import RetentionPlan, SnapshotReason
from tierlog.metadata.records import (
    BrokerEndpoint,
    BrokerFeature,
    ConfigResourceType,
    FeatureLevelRecord,
    MetadataRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from tierlog.metadata.snapshot import SnapshotFile
from tierlog.metadata.snapshot_generator import (
    PendingSnapshot,
    SnapshotGenerator,
    SnapshotMetrics,
    SnapshotSettings,
)
from tierlog.scheduler import Scheduler, TaskHandle

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK_SIZE = 1000
MAX_TOPIC_NAME_LENGTH = 249
#: One command's partitions must fit one metadata batch; this keeps it well inside 8 MiB.
MAX_PARTITIONS_PER_REQUEST = 100_000
_INT64_MAX = 2**63 - 1
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")

Listener = Callable[[MetadataImage, MetadataDelta], None]


@dataclass(frozen=True)
class ControllerSettings:
    node_id: int = 1
    default_num_partitions: int = setting("num.partitions")
    default_replication_factor: int = 1
    snapshots: SnapshotSettings = field(default_factory=SnapshotSettings)
    log: MetadataLogSettings = field(default_factory=MetadataLogSettings)
    bootstrap_metadata_version: int = LATEST_METADATA_VERSION
    #: How often the time trigger is checked even when nothing is committed.
    snapshot_check_interval_ms: int = 1000
    #: How often snapshot retention runs (KafkaMetadataLog's cleaner: every 60 s), besides after each snapshot.
    cleaner_interval_ms: int = 60000
    #: Broker-derived defaults of topic keys, for validating topic configs as a whole.
    topic_defaults: Mapping[str, Value] = field(default_factory=dict)
    #: The broker's bounds of group configs (group.consumer.min.session.timeout.ms ...), which the
    #: controller checks a group's configs against as Kafka's does.
    group_bounds: Mapping[str, int] = field(default_factory=dict)


def metadata_log_dir(config: BrokerConfig) -> Path:
    """Kafka keeps the metadata log in the first log directory unless metadata.log.dir says otherwise."""
    return config.log_dirs[0] / METADATA_LOG_DIR_NAME


@dataclass(frozen=True)
class CreateTopicResult:
    name: str
    topic_id: bytes
    num_partitions: int
    replication_factor: int
    configs: Mapping[str, str]


@dataclass(frozen=True)
class ProducerIdsBlock:
    assigned_broker_id: int
    first_producer_id: int
    size: int

    @property
    def last_producer_id(self) -> int:
        return self.first_producer_id + self.size - 1


class Controller:
    def __init__(self, mlog: MetadataLog, load: LoadResult, settings: ControllerSettings, *,
                 clock: Clock = SYSTEM_CLOCK, scheduler: Scheduler | None = None) -> None:
        self._log = mlog
        self.settings = settings
        self.clock = clock
        self.load_result = load
        self._image = load.image
        self._lock = threading.RLock()
        self._listeners: list[Listener] = []
        self._generator = SnapshotGenerator(mlog, clock, load)
        self._pending: PendingSnapshot | None = None
        #: '.'/'_' spelling of every topic name that has one of them → the name (collision checks).
        self._collision_names = {_unify(n): n for n in load.image.topics_by_name if _has_collision_chars(n)}
        self._failure: BaseException | None = None
        #: Called once (from the committing thread) with why the metadata log failed: the broker
        #: stops on it (the composition root sets it), as Kafka does on a metadata log write error.
        self.on_failure: Callable[[str], None] | None = None
        self._closed = False
        self._tasks: list[TaskHandle] = []
        if scheduler is not None:
            self._tasks.append(scheduler.schedule("metadata-snapshot-check", self._periodic_check,
                                                  settings.snapshot_check_interval_ms,
                                                  settings.snapshot_check_interval_ms))
            self._tasks.append(scheduler.schedule("metadata-log-cleaner", self.clean, settings.cleaner_interval_ms,
                                                  settings.cleaner_interval_ms))

    @classmethod
    def open(cls, directory: Path, settings: ControllerSettings | None = None, *, clock: Clock = SYSTEM_CLOCK,
             scheduler: Scheduler | None = None, bootstrap: bool = True) -> Controller:
        """Load the metadata log in ``directory`` (``<log dir>/__cluster_metadata-0``). With
        ``bootstrap`` a new cluster gets its metadata.version record."""
        settings = settings or ControllerSettings()
        mlog, load = MetadataLog.open(directory, settings.log, clock=clock, scheduler=scheduler)
        for warning in load.warnings:
            log.warning("%s", warning)
        controller = cls(mlog, load, settings, clock=clock, scheduler=scheduler)
        try:
            if bootstrap and controller.image.metadata_version is None:
                with controller._lock:
                    controller._commit([FeatureLevelRecord(METADATA_VERSION_FEATURE,
                                                           settings.bootstrap_metadata_version)])
                controller._after_commit()
            else:
                # A snapshot may be due already (old records in the tail, or a version change no snapshot holds).
                controller.maybe_snapshot()
        except BaseException:
            controller.close()
            raise
        return controller

    # -- state --------------------------------------------------------------------------------------

    @property
    def image(self) -> MetadataImage:
        return self._image

    @property
    def metrics(self) -> SnapshotMetrics:
        return self._generator.metrics

    @property
    def latest_snapshot_age_ms(self) -> int:
        """Milliseconds since the latest snapshot was written; -1 if there is none."""
        return self._generator.metrics.latest_snapshot_age_ms(self.clock.wall_ms())

    @property
    def metadata_log(self) -> MetadataLog:
        return self._log

    @property
    def epoch(self) -> int:
        return self._log.epoch

    def add_listener(self, listener: Listener) -> None:
        """``listener(new_image, delta)`` runs after every commit, in commit order, under the
        controller's lock: it must be quick and must not wait for another thread's command."""
        with self._lock:
            self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.remove(listener)

    def effective_snapshot_settings(self) -> SnapshotSettings:
        """The static settings overridden by dynamic broker configs in the image (per broker, then
        cluster-wide), so an operator can change them without a restart."""
        image, node = self._image, self.settings.node_id
        return with_overrides(self.settings.snapshots, lambda key: image.effective_broker_config(node, key))

    # -- commit -------------------------------------------------------------------------------------

    def _ensure_active(self) -> None:
        if self._closed:
            raise NotControllerError("the controller is closed")
        if self._failure is not None:
            raise NotControllerError(f"the controller stopped after a metadata log failure: {self._failure}")

    def _commit(self, records: Sequence[MetadataRecord]) -> MetadataImage:
        """Append ``records`` as one batch and apply them. Call with the lock held."""
        self._ensure_active()
        if not records:
            return self._image
        delta = MetadataDelta(self._image)
        delta.replay_all(records)
        now_ms = self.clock.wall_ms()
        try:
            result = self._log.append(records, now_ms)
        except (OSError, KafkaStorageError) as e:
            # The batch may be partly on disk: the image can no longer be trusted to match the log.
            # A restart recovers the log and replays it.
            self._failure = e
            log.error("metadata log append failed in %s; the controller stops accepting commands and the broker "
                      "stops (a restart recovers the log up to its last whole batch): %s", self._log.dir, e)
            if self.on_failure is not None:
                self.on_failure(f"metadata log append in {self._log.dir} failed: {e}")
            raise NotControllerError(f"metadata log append failed: {e}") from e
        delta.set_provenance(MetadataProvenance(result.last_offset, result.epoch, now_ms))
        image = delta.apply()
        self._image = image
        for old in delta.deleted_topics.values():
            if self._collision_names.get(_unify(old.name)) == old.name:
                del self._collision_names[_unify(old.name)]
        for name in delta.created_topics:
            if _has_collision_chars(name):
                self._collision_names[_unify(name)] = name
        self._generator.on_commit(result.size_bytes, now_ms, delta.metadata_version_changed)
        for listener in list(self._listeners):
            try:
                listener(image, delta)
            except Exception:
                log.exception("metadata listener %r failed", listener)
        self._capture_if_due(now_ms)
        return image

    def _capture_if_due(self, now_ms: int, reason: SnapshotReason | None = None) -> None:
        if self._pending is not None:
            return
        reason = reason or self._generator.check(now_ms, self.effective_snapshot_settings())
        if reason is not None:
            self._pending = self._generator.capture(self._image, reason)

    def _after_commit(self) -> SnapshotFile | None:
        """Write the snapshot a commit captured, outside the lock: commands go on while it is written."""
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is None:
            return None
        return self._generator.emit(pending, self.effective_snapshot_settings())

    # -- snapshots ----------------------------------------------------------------------------------

    def maybe_snapshot(self) -> SnapshotFile | None:
        """Snapshot if a trigger fires now (the periodic check; also runs after every commit)."""
        with self._lock:
            if self._closed or self._failure is not None:
                return None
            self._capture_if_due(self.clock.wall_ms())
        return self._after_commit()

    def snapshot_now(self) -> SnapshotFile | None:
        """Snapshot the current image whatever the triggers say; None when the latest snapshot already
        holds every record."""
        with self._lock:
            self._ensure_active()
            if not self._generator.has_unsnapshotted_records:
                return None
            self._capture_if_due(self.clock.wall_ms(), SnapshotReason.REQUESTED)
        return self._after_commit()

    def _periodic_check(self) -> None:
        try:
            self.maybe_snapshot()
        except Exception:
            log.exception("periodic metadata snapshot check failed")

    def clean(self) -> RetentionPlan:
        """Snapshot retention now (also runs every ``cleaner_interval_ms`` and after each snapshot)."""
        if self._closed:
            return RetentionPlan((), None)
        return self._generator.clean(self.effective_snapshot_settings())

    # -- topics -------------------------------------------------------------------------------------

    def create_topic(self, name: str, num_partitions: int | None = None, replication_factor: int | None = None,
                     configs: Mapping[str, object] | None = None, *, validate_only: bool = False,
                     topic_id: bytes | None = None) -> CreateTopicResult:
        """``topic_id``: the id to give the topic (a topic restored from its logs keeps the id they
        carry); a new random one by default."""
        with self._lock:
            self._ensure_active()
            image = self._image
            _validate_topic_name(name, image)
            existing = self._collision_names.get(_unify(name)) if _has_collision_chars(name) else None
            if existing is not None:
                # Metric names replace '.' with '_', so two such topics would report as one.
                raise InvalidTopicError(f"Topic '{name}' collides with existing topic: {existing}")
            if num_partitions is None or num_partitions == -1:
                num_partitions = self.settings.default_num_partitions
            if num_partitions <= 0:
                raise InvalidPartitionsError("Number of partitions was set to an invalid non-positive value.")
            if num_partitions > MAX_PARTITIONS_PER_REQUEST:
                raise InvalidPartitionsError(
                    f"Number of partitions {num_partitions} exceeds the limit of {MAX_PARTITIONS_PER_REQUEST} per request."
                )
            rf = self._replication_factor(replication_factor)
            canonical = canonical_configs(ConfigResourceType.TOPIC, configs or {})
            check_topic_configs(canonical, self.settings.topic_defaults)
            if topic_id is None or topic_id in image.topics_by_id or topic_id in (ZERO_UUID, ONE_UUID):
                topic_id = _new_topic_id(image)
            result = CreateTopicResult(name, topic_id, num_partitions, rf, canonical)
            if validate_only:
                return result
            # Kafka's order: the topic, its configs, then its partitions.
            records: list[MetadataRecord] = [TopicRecord(name, topic_id)]
            records += diff_records(ConfigResourceType.TOPIC, name, {}, canonical)
            records += self._partition_records(topic_id, range(num_partitions))
            self._commit(records)
        self._after_commit()
        return result

    def _replication_factor(self, replication_factor: int | None) -> int:
        rf = self.settings.default_replication_factor if replication_factor in (None, -1) else replication_factor
        assert rf is not None
        if rf <= 0:
            raise InvalidReplicationFactorError(
                "Replication factor must be larger than 0, or -1 to use the default value."
            )
        if rf > 1:
            raise InvalidReplicationFactorError(
                f"Unable to replicate the partition {rf} time(s): The target replication factor of {rf} "
                "cannot be reached because only 1 broker(s) are registered."
            )
        return rf

    def _partition_records(self, topic_id: bytes, partition_ids: range) -> list[MetadataRecord]:
        node = (self.settings.node_id,)
        return [PartitionRecord(p, topic_id, node, node, node[0], 0, 0) for p in partition_ids]

    def _topic(self, name: str) -> TopicImage:
        topic = self._image.topics_by_name.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"This server does not host this topic: {name}")
        return topic

    def delete_topic(self, name: str) -> bytes:
        """Delete a topic by name; returns its id."""
        with self._lock:
            self._ensure_active()
            topic = self._topic(name)
            self._commit([RemoveTopicRecord(topic.topic_id)])
        self._after_commit()
        return topic.topic_id

    def delete_topic_by_id(self, topic_id: bytes) -> str:
        with self._lock:
            self._ensure_active()
            topic = self._image.topics_by_id.get(topic_id)
            if topic is None:
                raise UnknownTopicOrPartitionError("This server does not host this topic ID.")
            self._commit([RemoveTopicRecord(topic_id)])
        self._after_commit()
        return topic.name

    def create_partitions(self, name: str, total_count: int, *, validate_only: bool = False) -> int:
        """Grow a topic to ``total_count`` partitions (never shrink); returns the new count."""
        with self._lock:
            self._ensure_active()
            topic = self._topic(name)
            current = topic.num_partitions
            if total_count < current:
                raise InvalidPartitionsError(
                    f"The topic {name} currently has {current} partition(s); {total_count} would not be an increase."
                )
            if total_count == current:
                raise InvalidPartitionsError(f"Topic already has {current} partition(s).")
            if total_count - current > MAX_PARTITIONS_PER_REQUEST:
                raise InvalidPartitionsError(
                    f"Adding {total_count - current} partitions exceeds the limit of {MAX_PARTITIONS_PER_REQUEST} per request."
                )
            if not validate_only:
                self._commit(self._partition_records(topic.topic_id, range(current, total_count)))
        self._after_commit()
        return total_count

    # -- configs ------------------------------------------------------------------------------------

    def _config_resource(self, resource_type: ConfigResourceType, resource_name: str) -> Mapping[str, str]:
        if resource_type == ConfigResourceType.TOPIC:
            self._topic(resource_name)
        elif resource_type == ConfigResourceType.BROKER:
            validate_broker_resource_name(resource_name)
        elif resource_type == ConfigResourceType.GROUP:
            validate_group_resource_name(resource_name)
        else:
            raise InvalidRequestError(f"unsupported config resource type {resource_type}")
        return self._image.configs.get((resource_type, resource_name), {})

    def _alter(self, resource_type: ConfigResourceType, resource_name: str, old: Mapping[str, str],
               new: dict[str, str], validate_only: bool) -> dict[str, str]:
        if resource_type == ConfigResourceType.TOPIC:
            check_topic_configs(new, self.settings.topic_defaults)
        elif resource_type == ConfigResourceType.GROUP:
            check_group_resource(new, self.settings.group_bounds)
        records = diff_records(resource_type, resource_name, old, new)
        if records and not validate_only:
            self._commit(records)
        return new

    def alter_configs(self, resource_type: ConfigResourceType, resource_name: str, configs: Mapping[str, object],
                      *, validate_only: bool = False) -> dict[str, str]:
        """Replace every dynamic config of the resource (the legacy AlterConfigs); returns the new set."""
        with self._lock:
            self._ensure_active()
            old = self._config_resource(resource_type, resource_name)
            new = canonical_configs(resource_type, configs)
            result = self._alter(resource_type, resource_name, old, new, validate_only)
        self._after_commit()
        return result

    def incremental_alter_configs(self, resource_type: ConfigResourceType, resource_name: str,
                                  ops: Sequence[AlterConfigOp], *, validate_only: bool = False) -> dict[str, str]:
        """SET / DELETE / APPEND / SUBTRACT individual keys; returns the new set."""
        with self._lock:
            self._ensure_active()
            old = self._config_resource(resource_type, resource_name)
            new = apply_ops(resource_type, old, ops)
            result = self._alter(resource_type, resource_name, old, new, validate_only)
        self._after_commit()
        return result

    # -- producer ids, features, brokers -----------------------------------------------------------

    def allocate_producer_ids(self, broker_id: int | None = None, broker_epoch: int = -1, *,
                              at_least: int = 0) -> ProducerIdsBlock:
        """The next block of 1000 producer ids, starting at ``at_least`` or later. The block is in the
        log before it is returned, so no id is handed out twice, across restarts too. ``at_least``
        covers ids the partitions' producer states still hold when a damaged metadata log lost the
        allocation that handed them out."""
        broker_id = self.settings.node_id if broker_id is None else broker_id
        with self._lock:
            self._ensure_active()
            first = self._image.producer_ids.next_producer_id
            if at_least > first:
                log.warning("producer ids up to %d are in use in the logs but the metadata allocates from %d (a lost "
                            "allocation); allocating from %d", at_least - 1, first, at_least)
                first = at_least
            if first > _INT64_MAX - PRODUCER_ID_BLOCK_SIZE:
                raise TierlogError("Exhausted all producerIds as the next block's end producerId would exceed the int64 range")
            self._commit([ProducerIdsRecord(broker_id, broker_epoch, first + PRODUCER_ID_BLOCK_SIZE)])
        self._after_commit()
        return ProducerIdsBlock(broker_id, first, PRODUCER_ID_BLOCK_SIZE)

    def commit_records(self, records: Sequence[MetadataRecord]) -> MetadataImage:
        """Commit records planned by a caller as one batch (SCRAM credentials: the server's security
        code decides them, the log only stores them); the image after."""
        with self._lock:
            self._ensure_active()
            image = self._commit(records) if records else self._image
        self._after_commit()
        return image

    def update_features(self, updates: Sequence[FeatureUpdate], *, validate_only: bool = False) -> None:
        """UpdateFeatures: every update is applied, in one batch, or none (InvalidUpdateVersionError
        names the first one refused). A metadata.version change triggers a snapshot (seed 000)."""
        with self._lock:
            self._ensure_active()
            image = self._image
            records = plan_feature_updates(image.features, updates, self.settings.node_id)
            if validate_only or not records:
                return
            for r in records:
                old = image.features.get(r.name, 0)
                if r.name == METADATA_VERSION_FEATURE and old != r.feature_level:
                    log.info("%s metadata.version from %s to %s", "upgrading" if r.feature_level > old else "downgrading",
                             metadata_version_name(old), metadata_version_name(r.feature_level))
            self._commit(records)
        self._after_commit()

    def set_metadata_version(self, level: int, *, allow_unsafe_downgrade: bool = False,
                             validate_only: bool = False) -> None:
        """One metadata.version update: an upgrade, or a safe downgrade (unsafe with
        ``allow_unsafe_downgrade``), under the rules of :meth:`update_features`."""
        current = self._image.metadata_version or 0
        kind = (UpgradeType.UPGRADE if level >= current else
                UpgradeType.UNSAFE_DOWNGRADE if allow_unsafe_downgrade else UpgradeType.SAFE_DOWNGRADE)
        self.update_features([FeatureUpdate(METADATA_VERSION_FEATURE, level, kind)], validate_only=validate_only)

    def register_broker(self, broker_id: int, incarnation_id: bytes, endpoints: Sequence[BrokerEndpoint] = (),
                        rack: str | None = None, features: Sequence[BrokerFeature] = ()) -> int:
        """Record a broker's (re)registration; returns its broker epoch (the registration's offset, as in Kafka)."""
        with self._lock:
            self._ensure_active()
            broker_epoch = self._log.log_end_offset
            self._commit([RegisterBrokerRecord(broker_id, incarnation_id, broker_epoch, tuple(endpoints),
                                               tuple(features), rack, fenced=False)])
        self._after_commit()
        return broker_epoch

    # -- lifecycle ----------------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for task in self._tasks:
                task.cancel()
        with self._generator.write_lock:
            self._log.close()


def legal_topic_name(name: str) -> bool:
    """Whether Kafka's Topic.validate accepts the name."""
    return bool(name) and name not in (".", "..") and len(name) <= MAX_TOPIC_NAME_LENGTH \
        and _LEGAL_TOPIC.match(name) is not None


def _validate_topic_name(name: str, image: MetadataImage) -> None:
    """Kafka's Topic.validate, plus the metadata topic and existing names."""
    if not name:
        raise InvalidTopicError("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError('Topic name cannot be "." or ".."')
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, topic name: {name}"
        )
    if not _LEGAL_TOPIC.match(name):
        raise InvalidTopicError(
            f'Topic name "{name}" is illegal, it contains a character other than ASCII alphanumerics, \'.\', \'_\' and \'-\''
        )
    if name == METADATA_TOPIC:
        raise InvalidRequestError(f"Creation of internal topic {METADATA_TOPIC} is prohibited.")
    if name in image.topics_by_name:
        raise TopicExistsError(f"Topic '{name}' already exists.")


def _has_collision_chars(name: str) -> bool:
    return "." in name or "_" in name


def _unify(name: str) -> str:
    return name.replace(".", "_")


def _new_topic_id(image: MetadataImage) -> bytes:
    while True:
        topic_id = random_uuid()
        if topic_id not in image.topics_by_id:
            return topic_id
