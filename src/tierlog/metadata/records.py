"""Metadata records and their versioned binary encoding.

A record value is framed as Kafka frames it (``AbstractApiMessageSerde``, KAFKA-FACTS §5.5/§6.4):
unsigned varint frame version (1), unsigned varint apiKey, unsigned varint record version, then the
record's fields in the flexible encoding. The apiKeys and v0 field layouts are Kafka's, so a record
written here reads as the same record in Kafka's metadata shell.

Adding a record type (the remote-segment metadata records will be the first): subclass
:class:`MetadataRecord` as a frozen dataclass, implement ``write``/``read``, decorate it with
:func:`register`, and teach :class:`~tierlog.metadata.delta.MetadataDelta` and
:func:`~tierlog.metadata.image.image_records` about it. Kafka's own metadata apiKeys stay below 10000;
tierlog's own record types use 10000 and up so they can never collide with one Kafka adds later.

Longer than most modules because it holds every Kafka record type tierlog stores (brokers, topics,
partitions, configs, features, producer ids, SCRAM credentials, ACLs, client quotas), each a small
codec beside its apiKey: one module keeps the apiKey registry and the layouts checked against Kafka's
JSON schemas in one place.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from tierlog.metadata._codec import Reader, Writer, uvarint
from tierlog.metadata.errors import MetadataReplayError, UnsupportedVersionError

FRAME_VERSION = 1
#: The first apiKey tierlog may use for record types of its own.
TIERLOG_API_KEY_BASE = 10000


class ConfigResourceType(enum.IntEnum):
    """Kafka's ``ConfigResource.Type`` ids, as ConfigRecord stores them."""

    TOPIC = 2
    BROKER = 4
    GROUP = 32


class MetadataRecord:
    """Base of every metadata record: an apiKey, the version this code writes, and the codec."""

    __slots__ = ()
    API_KEY: ClassVar[int]
    #: The version written; readers accept every version from 0 up to it.
    VERSION: ClassVar[int] = 0

    def write(self, w: Writer) -> None:
        raise NotImplementedError

    @classmethod
    def read(cls, r: Reader, version: int) -> MetadataRecord:
        raise NotImplementedError


RECORD_TYPES: dict[int, type[MetadataRecord]] = {}
_R = TypeVar("_R", bound=type[MetadataRecord])


def register(cls: _R) -> _R:
    """Make ``cls`` decodable by its apiKey; two types may not share one."""
    existing = RECORD_TYPES.get(cls.API_KEY)
    if existing is not None and existing is not cls:
        raise ValueError(f"apiKey {cls.API_KEY} is already {existing.__name__}")
    RECORD_TYPES[cls.API_KEY] = cls
    return cls


_FRAME_PREFIX: dict[type[MetadataRecord], bytes] = {}


def encode_record(record: MetadataRecord) -> bytes:
    """The record value as it is stored in the metadata log and in snapshots."""
    cls = type(record)
    prefix = _FRAME_PREFIX.get(cls)
    if prefix is None:
        prefix = _FRAME_PREFIX[cls] = uvarint(FRAME_VERSION) + uvarint(cls.API_KEY) + uvarint(cls.VERSION)
    w = Writer()
    w.buf += prefix
    record.write(w)
    return bytes(w.buf)


def decode_record(value: bytes | None) -> MetadataRecord:
    if value is None:
        raise MetadataReplayError("a metadata record has a null value")
    if len(value) >= 3 and value[0] == FRAME_VERSION and value[1] < 0x80 and value[2] < 0x80:
        # Every apiKey and version in use fits one varint byte: skip the general varint reader.
        r = Reader(value, 3)
        api_key = value[1]
        version = value[2]
    else:
        r = Reader(value)
        frame = r.uvarint()
        if frame != FRAME_VERSION:
            raise MetadataReplayError(f"unknown metadata record frame version {frame}")
        api_key = r.uvarint()
        version = r.uvarint()
    cls = RECORD_TYPES.get(api_key)
    if cls is None:
        raise MetadataReplayError(f"unknown metadata record apiKey {api_key}")
    if version > cls.VERSION:
        raise UnsupportedVersionError(
            api_key, version, None,
            message=f"{cls.__name__} version {version} is newer than the highest this broker reads ({cls.VERSION})"
        )
    record = cls.read(r, version)
    r.expect_end(cls.__name__)
    return record


# ------------------------------------------------------------------------------------------ records


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    name: str
    host: str
    port: int
    security_protocol: int = 0  # PLAINTEXT


@dataclass(frozen=True, slots=True)
class BrokerFeature:
    name: str
    min_supported_version: int
    max_supported_version: int


@register
@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord(MetadataRecord):
    broker_id: int
    incarnation_id: bytes
    broker_epoch: int
    endpoints: tuple[BrokerEndpoint, ...] = ()
    features: tuple[BrokerFeature, ...] = ()
    rack: str | None = None
    fenced: bool = False

    API_KEY: ClassVar[int] = 0

    def write(self, w: Writer) -> None:
        w.i32(self.broker_id)
        w.uuid(self.incarnation_id)
        w.i64(self.broker_epoch)
        w.array_length(len(self.endpoints))
        for e in self.endpoints:
            w.string(e.name)
            w.string(e.host)
            w.u16(e.port)
            w.i16(e.security_protocol)
            w.tagged_fields()
        w.array_length(len(self.features))
        for f in self.features:
            w.string(f.name)
            w.i16(f.min_supported_version)
            w.i16(f.max_supported_version)
            w.tagged_fields()
        w.nullable_string(self.rack)
        w.bool(self.fenced)
        w.tagged_fields()

    @classmethod
    def read(cls, r: Reader, version: int) -> RegisterBrokerRecord:
        broker_id = r.i32()
        incarnation_id = r.uuid()
        broker_epoch = r.i64()
        endpoints = []
        for _ in range(r.array_length()):
            endpoint = BrokerEndpoint(r.string(), r.string(), r.u16(), r.i16())
            r.tagged_fields()
            endpoints.append(endpoint)
        features = []
        for _ in range(r.array_length()):
            feature = BrokerFeature(r.string(), r.i16(), r.i16())
            r.tagged_fields()
            features.append(feature)
        rack = r.nullable_string()
        fenced = r.bool()
        r.tagged_fields()
        return cls(broker_id, incarnation_id, broker_epoch, tuple(endpoints), tuple(features), rack, fenced)


@register
@dataclass(frozen=True, slots=True)
class TopicRecord(MetadataRecord):
    name: str
    topic_id: bytes

    API_KEY: ClassVar[int] = 2

    def write(self, w: Writer) -> None:
        w.string(self.name)
        w.uuid(self.topic_id)
        w.tagged_fields()

    @classmethod
    def read(cls, r: Reader, version: int) -> TopicRecord:
        rec = cls(r.string(), r.uuid())
        r.tagged_fields()
        return rec


@register
@dataclass(frozen=True, slots=True)
class PartitionRecord(MetadataRecord):
    partition_id: int
    topic_id: bytes
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    #: Tagged field 0 (default 0 = RECOVERED, omitted when default).
    leader_recovery_state: int = 0

    API_KEY: ClassVar[int] = 3

    def write(self, w: Writer) -> None:
        w.buf += partition_record_body(self.partition_id, self.topic_id, self.replicas, self.isr,
                                       self.removing_replicas, self.adding_replicas, self.leader,
                                       self.leader_epoch, self.partition_epoch, self.leader_recovery_state)

    @classmethod
    def read(cls, r: Reader, version: int) -> PartitionRecord:
        fast = _read_partition_fast(r)
        if fast is not None:
            return fast
        partition_id = r.i32()
        topic_id = r.uuid()
        replicas = r.i32_array()
        isr = r.i32_array()
        removing = r.i32_array()
        adding = r.i32_array()
        leader = r.i32()
        leader_epoch = r.i32()
        partition_epoch = r.i32()
        tagged = r.tagged_fields()
        recovery = 0
        raw = tagged.get(0)
        if raw:
            recovery = raw[0] - 256 if raw[0] > 127 else raw[0]
        return cls(partition_id, topic_id, replicas, isr, leader, leader_epoch, partition_epoch,
                   removing, adding, recovery)


_I32 = struct.Struct(">i")
_I32X3 = struct.Struct(">iii")
_SMALL_ARRAYS = [struct.Struct(f">{n}i") for n in range(32)]
_PARTITION_PREFIX = uvarint(FRAME_VERSION) + uvarint(PartitionRecord.API_KEY) + uvarint(PartitionRecord.VERSION)


def partition_record_body(
    partition_id: int, topic_id: bytes, replicas: tuple[int, ...], isr: tuple[int, ...],
    removing_replicas: tuple[int, ...], adding_replicas: tuple[int, ...], leader: int, leader_epoch: int,
    partition_epoch: int, leader_recovery_state: int = 0,
) -> bytes:
    """PartitionRecord's fields in one concatenation instead of a call per field: a snapshot holds one
    PartitionRecord per partition, so this is the hot path of writing a large cluster's snapshot."""
    if len(topic_id) != 16:
        raise ValueError(f"a uuid is 16 bytes, got {len(topic_id)}")
    tagged = b"\x00" if not leader_recovery_state else b"\x01\x00\x01" + bytes((leader_recovery_state & 0xFF,))
    return (
        _I32.pack(partition_id) + topic_id + _i32_array(replicas) + _i32_array(isr)
        + _i32_array(removing_replicas) + _i32_array(adding_replicas)
        + _I32X3.pack(leader, leader_epoch, partition_epoch) + tagged
    )


def encode_partition_record(
    partition_id: int, topic_id: bytes, replicas: tuple[int, ...], isr: tuple[int, ...],
    removing_replicas: tuple[int, ...], adding_replicas: tuple[int, ...], leader: int, leader_epoch: int,
    partition_epoch: int, leader_recovery_state: int = 0,
) -> bytes:
    """The framed value of a PartitionRecord, without building the record object."""
    return _PARTITION_PREFIX + partition_record_body(
        partition_id, topic_id, replicas, isr, removing_replicas, adding_replicas, leader, leader_epoch,
        partition_epoch, leader_recovery_state)


def _i32_array(values: tuple[int, ...]) -> bytes:
    n = len(values)
    if n < len(_SMALL_ARRAYS):
        return bytes((n + 1,)) + _SMALL_ARRAYS[n].pack(*values)
    w = Writer()
    w.i32_array(values)
    return bytes(w.buf)


PartitionFields = tuple[int, bytes, tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...], int, int, int]


def _partition_fields(buf: bytes, pos: int, end: int) -> tuple[PartitionFields, int] | None:
    """PartitionRecord v0 in its common shape (arrays under 32 entries, no tagged field) read with a
    few struct calls, as (partition_id, topic_id, replicas, isr, removing, adding, leader, leader_epoch,
    partition_epoch) and the position after it; None sends anything else to the general reader."""
    if pos + 20 > end:
        return None
    (partition_id,) = _I32.unpack_from(buf, pos)
    topic_id = buf[pos + 4 : pos + 20]
    pos += 20
    arrays: list[tuple[int, ...]] = []
    for _ in range(4):
        if pos >= end:
            return None
        n = buf[pos] - 1
        if not 0 <= n < len(_SMALL_ARRAYS) or pos + 1 + 4 * n > end:
            return None
        arrays.append(_SMALL_ARRAYS[n].unpack_from(buf, pos + 1))
        pos += 1 + 4 * n
    if pos + 13 > end or buf[pos + 12] != 0:
        return None
    leader, leader_epoch, partition_epoch = _I32X3.unpack_from(buf, pos)
    return (partition_id, topic_id, arrays[0], arrays[1], arrays[2], arrays[3], leader, leader_epoch,
            partition_epoch), pos + 13


def _read_partition_fast(r: Reader) -> PartitionRecord | None:
    found = _partition_fields(r.buf, r.pos, r.end)
    if found is None:
        return None
    (pid, tid, replicas, isr, removing, adding, leader, leader_epoch, partition_epoch), r.pos = found
    return PartitionRecord(pid, tid, replicas, isr, leader, leader_epoch, partition_epoch, removing, adding)


def decode_partition_value(value: bytes) -> PartitionFields | None:
    """A whole PartitionRecord value decoded to its fields without building the record, for replaying
    snapshots (one such record per partition); None if it is not a common-shape PartitionRecord v0."""
    if not value.startswith(_PARTITION_PREFIX):
        return None
    found = _partition_fields(value, len(_PARTITION_PREFIX), len(value))
    if found is None or found[1] != len(value):
        return None
    return found[0]


@register
@dataclass(frozen=True, slots=True)
class ConfigRecord(MetadataRecord):
    resource_type: int
    resource_name: str
    name: str
    #: None deletes the key (the dynamic value falls back to the next level).
    value: str | None

    API_KEY: ClassVar[int] = 4

    def write(self, w: Writer) -> None:
        w.i8(self.resource_type)
        w.string(self.resource_name)
        w.string(self.name)
        w.nullable_string(self.value)
        w.tagged_fields()

    @classmethod
    def read(cls, r: Reader, version: int) -> ConfigRecord:
        rec = cls(r.i8(), r.string(), r.string(), r.nullable_string())
        r.tagged_fields()
        return rec


@register
@dataclass(frozen=True, slots=True)
class RemoveTopicRecord(MetadataRecord):
    topic_id: bytes

    API_KEY: ClassVar[int] = 9

    def write(self, w: Writer) -> None:
        w.uuid(self.topic_id)
        w.tagged_fields()

    @classmethod
    def read(cls, r: Reader, version: int) -> RemoveTopicRecord:
        rec = cls(r.uuid())
        r.tagged_fields()
        return rec


@register
@dataclass(frozen=True, slots=True)
class FeatureLevelRecord(MetadataRecord):
    name: str
    #: 0 removes the feature (Kafka's convention).
    feature_level: int

    API_KEY: ClassVar[int] = 12

    def write(self, w: Writer) -> None:
        w.string(self.name)
        w.i16(self.feature_level)
        w.tagged_fields()

    @classmethod
    def read(cls, r: Reader, version: int) -> FeatureLevelRecord:
        rec = cls(r.string(), r.i16())
        r.tagged_fields()
        return rec


@register
@dataclass(frozen=True, slots=True)
class ProducerIdsRecord(MetadataRecord):
    broker_id: int
    broker_epoch: int
    next_producer_id: int

    API_KEY: ClassVar[int] = 15

    def write(self, w: Writer) -> None:
        w.i32(self.broker_id)
        w.i64(self.broker_epoch)
        w.i64(self.next_producer_id)
        w.tagged_fields()

    @classmethod
    def read(cls, r: Reader, version: int) -> ProducerIdsRecord:
        rec = cls(r.i32(), r.i64(), r.i64())
        r.tagged_fields()
        return rec


@register
@dataclass(frozen=True, slots=True)
class NoOpRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 20

    def write(self, w: Writer) -> None:
        w.tagged_fields()

    @classmethod
    def read(cls, r: Reader, version: int) -> NoOpRecord:
        r.tagged_fields()
        return cls()


__all__ = [
    "FRAME_VERSION",
    "RECORD_TYPES",
    "TIERLOG_API_KEY_BASE",
    "BrokerEndpoint",
    "BrokerFeature",
    "ConfigRecord",
    "ConfigResourceType",
    "FeatureLevelRecord",
    "MetadataRecord",
    "NoOpRecord",
    "PartitionRecord",
    "ProducerIdsRecord",
    "RegisterBrokerRecord",
    "RemoveTopicRecord",
    "TopicRecord",
    "decode_record",
    "encode_record",
    "register",
]


@register
@dataclass(frozen=True, slots=True)
class UserScramCredentialRecord(MetadataRecord):
    """A user's SCRAM credential (KIP-554): never the password, only what RFC 5802 lets a server
    check a proof with. Mechanism: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512 (Kafka's ScramMechanism ids)."""

    name: str
    mechanism: int
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    API_KEY: ClassVar[int] = 11

    def write(self, w: Writer) -> None:
        w.string(self.name)
        w.i8(self.mechanism)
        w.compact_bytes(self.salt)
        w.compact_bytes(self.stored_key)
        w.compact_bytes(self.server_key)
        w.i32(self.iterations)
        w.tagged_fields()

    @classmethod
    def read(cls, r: Reader, version: int) -> UserScramCredentialRecord:
        rec = cls(r.string(), r.i8(), r.compact_bytes(), r.compact_bytes(), r.compact_bytes(), r.i32())
        r.tagged_fields()
        return rec


@register
@dataclass(frozen=True, slots=True)
class RemoveUserScramCredentialRecord(MetadataRecord):
    name: str
    mechanism: int

    API_KEY: ClassVar[int] = 22

    def write(self, w: Writer) -> None:
        w.string(self.name)
        w.i8(self.mechanism)
        w.tagged_fields()

    @classmethod
    def read(cls, r: Reader, version: int) -> RemoveUserScramCredentialRecord:
        rec = cls(r.string(), r.i8())
        r.tagged_fields()
        return rec


@register
@dataclass(frozen=True, slots=True)
class AccessControlEntryRecord(MetadataRecord):
    """One ACL (Kafka's AccessControlEntryRecord, apiKey 18): the enum fields hold Kafka's ids
    (:mod:`tierlog.metadata.acls`)."""

    id: bytes
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int

    API_KEY: ClassVar[int] = 18

    def write(self, w: Writer) -> None:
        w.uuid(self.id)
        w.i8(self.resource_type)
        w.string(self.resource_name)
        w.i8(self.pattern_type)
        w.string(self.principal)
        w.string(self.host)
        w.i8(self.operation)
        w.i8(self.permission_type)
        w.tagged_fields()

    @classmethod
    def read(cls, r: Reader, version: int) -> AccessControlEntryRecord:
        rec = cls(r.uuid(), r.i8(), r.string(), r.i8(), r.string(), r.string(), r.i8(), r.i8())
        r.tagged_fields()
        return rec


@register
@dataclass(frozen=True, slots=True)
class RemoveAccessControlEntryRecord(MetadataRecord):
    id: bytes

    API_KEY: ClassVar[int] = 19

    def write(self, w: Writer) -> None:
        w.uuid(self.id)
        w.tagged_fields()

    @classmethod
    def read(cls, r: Reader, version: int) -> RemoveAccessControlEntryRecord:
        rec = cls(r.uuid())
        r.tagged_fields()
        return rec


@dataclass(frozen=True, slots=True)
class QuotaEntityPart:
    """One component of a client quota entity: ``user`` or ``client-id``, and its name (None is the
    default entity of that type, Kafka's ``<default>``)."""

    entity_type: str
    entity_name: str | None


@register
@dataclass(frozen=True, slots=True)
class ClientQuotaRecord(MetadataRecord):
    """A client quota set or removed (Kafka's ClientQuotaRecord, apiKey 14, v0): the entity, the quota
    key (``producer_byte_rate``, …), its value, and ``remove`` to drop the key."""

    entity: tuple[QuotaEntityPart, ...]
    key: str
    value: float
    remove: bool = False

    API_KEY: ClassVar[int] = 14

    def write(self, w: Writer) -> None:
        w.array_length(len(self.entity))
        for part in self.entity:
            w.string(part.entity_type)
            w.nullable_string(part.entity_name)
            w.tagged_fields()
        w.string(self.key)
        w.f64(self.value)
        w.bool(self.remove)
        w.tagged_fields()

    @classmethod
    def read(cls, r: Reader, version: int) -> ClientQuotaRecord:
        parts = []
        for _ in range(r.array_length()):
            part = QuotaEntityPart(r.string(), r.nullable_string())
            r.tagged_fields()
            parts.append(part)
        rec = cls(tuple(parts), r.string(), r.f64(), r.bool())
        r.tagged_fields()
        return rec
