"""The cluster metadata partition ``__cluster_metadata-0``: a UnifiedLog in the ordinary segment format
plus its snapshot files, and loading the image from them at startup (KafkaMetadataLog's part).

Only snapshot-driven cleanup deletes this log's segments: its retention.ms/bytes are forced to -1.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tierlog._util.files import fsync_dir
from tierlog.clock import SYSTEM_CLOCK, Clock
from tierlog.config.log_config import LogConfig
from tierlog.config.settings import setting
from tierlog.errors import CorruptRecordError, CorruptSnapshotError, TierlogError
from tierlog.ids import METADATA_TOPIC
from tierlog.ids import ONE_UUID as METADATA_TOPIC_ID
from tierlog.metadata.delta import MetadataDelta
from tierlog.metadata.errors import InconsistentMetadataLogError, MetadataReplayError
from tierlog.metadata.image import EMPTY_IMAGE, MetadataImage, MetadataProvenance
from tierlog.metadata.policy import RetentionPlan, SegmentSummary, SnapshotSummary, plan_snapshot_retention
from tierlog.metadata.records import MetadataRecord, encode_record
from tierlog.metadata.snapshot import (
    PARTIAL_SUFFIX,
    LoadedSnapshot,
    SnapshotFile,
    list_snapshots,
    load_snapshot,
    read_last_contained_timestamp,
    remove_partial_snapshots,
    write_snapshot,
)
from tierlog.records import BatchHeader, SimpleRecord, build_batch, decode_batch, iter_headers
from tierlog.scheduler import Scheduler
from tierlog.storage.loader import LoadOptions, LoadStats, load_log
from tierlog.storage.log import UnifiedLog
from tierlog.storage.producer_state import AppendOrigin

log = logging.getLogger(__name__)

METADATA_LOG_DIR_NAME = f"{METADATA_TOPIC}-0"
CORRUPT_SUFFIX = ".corrupt"
_READ_CHUNK_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class MetadataLogSettings:
    segment_bytes: int = setting("metadata.log.segment.bytes")
    segment_ms: int = setting("metadata.log.segment.ms")
    #: The largest batch one command may append (Kafka's metadata batches are at most 8 MiB).
    max_batch_bytes: int = 8 * 1024 * 1024
    file_delete_delay_ms: int = 60000
    #: fsync after every append, so a command is durable once it returns (Raft commits only flushed data).
    sync_commits: bool = True

    def log_config(self) -> LogConfig:
        return LogConfig(
            segment_bytes=max(self.segment_bytes, self.max_batch_bytes),
            segment_ms=self.segment_ms,
            retention_ms=-1,
            retention_bytes=-1,
            max_message_bytes=self.max_batch_bytes,
            file_delete_delay_ms=self.file_delete_delay_ms,
        )


@dataclass(frozen=True)
class AppendResult:
    first_offset: int
    last_offset: int
    epoch: int
    size_bytes: int
    append_time_ms: int


@dataclass
class LoadResult:
    """The image a metadata log directory holds, and what the snapshot policy needs to know of it."""

    image: MetadataImage
    #: The snapshot the image was built from (None: replayed from the start of the log).
    snapshot: SnapshotFile | None
    #: Bytes of the batches replayed after that snapshot (the byte trigger's counter).
    tail_bytes: int = 0
    tail_records: int = 0
    #: Append time of the oldest replayed batch (the time trigger's start), None if none.
    oldest_tail_append_time_ms: int | None = None
    #: metadata.version changed in the replayed tail, so no snapshot holds the new level yet.
    metadata_version_changed: bool = False
    warnings: list[str] = field(default_factory=list)
    #: Recovery cut damaged or torn records out of the log, or the log ends below an offset it once
    #: reached: the image may lack topics whose logs exist, so nothing may be deleted for being absent
    #: from it.
    lost_records: bool = False


# -------------------------------------------------------------------------------------------- loading


def _replay_batches(image: MetadataImage, batches: Iterator[BatchHeader], result: LoadResult) -> MetadataImage:
    delta = MetadataDelta(image)
    last: BatchHeader | None = None
    for h in batches:
        if h.is_control:
            last = h
            continue
        features_before = delta.feature_records_replayed
        for rec in decode_batch(h):
            delta.replay_value(rec.value)
            result.tail_records += 1
        if delta.feature_records_replayed != features_before:
            delta.features_epoch = h.last_offset
        result.tail_bytes += h.size_bytes
        append_ms = h.max_timestamp
        oldest = result.oldest_tail_append_time_ms
        if oldest is None or append_ms < oldest:
            result.oldest_tail_append_time_ms = append_ms
        last = h
    if last is not None:
        delta.set_provenance(MetadataProvenance(last.last_offset, last.partition_leader_epoch, last.max_timestamp))
    result.metadata_version_changed = delta.metadata_version_changed
    return delta.apply()


def load_state(
    snapshots: Sequence[SnapshotFile],
    log_start_offset: int,
    log_end_offset: int,
    read_batches: Callable[[int], Iterator[BatchHeader]],
    on_corrupt: Callable[[SnapshotFile, CorruptSnapshotError], None] | None = None,
) -> LoadResult:
    """The newest valid snapshot the log can continue from, plus the log after it.

    A corrupt snapshot is skipped with a warning for the next older one; with none usable the log must
    start at offset 0 to be replayed whole, otherwise the state before its start is lost for good.
    """
    warnings: list[str] = []
    for snap in reversed(snapshots):
        sid = snap.snapshot_id
        if not log_start_offset <= sid.end_offset <= log_end_offset:
            continue
        try:
            loaded: LoadedSnapshot = load_snapshot(snap.path)
        except CorruptSnapshotError as e:
            msg = f"metadata snapshot {snap.path.name} is unusable ({e}); falling back to an older snapshot and the log"
            log.warning(msg)
            warnings.append(msg)
            if on_corrupt is not None:
                on_corrupt(snap, e)
            continue
        result = LoadResult(loaded.image, snap, warnings=warnings)
        result.image = _replay_tail(loaded.image, sid.end_offset, read_batches, result)
        return result
    if log_start_offset > 0:
        raise InconsistentMetadataLogError(
            f"the metadata log starts at offset {log_start_offset} but no usable snapshot covers it "
            f"(snapshots: {', '.join(s.path.name for s in snapshots) or 'none'}); "
            "restore one with `tierlog metadata restore`"
        )
    result = LoadResult(EMPTY_IMAGE, None, warnings=warnings)
    result.image = _replay_tail(EMPTY_IMAGE, 0, read_batches, result)
    return result


def _replay_tail(image: MetadataImage, from_offset: int, read_batches: Callable[[int], Iterator[BatchHeader]],
                 result: LoadResult) -> MetadataImage:
    try:
        return _replay_batches(image, read_batches(from_offset), result)
    except (MetadataReplayError, CorruptRecordError) as e:
        raise InconsistentMetadataLogError(f"cannot replay the metadata log after offset {from_offset}: {e}") from e


def read_log_files(directory: Path) -> Callable[[int], Iterator[BatchHeader]]:
    """Batches from the ``.log`` files of ``directory`` without opening the log (no recovery, no
    writes): for inspecting a broker's data directory. Reading stops at the first damaged batch, the
    point where recovery would truncate."""

    def batches(from_offset: int) -> Iterator[BatchHeader]:
        bases = sorted(int(n[:-4]) for n in os.listdir(directory) if n.endswith(".log") and n[:-4].isdigit())
        for base in bases:
            data = (directory / f"{base:020d}.log").read_bytes()
            try:
                for h in iter_headers(data):
                    if not h.is_valid():
                        log.warning("stopping at the damaged batch at offset %d of %s", h.base_offset, directory)
                        return
                    if h.last_offset >= from_offset:
                        _check_aligned(h, from_offset)
                        yield h
            except CorruptRecordError as e:
                log.warning("stopping at damaged data in %s/%020d.log: %s", directory, base, e)
                return

    return batches


def _check_aligned(h: BatchHeader, from_offset: int) -> None:
    if h.base_offset < from_offset:
        raise InconsistentMetadataLogError(
            f"offset {from_offset} falls inside the metadata batch [{h.base_offset}, {h.last_offset}]"
        )


def load_readonly(directory: Path) -> LoadResult:
    """The image of a (stopped or running) broker's metadata directory, touching nothing."""
    bases = sorted(int(n[:-4]) for n in os.listdir(directory) if n.endswith(".log") and n[:-4].isdigit())
    batches = read_log_files(directory)
    end_offset = 0
    for h in batches(0):
        end_offset = h.next_offset
    log_start = bases[0] if bases else 0
    snapshots = list_snapshots(directory)
    if snapshots and snapshots[-1].snapshot_id.end_offset > end_offset:
        # A restored snapshot ahead of the log: the broker will truncate the log to it on start.
        log_start = end_offset = snapshots[-1].snapshot_id.end_offset
    return load_state(snapshots, log_start, end_offset, batches)


# ------------------------------------------------------------------------------------------ the log


class MetadataLog:
    """The metadata partition's log and snapshots. Not thread-safe: the controller serializes calls."""

    def __init__(self, directory: Path, ulog: UnifiedLog, settings: MetadataLogSettings, clock: Clock) -> None:
        self.dir = directory
        self.log = ulog
        self.settings = settings
        self.clock = clock
        #: The leader epoch of this node's term: one past every epoch in the log or its snapshots,
        #: as if it had just won an election.
        self.epoch = 0
        self._last_contained_ms: dict[Path, int] = {}

    @classmethod
    def open(
        cls, directory: Path, settings: MetadataLogSettings | None = None, *, clock: Clock = SYSTEM_CLOCK,
        scheduler: Scheduler | None = None,
    ) -> tuple[MetadataLog, LoadResult]:
        settings = settings or MetadataLogSettings()
        directory.mkdir(parents=True, exist_ok=True)
        remove_partial_snapshots(directory)
        stats = LoadStats()
        ulog = load_log(directory, settings.log_config(), LoadOptions(), clock=clock, scheduler=scheduler,
                        stats=stats)
        mlog = cls(directory, ulog, settings, clock)
        try:
            if ulog.topic_id is None:
                # Kafka gives the metadata topic the fixed id Uuid.METADATA_TOPIC_ID (= ONE_UUID).
                ulog.write_partition_metadata(METADATA_TOPIC_ID)
            result = mlog._load()
            if stats.truncated_bytes or stats.lost_offsets:
                result.lost_records = True
                result.warnings.append(f"the metadata log lost records: recovery cut {stats.truncated_bytes} bytes "
                                       f"of damaged or torn ones, {stats.lost_offsets} offsets it once had are gone")
        except BaseException:
            ulog.close()
            raise
        mlog.epoch = max([result.image.provenance.last_epoch]
                         + [s.snapshot_id.epoch for s in mlog.snapshots()]) + 1
        return mlog, result

    def _load(self) -> LoadResult:
        self._truncate_to_latest_snapshot()
        ulog = self.log
        for snap in self.snapshots():
            if snap.snapshot_id.end_offset < ulog.log_start_offset:
                log.info("deleting metadata snapshot %s below the log start offset %d", snap.path.name,
                         ulog.log_start_offset)
                snap.path.unlink(missing_ok=True)
        return load_state(self.snapshots(), ulog.log_start_offset, ulog.log_end_offset, self._read_batches,
                          on_corrupt=self._set_aside)

    def _truncate_to_latest_snapshot(self) -> None:
        """A snapshot ahead of the log (``tierlog metadata restore``, or a crash between installing a
        snapshot and truncating) replaces the whole log: the log restarts at its offset."""
        for snap in reversed(self.snapshots()):
            if snap.snapshot_id.end_offset <= self.log.log_end_offset:
                return
            try:
                load_snapshot(snap.path)
            except CorruptSnapshotError as e:
                self._set_aside(snap, e)
                continue
            log.warning("metadata snapshot %s is ahead of the log end offset %d: restarting the log at %d",
                        snap.path.name, self.log.log_end_offset, snap.snapshot_id.end_offset)
            self.log.truncate_fully_and_start_at(snap.snapshot_id.end_offset)
            for older in self.snapshots():
                if older.snapshot_id < snap.snapshot_id:
                    older.path.unlink(missing_ok=True)
            return

    def _set_aside(self, snap: SnapshotFile, error: CorruptSnapshotError) -> None:
        """Keep a corrupt snapshot for inspection under a name nothing loads, so a new snapshot of the
        same offset can be written."""
        target = snap.path.with_name(snap.path.name + CORRUPT_SUFFIX)
        os.replace(snap.path, target)
        log.warning("moved the corrupt metadata snapshot to %s: %s", target, error)

    def _read_batches(self, from_offset: int) -> Iterator[BatchHeader]:
        offset = from_offset
        while offset < self.log.log_end_offset:
            data = self.log.read(offset, _READ_CHUNK_BYTES).read_bytes()
            if not data:
                return
            progressed = False
            for h in iter_headers(data):
                if h.last_offset < offset:
                    continue
                h.ensure_valid()
                _check_aligned(h, offset)
                yield h
                offset = h.next_offset
                progressed = True
            if not progressed:
                raise InconsistentMetadataLogError(f"the metadata log returned no batch at offset {offset}")

    # -- appends ------------------------------------------------------------------------------------

    def append(self, records: Sequence[MetadataRecord], now_ms: int) -> AppendResult:
        """Append ``records`` as one batch: a command's records become visible together or not at all."""
        batch = build_batch([SimpleRecord(None, encode_record(r), timestamp=now_ms) for r in records],
                            partition_leader_epoch=self.epoch)
        info = self.log.append_as_leader(batch, self.epoch, AppendOrigin.COORDINATOR)
        if self.settings.sync_commits:
            self.log.flush()
        return AppendResult(info.first_offset, info.last_offset, self.epoch, len(batch), now_ms)

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    # -- snapshots ----------------------------------------------------------------------------------

    def snapshots(self) -> list[SnapshotFile]:
        return list_snapshots(self.dir)

    def latest_snapshot(self) -> SnapshotFile | None:
        snaps = self.snapshots()
        return snaps[-1] if snaps else None

    def create_snapshot(self, image: MetadataImage, now_ms: int) -> SnapshotFile:
        end = image.provenance.end_offset
        if not self.log.log_start_offset <= end <= self.log.log_end_offset:
            raise TierlogError(
                f"cannot snapshot at offset {end}: outside the log [{self.log.log_start_offset}, "
                f"{self.log.log_end_offset}]"
            )
        snap = write_snapshot(self.dir, image, now_ms)
        self._last_contained_ms[snap.path] = image.provenance.last_append_time_ms
        return snap

    def _last_contained(self, snap: SnapshotFile) -> int:
        ts = self._last_contained_ms.get(snap.path)
        if ts is None:
            ts = self._last_contained_ms[snap.path] = read_last_contained_timestamp(snap.path)
        return ts

    def clean(self, now_ms: int, max_retention_bytes: int, max_retention_ms: int) -> RetentionPlan:
        """Snapshot retention: drop the oldest snapshots past the limits, move the log start offset to
        the oldest kept one and delete the segments wholly before it. The newest snapshot stays."""
        snaps = self.snapshots()
        if len(snaps) < 2:
            return RetentionPlan((), None)
        summaries = [SnapshotSummary(s.snapshot_id.end_offset, s.size_bytes, self._last_contained(s)) for s in snaps]
        with self.log.lock:  # appends may roll a segment meanwhile
            segments = [SegmentSummary(i.base_offset, i.upper_bound_offset, i.size_bytes)
                        for i in self.log.segment_infos()]
        plan = plan_snapshot_retention(summaries, segments, now_ms, max_retention_bytes, max_retention_ms)
        if plan.new_log_start_offset is None:
            return plan
        # Log first, snapshots second: a crash in between leaves extra snapshots, which the next start
        # deletes, never a log that no snapshot covers.
        self.log.maybe_increment_log_start_offset(plan.new_log_start_offset, "metadata snapshot retention")
        self.log.delete_old_segments(now_ms)
        for snap in snaps[: len(plan.delete_snapshots)]:
            log.info("deleting metadata snapshot %s (retention)", snap.path.name)
            snap.path.unlink(missing_ok=True)
            self._last_contained_ms.pop(snap.path, None)
        return plan

    def flush(self) -> None:
        self.log.flush()

    def close(self) -> None:
        self.log.close()


# ------------------------------------------------------------------------------------------ restore


def resolve_metadata_dir(path: Path) -> Path:
    """Accept a broker's log directory or the ``__cluster_metadata-0`` directory itself."""
    return path if path.name == METADATA_LOG_DIR_NAME else path / METADATA_LOG_DIR_NAME


def restore_snapshot(directory: Path, snapshot_path: Path, settings: MetadataLogSettings | None = None, *,
                     clock: Clock = SYSTEM_CLOCK) -> LoadedSnapshot:
    """Make ``snapshot_path`` the base of a stopped broker's metadata: the log restarts empty at the
    snapshot's offset and every other snapshot goes.

    The snapshot is validated, then copied in under a ``.part`` name before anything is changed; it
    becomes visible last. An interrupted restore therefore leaves either the old state or a log no
    snapshot covers, which the broker refuses to start from — never a silently mixed state — and
    running the restore again finishes it.
    """
    loaded = load_snapshot(snapshot_path)
    sid = loaded.snapshot_id
    settings = settings or MetadataLogSettings()
    directory.mkdir(parents=True, exist_ok=True)
    remove_partial_snapshots(directory)
    data = snapshot_path.read_bytes()
    staged = directory / f"{sid.end_offset:020d}-{sid.epoch:010d}-restore{PARTIAL_SUFFIX}"
    with open(staged, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    ulog = load_log(directory, settings.log_config(), LoadOptions(), clock=clock)
    try:
        ulog.truncate_fully_and_start_at(sid.end_offset)
        ulog.flush()
    finally:
        ulog.close()
    for snap in list_snapshots(directory):
        snap.path.unlink(missing_ok=True)
    os.replace(staged, directory / sid.file_name())
    fsync_dir(directory)
    log.info("restored metadata snapshot %s into %s", snapshot_path, directory)
    return loaded
