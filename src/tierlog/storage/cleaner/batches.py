"""Reading a segment's batches for the cleaner, every one CRC-checked, and rewriting one batch
(Kafka's MemoryRecords.filterTo): offsets, base sequence, producer id/epoch, leader epoch, timestamps
and codec are kept; a producer's last batch is kept even when it is emptied."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tierlog._util.varint import read_varint, read_varlong
from tierlog.errors import CorruptRecordError, TierlogError
from tierlog.records.builder import build_batch
from tierlog.records.header import (
    BATCH_HEADER_SIZE,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_V2,
    BatchHeader,
)
from tierlog.records.reader import _records_region, decode_batch
from tierlog.records.record import Record
from tierlog.storage.cleaner.decisions import tombstone_retained
from tierlog.storage.cleaner.fast_path import rewrite_data_batch
from tierlog.storage.cleaner.offset_map import AnyOffsetMap, OffsetMap
from tierlog.storage.cleaner.txn_tracker import TxnTracker
from tierlog.storage.file_records import FileRecords
from tierlog.storage.txn_index import AbortedTxn

_LENGTH_AT = 8


class CorruptDirtyBatchError(TierlogError):
    """A batch the cleaner read fails its CRC or its structure: the partition is not cleaned."""

    def __init__(self, path: Path, position: int, reason: str) -> None:
        super().__init__(f"{path}: damaged batch at byte {position}: {reason}")
        self.path = path
        self.position = position


class ChunkWalk(Protocol):
    """Takes a run of batches of a read chunk in one call: (chunk, position in it, last offset so
    far, the chunk's file position) -> (position after the run, its last offset); the position
    unchanged when it took none. It may pass the chunk's end (a run skipped unread)."""

    def __call__(self, buf: bytes, position: int, previous_last: int, chunk_position: int = 0) -> tuple[int, int]: ...


def read_batches(records: FileRecords, buffer_bytes: int, on_read: Callable[[int], None] | None = None,
                 walk: ChunkWalk | None = None) -> Iterator[BatchHeader]:
    """Every batch of the file, in order, each over a buffer holding it whole and CRC-checked;
    reads ``buffer_bytes`` at a time (a larger batch is read whole). ``on_read`` gets bytes read.
    ``walk`` (the map pass's compiled loop) is offered each position first: the batches it takes, with
    the same checks, are not yielded; the first it leaves is read here as usual."""
    size = records.size_bytes
    position = 0
    previous_last = -1
    chunk_bytes = max(buffer_bytes, BATCH_HEADER_SIZE)
    while position < size:
        buf = records.read(position, min(chunk_bytes, size - position))
        if on_read is not None:
            on_read(len(buf))
        offset_in = 0
        while offset_in + LOG_OVERHEAD <= len(buf):
            if walk is not None:
                offset_in, previous_last = walk(buf, offset_in, previous_last, position)
                if offset_in + LOG_OVERHEAD > len(buf):
                    break
            length = int.from_bytes(buf[offset_in + _LENGTH_AT:offset_in + LOG_OVERHEAD], "big", signed=True)
            total = length + LOG_OVERHEAD
            if length < BATCH_HEADER_SIZE - LOG_OVERHEAD or position + offset_in + total > size:
                raise CorruptDirtyBatchError(records.path, position + offset_in,
                                             f"batch length {length} does not fit the file")
            if offset_in + total > len(buf):
                if offset_in == 0:  # one batch larger than the buffer: read it whole
                    buf = records.read(position, total)
                    if on_read is not None:
                        on_read(total)
                else:
                    break
            try:
                h = BatchHeader(buf, offset_in)
                if h.magic != MAGIC_V2:
                    raise CorruptRecordError(f"magic {h.magic}")
                h.ensure_valid()
            except (CorruptRecordError, TierlogError) as e:
                raise CorruptDirtyBatchError(records.path, position + offset_in, str(e)) from e
            if h.base_offset <= previous_last:
                raise CorruptDirtyBatchError(records.path, position + offset_in,
                                             f"offset {h.base_offset} does not follow {previous_last}")
            previous_last = h.last_offset
            yield h
            offset_in += total
        if offset_in == 0:
            raise CorruptDirtyBatchError(records.path, position, "the file ends inside a batch header")
        position += offset_in


def batch_keys(h: BatchHeader) -> list[tuple[int, bytes | None, bool]]:
    """(offset, key, has value) of each record, without decoding values or headers: what the map
    pass and the retention decision need (a batch kept whole is then copied as it is)."""
    buf, pos, end = _records_region(h)
    base = h.base_offset
    out: list[tuple[int, bytes | None, bool]] = []
    try:
        for _ in range(h.records_count):
            length, pos = read_varint(buf, pos)
            record_end = pos + length
            _ts_delta, p = read_varlong(buf, pos + 1)  # after the attributes byte
            offset_delta, p = read_varint(buf, p)
            key_length, p = read_varint(buf, p)
            key = None if key_length < 0 else bytes(buf[p:p + key_length])
            p += max(key_length, 0)
            value_length, p = read_varint(buf, p)
            out.append((base + offset_delta, key, value_length >= 0))
            pos = record_end
    except IndexError as e:
        raise CorruptRecordError(f"batch at offset {base} ends inside a record") from e
    if pos != end:
        raise CorruptRecordError(f"batch at offset {base}: its records end at {pos}, not at {end}")
    return out


class Retention(enum.Enum):
    DELETE = "delete"
    DELETE_EMPTY = "delete_empty"
    RETAIN_EMPTY = "retain_empty"


@dataclass(frozen=True)
class LastRecord:
    """A producer's last data offset (None when it has only markers) and epoch, from producer state."""

    last_data_offset: int | None
    producer_epoch: int


@dataclass
class FilterContext:
    offset_map: AnyOffsetMap
    txn: TxnTracker
    now_ms: int
    delete_retention_ms: int
    last_records: dict[int, LastRecord]
    #: Keep tombstones and transaction markers whatever their horizon: the local cleaner of a tiered
    #: log, whose older records of the same keys (or transactions) may be in the remote tier, where only
    #: remote compaction can remove them (issue 18); dropping the tombstone here would bring them back.
    keep_deletes: bool = False
    #: Aborted transactions whose ABORT marker stays, for the cleaned segment's transaction index.
    kept_aborted: list[AbortedTxn] = field(default_factory=list)
    records_read: int = 0
    records_kept: int = 0


def _is_last_of_producer(h: BatchHeader, last: dict[int, LastRecord]) -> bool:
    rec = last.get(h.producer_id)
    if rec is None:
        return False
    if rec.last_data_offset is not None:
        return h.last_offset == rec.last_data_offset
    return h.is_control and h.producer_epoch == rec.producer_epoch


def delete_horizon_of(h: BatchHeader) -> int | None:
    return h.base_timestamp if h.has_delete_horizon else None


def filter_batch(h: BatchHeader, ctx: FilterContext) -> bytes | None:
    """The batch as the cleaned log keeps it: its own bytes when nothing changes, a rewrite, or None."""
    horizon = delete_horizon_of(h)
    if h.is_control:
        discardable, aborted = ctx.txn.on_control_batch_read(h)
        if aborted is not None:
            ctx.kept_aborted.append(aborted)
        discard_records = discardable and horizon is not None and horizon <= ctx.now_ms and not ctx.keep_deletes
    else:
        discardable = ctx.txn.on_batch_read(h)
        discard_records = discardable
    if h.producer_id >= 0 and _is_last_of_producer(h, ctx.last_records):
        retention = Retention.RETAIN_EMPTY
    elif discard_records:
        retention = Retention.DELETE
    else:
        retention = Retention.DELETE_EMPTY
    ctx.records_read += h.records_count
    if retention is Retention.DELETE:
        return None
    if isinstance(ctx.offset_map, OffsetMap) and not discard_records and not h.is_control:
        fast = rewrite_data_batch(h, ctx.offset_map, ctx.now_ms, ctx.delete_retention_ms,
                                  ctx.keep_deletes or tombstone_retained(horizon, ctx.now_ms), horizon,
                                  drop_if_empty=retention is Retention.DELETE_EMPTY)
        if fast is not None:
            out, kept_count = fast
            ctx.records_kept += kept_count
            return out
    keys = batch_keys(h)
    if discard_records:
        kept_offsets: list[int] = []
        has_tombstone = False
    elif h.is_control:
        kept_offsets = [o for o, _, _ in keys]
        has_tombstone = False
    else:
        kept_offsets = []
        has_tombstone = False
        keep_deletes = ctx.keep_deletes or tombstone_retained(horizon, ctx.now_ms)
        get = ctx.offset_map.get
        for offset, key, has_value in keys:
            if key is None:
                continue  # a null key cannot be compacted: Kafka's cleaner drops it
            if offset < get(key):
                continue
            if not has_value:
                if not keep_deletes:
                    continue
                has_tombstone = True
            kept_offsets.append(offset)
    ctx.records_kept += len(kept_offsets)
    marker_for_empty_txn = discardable and h.is_control and bool(kept_offsets)
    new_horizon = horizon
    if horizon is None and (has_tombstone or marker_for_empty_txn):
        new_horizon = ctx.now_ms + ctx.delete_retention_ms
    if len(kept_offsets) == len(keys) and new_horizon == horizon:
        return bytes(h.raw())
    if not kept_offsets and retention is Retention.DELETE_EMPTY:
        return None
    wanted = set(kept_offsets)
    kept: list[Record] = [r for r in decode_batch(h) if r.offset in wanted] if wanted else []
    log_append = h.timestamp_type == LOG_APPEND_TIME
    return build_batch(
        kept, base_offset=h.base_offset, compression=h.compression, timestamp_type=h.timestamp_type,
        producer_id=h.producer_id, producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
        is_transactional=h.is_transactional, is_control=h.is_control,
        partition_leader_epoch=h.partition_leader_epoch,
        log_append_time_ms=h.max_timestamp if log_append else None,
        delete_horizon_ms=new_horizon if kept else None,
        last_offset_delta=h.last_offset_delta,
        # An emptied batch keeps its header's timestamps (Kafka's writeEmptyHeader).
        max_timestamp=None if kept or log_append else h.max_timestamp,
    )
