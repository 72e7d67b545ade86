"""Control records (KAFKA-FACTS §1.4): the key every control record carries, transaction markers, and
builders for control batches (end-transaction markers, KRaft snapshot header/footer and the like)."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

from tierlog.errors import InvalidRecordError
from tierlog.records.builder import SimpleRecord, build_batch
from tierlog.records.header import NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from tierlog.records.record import Record

CONTROL_RECORD_KEY_VERSION = 0
CONTROL_RECORD_KEY_SIZE = 4
END_TXN_MARKER_VALUE_VERSION = 0
END_TXN_MARKER_VALUE_SIZE = 6

_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")


class ControlRecordType(IntEnum):
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6
    #: Any type id this version does not know; readers skip such records rather than fail.
    UNKNOWN = -1

    @classmethod
    def from_id(cls, type_id: int) -> ControlRecordType:
        try:
            return cls(type_id)
        except ValueError:
            return cls.UNKNOWN


def control_record_key(control_type: int, version: int = CONTROL_RECORD_KEY_VERSION) -> bytes:
    """The 4-byte key: int16 version + int16 type."""
    if control_type == ControlRecordType.UNKNOWN:
        raise InvalidRecordError("cannot write a control record of type UNKNOWN")
    return _KEY.pack(version, control_type)


def parse_control_record_type(key: bytes | None) -> ControlRecordType:
    """The type of a control record from its key (ControlRecordType.parse)."""
    if key is None or len(key) < CONTROL_RECORD_KEY_SIZE:
        found = 0 if key is None else len(key)
        raise InvalidRecordError(
            f"Invalid value size found for end control record key. Must have at least "
            f"{CONTROL_RECORD_KEY_SIZE} bytes, but found only {found}"
        )
    # A newer key version is read as version 0: later versions may only append fields.
    version, type_id = _KEY.unpack_from(key, 0)
    if version < 0:
        raise InvalidRecordError(f"Invalid version found for control record: {version}. May indicate data corruption")
    return ControlRecordType.from_id(type_id)


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    """The COMMIT or ABORT marker a transaction coordinator writes into each partition."""

    control_type: ControlRecordType
    coordinator_epoch: int

    def __post_init__(self) -> None:
        _ensure_marker_type(self.control_type)

    @property
    def is_commit(self) -> bool:
        return self.control_type is ControlRecordType.COMMIT

    def key(self) -> bytes:
        return control_record_key(self.control_type)

    def value(self) -> bytes:
        return _MARKER_VALUE.pack(END_TXN_MARKER_VALUE_VERSION, self.coordinator_epoch)

    @classmethod
    def from_record(cls, record: Record) -> EndTransactionMarker:
        return cls.from_key_value(record.key, record.value)

    @classmethod
    def from_key_value(cls, key: bytes | None, value: bytes | None) -> EndTransactionMarker:
        """The marker a control record's key and value hold (the one parser of end-transaction
        markers: the producer-state replay reads them from batch bytes through it too)."""
        control_type = parse_control_record_type(key)
        _ensure_marker_type(control_type)
        if value is None or len(value) < END_TXN_MARKER_VALUE_SIZE:
            found = 0 if value is None else len(value)
            raise InvalidRecordError(
                f"Invalid value size found for end transaction marker. Must have at least "
                f"{END_TXN_MARKER_VALUE_SIZE} bytes, but found only {found}"
            )
        version, coordinator_epoch = _MARKER_VALUE.unpack_from(value, 0)
        if version < 0:
            raise InvalidRecordError(
                f"Invalid version found for end transaction marker: {version}. May indicate data corruption"
            )
        return cls(control_type, coordinator_epoch)


def _ensure_marker_type(control_type: ControlRecordType) -> None:
    if control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise InvalidRecordError(
            f"Invalid control record type for end transaction marker: {control_type.name}"
        )


def build_control_batch(
    entries: Sequence[tuple[int, bytes | None]],
    *,
    timestamp_ms: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    is_transactional: bool = False,
) -> bytes:
    """An uncompressed control batch with one record per (control type, value) entry.

    For KRaft's control records (snapshot header/footer, leader change, kraft version, voters) the
    caller serializes the value; this only frames it. Kafka never compresses these batches.
    """
    records = [SimpleRecord(control_record_key(t), value, timestamp=timestamp_ms) for t, value in entries]
    return build_batch(
        records,
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=is_transactional,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def build_end_txn_marker_batch(
    marker: EndTransactionMarker,
    *,
    producer_id: int,
    producer_epoch: int,
    timestamp_ms: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """The one-record transactional control batch a COMMIT/ABORT marker is written in
    (MemoryRecords.withEndTransactionMarker: CreateTime, no sequence, uncompressed)."""
    return build_control_batch(
        [(marker.control_type, marker.value())],
        timestamp_ms=timestamp_ms,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
    )
