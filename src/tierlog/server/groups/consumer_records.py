"""Records of consumer groups (KIP-848) in ``__consumer_offsets``, in Kafka's formats.

A key starts with an int16 record type, then the non-flexible key fields: 3 ConsumerGroupMetadata
(group), 5 ConsumerGroupMemberMetadata (group, member), 6 ConsumerGroupTargetAssignmentMetadata
(group), 7 ConsumerGroupTargetAssignmentMember (group, member), 8 ConsumerGroupCurrentMemberAssignment
(group, member). A value starts with an int16 version (0 for all of them) followed by the flexible
encoding (compact strings and arrays, tagged fields). A null value is a tombstone. Type 4
(ConsumerGroupPartitionMetadata) is written by Kafka 4.0 only and replaced by a metadata hash since
4.1; tierlog neither writes it nor needs it, and skips it when it reads one.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from tierlog.errors import CorruptRecordError
from tierlog.metadata._codec import Reader, Writer
from tierlog.metadata.errors import MetadataReplayError
from tierlog.server.groups.assignors import Assignment

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8
CONSUMER_GROUP_RECORD_TYPES = frozenset(range(GROUP_METADATA, CURRENT_MEMBER_ASSIGNMENT + 1))

_VALUE_VERSION = 0
_I16 = struct.Struct(">h")

Record = tuple[bytes, bytes | None]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ConsumerGroupKey:
    record_type: int
    group: str
    member_id: str | None = None


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None


@dataclass(frozen=True, slots=True)
class CurrentAssignment:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: Assignment
    pending_revocation: Assignment


def _key_string(value: str) -> bytes:
    raw = value.encode("utf-8")
    return _I16.pack(len(raw)) + raw


def encode_key(record_type: int, group: str, member_id: str | None = None) -> bytes:
    out = _I16.pack(record_type) + _key_string(group)
    if record_type in (MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT):
        assert member_id is not None
        out += _key_string(member_id)
    return out


def decode_key(raw: bytes) -> ConsumerGroupKey:
    def string(pos: int) -> tuple[str, int]:
        if pos + 2 > len(raw):
            raise CorruptRecordError("consumer group record key truncated")
        (n,) = _I16.unpack_from(raw, pos)
        if n < 0 or pos + 2 + n > len(raw):
            raise CorruptRecordError("consumer group record key truncated")
        return raw[pos + 2:pos + 2 + n].decode("utf-8", "replace"), pos + 2 + n

    (record_type,) = _I16.unpack_from(raw, 0)
    if record_type not in CONSUMER_GROUP_RECORD_TYPES:
        raise CorruptRecordError(f"not a consumer group record key type: {record_type}")
    group, pos = string(2)
    member = None
    if record_type in (MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT):
        member, pos = string(pos)
    return ConsumerGroupKey(record_type, group, member)


def record_type_of(raw_key: bytes) -> int:
    return int(_I16.unpack_from(raw_key, 0)[0]) if len(raw_key) >= 2 else -1


def _start() -> Writer:
    w = Writer()
    w.i16(_VALUE_VERSION)
    return w


def _reader(raw: bytes, what: str) -> Reader:
    r = Reader(raw)
    try:
        version = r.i16()
    except MetadataReplayError as e:
        raise CorruptRecordError(f"{what}: {e}") from None
    if version != _VALUE_VERSION:
        raise CorruptRecordError(f"unknown {what} version {version}")
    return r


def _write_partitions(w: Writer, assignment: Assignment) -> None:
    w.array_length(len(assignment))
    for tid in sorted(assignment):
        w.uuid(tid)
        w.i32_array(sorted(assignment[tid]))
        w.tagged_fields()


def _read_partitions(r: Reader) -> Assignment:
    out: Assignment = {}
    for _ in range(r.array_length()):
        tid = r.uuid()
        partitions = r.i32_array()
        r.tagged_fields()  # AssignmentEpochs (KIP-1251) and later tags: not used here
        out[tid] = frozenset(partitions)
    return out


def encode_group_metadata(epoch: int) -> bytes:
    w = _start()
    w.i32(epoch)
    w.tagged_fields()
    return bytes(w.buf)


def decode_group_metadata(raw: bytes) -> int:
    r = _reader(raw, "ConsumerGroupMetadataValue")
    return _guard(r.i32)


def encode_member_metadata(m: MemberMetadata) -> bytes:
    w = _start()
    w.nullable_string(m.instance_id)
    w.nullable_string(m.rack_id)
    w.string(m.client_id)
    w.string(m.client_host)
    w.array_length(len(m.subscribed_topic_names))
    for name in m.subscribed_topic_names:
        w.string(name)
    w.nullable_string(m.subscribed_topic_regex)
    w.i32(m.rebalance_timeout_ms)
    w.nullable_string(m.server_assignor)
    w.tagged_fields()
    return bytes(w.buf)


def decode_member_metadata(raw: bytes) -> MemberMetadata:
    r = _reader(raw, "ConsumerGroupMemberMetadataValue")

    def read() -> MemberMetadata:
        instance_id, rack_id = r.nullable_string(), r.nullable_string()
        client_id, client_host = r.string(), r.string()
        names = tuple(r.string() for _ in range(r.array_length()))
        return MemberMetadata(instance_id, rack_id, client_id, client_host, names, r.nullable_string(), r.i32(),
                              r.nullable_string())

    return _guard(read)


def encode_target_metadata(assignment_epoch: int) -> bytes:
    return encode_group_metadata(assignment_epoch)  # the same layout: an int32 and tagged fields


def decode_target_metadata(raw: bytes) -> int:
    r = _reader(raw, "ConsumerGroupTargetAssignmentMetadataValue")
    return _guard(r.i32)


def encode_target_member(assignment: Assignment) -> bytes:
    w = _start()
    _write_partitions(w, assignment)
    w.tagged_fields()
    return bytes(w.buf)


def decode_target_member(raw: bytes) -> Assignment:
    r = _reader(raw, "ConsumerGroupTargetAssignmentMemberValue")
    return _guard(lambda: _read_partitions(r))


def encode_current_assignment(a: CurrentAssignment) -> bytes:
    w = _start()
    w.i32(a.member_epoch)
    w.i32(a.previous_member_epoch)
    w.i8(a.state)
    _write_partitions(w, a.assigned)
    _write_partitions(w, a.pending_revocation)
    w.tagged_fields()
    return bytes(w.buf)


def decode_current_assignment(raw: bytes) -> CurrentAssignment:
    r = _reader(raw, "ConsumerGroupCurrentMemberAssignmentValue")
    return _guard(lambda: CurrentAssignment(r.i32(), r.i32(), r.i8(), _read_partitions(r), _read_partitions(r)))


def _guard(read: Callable[[], T]) -> T:
    try:
        return read()
    except MetadataReplayError as e:
        raise CorruptRecordError(str(e)) from None
