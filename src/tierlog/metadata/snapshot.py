"""Metadata snapshot files, byte-compatible with KRaft's (KAFKA-FACTS §6.3/§6.4).

``<end offset, 20 digits>-<epoch, 10 digits>.checkpoint``: v2 record batches whose offsets start at
0 and whose partitionLeaderEpoch is the snapshot epoch. The first batch is a control batch holding the
SNAPSHOT_HEADER record, the last one a control batch holding SNAPSHOT_FOOTER; the metadata records sit
in between with null keys. A snapshot is written to ``<id>-<random>.checkpoint.part``, fsynced, then
renamed, so a crash never leaves a partial ``.checkpoint`` behind.
"""

from __future__ import annotations

import logging
import os
import re
import struct
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tierlog._util.files import fsync_dir
from tierlog.errors import CorruptRecordError, CorruptSnapshotError, InvalidRecordError, TierlogError
from tierlog.metadata.delta import MetadataDelta
from tierlog.metadata.image import EMPTY_IMAGE, MetadataImage, MetadataProvenance, image_record_values
from tierlog.metadata.records import MetadataRecord, decode_record
from tierlog.records import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    ControlRecordType,
    SimpleRecord,
    build_batch,
    build_control_batch,
    decode_batch,
    iter_headers,
    parse_control_record_type,
)
from tierlog.records.record import Record

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".checkpoint.part"
DELETED_SUFFIX = ".checkpoint.deleted"
#: KafkaRaftClient.MAX_BATCH_SIZE_BYTES: the largest batch a snapshot writer produces.
MAX_BATCH_BYTES = 8 * 1024 * 1024
#: Record overhead beyond the value for a null-key, header-less record (length, attributes,
#: timestamp delta, offset delta, key length, value length, header count): an upper bound.
_RECORD_OVERHEAD_BYTES = 20

_HEADER_VALUE = struct.Struct(">hq")  # Version, LastContainedLogTimestamp (+ tagged fields byte)
_FOOTER_VALUE = struct.Struct(">h")  # Version (+ tagged fields byte)
_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
#: A backup copy may carry a prefix (``backup-<id>.checkpoint``); its id is still at the end.
_NAME_SUFFIX = re.compile(r"(\d{20})-(\d{10})\.checkpoint$")


@dataclass(frozen=True, order=True)
class SnapshotId:
    """``end_offset`` is exclusive: the snapshot holds every offset below it."""

    end_offset: int
    epoch: int

    def file_name(self) -> str:
        return f"{self.end_offset:020d}-{self.epoch:010d}{SNAPSHOT_SUFFIX}"


def parse_snapshot_file_name(name: str) -> SnapshotId | None:
    """The id of a finished snapshot file name, or None for anything else (``.part``, ``.deleted``)."""
    m = _NAME.match(name)
    return SnapshotId(int(m.group(1)), int(m.group(2))) if m else None


@dataclass(frozen=True)
class SnapshotFile:
    snapshot_id: SnapshotId
    path: Path
    size_bytes: int


def list_snapshots(directory: Path) -> list[SnapshotFile]:
    """Finished snapshots in ``directory``, oldest first."""
    out: list[SnapshotFile] = []
    if not directory.is_dir():
        return out
    for entry in os.scandir(directory):
        sid = parse_snapshot_file_name(entry.name)
        if sid is not None and entry.is_file():
            out.append(SnapshotFile(sid, Path(entry.path), entry.stat().st_size))
    out.sort(key=lambda s: s.snapshot_id)
    return out


def remove_partial_snapshots(directory: Path) -> list[Path]:
    """Delete ``.checkpoint.part`` (a write that never finished) and ``.checkpoint.deleted`` files."""
    removed: list[Path] = []
    if not directory.is_dir():
        return removed
    for entry in os.scandir(directory):
        if entry.name.endswith((PARTIAL_SUFFIX, DELETED_SUFFIX)):
            Path(entry.path).unlink(missing_ok=True)
            removed.append(Path(entry.path))
    for path in removed:
        log.info("removed leftover snapshot file %s", path)
    return removed


# ------------------------------------------------------------------------------------------ writing


def header_value(last_contained_timestamp_ms: int) -> bytes:
    return _HEADER_VALUE.pack(0, last_contained_timestamp_ms) + b"\x00"


def footer_value() -> bytes:
    return _FOOTER_VALUE.pack(0) + b"\x00"


def snapshot_batches(
    values: Iterator[bytes], *, epoch: int, last_contained_timestamp_ms: int, now_ms: int,
    max_batch_bytes: int = MAX_BATCH_BYTES,
) -> Iterator[bytes]:
    """The batches of a snapshot file in order: header, metadata records, footer."""
    yield build_control_batch([(ControlRecordType.SNAPSHOT_HEADER, header_value(last_contained_timestamp_ms))],
                              timestamp_ms=now_ms, base_offset=0, partition_leader_epoch=epoch)
    next_offset = 1
    pending: list[SimpleRecord] = []
    pending_bytes = 0
    for value in values:
        size = len(value) + _RECORD_OVERHEAD_BYTES
        if pending and pending_bytes + size > max_batch_bytes:
            yield build_batch(pending, base_offset=next_offset, partition_leader_epoch=epoch)
            next_offset += len(pending)
            pending = []
            pending_bytes = 0
        pending.append(SimpleRecord(None, value, timestamp=now_ms))
        pending_bytes += size
    if pending:
        yield build_batch(pending, base_offset=next_offset, partition_leader_epoch=epoch)
        next_offset += len(pending)
    yield build_control_batch([(ControlRecordType.SNAPSHOT_FOOTER, footer_value())],
                              timestamp_ms=now_ms, base_offset=next_offset, partition_leader_epoch=epoch)


def write_snapshot(directory: Path, image: MetadataImage, now_ms: int, *,
                   max_batch_bytes: int = MAX_BATCH_BYTES) -> SnapshotFile:
    """Write ``image`` as the snapshot ``(image end offset, image epoch)`` atomically.

    If that snapshot already exists it is returned untouched (Kafka's createSnapshot does the same:
    two snapshots of one offset hold the same state).
    """
    prov = image.provenance
    if prov.end_offset <= 0 or prov.last_epoch < 0:
        raise ValueError(f"cannot snapshot an image that contains no record (provenance {prov})")
    sid = SnapshotId(prov.end_offset, prov.last_epoch)
    final = directory / sid.file_name()
    if final.exists():
        log.info("snapshot %s already exists", final)
        return SnapshotFile(sid, final, final.stat().st_size)
    fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f"{sid.end_offset:020d}-{sid.epoch:010d}-",
                                    suffix=PARTIAL_SUFFIX)
    tmp = Path(tmp_name)
    size = 0
    try:
        with os.fdopen(fd, "wb") as f:
            for batch in snapshot_batches(image_record_values(image), epoch=sid.epoch,
                                          last_contained_timestamp_ms=prov.last_append_time_ms,
                                          now_ms=now_ms, max_batch_bytes=max_batch_bytes):
                f.write(batch)
                size += len(batch)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(directory)
    return SnapshotFile(sid, final, size)


# ------------------------------------------------------------------------------------------ reading


@dataclass(frozen=True)
class LoadedSnapshot:
    snapshot_id: SnapshotId
    image: MetadataImage
    last_contained_timestamp_ms: int
    size_bytes: int
    records: int


class SnapshotReader:
    """Iterating validates a snapshot's bytes and yields its metadata records; the header's
    LastContainedLogTimestamp is available once the first record (or the end) has been reached.

    Raises CorruptSnapshotError for a bad CRC, a missing header or footer, offsets that do not start
    at 0 or do not follow on, trailing bytes, or a record that does not decode.
    """

    def __init__(self, data: bytes, *, source: str = "snapshot") -> None:
        self.data = data
        self.source = source
        self.last_contained_timestamp_ms = -1

    def __iter__(self) -> Iterator[MetadataRecord]:
        for value in self.values():
            try:
                record = decode_record(value)
            except TierlogError as e:
                raise CorruptSnapshotError(f"{self.source}: {e}") from e
            yield record

    def values(self) -> Iterator[bytes | None]:
        """The encoded records (the caller decodes them)."""
        try:
            yield from self._values()
        except CorruptSnapshotError:
            raise
        except (CorruptRecordError, InvalidRecordError, TierlogError) as e:
            raise CorruptSnapshotError(f"{self.source}: {e}") from e

    def _values(self) -> Iterator[bytes | None]:
        data = self.data
        source = self.source
        expected_offset = 0
        position = 0
        footer_seen = False
        first = True
        for h in iter_headers(data):
            if footer_seen:
                raise CorruptSnapshotError(f"{source}: a batch follows the snapshot footer at offset {h.base_offset}")
            h.ensure_valid()
            if h.base_offset != expected_offset:
                raise CorruptSnapshotError(
                    f"{source}: batch at position {h.position} starts at offset {h.base_offset}, "
                    f"expected {expected_offset}"
                )
            expected_offset = h.next_offset
            position = h.position + h.size_bytes
            records = decode_batch(h)
            if first:
                first = False
                self.last_contained_timestamp_ms = _parse_header(h, records, source)
                continue
            if h.is_control:
                if records and parse_control_record_type(records[0].key) is ControlRecordType.SNAPSHOT_FOOTER:
                    footer_seen = True
                continue  # other control records (kraft.version, voters) carry no metadata state
            for rec in records:
                yield rec.value
        if first:
            raise CorruptSnapshotError(f"{source}: empty snapshot (no header batch)")
        if not footer_seen:
            raise CorruptSnapshotError(f"{source}: the snapshot footer is missing (the file is truncated)")
        if position != len(data):
            raise CorruptSnapshotError(f"{source}: {len(data) - position} bytes follow the snapshot footer")


def _parse_header(h: BatchHeader, records: list[Record], source: str) -> int:
    if not h.is_control or not records or \
            parse_control_record_type(records[0].key) is not ControlRecordType.SNAPSHOT_HEADER:
        raise CorruptSnapshotError(f"{source}: the first batch is not a snapshot header control batch")
    value = records[0].value or b""
    if len(value) < _HEADER_VALUE.size:
        raise CorruptSnapshotError(f"{source}: snapshot header value of {len(value)} bytes is too short")
    return int(_HEADER_VALUE.unpack_from(value, 0)[1])


def load_snapshot_data(data: bytes, snapshot_id: SnapshotId, *, source: str = "snapshot") -> LoadedSnapshot:
    delta = MetadataDelta(EMPTY_IMAGE)
    reader = SnapshotReader(data, source=source)
    replay = delta.replay_value
    count = 0
    try:
        for value in reader.values():
            replay(value)
            count += 1
    except CorruptSnapshotError:
        raise
    except TierlogError as e:
        raise CorruptSnapshotError(f"{source}: {e}") from e
    last_ms = reader.last_contained_timestamp_ms
    delta.set_provenance(MetadataProvenance(snapshot_id.end_offset - 1, snapshot_id.epoch, last_ms))
    return LoadedSnapshot(snapshot_id, delta.apply(), last_ms, len(data), count)


def snapshot_id_of(path: Path) -> SnapshotId | None:
    """The id at the end of a snapshot file's name, also for a prefixed backup copy."""
    m = _NAME_SUFFIX.search(path.name)
    return SnapshotId(int(m.group(1)), int(m.group(2))) if m else None


def load_snapshot(path: Path, snapshot_id: SnapshotId | None = None) -> LoadedSnapshot:
    """Read and validate one snapshot file into an image. ``snapshot_id`` defaults to the one in the
    file name: the end offset is stored nowhere else."""
    sid = snapshot_id if snapshot_id is not None else snapshot_id_of(path)
    if sid is None:
        raise CorruptSnapshotError(f"{path}: not a snapshot file name (<20 digits>-<10 digits>.checkpoint)")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CorruptSnapshotError(f"{path}: {e}") from e
    return load_snapshot_data(data, sid, source=str(path))


def read_last_contained_timestamp(path: Path) -> int:
    """The header's LastContainedLogTimestamp, reading only the first batch (retention needs it for
    every snapshot, and snapshots can be large)."""
    with open(path, "rb") as f:
        head = f.read(BATCH_HEADER_SIZE)
        if len(head) < BATCH_HEADER_SIZE:
            raise CorruptSnapshotError(f"{path}: shorter than one batch header")
        size = LOG_OVERHEAD + int.from_bytes(head[8:12], "big", signed=True)
        data = head + f.read(max(0, size - BATCH_HEADER_SIZE))
    try:
        h = BatchHeader(data, 0)
        h.ensure_valid()
        records = decode_batch(h)
    except TierlogError as e:
        raise CorruptSnapshotError(f"{path}: {e}") from e
    return _parse_header(h, records, str(path))
