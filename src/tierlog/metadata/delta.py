"""MetadataDelta: replays metadata records on top of an image and produces the next image.

Copy-on-write at the granularity a change touches: a ConfigRecord copies one resource's map, a
PartitionRecord copies one topic's partition map, and the top-level maps are copied once per delta.
The delta also says what changed, which is what listeners (the broker, the log manager, the remote log
manager) react to.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from tierlog.ids import uuid_to_base64
from tierlog.metadata.errors import MetadataReplayError
from tierlog.metadata.image import (
    METADATA_VERSION_FEATURE,
    BrokerRegistration,
    ConfigKey,
    MetadataImage,
    MetadataProvenance,
    PartitionImage,
    ProducerIdsImage,
    QuotaEntity,
    TopicImage,
    quota_entity,
)
from tierlog.metadata.records import (
    AccessControlEntryRecord,
    ClientQuotaRecord,
    ConfigRecord,
    ConfigResourceType,
    FeatureLevelRecord,
    MetadataRecord,
    NoOpRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UserScramCredentialRecord,
    decode_partition_value,
    decode_record,
)


class _TopicChange:
    __slots__ = ("created", "name", "partitions", "topic_id")

    def __init__(self, name: str, topic_id: bytes, partitions: dict[int, PartitionImage], created: bool) -> None:
        self.name = name
        self.topic_id = topic_id
        self.partitions = partitions
        self.created = created


class MetadataDelta:
    """Records replayed on top of ``image``; :meth:`apply` returns the resulting image."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self._features: dict[str, int] | None = None
        self._brokers: dict[int, BrokerRegistration] | None = None
        self._topics: dict[bytes, _TopicChange] = {}
        self._deleted_topics: dict[bytes, TopicImage] = {}
        self._configs: dict[ConfigKey, dict[str, str]] = {}
        self._producer_ids: ProducerIdsImage | None = None
        self._scram: dict[tuple[str, int], UserScramCredentialRecord] | None = None
        self._acls: dict[bytes, AccessControlEntryRecord] | None = None
        self._provenance: MetadataProvenance | None = None
        self._quotas: dict[QuotaEntity, dict[str, float]] = {}
        #: True once metadata.version moved from one level to another (not on its first setting).
        self.metadata_version_changed = False
        self.records_replayed = 0
        self.feature_records_replayed = 0
        #: The offset of the last batch that held a FeatureLevelRecord, when the replayer knows it;
        #: otherwise the image's last offset stands for it (see MetadataImage.features_epoch).
        self.features_epoch: int | None = None
        self._replayers: dict[type[MetadataRecord], Callable[[Any], None]] = {
            TopicRecord: self._replay_topic,
            PartitionRecord: self._replay_partition,
            ConfigRecord: self._replay_config,
            RemoveTopicRecord: self._replay_remove_topic,
            FeatureLevelRecord: self._replay_feature_level,
            ProducerIdsRecord: self._replay_producer_ids,
            RegisterBrokerRecord: self._replay_register_broker,
            NoOpRecord: _ignore,
            UserScramCredentialRecord: self._replay_scram,
            RemoveUserScramCredentialRecord: self._replay_remove_scram,
            AccessControlEntryRecord: self._replay_acl,
            RemoveAccessControlEntryRecord: self._replay_remove_acl,
            ClientQuotaRecord: self._replay_client_quota,
        }

    # -- replay -------------------------------------------------------------------------------------

    def replay(self, record: MetadataRecord) -> None:
        handler = self._replayers.get(type(record))
        if handler is None:
            raise MetadataReplayError(f"no replay rule for {type(record).__name__}")
        handler(record)
        self.records_replayed += 1

    def replay_all(self, records: Iterable[MetadataRecord]) -> None:
        for record in records:
            self.replay(record)

    def replay_value(self, value: bytes | None) -> None:
        """Replay an encoded record. PartitionRecords go straight from bytes into the partition map:
        loading a large snapshot is mostly PartitionRecords, and skipping the record object halves
        their cost."""
        if value is not None:
            fields = decode_partition_value(value)
            if fields is not None:
                pid, topic_id, replicas, isr, removing, adding, leader, leader_epoch, partition_epoch = fields
                self._put_partition(topic_id, PartitionImage._make(
                    (pid, replicas, isr, leader, leader_epoch, partition_epoch, removing, adding, 0)))
                self.records_replayed += 1
                return
        self.replay(decode_record(value))

    def set_provenance(self, provenance: MetadataProvenance) -> None:
        """Where the image will stand once the replayed records are applied."""
        self._provenance = provenance

    def _live_topic(self, topic_id: bytes) -> _TopicChange | TopicImage | None:
        change = self._topics.get(topic_id)
        if change is not None:
            return change
        if topic_id in self._deleted_topics:
            return None
        return self.image.topics_by_id.get(topic_id)

    def _replay_topic(self, r: TopicRecord) -> None:
        if self._live_topic(r.topic_id) is not None:
            raise MetadataReplayError(f"TopicRecord for {r.name}: topic id {uuid_to_base64(r.topic_id)} already exists")
        self._topics[r.topic_id] = _TopicChange(r.name, r.topic_id, {}, created=True)

    def _replay_partition(self, r: PartitionRecord) -> None:
        self._put_partition(r.topic_id, PartitionImage.from_record(r))

    def _put_partition(self, topic_id: bytes, partition: PartitionImage) -> None:
        change = self._topics.get(topic_id)
        if change is None:
            base = None if topic_id in self._deleted_topics else self.image.topics_by_id.get(topic_id)
            if base is None:
                raise MetadataReplayError(
                    f"PartitionRecord {partition.partition_id} for unknown topic id {uuid_to_base64(topic_id)}"
                )
            change = self._topics[topic_id] = _TopicChange(base.name, base.topic_id, dict(base.partitions), False)
        change.partitions[partition.partition_id] = partition

    def _replay_remove_topic(self, r: RemoveTopicRecord) -> None:
        change = self._topics.pop(r.topic_id, None)
        base = None if r.topic_id in self._deleted_topics else self.image.topics_by_id.get(r.topic_id)
        if change is None and base is None:
            raise MetadataReplayError(f"RemoveTopicRecord for unknown topic id {uuid_to_base64(r.topic_id)}")
        if base is not None:
            self._deleted_topics[r.topic_id] = base
        name = change.name if change is not None else base.name  # type: ignore[union-attr]
        # Kafka drops a deleted topic's configs while replaying RemoveTopicRecord.
        self._configs[(ConfigResourceType.TOPIC, name)] = {}

    def _replay_config(self, r: ConfigRecord) -> None:
        try:
            rtype = ConfigResourceType(r.resource_type)
        except ValueError:
            raise MetadataReplayError(f"ConfigRecord with unsupported resource type {r.resource_type}") from None
        key = (rtype, r.resource_name)
        current = self._configs.get(key)
        if current is None:
            current = self._configs[key] = dict(self.image.configs.get(key, {}))
        if r.value is None:
            current.pop(r.name, None)
        else:
            current[r.name] = r.value

    def _replay_feature_level(self, r: FeatureLevelRecord) -> None:
        self.feature_records_replayed += 1
        if self._features is None:
            self._features = dict(self.image.features)
        previous = self._features.get(r.name)
        if r.feature_level == 0:
            self._features.pop(r.name, None)
        else:
            self._features[r.name] = r.feature_level
        if r.name == METADATA_VERSION_FEATURE and previous is not None and previous != r.feature_level:
            self.metadata_version_changed = True

    def _replay_scram(self, r: UserScramCredentialRecord) -> None:
        if self._scram is None:
            self._scram = dict(self.image.scram_credentials)
        self._scram[(r.name, r.mechanism)] = r

    def _replay_remove_scram(self, r: RemoveUserScramCredentialRecord) -> None:
        if self._scram is None:
            self._scram = dict(self.image.scram_credentials)
        self._scram.pop((r.name, r.mechanism), None)

    def _replay_acl(self, r: AccessControlEntryRecord) -> None:
        if self._acls is None:
            self._acls = dict(self.image.acls)
        if r.id in self._acls:
            raise MetadataReplayError(f"AccessControlEntryRecord: ACL id {uuid_to_base64(r.id)} already exists")
        self._acls[r.id] = r

    def _replay_remove_acl(self, r: RemoveAccessControlEntryRecord) -> None:
        if self._acls is None:
            self._acls = dict(self.image.acls)
        if self._acls.pop(r.id, None) is None:
            raise MetadataReplayError(f"RemoveAccessControlEntryRecord for unknown ACL id {uuid_to_base64(r.id)}")

    def _replay_client_quota(self, r: ClientQuotaRecord) -> None:
        entity = quota_entity((p.entity_type, p.entity_name) for p in r.entity)
        current = self._quotas.get(entity)
        if current is None:
            current = self._quotas[entity] = dict(self.image.client_quotas.get(entity, {}))
        if r.remove:
            current.pop(r.key, None)
        else:
            current[r.key] = r.value

    def _replay_producer_ids(self, r: ProducerIdsRecord) -> None:
        current = self._producer_ids or self.image.producer_ids
        if r.next_producer_id < current.next_producer_id:
            raise MetadataReplayError(
                f"ProducerIdsRecord moves the next producer id back from {current.next_producer_id} "
                f"to {r.next_producer_id}"
            )
        self._producer_ids = ProducerIdsImage(r.next_producer_id, r.broker_id, r.broker_epoch)

    def _replay_register_broker(self, r: RegisterBrokerRecord) -> None:
        if self._brokers is None:
            self._brokers = dict(self.image.brokers)
        self._brokers[r.broker_id] = BrokerRegistration.from_record(r)

    # -- what changed ----------------------------------------------------------------------------------

    @property
    def created_topics(self) -> dict[str, bytes]:
        """Name → topic id of topics created by this delta."""
        return {c.name: tid for tid, c in self._topics.items() if c.created}

    @property
    def deleted_topics(self) -> Mapping[bytes, TopicImage]:
        """Topic id → the image of each topic of the base image this delta deletes."""
        return MappingProxyType(self._deleted_topics)

    @property
    def changed_topic_ids(self) -> frozenset[bytes]:
        """Topics created or given new/changed partitions (deleted ones excluded)."""
        return frozenset(self._topics)

    @property
    def changed_configs(self) -> frozenset[ConfigKey]:
        return frozenset(self._configs)

    @property
    def client_quotas_changed(self) -> bool:
        return bool(self._quotas)

    @property
    def features_changed(self) -> bool:
        return self._features is not None and self._features != dict(self.image.features)

    @property
    def producer_ids_changed(self) -> bool:
        return self._producer_ids is not None

    @property
    def acls_changed(self) -> bool:
        return self._acls is not None

    @property
    def brokers_changed(self) -> bool:
        return self._brokers is not None

    # -- apply -----------------------------------------------------------------------------------------

    def apply(self) -> MetadataImage:
        image = self.image
        topics_by_id = image.topics_by_id
        topics_by_name = image.topics_by_name
        if self._topics or self._deleted_topics:
            by_id = dict(topics_by_id)
            by_name = dict(topics_by_name)
            for tid, old in self._deleted_topics.items():
                del by_id[tid]
                if by_name.get(old.name) is old:
                    del by_name[old.name]
            for tid, change in self._topics.items():
                topic = TopicImage(change.name, tid, MappingProxyType(dict(change.partitions)))
                by_id[tid] = topic
                by_name[change.name] = topic
            topics_by_id = MappingProxyType(by_id)
            topics_by_name = MappingProxyType(by_name)
        configs = image.configs
        if self._configs:
            merged = dict(configs)
            for key, values in self._configs.items():
                if values:
                    merged[key] = MappingProxyType(dict(values))
                else:
                    merged.pop(key, None)
            configs = MappingProxyType(merged)
        client_quotas = image.client_quotas
        if self._quotas:
            merged_quotas = dict(client_quotas)
            for entity, quota_values in self._quotas.items():
                if quota_values:
                    merged_quotas[entity] = MappingProxyType(dict(quota_values))
                else:
                    merged_quotas.pop(entity, None)
            client_quotas = MappingProxyType(merged_quotas)
        provenance = self._provenance or image.provenance
        features_epoch = image.features_epoch
        if self.features_epoch is not None:
            features_epoch = self.features_epoch
        elif self.feature_records_replayed:
            features_epoch = provenance.last_offset
        return MetadataImage(
            provenance=provenance,
            features_epoch=features_epoch,
            features=image.features if self._features is None else MappingProxyType(dict(self._features)),
            brokers=image.brokers if self._brokers is None else MappingProxyType(dict(self._brokers)),
            topics_by_id=topics_by_id,
            topics_by_name=topics_by_name,
            configs=configs,
            producer_ids=self._producer_ids or image.producer_ids,
            scram_credentials=image.scram_credentials if self._scram is None else MappingProxyType(self._scram),
            acls=image.acls if self._acls is None else MappingProxyType(self._acls),
            client_quotas=client_quotas,
        )


def _ignore(_record: MetadataRecord) -> None:
    """NoOpRecord only moves the log forward (Kafka writes them to keep followers' images fresh)."""


def replay_records(image: MetadataImage, records: Iterable[MetadataRecord],
                   provenance: MetadataProvenance | None = None) -> MetadataImage:
    delta = MetadataDelta(image)
    delta.replay_all(records)
    if provenance is not None:
        delta.set_provenance(provenance)
    return delta.apply()
