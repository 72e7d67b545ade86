"""Maintenance jobs over a data directory and its remote tier, run as Spark jobs: one task per segment,
so they grow from ``local[*]`` to a cluster by changing the master.

* :func:`usage` — bytes and segments per partition, local and remote (the remote size as the
  plugin's custom metadata reports it, seed 002, where the plugin can read it), and the records a
  reader gets (each readable offset once);
* :func:`verify` — every batch's CRC and structure, offsets, both indexes and the producer snapshot
  of every segment, local and remote (seed 003's checks, for all segments at once);
* :func:`retention_preview` — what the time, size and timestamp-floor (seed 004) policies would
  delete now, in each tier, without deleting anything;
* :func:`rebuild_snapshots` — the missing producer snapshots of closed segments, each rebuilt from
  the expiration window only (seed 001 as a backfill), on a cleanly stopped broker's data;
* :func:`export` (in :mod:`tierlog.pipeline.export`) — topics to Parquet partitioned by date: an
  archive each run appends the offsets not yet exported to (a manifest in the output records them),
  or a mirror of the log.

The per-segment functions are plain Python, so they run on Spark workers and in tests alike.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from tierlog._util.crc import crc32c
from tierlog._util.files import fsync_dir
from tierlog.config.broker_config import BrokerConfig
from tierlog.config.log_config import LogConfig
from tierlog.errors import TierlogError
from tierlog.metadata.metadata_log import load_readonly, resolve_metadata_dir
from tierlog.pipeline import _decode as K
from tierlog.pipeline.catalog import LocalSegment, PartitionLog, discover

# The export lives in its own module; its names stay reachable as jobs.export etc. for the callers.
from tierlog.pipeline.export import EXPORT_MANIFEST as EXPORT_MANIFEST
from tierlog.pipeline.export import EXPORT_MODES as EXPORT_MODES
from tierlog.pipeline.export import export as export
from tierlog.pipeline.export import exported_offsets as exported_offsets
from tierlog.pipeline.reader import (
    RemoteSpec,
    ScanRange,
    WindowDecoder,
    _readonly,
    offset_index_entries,
    open_segment,
    read_index,
    remote_storage,
    segment_base_offset,
    time_index_entries,
)
from tierlog.records import decode_batch
from tierlog.records.header import BatchHeader
from tierlog.storage.checkpoints import CLEAN_SHUTDOWN
from tierlog.storage.producer_rebuild import rebuild_missing_snapshot, segment_sources_in
from tierlog.storage.producer_snapshot import decode_snapshot
from tierlog.storage.retention import Deletion, RetentionPolicy, SegmentInfo, deletable_segments
from tierlog.tiered.api import IndexType, load_class


@dataclass(frozen=True)
class SegmentTask:
    """One segment to look at: its offsets [base, end), and where it is."""

    scan: ScanRange
    tier: str  # "local" | "remote"
    size_bytes: int
    snapshot_path: str | None = None  # the local producer snapshot at the segment's end, if any
    last: bool = False  # the partition's active segment (no final index entries, no snapshot yet)
    #: The offsets [lo, hi) a reader gets from this copy: within [log start, end), and a tiered
    #: segment still on local disk is read (and counted) locally only, as the source reads it.
    readable: tuple[int, int] = (0, 0)


def segment_tasks(logs: Mapping[tuple[str, int], PartitionLog], topics: Iterable[str] | None = None) -> list[SegmentTask]:
    wanted = None if topics is None else set(topics)
    tasks = []
    for tp in sorted(logs):
        plog = logs[tp]
        if wanted is not None and plog.topic not in wanted:
            continue
        if plog.remote_segments:
            plog.require_remote()
        local_start = plog.local_start if plog.local_start is not None else plog.log_end_offset
        for md in plog.remote_segments:
            rng = ScanRange(plog.topic, plog.partition, md.start_offset, md.end_offset + 1, remote=md)
            readable = (max(md.start_offset, plog.remote_start or 0), min(md.end_offset + 1, local_start))
            tasks.append(SegmentTask(rng, "remote", md.segment_size_in_bytes, readable=readable))
        bounds = plog.local_bounds()
        for i, (seg, end) in enumerate(bounds):
            rng = ScanRange(plog.topic, plog.partition, seg.base_offset, end, log_path=seg.log_path)
            snap = Path(seg.log_path).with_name(f"{end:020d}.snapshot")
            tasks.append(SegmentTask(rng, "local", seg.size_bytes, str(snap) if snap.exists() else None,
                                     last=i == len(bounds) - 1, readable=(max(seg.base_offset, local_start), end)))
    return tasks


# -- reading a whole segment ---------------------------------------------------------------------------


def _segment_bytes(task: SegmentTask, spec: RemoteSpec | None) -> bytes:
    with open_segment(task.scan, spec, 0) as stream:
        return stream.read()


def _headers(data: bytes) -> tuple[np.ndarray, int, int]:
    """(header table, end of the last whole batch, status) of a whole segment."""
    buf = _readonly(data)
    n, stop, status, _ = K.count_batches(buf, 0, len(buf))
    return K.scan_batches(buf, 0, n), stop, status


# -- usage -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SegmentUsage:
    topic: str
    partition: int
    tier: str
    base_offset: int
    size_bytes: int
    records: int
    batches: int


def segment_usage(task: SegmentTask, spec: RemoteSpec | None) -> SegmentUsage:
    """Records counted from the batch headers (no decompression); control records are not data."""
    size = task.size_bytes
    if task.scan.remote is not None and spec is not None:
        hook = getattr(load_class(spec.class_name), "uploaded_size_bytes", None)
        custom = task.scan.remote.custom_metadata
        if callable(hook) and custom:
            try:
                reported = hook(custom)
            except Exception:
                reported = None
            if isinstance(reported, int):
                size = reported
    lo, hi = task.readable
    records = batches = 0
    if lo < hi:
        data = _segment_bytes(task, spec)
        table, _, _ = _headers(data)
        bases = table[:, K.F_BASE_OFFSET]
        lasts = bases + table[:, K.F_LAST_OFFSET_DELTA]
        counted = ((table[:, K.F_ATTRIBUTES] & 0x20) == 0) & (lasts >= lo) & (bases < hi)
        whole = counted & (bases >= lo) & (lasts < hi)
        records = int(table[whole, K.F_RECORDS_COUNT].clip(min=0).sum())
        batches = int(np.count_nonzero(counted))
        # A batch the log start (DeleteRecords) or the tier boundary cuts: its records one by one.
        for i in np.flatnonzero(counted & ~whole).tolist():
            header = BatchHeader(data, int(table[i, K.F_POSITION]))
            records += sum(1 for r in decode_batch(header) if lo <= r.offset < hi)
    return SegmentUsage(task.scan.topic, task.scan.partition, task.tier, segment_base_offset(task.scan), size,
                        records, batches)


def summarize_usage(rows: Iterable[SegmentUsage]) -> list[dict[str, Any]]:
    """Per partition: local and remote bytes and segments (what each tier stores) and the records a
    reader gets from each (each offset once); partitions that hold nothing at all are left out."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for r in rows:
        entry = out.setdefault((r.topic, r.partition), {
            "topic": r.topic, "partition": r.partition,
            "local_bytes": 0, "local_records": 0, "local_segments": 0,
            "remote_bytes": 0, "remote_records": 0, "remote_segments": 0})
        entry[f"{r.tier}_bytes"] += r.size_bytes
        entry[f"{r.tier}_records"] += r.records
        entry[f"{r.tier}_segments"] += 1
    return [e for k, e in sorted(out.items())
            if e["local_bytes"] or e["remote_bytes"] or e["local_records"] or e["remote_records"]]


# -- verify ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SegmentCheck:
    topic: str
    partition: int
    tier: str
    base_offset: int
    batches: int
    problems: tuple[str, ...] = field(default=())
    #: Why the segment was not checked: it was deleted (retention, tiering, compaction) or kept
    #: changing while the job read it. Not damage: Kafka's own check never sees such a segment.
    skipped: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems


def _zero_tail(raw: bytes, valid: int, entry_bytes: int) -> bool:
    """The bytes after the valid entries are all zero: the preallocated, not yet written part of an
    active segment's index (Kafka preallocates segment.index.bytes and trims only at roll)."""
    return not any(raw[valid * entry_bytes :])


def _check_offset_index(raw: bytes, base: int, table: np.ndarray, problems: list[str], *,
                        active: bool = False, read_bytes: int | None = None) -> None:
    """``active``: the partition's active segment, whose index has a zero-filled tail and may already
    hold entries for batches appended after its log was read (positions at or past ``read_bytes``)."""
    offsets, positions = offset_index_entries(raw, base)
    if active and len(offsets) and not any(raw[:8]) and _zero_tail(raw, 1, 8):
        # An active index with no entry yet is all zeros, and its first slot reads as (base, 0): an
        # entry Kafka never writes unless the first batch is one record (entries name a batch's last
        # offset). It is no entry, not damage.
        offsets, positions = offsets[:0], positions[:0]
    whole = len(raw) // 8
    if active and _zero_tail(raw, len(offsets), 8):
        whole = len(offsets)
    elif len(raw) % 8:
        problems.append(f"offset index: size {len(raw)} is not a multiple of 8")
    if len(offsets) < whole:
        problems.append(f"offset index: entry {len(offsets)} of {whole} does not increase (zero-filled or damaged)")
    if active and read_bytes is not None:
        keep = positions < read_bytes
        offsets, positions = offsets[keep], positions[keep]
    by_position = dict(zip(table[:, K.F_POSITION].tolist(),
                           (table[:, K.F_BASE_OFFSET] + table[:, K.F_LAST_OFFSET_DELTA]).tolist(), strict=True))
    for offset, position in zip(offsets.tolist(), positions.tolist(), strict=True):
        last = by_position.get(position)
        if last is None:
            problems.append(f"offset index: entry ({offset}, {position}) does not point at a batch")
            return
        if last != offset:
            problems.append(f"offset index: entry ({offset}, {position}) points at a batch ending at {last}")
            return


def _check_time_index(raw: bytes, base: int, end: int, table: np.ndarray, final: bool, problems: list[str]) -> None:
    """``final`` false: the active segment (a zero-filled tail, entries for what was appended after
    its log was read, and no final entry yet)."""
    stamps, offsets = time_index_entries(raw, base)
    whole = len(raw) // 12
    if not final and _zero_tail(raw, len(stamps), 12):
        whole = len(stamps)
    elif len(raw) % 12:
        problems.append(f"time index: size {len(raw)} is not a multiple of 12")
    if len(stamps) < whole:
        problems.append(f"time index: entry {len(stamps)} of {whole} does not increase (zero-filled or damaged)")
    if len(offsets) and (offsets[0] < base or (final and offsets[-1] >= max(end, base + 1))):
        problems.append(f"time index: offsets [{offsets[0]}, {offsets[-1]}] outside the segment [{base}, {end})")
    # Control batches count: the log's max timestamp covers transaction markers too.
    if final and len(table):
        largest = int(table[:, K.F_MAX_TIMESTAMP].max())
        if largest >= 0 and (not len(stamps) or int(stamps[-1]) != largest):
            found = int(stamps[-1]) if len(stamps) else None
            problems.append(f"time index: last entry {found} is not the segment's largest timestamp {largest}")


#: Times a local segment whose files changed while it was read is checked again before it is
#: reported as skipped (a log cleaner swap or a roll between reading the log and its indexes).
CHECK_ATTEMPTS = 3
DELETED = "deleted during the job"
CHANGING = "changed during the job"


def _identity(task: SegmentTask) -> tuple[int, ...] | None:
    """What changes when a local segment's files are replaced or rewritten (None: the log is gone).
    The active segment only grows, which its checks allow for: only a replacement counts there."""
    if task.scan.log_path is None:
        return ()
    out: list[int] = []
    for suffix in (".log", ".index", ".timeindex"):
        try:
            st = os.stat(Path(task.scan.log_path).with_suffix(suffix))
        except FileNotFoundError:
            if suffix == ".log":
                return None
            out += [-1, -1, -1]
            continue
        out += [st.st_ino, -1, -1] if task.last else [st.st_ino, st.st_size, st.st_mtime_ns]
    return tuple(out)


def verify_segment(task: SegmentTask, spec: RemoteSpec | None) -> SegmentCheck:
    """Every check of one segment; problems are described, never raised, so one bad segment does not
    hide the others. A local segment deleted while it is checked is skipped, and one whose files
    changed while it was read (compaction's swap, a roll) is checked again, as the problems then
    describe no state the files were ever in."""
    scan = task.scan
    base = segment_base_offset(scan)
    for _ in range(CHECK_ATTEMPTS):
        before = _identity(task)
        if before is None:
            return SegmentCheck(scan.topic, scan.partition, task.tier, base, 0, skipped=DELETED)
        check = _verify_once(task, spec)
        if check.ok:
            return check
        after = _identity(task)
        if after is None:
            return SegmentCheck(scan.topic, scan.partition, task.tier, base, 0, skipped=DELETED)
        if after == before:
            return check
    return SegmentCheck(scan.topic, scan.partition, task.tier, base, 0, skipped=CHANGING)


def _verify_once(task: SegmentTask, spec: RemoteSpec | None) -> SegmentCheck:
    scan = task.scan
    base = segment_base_offset(scan)
    problems: list[str] = []
    try:
        data = _segment_bytes(task, spec)
    except (OSError, TierlogError) as e:
        return SegmentCheck(scan.topic, scan.partition, task.tier, base, 0, (f"cannot read the segment: {e}",))
    table, stop, status = _headers(data)
    if status != K.OK and not (status == K.SHORT_BATCH and not any(data[stop:])):
        problems.append(f"batch at position {stop}: {'length below the minimum' if status == K.SHORT_BATCH else 'bad magic'}")
    elif stop != len(data) and any(data[stop:]) and not (task.last and status == K.OK):
        # The active segment may end inside a batch the broker is writing as it is read.
        problems.append(f"{len(data) - stop} bytes after the last whole batch at position {stop}")
    view = memoryview(data)
    bases = table[:, K.F_BASE_OFFSET]
    lasts = bases + table[:, K.F_LAST_OFFSET_DELTA]
    for i in range(len(table)):
        p, s = int(table[i, K.F_POSITION]), int(table[i, K.F_SIZE])
        if s < 61 or crc32c(view[p + 21 : p + s]) != int(table[i, K.F_CRC]):
            problems.append(f"batch at offset {int(bases[i])} (position {p}): CRC mismatch or short batch")
    if len(table):
        if int(bases[0]) < base:
            problems.append(f"first batch starts at offset {int(bases[0])}, below the segment's base {base}")
        if np.any(bases[1:] <= lasts[:-1]):
            problems.append("batch offsets do not increase")
        if int(lasts[-1]) >= scan.end_offset and not task.last:
            problems.append(f"last offset {int(lasts[-1])} reaches the next segment at {scan.end_offset}")
    if not problems:
        # Record structure (and decompression) of every batch, through the scan's own decoder.
        decoder = WindowDecoder(scan.topic, scan.partition, base, 1 << 62, include_headers=True, check_crcs=False)
        try:
            decoder.decode(_readonly(data), 0)
        except TierlogError as e:
            problems.append(str(e))
    del view
    _check_offset_index(read_index(scan, IndexType.OFFSET, spec), base, table, problems,
                        active=task.last, read_bytes=stop)
    _check_time_index(read_index(scan, IndexType.TIMESTAMP, spec), base, scan.end_offset, table, not task.last,
                      problems)
    snapshot: bytes | None = None
    if task.scan.remote is not None and spec is not None:
        try:
            with remote_storage(spec).fetch_index(task.scan.remote, IndexType.PRODUCER_SNAPSHOT) as stream:
                snapshot = stream.read()
        except (OSError, TierlogError) as e:
            problems.append(f"producer snapshot: missing from the remote tier ({e})")
    elif task.snapshot_path is not None:
        try:
            snapshot = Path(task.snapshot_path).read_bytes()
        except FileNotFoundError:
            snapshot = None  # deleted with its segment, or replaced by the broker: not this check's
    if snapshot is not None:
        try:
            decode_snapshot(snapshot, task.snapshot_path or "remote producer snapshot")
        except TierlogError as e:
            problems.append(f"producer snapshot: {e}")
    return SegmentCheck(scan.topic, scan.partition, task.tier, base, len(table), tuple(problems))


# -- running on Spark --------------------------------------------------------------------------------------


def on_cluster(spark: Any) -> bool:
    """Whether executors may run elsewhere (any master but ``local``), not seeing the broker's disk."""
    return not str(spark.sparkContext.master).startswith("local")


def _spread(spark: Any, items: Sequence[Any], needs_disk: Callable[[Any], bool], fn: Callable[[Any], Any]) -> list[Any]:
    """``fn`` of each item, in order. On a cluster the executors do not see the broker's disk: the
    items that read it run here, on the driver (the job was given the log dir, so it runs beside
    the broker), and only the others (the remote tier's) go to the executors."""
    if not items:
        return []
    cluster = on_cluster(spark)
    here = {i for i, item in enumerate(items) if cluster and needs_disk(item)}
    out: list[Any] = [None] * len(items)
    for i in sorted(here):
        out[i] = fn(items[i])
    away = [i for i in range(len(items)) if i not in here]
    if away:
        rdd = spark.sparkContext.parallelize([items[i] for i in away], len(away))
        for i, result in zip(away, rdd.map(fn).collect(), strict=True):
            out[i] = result
    return out


def _run(spark: Any, tasks: Sequence[SegmentTask], spec: RemoteSpec | None, fn: Any) -> list[Any]:
    return _spread(spark, tasks, lambda t: t.tier == "local", lambda t: fn(t, spec))  # local ones on the driver


def _logs(paths: Sequence[str], spec: RemoteSpec | None,
          topics: Iterable[str] | None = None) -> dict[tuple[str, int], PartitionLog]:
    """The partitions in ``paths`` and the remote tier; a wanted topic found in neither is an error."""
    logs = discover([Path(p) for p in paths], spec)
    missing = sorted(set(topics or ()) - {t for t, _ in logs})
    if missing:
        raise TierlogError(f"topic {', '.join(map(repr, missing))} not found in {', '.join(paths)}"
                           + (" or the remote tier" if spec is not None else ""))
    return logs


def usage(spark: Any, paths: Sequence[str], spec: RemoteSpec | None,
          topics: Iterable[str] | None = None) -> list[dict[str, Any]]:
    tasks = segment_tasks(_logs(paths, spec, topics), topics)
    return summarize_usage(_run(spark, tasks, spec, segment_usage))


def verify(spark: Any, paths: Sequence[str], spec: RemoteSpec | None,
           topics: Iterable[str] | None = None) -> list[dict[str, Any]]:
    return verify_tasks(spark, segment_tasks(_logs(paths, spec, topics), topics), paths, spec, topics)


def verify_tasks(spark: Any, tasks: Sequence[SegmentTask], paths: Sequence[str], spec: RemoteSpec | None,
                 topics: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """Check ``tasks`` (planned earlier); a segment found damaged that the log no longer holds when
    the job ends (retention deleted it, tiering moved it, a remote segment's deletion started) is
    reported as skipped: Kafka would never read it again."""
    checks: list[SegmentCheck] = _run(spark, tasks, spec, verify_segment)
    if any(not c.ok for c in checks):
        live = {(t.scan.topic, t.scan.partition, t.tier, segment_base_offset(t.scan))
                for t in segment_tasks(_logs(paths, spec), topics)}
        checks = [c if c.ok or (c.topic, c.partition, c.tier, c.base_offset) in live
                  else replace(c, problems=(), skipped=DELETED) for c in checks]
    return [{**asdict(c), "problems": list(c.problems), "ok": c.ok}
            for c in sorted(checks, key=lambda c: (c.topic, c.partition, c.base_offset, c.tier))]


# -- retention preview -------------------------------------------------------------------------------------


def _largest_timestamp(seg: LocalSegment, last: bool) -> int:
    """What retention compares with: the time index's last entry (a closed segment's final entry is its
    largest timestamp); the active segment's batches are read, since its newest are not indexed yet;
    the file's mtime when no record has a timestamp, as Kafka does."""
    rng = ScanRange("", 0, seg.base_offset, seg.base_offset + 1, log_path=seg.log_path)
    stamps, _ = time_index_entries(read_index(rng, IndexType.TIMESTAMP, None), seg.base_offset)
    largest = int(stamps[-1]) if len(stamps) else -1
    if last:
        table, _, _ = _headers(Path(seg.log_path).read_bytes())
        if len(table):
            largest = max(largest, int(table[:, K.F_MAX_TIMESTAMP].max()))
    if largest < 0:
        largest = int(os.stat(seg.log_path).st_mtime * 1000)
    return largest


def partition_retention(plog: PartitionLog, config: LogConfig, now_ms: int) -> list[dict[str, Any]]:
    """What retention would delete now from one partition, per tier, with the policy that would
    delete each segment (seed 004's timestamp floor among them)."""
    rows: list[dict[str, Any]] = []
    tiered = config.remote_storage_enable and bool(plog.remote_segments)
    highest_remote = plog.remote_segments[-1].end_offset if plog.remote_segments else -1
    bounds = plog.local_bounds()
    local = [SegmentInfo(seg.base_offset, end, seg.size_bytes, _largest_timestamp(seg, i == len(bounds) - 1),
                         i == len(bounds) - 1) for i, (seg, end) in enumerate(bounds)]
    policy = RetentionPolicy.from_config(
        config, log_start_offset=plog.local_start or 0, high_watermark=plog.latest, local=tiered,
        highest_offset_in_remote=highest_remote if tiered else None)
    for d in deletable_segments(local, policy, now_ms):
        rows.append(_deletion_row(plog, "local", d))
    if plog.remote_segments:
        remote = [SegmentInfo(md.start_offset, md.end_offset + 1, md.segment_size_in_bytes, md.max_timestamp_ms, False)
                  for md in plog.remote_segments]
        # The remote tier is held to the topic's total retention, counting what is only local too.
        local_only = sum(s.size_bytes for s in local if s.base_offset > highest_remote)
        total = sum(s.size_bytes for s in remote) + local_only
        remote_policy = RetentionPolicy.from_config(config, log_start_offset=plog.remote_start or 0,
                                                    high_watermark=plog.latest)
        for d in deletable_segments(remote, remote_policy, now_ms, total):
            rows.append(_deletion_row(plog, "remote", d))
    return rows


def _deletion_row(plog: PartitionLog, tier: str, d: Deletion) -> dict[str, Any]:
    s = d.segment
    return {"topic": plog.topic, "partition": plog.partition, "tier": tier, "base_offset": s.base_offset,
            "end_offset": s.upper_bound_offset, "size_bytes": s.size_bytes,
            "largest_timestamp_ms": s.largest_timestamp_ms, "reason": d.reason.value}


def topic_configs(paths: Sequence[str], broker: BrokerConfig | None,
                  overrides: Mapping[str, str] | None = None) -> Callable[[str], LogConfig]:
    """Each topic's LogConfig as the broker would build it: its stored overrides (from the metadata
    log, read without a broker) over the broker's defaults, then ``overrides`` (a what-if)."""
    defaults = broker.topic_defaults() if broker is not None else None
    stored: dict[str, Mapping[str, str]] = {}
    for p in paths:
        directory = resolve_metadata_dir(Path(p))
        if directory.is_dir():
            image = load_readonly(directory).image
            stored = {name: dict(image.topic_configs(name)) for name in image.topics_by_name}
            break

    def config_for(topic: str) -> LogConfig:
        return LogConfig.from_props({**stored.get(topic, {}), **(overrides or {})}, defaults)

    return config_for


def retention_preview(spark: Any, paths: Sequence[str], spec: RemoteSpec | None,
                      config_for: Callable[[str], LogConfig], now_ms: int,
                      topics: Iterable[str] | None = None) -> list[dict[str, Any]]:
    logs = _logs(paths, spec, topics)
    wanted = None if topics is None else set(topics)
    work = [(logs[tp], config_for(tp[0])) for tp in sorted(logs) if wanted is None or tp[0] in wanted]
    # A partition's local segments are read for their largest timestamps: on the driver when on a
    # cluster; the remote tier's figures are in its metadata, so partitions held only there go anywhere.
    per_partition = _spread(spark, work, lambda item: bool(item[0].local_segments),
                            lambda item: partition_retention(item[0], item[1], now_ms))
    return [row for rows in per_partition for row in rows]


# -- rebuild-snapshots (seed 001 as a backfill) --------------------------------------------------------------


def partition_rebuild_snapshots(plog: PartitionLog, expiration_ms: int, dry_run: bool) -> list[dict[str, Any]]:
    """The producer snapshot at the end of every closed local segment that lacks one, each rebuilt
    from only the segments within ``producer.id.expiration.ms`` before the segment's end (seed 001),
    so tiering them later uploads real state rather than a placeholder.

    Writes nothing where the log is: each snapshot's bytes go back in its row (``content``) and the
    driver writes them into the partition directory (a file written by a task would land on
    whichever node ran it). It reads the local segments, so on a cluster it runs on the driver
    (:func:`rebuild_snapshots`); scratch files stay in the process's own temporary directory."""
    if plog.directory is None:
        return []
    bounds = plog.local_bounds()[:-1]  # the active segment has no end yet
    start = plog.local_start or 0
    missing = [(seg, end) for seg, end in bounds
               if end > start and not (plog.directory / f"{end:020d}.snapshot").exists()]
    rows: list[dict[str, Any]] = []
    if not missing:
        return rows
    sources = segment_sources_in(plog.directory)
    # Closed segments' largest timestamps from their time indexes: no segment is scanned for them.
    stamps = {seg.base_offset: _largest_timestamp(seg, False) for seg, _ in plog.local_bounds()}
    scratch = Path(tempfile.mkdtemp(prefix="tierlog-snapshot-rebuild-"))
    try:
        for seg, end in missing:
            row: dict[str, Any] = {"topic": plog.topic, "partition": plog.partition, "segment": seg.base_offset,
                                   "snapshot": f"{end:020d}.snapshot", "producers": None, "written": False,
                                   "directory": str(plog.directory)}
            if not dry_run:
                built = rebuild_missing_snapshot(sources, seg.base_offset, end, start, expiration_ms, scratch, stamps,
                                                 sync=False)
                content = built.read_bytes()
                row["producers"] = len(decode_snapshot(content, built))
                row["content"] = content
            rows.append(row)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return rows


def write_snapshot(row: dict[str, Any]) -> bool:
    """On the driver: write one rebuilt snapshot into its partition directory, renamed in only when
    whole (a reader never sees a partial snapshot), unless one appeared meanwhile."""
    directory = Path(row["directory"])
    target = directory / row["snapshot"]
    if target.exists():
        return False
    tmp = directory / f".{row['snapshot']}.tmp"
    with open(tmp, "wb") as out:
        out.write(row["content"])
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, target)
    fsync_dir(directory)
    return True


def stopped_cleanly(paths: Sequence[str]) -> list[str]:
    """The log dirs without Kafka's clean-shutdown marker: a broker may be running there (it deletes
    the marker when it starts), and files must not change under it."""
    return [p for p in paths if not (Path(p) / CLEAN_SHUTDOWN).exists()]


def rebuild_snapshots(spark: Any, paths: Sequence[str], spec: RemoteSpec | None, expiration_ms: int, *,
                      dry_run: bool = False, topics: Iterable[str] | None = None) -> list[dict[str, Any]]:
    logs = _logs(paths, spec, topics)
    wanted = None if topics is None else set(topics)
    work = [logs[tp] for tp in sorted(logs) if logs[tp].directory is not None and (wanted is None or tp[0] in wanted)]
    # Every rebuild reads local segments only: on a cluster all of it runs on the driver, beside the
    # log dir, and no executor writes (or needs) anything.
    rows = [row for found in _spread(spark, work, lambda plog: True,
                                     lambda plog: partition_rebuild_snapshots(plog, expiration_ms, dry_run))
            for row in found]
    for row in rows:
        content = row.pop("content", None)
        if content is not None:
            row["written"] = write_snapshot({**row, "content": content})
        row.pop("directory", None)
    return rows
