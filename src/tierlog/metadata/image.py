"""The metadata image: an immutable view of all cluster state at one offset of the metadata log.

Every map is read-only (``MappingProxyType``); a :class:`~tierlog.metadata.delta.MetadataDelta`
builds the next image by copying only what changed, so holding an old image is safe from any thread
and costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple, TypeVar

from tierlog.ids import uuid_to_base64
from tierlog.metadata.records import (
    AccessControlEntryRecord,
    BrokerEndpoint,
    BrokerFeature,
    ClientQuotaRecord,
    ConfigRecord,
    ConfigResourceType,
    FeatureLevelRecord,
    MetadataRecord,
    PartitionRecord,
    ProducerIdsRecord,
    QuotaEntityPart,
    RegisterBrokerRecord,
    TopicRecord,
    UserScramCredentialRecord,
    encode_partition_record,
    encode_record,
)

METADATA_VERSION_FEATURE = "metadata.version"

class PartitionImage(NamedTuple):
    """One partition's state. A NamedTuple rather than a frozen dataclass: an image holds one per
    partition, and building hundreds of thousands of them is on the snapshot load path."""

    partition_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: int = 0

    @classmethod
    def from_record(cls, r: PartitionRecord) -> PartitionImage:
        # _make skips the generated __new__ (and its defaults handling): this runs once per partition.
        return cls._make((r.partition_id, r.replicas, r.isr, r.leader, r.leader_epoch, r.partition_epoch,
                          r.removing_replicas, r.adding_replicas, r.leader_recovery_state))

    def to_record(self, topic_id: bytes) -> PartitionRecord:
        return PartitionRecord(self.partition_id, topic_id, self.replicas, self.isr, self.leader,
                               self.leader_epoch, self.partition_epoch, self.removing_replicas,
                               self.adding_replicas, self.leader_recovery_state)


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: bytes
    partitions: Mapping[int, PartitionImage]

    @property
    def num_partitions(self) -> int:
        return len(self.partitions)

    @property
    def topic_id_string(self) -> str:
        return uuid_to_base64(self.topic_id)


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    incarnation_id: bytes
    broker_epoch: int
    endpoints: tuple[BrokerEndpoint, ...]
    features: tuple[BrokerFeature, ...]
    rack: str | None
    fenced: bool

    @classmethod
    def from_record(cls, r: RegisterBrokerRecord) -> BrokerRegistration:
        return cls(r.broker_id, r.incarnation_id, r.broker_epoch, r.endpoints, r.features, r.rack, r.fenced)

    def to_record(self) -> RegisterBrokerRecord:
        return RegisterBrokerRecord(self.broker_id, self.incarnation_id, self.broker_epoch, self.endpoints,
                                    self.features, self.rack, self.fenced)


@dataclass(frozen=True, slots=True)
class ProducerIdsImage:
    """The producer-id block state: ``next_producer_id`` is the first id never handed out."""

    next_producer_id: int = 0
    last_broker_id: int = -1
    last_broker_epoch: int = -1

    @property
    def is_empty(self) -> bool:
        return self == ProducerIdsImage()


@dataclass(frozen=True, slots=True)
class MetadataProvenance:
    """Where in the metadata log an image stands."""

    #: The highest offset the image contains; -1 for the empty image.
    last_offset: int = -1
    #: The leader epoch of the batch holding ``last_offset``; -1 for the empty image.
    last_epoch: int = -1
    #: The append time of that batch (a snapshot's LastContainedLogTimestamp); -1 if unknown.
    last_append_time_ms: int = -1

    @property
    def end_offset(self) -> int:
        """The snapshot id offset: exclusive, the next offset the log will assign."""
        return self.last_offset + 1


ConfigKey = tuple[ConfigResourceType, str]
#: A client quota entity as ((entity type, name or None for the default), ...), sorted by type: one
#: key per entity however a request ordered its parts (Kafka's ClientQuotaEntity is a map).
QuotaEntity = tuple[tuple[str, str | None], ...]


def quota_entity(parts: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    return tuple(sorted(parts, key=lambda p: p[0]))


@dataclass(frozen=True)
class MetadataImage:
    provenance: MetadataProvenance = MetadataProvenance()
    features: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=lambda: MappingProxyType({}))
    topics_by_id: Mapping[bytes, TopicImage] = field(default_factory=lambda: MappingProxyType({}))
    topics_by_name: Mapping[str, TopicImage] = field(default_factory=lambda: MappingProxyType({}))
    #: Dynamic configs by (resource type, resource name); a broker resource name is a broker id, or
    #: "" for the cluster-wide default. Only non-empty maps are kept.
    configs: Mapping[ConfigKey, Mapping[str, str]] = field(default_factory=lambda: MappingProxyType({}))
    producer_ids: ProducerIdsImage = ProducerIdsImage()
    #: SCRAM credentials by (user name, mechanism id).
    scram_credentials: Mapping[tuple[str, int], UserScramCredentialRecord] = field(
        default_factory=lambda: MappingProxyType({}))
    #: ACLs by their id (AccessControlEntryRecord.id). The same mapping object is kept while no ACL
    #: changes, so the broker re-indexes its authorizer only when they do.
    acls: Mapping[bytes, AccessControlEntryRecord] = field(default_factory=lambda: MappingProxyType({}))
    #: Client quotas (Kafka's ClientQuotaRecord): entity → quota key → value. Only non-empty maps.
    client_quotas: Mapping[QuotaEntity, Mapping[str, float]] = field(
        default_factory=lambda: MappingProxyType({}))
    #: The metadata log offset of the last batch that set a feature level: ApiVersions'
    #: FinalizedFeaturesEpoch, as Kafka's controller reports it (FeaturesPublisher). An image loaded
    #: from a snapshot has the snapshot's last offset, as in Kafka; -1 when no feature is set. Not
    #: part of equality: it says how the image was reached, and a snapshot plus its tail is the same
    #: image as the whole log replayed.
    features_epoch: int = field(default=-1, compare=False)

    @property
    def metadata_version(self) -> int | None:
        return self.features.get(METADATA_VERSION_FEATURE)

    @property
    def is_empty(self) -> bool:
        return (not self.features and not self.brokers and not self.topics_by_id and not self.configs
                and self.producer_ids.is_empty and not self.acls and not self.client_quotas)

    @property
    def num_partitions(self) -> int:
        return sum(len(t.partitions) for t in self.topics_by_id.values())

    def topic(self, name: str) -> TopicImage | None:
        return self.topics_by_name.get(name)

    def topic_configs(self, name: str) -> Mapping[str, str]:
        return self.configs.get((ConfigResourceType.TOPIC, name), MappingProxyType({}))

    def group_configs(self, name: str) -> Mapping[str, str]:
        """Configs set on group ``name`` (the GROUP config resource), whether or not the group exists."""
        return self.configs.get((ConfigResourceType.GROUP, name), MappingProxyType({}))

    def broker_configs(self, name: str) -> Mapping[str, str]:
        """Dynamic configs of broker ``name`` (a broker id as a string, or "" for the cluster default)."""
        return self.configs.get((ConfigResourceType.BROKER, name), MappingProxyType({}))

    def effective_broker_config(self, node_id: int, key: str) -> str | None:
        """Kafka's precedence for dynamic broker configs: per-broker over the cluster-wide default."""
        value = self.broker_configs(str(node_id)).get(key)
        if value is None:
            value = self.broker_configs("").get(key)
        return value


EMPTY_IMAGE = MetadataImage()


T = TypeVar("T")


def _image_items(image: MetadataImage, partition: Callable[[bytes, PartitionImage], T],
                 other: Callable[[MetadataRecord], T]) -> Iterator[T]:
    mv = image.features.get(METADATA_VERSION_FEATURE)
    if mv is not None:
        yield other(FeatureLevelRecord(METADATA_VERSION_FEATURE, mv))
    for name in sorted(image.features):
        if name != METADATA_VERSION_FEATURE:
            yield other(FeatureLevelRecord(name, image.features[name]))
    for broker_id in sorted(image.brokers):
        yield other(image.brokers[broker_id].to_record())
    if not image.producer_ids.is_empty:
        pids = image.producer_ids
        yield other(ProducerIdsRecord(pids.last_broker_id, pids.last_broker_epoch, pids.next_producer_id))
    for key in sorted(image.scram_credentials):
        yield other(image.scram_credentials[key])
    for acl_id in sorted(image.acls):
        yield other(image.acls[acl_id])
    for entity in sorted(image.client_quotas, key=repr):
        parts = tuple(QuotaEntityPart(t, n) for t, n in entity)
        for quota_key, value in sorted(image.client_quotas[entity].items()):
            yield other(ClientQuotaRecord(parts, quota_key, value))
    for resource in sorted(k for k in image.configs if k[0] != ConfigResourceType.TOPIC):
        for rec in _config_records(resource, image.configs[resource]):
            yield other(rec)
    topic_type = ConfigResourceType.TOPIC
    for topic in image.topics_by_id.values():
        topic_id = topic.topic_id
        yield other(TopicRecord(topic.name, topic_id))
        configs = image.configs.get((topic_type, topic.name))
        if configs:
            for rec in _config_records((topic_type, topic.name), configs):
                yield other(rec)
        for p in topic.partitions.values():
            yield partition(topic_id, p)
    # Configs of topics that do not exist (kept, as Kafka keeps them, until the name is reused or
    # the configs are deleted).
    for resource in image.configs:
        if resource[0] == topic_type and resource[1] not in image.topics_by_name:
            for rec in _config_records(resource, image.configs[resource]):
                yield other(rec)


def image_records(image: MetadataImage) -> Iterator[MetadataRecord]:
    """The records that rebuild ``image`` from the empty image: the body of a snapshot.

    metadata.version comes first because it decides how every later record is read; then brokers,
    producer ids and broker configs; then each topic in Kafka's order (topic, configs, partitions).
    """
    return _image_items(image, lambda topic_id, p: p.to_record(topic_id), _identity)


def image_record_values(image: MetadataImage) -> Iterator[bytes]:
    """``image_records`` already encoded; partitions are encoded straight from the image, since
    building a record object for each of them would double the cost of writing a large snapshot."""
    return _image_items(image, _encode_partition, encode_record)


def _encode_partition(topic_id: bytes, p: PartitionImage) -> bytes:
    return encode_partition_record(p.partition_id, topic_id, p.replicas, p.isr, p.removing_replicas,
                                   p.adding_replicas, p.leader, p.leader_epoch, p.partition_epoch,
                                   p.leader_recovery_state)


def _identity(record: MetadataRecord) -> MetadataRecord:
    return record


def _config_records(resource: ConfigKey, configs: Mapping[str, str]) -> Iterator[ConfigRecord]:
    rtype, rname = resource
    for name, value in configs.items():
        yield ConfigRecord(int(rtype), rname, name, value)
