"""``tierlog spark compact``: the broker's remote compaction (issue 18, :mod:`tierlog.tiered.remote_compaction`)
as a Spark job, one task per partition, beside a running broker.

The driver plans: for each partition of a compacted topic (``compact`` or ``compact,delete``) whose
remote tier is dirty enough (the broker's ``remote_compaction_due``, or any with ``--force``), the
FINISHED segments and their groups (``group_sources``, as the broker groups them), a fresh segment id
per group, and an *intent* naming those uploads, written before any of them (see
:mod:`tierlog.tiered.compaction_jobs`). The task, on an executor, runs the broker's own pieces: the
key → offset map over the remote segments (``map_sources``, bounded by ``log.cleaner.dedupe.buffer.size``;
only the groups whose every segment was mapped are compacted), each group through the cleaner's
filter into a new segment with its indexes (``write_replacement``, ``replacement``), uploaded
through the remote storage plugin. The driver then hands the broker a *commit*; the broker makes each
swap (one remote log metadata entry, refused if the sources changed meanwhile) and answers.

Unlike the broker, the job does not map the local log above the remote end (an executor on a
cluster does not see the broker's disk): a remote record superseded only by a local one stays until
the broker's own remote compaction or a later run drops it. Each producer's last batch is taken from
the newest source's producer snapshot, so an emptied batch is kept when it may be a producer's last.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tierlog.clock import Clock, monotonic_s
from tierlog.config.log_config import LogConfig
from tierlog.config.settings import setting
from tierlog.errors import TierlogError
from tierlog.pipeline.catalog import PartitionLog, discover
from tierlog.pipeline.reader import RemoteSpec
from tierlog.records.header import BatchHeader
from tierlog.storage.cleaner.batches import FilterContext, LastRecord
from tierlog.storage.cleaner.txn_tracker import TxnTracker
from tierlog.storage.producer_snapshot import decode_snapshot
from tierlog.tiered.api import (
    IndexType,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteStorageManager,
    load_remote_storage_manager,
)
from tierlog.tiered.compaction_jobs import (
    abandon,
    lease_refresh_s,
    read_result,
    requests_dir,
    write_commit,
    write_intent,
)
from tierlog.tiered.remote_compaction import (
    RemoteCompactionResult,
    aborted_txns,
    group_sources,
    map_sources,
    new_offset_map,
    remote_compaction_due,
    replacement,
    replacement_segment,
    source_batches,
)

S = RemoteLogSegmentState


@dataclass(frozen=True)
class CompactionSettings:
    """The broker's settings the job compacts with (from its config)."""

    map_bytes: int
    io_buffer_bytes: int
    broker_id: int
    #: The broker's remote.log.compaction.job.lease.ms: the job touches its intents well within it.
    lease_ms: int = setting("remote.log.compaction.job.lease.ms")


@dataclass(frozen=True)
class PartitionWork:
    """One partition's compaction, planned on the driver (picklable: it is a Spark task's input)."""

    job: str
    topic: str
    partition: int
    groups: tuple[tuple[RemoteLogSegmentMetadata, ...], ...]
    segment_ids: tuple[RemoteLogSegmentId, ...]
    config: LogConfig
    settings: CompactionSettings
    now_ms: int


def plan(logs: dict[tuple[str, int], PartitionLog], config_for: Callable[[str], LogConfig],
         settings: CompactionSettings, now_ms: int, *, force: bool = False,
         topics: Iterable[str] | None = None) -> list[PartitionWork]:
    wanted = None if topics is None else set(topics)
    out: list[PartitionWork] = []
    job = uuid.uuid4().hex[:12]
    for tp in sorted(logs):
        plog = logs[tp]
        if (wanted is not None and plog.topic not in wanted) or not plog.remote_segments:
            continue
        config = config_for(plog.topic)
        if not config.compact:
            continue
        start = plog.remote_start or 0
        sources = [m for m in plog.remote_segments if m.state is S.COPY_SEGMENT_FINISHED and m.start_offset >= start]
        if not sources or not (force or remote_compaction_due(sources, config.min_cleanable_dirty_ratio)):
            continue
        groups = tuple(tuple(g) for g in group_sources(sources, config.segment_bytes))
        ids = tuple(RemoteLogSegmentId.generate(sources[0].segment_id.topic_id_partition) for _ in groups)
        out.append(PartitionWork(f"{job}-{plog.topic}-{plog.partition}", plog.topic, plog.partition, groups, ids,
                                 config, settings, now_ms))
    return out


def planned_metadata(work: PartitionWork) -> list[RemoteLogSegmentMetadata]:
    """What the intent names: each upload's id and offsets (all a plugin needs to delete it)."""
    return [RemoteLogSegmentMetadata(sid, g[0].start_offset, g[-1].end_offset, -1, work.settings.broker_id,
                                     work.now_ms, 0, replaces=tuple(m.segment_id for m in g))
            for sid, g in zip(work.segment_ids, work.groups, strict=True)]


# -- on an executor ------------------------------------------------------------------------------------

_WRITERS: dict[tuple[str, tuple[tuple[str, str], ...]], RemoteStorageManager] = {}
_WRITERS_LOCK = threading.Lock()


def _writer(spec: RemoteSpec) -> RemoteStorageManager:
    """The plugin as the broker configures it (writable, unlike the readers'), once per process."""
    key = (spec.class_name, spec.props)
    with _WRITERS_LOCK:
        rsm = _WRITERS.get(key)
        if rsm is None:
            rsm = _WRITERS[key] = load_remote_storage_manager(spec.class_name, dict(spec.props))
        return rsm


def _last_records(rsm: RemoteStorageManager, newest: RemoteLogSegmentMetadata) -> dict[int, LastRecord]:
    with rsm.fetch_index(newest, IndexType.PRODUCER_SNAPSHOT) as stream:
        entries = decode_snapshot(stream.read(), f"producer snapshot of {newest.segment_id.id_str}")
    return {e.producer_id: LastRecord(e.last_offset if e.last_offset >= 0 else None, e.producer_epoch)
            for e in entries}


def compact_partition(work: PartitionWork, spec: RemoteSpec) -> dict[str, Any]:
    """Map, rewrite and upload one partition's groups; returns its row, with the (metadata, update)
    pairs of the uploads in ``pairs``. An error is reported in the row (``error``), after the uploads
    already made are deleted: a failed partition never fails the others."""
    rsm = _writer(spec)
    result = RemoteCompactionResult()
    row: dict[str, Any] = {"topic": work.topic, "partition": work.partition, "job": work.job, "error": None}
    pairs: list[tuple[RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate]] = []
    scratch = Path(tempfile.mkdtemp(prefix="tierlog-spark-compact-"))
    try:
        sources = [m for g in work.groups for m in g]

        def batches(md: RemoteLogSegmentMetadata) -> Iterator[BatchHeader]:
            return source_batches(rsm, md, scratch, work.settings.io_buffer_bytes, result)

        offset_map = new_offset_map(work.settings.map_bytes)
        aborted = aborted_txns(rsm, sources)
        mapped = map_sources(offset_map, sources, aborted, batches)
        fctx = FilterContext(offset_map, TxnTracker(aborted), work.now_ms, work.config.delete_retention_ms,
                             _last_records(rsm, sources[-1]))
        done = 0
        for sid, group in zip(work.segment_ids, work.groups, strict=True):
            done += len(group)
            if done > mapped:
                break  # the map filled up: later groups wait for another run
            with replacement_segment(list(group), batches, fctx, work.config, work.now_ms, scratch,
                                     result) as (seg, out_dir):
                md, data = replacement(rsm, sid, list(group), seg, out_dir, work.settings.broker_id, work.now_ms)
                custom = rsm.copy_log_segment_data(md, data)
            pairs.append((md, RemoteLogSegmentMetadataUpdate(sid, work.now_ms, S.COPY_SEGMENT_FINISHED,
                                                              work.settings.broker_id, custom)))
            result.sources += len(group)
            result.segments_written += 1
            result.bytes_written += md.segment_size_in_bytes
        result.records_read, result.records_kept = fctx.records_read, fctx.records_kept
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {e}"
        for md, _ in pairs:
            try:
                rsm.delete_log_segment_data(md)
            except Exception:
                pass  # the intent's expiry deletes it
        pairs = []
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    row.update(sources=result.sources, segments_written=result.segments_written, bytes_read=result.bytes_read,
               bytes_written=result.bytes_written, records_read=result.records_read,
               records_kept=result.records_kept, pairs=pairs)
    return row


# -- on the driver -------------------------------------------------------------------------------------


class _Lease:
    """Touches the job's intents every ``refresh_s`` while it runs (the broker expires an untouched one)."""

    def __init__(self, paths: Sequence[Path], refresh_s: float) -> None:
        self.paths = list(paths)
        self.refresh_s = refresh_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="tierlog-compact-lease", daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.refresh_s):
            for p in self.paths:
                try:
                    os.utime(p)  # never re-created: gone means the broker took it
                except OSError:
                    pass

    def __enter__(self) -> _Lease:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def compact(spark: Any, paths: Sequence[str], spec: RemoteSpec | None, config_for: Callable[[str], LogConfig],
            settings: CompactionSettings, clock: Clock, *, force: bool = False, topics: Iterable[str] | None = None,
            timeout_s: float = 120.0) -> list[dict[str, Any]]:
    """Compact the remote tier of every (wanted) compacted partition; one row per partition with the
    broker's answer per segment (``swapped``, or why not), or ``pending`` when no broker answered
    within ``timeout_s`` (a broker started later applies the commit, or expires it)."""
    if spec is None:
        raise TierlogError("compact needs the remote tier: give --config or the remote tier's settings")
    logs = discover([Path(p) for p in paths], spec)
    missing = sorted(set(topics or ()) - {t for t, _ in logs})
    if missing:
        raise TierlogError(f"topic {', '.join(map(repr, missing))} not found in {', '.join(paths)} or the remote tier")
    for plog in logs.values():
        if plog.remote_segments:
            plog.require_remote()
    work = plan(logs, config_for, settings, clock.wall_ms(), force=force, topics=topics)
    if not work:
        return []
    directory = requests_dir(Path(spec.metadata_dir))
    intents = [write_intent(directory, w.job, planned_metadata(w)) for w in work]
    with _Lease(intents, lease_refresh_s(settings.lease_ms)):
        try:
            rdd = spark.sparkContext.parallelize(work, len(work))
            rows: list[dict[str, Any]] = rdd.map(lambda w: compact_partition(w, spec)).collect()
        except BaseException:
            for w in work:
                abandon(directory, w.job)
            raise
        for row in rows:
            pairs = row.pop("pairs")
            if pairs:
                write_commit(directory, row["job"], pairs)
            else:
                abandon(directory, row["job"])
        for row in rows:
            row["results"] = [] if row["segments_written"] else ["nothing to swap"]
        waiting = {row["job"]: row for row in rows if row["segments_written"]}
        deadline = monotonic_s(clock) + timeout_s
        while waiting and monotonic_s(clock) < deadline:
            for job in list(waiting):
                answer = read_result(directory, job)
                if answer is not None:
                    waiting.pop(job)["results"] = [str(a.get("result")) for a in answer]
            if waiting:
                time.sleep(0.2)
        for row in waiting.values():
            row["results"] = [f"pending: no broker answered within {timeout_s:g} s"]
    for row in rows:
        row["swapped"] = sum(1 for r in row["results"] if r == "swapped")
    return rows
