"""The record formats of ``__transaction_state`` (Kafka's TransactionLogKey and TransactionLogValue).

Key: int16 version 0, then the transactional id as a string (int16 length + UTF-8).
Value: int16 version (0, or 1 = flexible), then ProducerId int64, ProducerEpoch int16,
TransactionTimeoutMs int32, TransactionStatus int8, TransactionPartitions (nullable array of
{Topic string, PartitionIds []int32}), TransactionLastUpdateTimestampMs int64,
TransactionStartTimestampMs int64. Version 1 writes compact strings and arrays (uvarint length + 1)
with tagged fields after each struct: tag 0 PreviousProducerId, 1 NextProducerId (int64, default
-1), 2 ClientTransactionVersion (int16, default 0). A null value is a tombstone: the id expired.

tierlog writes version 0 (readable by every Kafka since 0.11) while ``transaction.version`` is 0, and
version 1 once it is 1 or more, as Kafka's TransactionLog.valueToBytes does
(TransactionVersion.transactionLogValueVersion); it reads both. Tagged fields equal to their default
are left out, as Kafka's generated writers do.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from tierlog._util.varint import read_unsigned_varint
from tierlog.errors import CorruptRecordError
from tierlog.ids import (
    TRANSACTION_STATE_TOPIC as TRANSACTION_STATE_TOPIC,  # re-exported: the txn modules import it here
)
from tierlog.server.groups.records import partition_for_group

KEY_VERSION = 0
VALUE_VERSION = 0

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class TxnState(enum.IntEnum):
    """TransactionState ids as stored in TransactionStatus."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and ListTransactions use (TransactionState.stateName)."""
        return "".join(part.capitalize() for part in self.name.split("_"))


@dataclass(frozen=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    #: topic → partitions; empty for Empty (written as null, as Kafka does).
    partitions: Mapping[str, tuple[int, ...]]
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


def partition_for_transactional_id(transactional_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(transactionalId.hashCode) % transactionTopicPartitionCount`` (the same
    rule as for group ids)."""
    return partition_for_group(transactional_id, num_partitions)


def _string(value: str) -> bytes:
    raw = value.encode("utf-8")
    return _I16.pack(len(raw)) + raw


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _string(transactional_id)


def decode_key(raw: bytes) -> str:
    try:
        (version,) = _I16.unpack_from(raw, 0)
        if version != KEY_VERSION:
            raise CorruptRecordError(f"unknown transaction log key version {version}")
        (length,) = _I16.unpack_from(raw, 2)
        if length < 0 or 4 + length > len(raw):
            raise CorruptRecordError("transaction log key string runs past the record")
        return raw[4:4 + length].decode("utf-8")
    except (struct.error, UnicodeDecodeError) as e:
        raise CorruptRecordError(f"unreadable transaction log key: {e}") from None


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_value(value: TxnLogValue, version: int = VALUE_VERSION) -> bytes:
    """The value at ``version`` 0 (fixed) or 1 (flexible: compact strings and arrays, tagged fields)."""
    if version not in (0, 1):
        raise ValueError(f"transaction log value version {version} does not exist")
    flexible = version == 1

    def length(n: int) -> bytes:  # an array length; -1 is null
        return _uvarint(n + 1) if flexible else _I32.pack(n)

    def string(text: str) -> bytes:
        raw = text.encode("utf-8")
        return (_uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))) + raw

    out = bytearray(_I16.pack(version))
    out += _I64.pack(value.producer_id)
    out += _I16.pack(value.producer_epoch)
    out += _I32.pack(value.timeout_ms)
    out += _I8.pack(int(value.state))
    if value.state is TxnState.EMPTY:
        out += length(-1)
    else:
        out += length(len(value.partitions))
        for topic, ids in sorted(value.partitions.items()):
            out += string(topic)
            out += length(len(ids))
            for p in sorted(ids):
                out += _I32.pack(p)
            if flexible:
                out += _uvarint(0)  # the partition struct's tagged fields: none
    out += _I64.pack(value.last_update_ms)
    out += _I64.pack(value.start_ms)
    if flexible:
        tags = [(tag, raw) for tag, raw, default in (
            (0, _I64.pack(value.previous_producer_id), value.previous_producer_id == -1),
            (1, _I64.pack(value.next_producer_id), value.next_producer_id == -1),
            (2, _I16.pack(value.client_transaction_version), value.client_transaction_version == 0),
        ) if not default]
        out += _uvarint(len(tags))
        for tag, raw in tags:
            out += _uvarint(tag) + _uvarint(len(raw)) + raw
    return bytes(out)


class _Reader:
    def __init__(self, raw: bytes, flexible: bool) -> None:
        self.raw = raw
        self.pos = 2
        self.flexible = flexible

    def take(self, s: struct.Struct) -> int:
        (v,) = s.unpack_from(self.raw, self.pos)
        self.pos += s.size
        return int(v)

    def uvarint(self) -> int:
        # ValueError when malformed: the decoder turns it, like struct errors, into a corrupt record.
        value, self.pos = read_unsigned_varint(self.raw, self.pos, error=ValueError)
        return value

    def length(self) -> int:
        """An array or string length; -1 for null."""
        return self.uvarint() - 1 if self.flexible else self.take(_I32)

    def string(self) -> str:
        n = self.uvarint() - 1 if self.flexible else self.take(_I16)
        if n < 0 or self.pos + n > len(self.raw):
            raise CorruptRecordError("transaction log string runs past the record")
        s = self.raw[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return s

    def tags(self) -> dict[int, bytes]:
        found: dict[int, bytes] = {}
        if not self.flexible:
            return found
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            size = self.uvarint()
            found[tag] = self.raw[self.pos:self.pos + size]
            self.pos += size
        return found


def decode_value(raw: bytes) -> TxnLogValue:
    try:
        (version,) = _I16.unpack_from(raw, 0)
        if version not in (0, 1):
            raise CorruptRecordError(f"unknown transaction log value version {version}")
        r = _Reader(raw, flexible=version >= 1)
        producer_id = r.take(_I64)
        producer_epoch = r.take(_I16)
        timeout_ms = r.take(_I32)
        state = TxnState(r.take(_I8))
        partitions: dict[str, tuple[int, ...]] = {}
        count = r.length()
        for _ in range(max(count, 0)):
            topic = r.string()
            n = r.length()
            partitions[topic] = tuple(r.take(_I32) for _ in range(max(n, 0)))
            r.tags()
        last_update_ms = r.take(_I64)
        start_ms = r.take(_I64)
        tags = r.tags()
        prev = _I64.unpack(tags[0])[0] if len(tags.get(0, b"")) == 8 else -1
        nxt = _I64.unpack(tags[1])[0] if len(tags.get(1, b"")) == 8 else -1
        tv = _I16.unpack(tags[2])[0] if len(tags.get(2, b"")) == 2 else 0
        return TxnLogValue(producer_id, producer_epoch, timeout_ms, state, partitions, last_update_ms, start_ms,
                           prev, nxt, tv)
    except (struct.error, IndexError, ValueError, UnicodeDecodeError) as e:
        raise CorruptRecordError(f"unreadable transaction log value: {e}") from None
