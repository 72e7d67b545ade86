"""What a set of log directories and a remote tier hold, read on the Spark driver without a broker:
the partitions, their local segments and remote segments, the earliest and latest offsets, and
offsets for timestamps (ListOffsets, answered from the files)."""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np

from tierlog.errors import TierlogError
from tierlog.ids import TopicPartition, uuid_to_base64
from tierlog.pipeline.broker_tail import (
    BrokerSpec,
    broker_offset_for_timestamp,
    broker_partitions,
    broker_topic_ids,
)
from tierlog.pipeline.reader import (
    RemoteSpec,
    ScanRange,
    offset_index_entries,
    open_segment,
    position_bounds,
    read_index,
    remote_storage,
    segment_base_offset,
    time_index_entries,
)
from tierlog.records import decode_batch
from tierlog.records.header import BatchHeader, iter_headers
from tierlog.storage import files
from tierlog.storage.checkpoints import (
    CLEAN_SHUTDOWN,
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES,
    PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT,
    OffsetCheckpointFile,
    PartitionMetadataFile,
)
from tierlog.storage.producer_snapshot import decode_snapshot
from tierlog.storage.txn_index import ABORTED_TXN_SIZE, AbortedTxn
from tierlog.tiered.api import IndexType, RemoteLogSegmentMetadata, RemoteStorageError, TopicIdPartition
from tierlog.tiered.manifest import PartitionManifest, build_manifest, read_manifests
from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager

log = logging.getLogger(__name__)

#: Directories beside the partitions in a log dir (tiering state, the metadata log).
SKIPPED_DIRS = frozenset({"remote-log-metadata", "remote-log-index-cache", "__cluster_metadata-0"})


@dataclass(frozen=True)
class LocalSegment:
    base_offset: int
    log_path: str
    size_bytes: int


@dataclass
class PartitionLog:
    """One partition across both tiers, oldest data first."""

    topic: str
    partition: int
    directory: Path | None
    local_segments: list[LocalSegment] = field(default_factory=list)
    #: The first offset readable locally (the checkpointed log start offset, or the first segment).
    local_start: int | None = None
    log_end_offset: int = 0
    #: COPY_SEGMENT_FINISHED remote segments by start offset.
    remote_segments: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    remote_start: int | None = None
    #: Why the remote segments cannot be read with the options given (raised when a read or a job
    #: needs them, so partitions that are only local still read).
    remote_error: str | None = None
    #: tail=broker: what the remote tier does not hold is read through this broker, whose earliest
    #: offset (its log start) is ``broker_start``; ``log_end_offset`` is then the broker's latest.
    broker: BrokerSpec | None = None
    broker_start: int | None = None
    _last_stable: int | None = None
    _aborted: list[tuple[int, int, int]] | None = None

    @property
    def earliest(self) -> int:
        if self.broker is not None and self.broker_start is not None:
            return self.broker_start  # the broker's log start offset is the partition's
        starts = [s for s in (self.remote_start, self.local_start) if s is not None]
        return min(starts) if starts else self.log_end_offset

    @property
    def latest(self) -> int:
        return self.log_end_offset

    def local_bounds(self) -> list[tuple[LocalSegment, int]]:
        """Each local segment with its exclusive end offset."""
        out = []
        for i, seg in enumerate(self.local_segments):
            nxt = self.local_segments[i + 1].base_offset if i + 1 < len(self.local_segments) else self.log_end_offset
            out.append((seg, max(nxt, seg.base_offset)))
        return out

    def ranges(self, start: int, end: int) -> list[ScanRange]:
        """One ScanRange per segment overlapping [start, end); local copies win where both tiers hold
        an offset, since a local read costs no request."""
        if self.broker is not None:
            return self._broker_ranges(start, end)
        out: list[ScanRange] = []
        local_start = self.local_start if self.local_start is not None else self.log_end_offset
        for md in self.remote_segments:
            lo = max(start, md.start_offset, self.remote_start or 0)
            hi = min(end, md.end_offset + 1, local_start)
            if lo < hi:
                self.require_remote()
                out.append(ScanRange(self.topic, self.partition, lo, hi, remote=md))
        for seg, seg_end in self.local_bounds():
            lo = max(start, seg.base_offset, local_start)
            hi = min(end, seg_end)
            if lo < hi:
                out.append(ScanRange(self.topic, self.partition, lo, hi, log_path=seg.log_path))
        return out

    def _broker_ranges(self, start: int, end: int) -> list[ScanRange]:
        """tail=broker: the remote segments where the manifest has them, the broker for every offset
        in between and after (a manifest behind the broker's tiering only moves work to the broker)."""
        out: list[ScanRange] = []
        at = max(start, self.earliest)
        for md in self.remote_segments:
            lo, hi = max(at, md.start_offset), min(end, md.end_offset + 1)
            if lo >= hi:
                continue
            self.require_remote()
            if lo > at:
                out.append(ScanRange(self.topic, self.partition, at, lo, broker=self.broker))
            out.append(ScanRange(self.topic, self.partition, lo, hi, remote=md))
            at = hi
        if at < end:
            out.append(ScanRange(self.topic, self.partition, at, end, broker=self.broker))
        return out

    def require_remote(self) -> None:
        if self.remote_error is not None:
            raise TierlogError(self.remote_error)

    def missing(self, start: int, end: int) -> list[tuple[int, int]]:
        """Offset gaps in [start, end) that neither tier covers (data lost to retention or damage)."""
        covered = sorted((r.start_offset, r.end_offset) for r in self.ranges(start, end))
        gaps = []
        at = start
        for lo, hi in covered:
            if lo > at:
                gaps.append((at, lo))
            at = max(at, hi)
        if at < end:
            gaps.append((at, end))
        return gaps


def last_stable_offset(plog: PartitionLog) -> int:
    """The first offset of the oldest transaction still open (the log end offset when none is): what a
    read_committed consumer may read up to.

    Tiering copies only below the LSO, so open transactions are local: their state is the newest
    producer snapshot's (each producer's open transaction's first offset) plus a replay of the batch
    headers after it, as the broker rebuilds it on startup."""
    if plog._last_stable is not None:
        return plog._last_stable
    leo = plog.log_end_offset
    if plog.directory is None or not plog.local_segments:
        plog._last_stable = leo
        return leo
    local_start = plog.local_start or 0
    snapshots = sorted(int(p.name.split(".")[0]) for p in plog.directory.glob("*.snapshot")
                       if p.name.split(".")[0].isdigit() and local_start <= int(p.name.split(".")[0]) <= leo)
    open_txns: dict[int, int] = {}
    start = local_start
    if snapshots:
        start = snapshots[-1]
        entries = decode_snapshot((plog.directory / f"{start:020d}.snapshot").read_bytes())
        open_txns = {e.producer_id: e.current_txn_first_offset for e in entries if e.current_txn_first_offset >= 0}
    for rng in plog.ranges(start, leo):
        index = offset_index_entries(read_index(rng, IndexType.OFFSET, None), segment_base_offset(rng))
        position, _ = position_bounds(index, rng.start_offset, rng.end_offset)
        for h in _stream_headers(rng, None, position):
            if h.base_offset < start or not h.is_transactional:
                continue
            if h.is_control:
                open_txns.pop(h.producer_id, None)  # a COMMIT or ABORT marker ends it either way
            else:
                open_txns.setdefault(h.producer_id, h.base_offset)
    plog._last_stable = min(open_txns.values(), default=leo)
    return plog._last_stable


def aborted_transactions(plog: PartitionLog, spec: RemoteSpec | None) -> list[tuple[int, int, int]]:
    """(producer id, first offset, last offset) of every aborted transaction, from the transaction
    indexes of both tiers (an entry sits in the segment of its ABORT marker, which may be later than
    the segments holding its records: hence all of them, gathered once on the driver)."""
    if plog._aborted is None:
        found = []
        for rng in plog.ranges(plog.earliest, plog.latest):
            if rng.broker is not None:
                continue  # the broker's consumer skips aborted records itself
            raw = read_index(rng, IndexType.TRANSACTION, spec)
            for at in range(0, len(raw) - ABORTED_TXN_SIZE + 1, ABORTED_TXN_SIZE):
                txn = AbortedTxn.from_bytes(raw, at)
                found.append((txn.producer_id, txn.first_offset, txn.last_offset))
        plog._aborted = sorted(set(found), key=lambda t: (t[1], t[0]))
    return plog._aborted


def _local_segments(directory: Path) -> list[LocalSegment]:
    out = []
    with os.scandir(directory) as it:
        for entry in it:
            stem, dot, suffix = entry.name.partition(".")
            if dot and suffix == "log" and stem.isdigit():
                out.append(LocalSegment(int(stem), entry.path, entry.stat().st_size))
    return sorted(out, key=lambda s: s.base_offset)


def _next_offset(seg: LocalSegment) -> int:
    """The offset after the last whole batch of a segment, reading only from its last index entry."""
    rng = ScanRange("", 0, seg.base_offset, seg.base_offset + 1, log_path=seg.log_path)
    offsets, positions = offset_index_entries(read_index(rng, IndexType.OFFSET, None), seg.base_offset)
    position = int(positions[-1]) if len(positions) else 0
    next_offset = int(offsets[-1]) + 1 if len(offsets) else seg.base_offset
    size = os.stat(seg.log_path).st_size
    if position >= size:
        position, next_offset = 0, seg.base_offset
    with open(seg.log_path, "rb") as f:
        f.seek(position)
        data = f.read()
    try:
        for h in iter_headers(data):
            next_offset = h.next_offset
    except TierlogError:
        pass  # a zero-filled or damaged tail ends the log here, as recovery would cut it
    return next_offset


def discover(paths: Sequence[Path], remote: RemoteSpec | None = None) -> dict[TopicPartition, PartitionLog]:
    """Every live partition in ``paths`` and in the remote metadata (a fully tiered partition whose
    local directory is gone still reads from the remote tier)."""
    logs: dict[TopicPartition, PartitionLog] = {}
    start_offsets: dict[TopicPartition, int] = {}
    for d in paths:
        d = Path(d)
        if not d.is_dir():
            raise TierlogError(f"log directory {d} does not exist")
        _require_log_dir(d)
        checkpoint = d / LOG_START_OFFSET_CHECKPOINT
        if checkpoint.exists():
            try:
                start_offsets.update(OffsetCheckpointFile(checkpoint).read())
            except TierlogError:
                pass  # only an optimisation: the first segment still bounds the log
        with os.scandir(d) as it:
            for entry in it:
                if not entry.is_dir() or entry.name in SKIPPED_DIRS:
                    continue
                try:
                    tp = files.parse_topic_partition_name(entry.name)
                except ValueError:
                    continue
                logs[tp] = PartitionLog(tp[0], tp[1], Path(entry.path), _local_segments(Path(entry.path)))
    for tp, plog in logs.items():
        segs = plog.local_segments
        if segs:
            plog.log_end_offset = _next_offset(segs[-1])
            plog.local_start = max(segs[0].base_offset, min(start_offsets.get(tp, 0), plog.log_end_offset))
    if remote is not None:
        _add_remote(logs, remote)
    return logs


def discover_without_disk(remote: RemoteSpec | None, broker: BrokerSpec | None,
                          wanted: Callable[[str], bool]) -> dict[TopicPartition, PartitionLog]:
    """``tail=broker`` and ``tail=none``: the partitions without the broker's disk. The remote tier's
    manifests give the remote segments; with a broker, its partitions and offsets decide what exists
    and where it starts and ends (the broker reads what the manifests do not cover). Without one,
    each partition is what its manifest holds: [its first tiered offset, its last + 1)."""
    logs: dict[TopicPartition, PartitionLog] = {}
    if broker is None:
        if remote is not None:
            _add_remote(logs, remote)
        return {tp: plog for tp, plog in logs.items() if plog.remote_segments and wanted(tp[0])}
    found = broker_partitions(broker, wanted)
    if remote is not None:
        _add_remote(logs, remote, broker_topic_ids(broker, sorted({t for t, _ in found})))
    out: dict[TopicPartition, PartitionLog] = {}
    for tp, (low, high) in found.items():
        plog = logs.get(tp) or PartitionLog(tp[0], tp[1], None)
        plog.broker, plog.broker_start, plog.log_end_offset = broker, low, high
        plog._last_stable = high  # the broker's ListOffsets answered with the reader's isolation level
        if broker.read_committed:
            # Which tiered records belong to aborted transactions can depend on markers not tiered
            # yet: only the broker sees both, so read_committed reads through it alone.
            plog.remote_segments = []
        out[tp] = plog
    return out


#: Files only a Kafka or tierlog log directory holds (any one is enough: a directory written by
#: hand with UnifiedLog has partition directories only).
_LOG_DIR_MARKERS = (META_PROPERTIES, LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT, CLEAN_SHUTDOWN)


def _is_log_dir(d: Path) -> bool:
    if any((d / name).exists() for name in _LOG_DIR_MARKERS):
        return True
    with os.scandir(d) as it:
        for entry in it:
            if entry.is_dir() and (entry.name in SKIPPED_DIRS or _is_partition_dir(entry.name)):
                return True
    return False


def _is_partition_dir(name: str) -> bool:
    try:
        files.parse_topic_partition_name(name)
    except ValueError:
        return False
    return True


def _require_log_dir(d: Path) -> None:
    """A path that is no log directory is an error, not an empty read: most often it is one level
    above (or below) the right one."""
    if _is_log_dir(d):
        return
    with os.scandir(d) as it:
        inside = sorted(e.name for e in it if e.is_dir() and _is_log_dir(Path(e.path)))
    hint = f"; {', '.join(str(d / n) for n in inside)} {'is' if len(inside) == 1 else 'are'}" if inside else ""
    raise TierlogError(f"{d} is not a Kafka or tierlog log directory (no {META_PROPERTIES}, no offset "
                       f"checkpoints, no <topic>-<partition> directories){hint}")


def _topic_id(plog: PartitionLog) -> bytes | None:
    if plog.directory is None:
        return None
    try:
        return PartitionMetadataFile(plog.directory / PARTITION_METADATA).read()
    except (OSError, TierlogError):
        return None


def _check_plugin(spec: RemoteSpec, tip: TopicIdPartition, segments: list[RemoteLogSegmentMetadata],
                  source: str) -> str | None:
    """When no option named the plugin, the local-directory default is only right if that plugin
    wrote the tier: its segments carry no custom metadata, and its directory exists. Anything else
    would read (or report missing) files from a directory that was never the remote tier."""
    if not spec.defaulted:
        return None
    where = dict(spec.props).get("dir", "")
    if any(m.custom_metadata for m in segments):
        return (
            f"the remote tier of {tip.topic}-{tip.partition} (listed in {source}) was written by a "
            "plugin other than the local-directory one (its segments carry custom metadata): give the plugin "
            "with option remote.log.storage.manager.class.name and its rsm.config.* options, or option "
            "config with the broker's server.properties")
    if where and not Path(where).is_dir():
        return (
            f"{source} lists remote segments of {tip.topic}-{tip.partition}, but the local-directory "
            f"remote tier {where} does not exist: give rsm.config.dir, or the plugin the broker uses "
            "(remote.log.storage.manager.class.name and its rsm.config.* options, or option config)")
    return None


def remote_manifests(spec: RemoteSpec) -> list[PartitionManifest] | None:
    """Every partition's manifest the remote tier holds (tiered/manifest.py: the broker publishes one
    per partition beside its segments, a checkpoint and the deltas after it), read through the plugin
    with the reader's options and credentials; None when the plugin keeps none."""
    rsm = remote_storage(spec)
    try:
        return read_manifests(rsm)
    except RemoteStorageError as e:
        # The store's first line names the request and its status; the client's debug dump after it
        # stays in the chained exception (--verbose).
        first = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
        raise TierlogError(f"reading the remote tier's manifests ({spec.class_name.rsplit('.', 1)[-1]}): "
                           f"{first}") from e


def _journal_manifests(metadata_dir: Path) -> list[PartitionManifest]:
    """The same, derived from the broker's journal (a tier without manifests, read beside the broker)."""
    store = FileRemoteLogMetadataManager(metadata_dir, read_only=True)
    try:
        return [build_manifest(store, tip) for tip in store.partitions()]
    finally:
        store.close()


def _choose(found: list[PartitionManifest], wanted: bytes | None) -> PartitionManifest | None:
    """The manifest of the topic that exists now among those of one partition name. A deleted
    topic's (its deletion under way) never; then the topic id the local partition or the broker
    gives; failing that (tail=none, or a broker that cannot say), the one whose newest segment was
    written last, with a warning naming the others: a topic deleted without its deletion reaching
    the remote tier, then recreated, leaves two live ones."""
    live = [m for m in found if m.delete_state is None]
    if wanted is not None:
        live = [m for m in live if m.tip.topic_id == wanted]
    if len(live) <= 1:
        return live[0] if live else None
    newest = max(live, key=lambda m: (max((s.event_timestamp_ms for s in m.segments), default=-1), m.sequence))
    log.warning("the remote tier holds manifests of %s-%d for %d topic ids (%s); reading %s, whose newest segment "
                "is the newest", newest.tip.topic, newest.tip.partition, len(live),
                ", ".join(uuid_to_base64(m.tip.topic_id) for m in live), uuid_to_base64(newest.tip.topic_id))
    return newest


def _add_remote(logs: dict[TopicPartition, PartitionLog], spec: RemoteSpec,
                topic_ids: Mapping[str, bytes] | None = None) -> None:
    manifests = remote_manifests(spec) or []
    source = "the remote tier's manifests"
    if not manifests and spec.metadata_dir and Path(spec.metadata_dir).is_dir():
        # No manifest published (a tier written by a broker before manifests, not yet synced by a
        # newer one): the journal on this disk says the same.
        manifests, source = _journal_manifests(Path(spec.metadata_dir)), str(spec.metadata_dir)
    by_tp: dict[TopicPartition, list[PartitionManifest]] = {}
    for each in manifests:
        by_tp.setdefault((each.tip.topic, each.tip.partition), []).append(each)
    for tp, found in by_tp.items():
        local = logs.get(tp)
        # A topic deleted and recreated under the same name keeps the old id's manifest until its
        # deletion is done: only the id the local partition (or the broker) carries is this topic.
        manifest = _choose(found, (None if local is None else _topic_id(local)) or (topic_ids or {}).get(tp[0]))
        if manifest is None:
            continue
        finished = sorted(manifest.finished(), key=lambda m: m.start_offset)
        if not finished:
            continue
        plog = local if local is not None else logs.setdefault(tp, PartitionLog(tp[0], tp[1], None))
        plog.remote_error = _check_plugin(spec, manifest.tip, finished, source)
        plog.remote_segments = finished
        plog.remote_start = max(finished[0].start_offset, manifest.log_start_offset or 0)
        remote_end = finished[-1].end_offset + 1
        if plog.local_start is None:
            plog.log_end_offset = max(plog.log_end_offset, remote_end)


# -- ListOffsets by timestamp --------------------------------------------------------------------------


def _stream_headers(rng: ScanRange, spec: RemoteSpec | None, position: int) -> Iterator[BatchHeader]:
    """Each whole batch of the segment from ``position`` (read batch by batch: this scan usually ends
    within a few batches)."""
    with open_segment(rng, spec, position) as raw:
        # Remote plugins may return unbuffered streams; batch-sized reads want a buffer in front.
        stream: BinaryIO = raw if isinstance(raw, io.BufferedIOBase) else io.BufferedReader(raw, 1 << 16)  # type: ignore[type-var]
        while True:
            head = stream.read(17)
            if len(head) < 17:
                return
            length = int.from_bytes(head[8:12], "big", signed=True)
            if length < 14 or head[16] != 2:
                return  # a zero-filled or damaged tail: where recovery would cut the log
            rest = stream.read(12 + length - 17)
            if len(rest) < 12 + length - 17:
                return
            yield BatchHeader(head + rest, 0)


def offset_for_timestamp(plog: PartitionLog, timestamp_ms: int, spec: RemoteSpec | None) -> int | None:
    """Kafka's ListOffsets for a timestamp (UnifiedLog.fetchOffsetByTimestamp): in the first segment,
    oldest first, whose largest timestamp reaches it, start at the batch the time index points to and
    return the first record at or after the timestamp."""
    if plog.broker is not None:
        return broker_offset_for_timestamp(plog.broker, (plog.topic, plog.partition), timestamp_ms)
    ranges = plog.ranges(plog.earliest, plog.latest)
    for i, rng in enumerate(ranges):
        base = segment_base_offset(rng)
        # A remote segment's largest timestamp is in its metadata: one too old is passed over
        # without fetching its time index.
        if rng.remote is not None and rng.remote.max_timestamp_ms < timestamp_ms:
            continue
        ts, offs = time_index_entries(read_index(rng, IndexType.TIMESTAMP, spec), base)
        largest = rng.remote.max_timestamp_ms if rng.remote is not None else (int(ts[-1]) if len(ts) else -1)
        # The active segment's newest batches are not in its time index yet: always look there.
        if largest < timestamp_ms and not (i == len(ranges) - 1 and not rng.is_remote):
            continue
        j = int(np.searchsorted(ts, timestamp_ms, side="right")) - 1
        target = max(int(offs[j]) if j >= 0 else base, rng.start_offset)
        index = offset_index_entries(read_index(rng, IndexType.OFFSET, spec), base)
        position, _ = position_bounds(index, target, target + 1)
        for h in _stream_headers(rng, spec, position):
            if h.base_offset >= rng.end_offset:
                break
            if h.last_offset < target or h.is_control or h.max_timestamp < timestamp_ms:
                continue
            for record in decode_batch(h):
                if record.timestamp >= timestamp_ms and rng.start_offset <= record.offset < rng.end_offset:
                    return record.offset
    return None


def select(logs: dict[TopicPartition, PartitionLog], topics: Iterable[str]) -> list[PartitionLog]:
    wanted = set(topics)
    return [logs[tp] for tp in sorted(logs) if tp[0] in wanted]
