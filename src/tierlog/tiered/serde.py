"""Remote log metadata records, encoded as Kafka encodes the values of ``__remote_log_metadata``
(KAFKA-FACTS §5.5): unsigned varint frame version 1, apiKey, record version 0, then the flexible
encoding with an empty tagged-field section closing every struct. A record written here decodes with
Kafka's RemoteLogMetadataSerde, so the durable store could be replayed into Kafka's topic.

apiKeys 0..2 are Kafka's; :class:`RemoteLogStartOffset` (tierlog's own: the log start offset a
DeleteRecords moved, which retention applies to remote segments) uses 10000 like every tierlog type.

Tagged field 10000 of the segment metadata and update records (tierlog's own, added after the first
release; tagged fields are how Kafka's flexible versions add optional fields without a version bump:
a reader that does not know the tag skips it, so older tierlog and Kafka's serde read these records,
and records without it read as before): the custom metadata a plugin returned over the limit,
carried by DELETE_SEGMENT_STARTED only (seed 002; see ``RemoteLogSegmentMetadata.rejected_custom_metadata``).
Tagged field 10001 of the segment metadata record, empty: the max timestamp was taken from the
segment's records (``RemoteLogSegmentMetadata.max_timestamp_from_records``); a record without it
(an older tierlog's upload) has a max timestamp taken from the batch headers.
Tagged field 10002 of the segment metadata record: the 16-byte ids of the segments (same partition)
a remote compaction output replaces (``RemoteLogSegmentMetadata.replaces``).
Tagged field 10003 of the segment metadata record: the smallest record timestamp of the segment, an
int64 (``RemoteLogSegmentMetadata.min_timestamp_ms``); absent when unknown.
"""

from __future__ import annotations

from dataclasses import dataclass

from tierlog.metadata._codec import Reader, Writer
from tierlog.metadata.errors import MetadataReplayError
from tierlog.tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)

FRAME_VERSION = 1
SEGMENT_METADATA_API_KEY = 0
SEGMENT_UPDATE_API_KEY = 1
PARTITION_DELETE_API_KEY = 2
LOG_START_OFFSET_API_KEY = 10000
REJECTED_CUSTOM_METADATA_TAG = 10000
MAX_TIMESTAMP_FROM_RECORDS_TAG = 10001
REPLACES_TAG = 10002
MIN_TIMESTAMP_TAG = 10003
_ID_BYTES = 16


@dataclass(frozen=True)
class RemoteLogStartOffset:
    topic_id_partition: TopicIdPartition
    log_start_offset: int
    event_timestamp_ms: int


RemoteLogMetadataRecord = (
    RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate | RemotePartitionDeleteMetadata | RemoteLogStartOffset
)


class SerdeError(MetadataReplayError):
    pass


def _write_tip(w: Writer, tip: TopicIdPartition) -> None:
    w.string(tip.topic)
    w.uuid(tip.topic_id)
    w.i32(tip.partition)
    w.tagged_fields()


def _read_tip(r: Reader) -> TopicIdPartition:
    topic = r.string()
    topic_id = bytes(r.uuid())
    partition = r.i32()
    r.tagged_fields()
    return TopicIdPartition(topic_id, topic, partition)


def _write_segment_id(w: Writer, sid: RemoteLogSegmentId) -> None:
    _write_tip(w, sid.topic_id_partition)
    w.uuid(sid.id)
    w.tagged_fields()


def _read_segment_id(r: Reader) -> RemoteLogSegmentId:
    tip = _read_tip(r)
    sid = bytes(r.uuid())
    r.tagged_fields()
    return RemoteLogSegmentId(tip, sid)


def _write_nullable_bytes(w: Writer, data: bytes | None) -> None:
    if data is None:
        w.uvarint(0)
    else:
        w.uvarint(len(data) + 1)
        w.buf += data


def _read_nullable_bytes(r: Reader) -> bytes | None:
    n = r.uvarint()
    if n == 0:
        return None
    if n - 1 > r.end - r.pos:
        raise SerdeError(f"bytes field of {n - 1} bytes is longer than the record")
    start = r.pos
    r.pos += n - 1
    return bytes(r.buf[start : r.pos])


def _read_tags(r: Reader) -> tuple[bytes | None, bool, bytes, int | None]:
    """The record's tagged section (unknown tags skipped): the rejected custom metadata in it,
    whether it says the max timestamp was taken from the records, the replaced segments' ids and
    the smallest record timestamp."""
    tags = r.tagged_fields()
    data = tags.get(REJECTED_CUSTOM_METADATA_TAG)
    replaces = bytes(tags.get(REPLACES_TAG, b""))
    if len(replaces) % _ID_BYTES:
        raise SerdeError(f"replaced segment ids of {len(replaces)} bytes are not whole 16-byte ids")
    min_ts = tags.get(MIN_TIMESTAMP_TAG)
    if min_ts is not None and len(min_ts) != 8:
        raise SerdeError(f"a smallest timestamp of {len(min_ts)} bytes is not an int64")
    smallest = None if min_ts is None else int.from_bytes(bytes(min_ts), "big", signed=True)
    return None if data is None else bytes(data), MAX_TIMESTAMP_FROM_RECORDS_TAG in tags, replaces, smallest


def _frame(w: Writer, api_key: int) -> None:
    w.uvarint(FRAME_VERSION)
    w.uvarint(api_key)
    w.uvarint(0)


def _rejected_tag(data: bytes | None) -> dict[int, bytes] | None:
    return None if data is None else {REJECTED_CUSTOM_METADATA_TAG: data}


def encode(record: RemoteLogMetadataRecord) -> bytes:
    w = Writer()
    tags: dict[int, bytes] | None = None
    if isinstance(record, RemoteLogSegmentMetadata):
        _frame(w, SEGMENT_METADATA_API_KEY)
        _write_segment_id(w, record.segment_id)
        w.i64(record.start_offset)
        w.i64(record.end_offset)
        w.i32(record.broker_id)
        w.i64(record.max_timestamp_ms)
        w.i64(record.event_timestamp_ms)
        w.array_length(len(record.segment_leader_epochs))
        for epoch, offset in record.segment_leader_epochs:
            w.i32(epoch)
            w.i64(offset)
            w.tagged_fields()
        w.i32(record.segment_size_in_bytes)
        _write_nullable_bytes(w, record.custom_metadata)
        w.i8(int(record.state))
        tags = _rejected_tag(record.rejected_custom_metadata)
        if record.max_timestamp_from_records:
            tags = {**(tags or {}), MAX_TIMESTAMP_FROM_RECORDS_TAG: b""}
        if record.replaces:
            tags = {**(tags or {}), REPLACES_TAG: b"".join(sid.id for sid in record.replaces)}
        if record.min_timestamp_ms is not None:
            tags = {**(tags or {}), MIN_TIMESTAMP_TAG: record.min_timestamp_ms.to_bytes(8, "big", signed=True)}
    elif isinstance(record, RemoteLogSegmentMetadataUpdate):
        _frame(w, SEGMENT_UPDATE_API_KEY)
        _write_segment_id(w, record.segment_id)
        w.i32(record.broker_id)
        w.i64(record.event_timestamp_ms)
        _write_nullable_bytes(w, record.custom_metadata)
        w.i8(int(record.state))
        tags = _rejected_tag(record.rejected_custom_metadata)
    elif isinstance(record, RemotePartitionDeleteMetadata):
        _frame(w, PARTITION_DELETE_API_KEY)
        _write_tip(w, record.topic_id_partition)
        w.i32(record.broker_id)
        w.i64(record.event_timestamp_ms)
        w.i8(int(record.state))
    else:
        _frame(w, LOG_START_OFFSET_API_KEY)
        _write_tip(w, record.topic_id_partition)
        w.i64(record.log_start_offset)
        w.i64(record.event_timestamp_ms)
    w.tagged_fields(tags)
    return bytes(w.buf)


def decode(value: bytes) -> RemoteLogMetadataRecord:
    r = Reader(value)
    frame = r.uvarint()
    if frame != FRAME_VERSION:
        raise SerdeError(f"unknown remote log metadata frame version {frame}")
    api_key = r.uvarint()
    version = r.uvarint()
    if version != 0:
        raise SerdeError(f"remote log metadata record apiKey {api_key} version {version} is not supported")
    record: RemoteLogMetadataRecord
    try:
        if api_key == SEGMENT_METADATA_API_KEY:
            sid = _read_segment_id(r)
            start, end, broker, max_ts, event_ts = r.i64(), r.i64(), r.i32(), r.i64(), r.i64()
            epochs = []
            for _ in range(r.array_length()):
                epochs.append((r.i32(), r.i64()))
                r.tagged_fields()
            size = r.i32()
            custom = _read_nullable_bytes(r)
            state = RemoteLogSegmentState(r.i8())
            rejected, from_records, replaced, min_ts = _read_tags(r)
            replaces = tuple(RemoteLogSegmentId(sid.topic_id_partition, replaced[i:i + _ID_BYTES])
                             for i in range(0, len(replaced), _ID_BYTES))
            record = RemoteLogSegmentMetadata(sid, start, end, max_ts, broker, event_ts, size, tuple(epochs),
                                              state, custom, rejected, max_timestamp_from_records=from_records,
                                              replaces=replaces, min_timestamp_ms=min_ts)
        elif api_key == SEGMENT_UPDATE_API_KEY:
            sid = _read_segment_id(r)
            broker, event_ts = r.i32(), r.i64()
            custom = _read_nullable_bytes(r)
            state = RemoteLogSegmentState(r.i8())
            rejected, _, _, _ = _read_tags(r)
            record = RemoteLogSegmentMetadataUpdate(sid, event_ts, state, broker, custom, rejected)
        elif api_key == PARTITION_DELETE_API_KEY:
            tip = _read_tip(r)
            broker, event_ts = r.i32(), r.i64()
            record = RemotePartitionDeleteMetadata(tip, RemotePartitionDeleteState(r.i8()), event_ts, broker)
        elif api_key == LOG_START_OFFSET_API_KEY:
            tip = _read_tip(r)
            record = RemoteLogStartOffset(tip, r.i64(), r.i64())
        else:
            raise SerdeError(f"unknown remote log metadata apiKey {api_key}")
        if api_key not in (SEGMENT_METADATA_API_KEY, SEGMENT_UPDATE_API_KEY):
            r.tagged_fields()
        r.expect_end("remote log metadata record")
    except SerdeError:
        raise
    except (ValueError, MetadataReplayError) as e:
        raise SerdeError(f"invalid remote log metadata record (apiKey {api_key}): {e}") from e
    return record
