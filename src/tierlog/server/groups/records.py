"""Records of the ``__consumer_offsets`` topic, in Kafka's own key and value formats.

Keys start with an int16 version: 0 and 1 are an OffsetCommitKey (group, topic, partition), 2 a
GroupMetadataKey (group). Values are OffsetCommitValue v0-v3 and GroupMetadataValue v0-v3, all
non-flexible; a null value is a tombstone. tierlog writes OffsetCommitKey v1 + OffsetCommitValue v3
and GroupMetadataKey v2 + GroupMetadataValue v3, as Kafka 3.x does, so the topic reads the same in
Kafka's tools (``kafka-dump-log --offsets-decoder``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from tierlog.errors import CorruptRecordError

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def _take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise CorruptRecordError(f"__consumer_offsets record truncated at byte {self.pos}")
        out = self.buf[self.pos:end]
        self.pos = end
        return out

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def string(self) -> str:
        n = self.i16()
        if n < 0:
            raise CorruptRecordError("null where a string is required")
        return self._take(n).decode("utf-8", "replace")

    def nullable_string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else self._take(n).decode("utf-8", "replace")

    def bytes_(self) -> bytes:
        n = self.i32()
        return b"" if n < 0 else self._take(n)


def _string(value: str | None) -> bytes:
    if value is None:
        return _I16.pack(-1)
    raw = value.encode("utf-8")
    return _I16.pack(len(raw)) + raw


def _bytes(value: bytes) -> bytes:
    return _I32.pack(len(value)) + value


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = -1


@dataclass(frozen=True, slots=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int = -1
    members: tuple[MemberValue, ...] = field(default_factory=tuple)


def encode_offset_key(key: OffsetKey) -> bytes:
    return _I16.pack(OFFSET_COMMIT_KEY_VERSION) + _string(key.group) + _string(key.topic) + _I32.pack(key.partition)


def encode_group_key(key: GroupKey) -> bytes:
    return _I16.pack(GROUP_METADATA_KEY_VERSION) + _string(key.group)


def encode_offset_value(value: OffsetValue) -> bytes:
    return (_I16.pack(OFFSET_COMMIT_VALUE_VERSION) + _I64.pack(value.offset) + _I32.pack(value.leader_epoch)
            + _string(value.metadata) + _I64.pack(value.commit_timestamp_ms))


def encode_group_value(value: GroupValue) -> bytes:
    out = bytearray(_I16.pack(GROUP_METADATA_VALUE_VERSION))
    out += _string(value.protocol_type)
    out += _I32.pack(value.generation)
    out += _string(value.protocol)
    out += _string(value.leader)
    out += _I64.pack(value.current_state_timestamp_ms)
    out += _I32.pack(len(value.members))
    for m in value.members:
        out += _string(m.member_id) + _string(m.group_instance_id) + _string(m.client_id) + _string(m.client_host)
        out += _I32.pack(m.rebalance_timeout_ms) + _I32.pack(m.session_timeout_ms)
        out += _bytes(m.subscription) + _bytes(m.assignment)
    return bytes(out)


def decode_key(raw: bytes) -> OffsetKey | GroupKey:
    r = _Reader(raw)
    version = r.i16()
    if version in (0, 1):
        return OffsetKey(r.string(), r.string(), r.i32())
    if version == 2:
        return GroupKey(r.string())
    raise CorruptRecordError(f"unknown __consumer_offsets key version {version}")


def decode_offset_value(raw: bytes) -> OffsetValue:
    r = _Reader(raw)
    version = r.i16()
    if version == 0:
        offset, metadata, ts = r.i64(), r.string(), r.i64()
        return OffsetValue(offset, -1, metadata, ts)
    if version in (1, 2):
        offset, metadata, ts = r.i64(), r.string(), r.i64()
        if version == 1:
            r.i64()  # expire timestamp: offsets here expire with their group, not per commit
        return OffsetValue(offset, -1, metadata, ts)
    if version == 3:
        return OffsetValue(r.i64(), r.i32(), r.string(), r.i64())
    raise CorruptRecordError(f"unknown OffsetCommitValue version {version}")


def decode_group_value(raw: bytes) -> GroupValue:
    r = _Reader(raw)
    version = r.i16()
    if not 0 <= version <= 3:
        raise CorruptRecordError(f"unknown GroupMetadataValue version {version}")
    protocol_type = r.string()
    generation = r.i32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    state_ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.i32()):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id, client_host = r.string(), r.string()
        rebalance_timeout = r.i32() if version >= 1 else -1
        session_timeout = r.i32()
        members.append(MemberValue(member_id, instance_id, client_id, client_host, rebalance_timeout,
                                   session_timeout, r.bytes_(), r.bytes_()))
    return GroupValue(protocol_type, generation, protocol, leader, state_ts, tuple(members))


def java_string_hash(value: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed int32."""
    h = 0
    raw = value.encode("utf-16-be")
    for i in range(0, len(raw), 2):
        h = (31 * h + ((raw[i] << 8) | raw[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for_group(group_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % groupMetadataTopicPartitionCount``
    (Utils.abs maps Integer.MIN_VALUE to 0)."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions
