"""Tiering status: the per-partition status the broker reports (``tierlog tier status``, the
metrics), the broker's status file (what only the running process knows: a copy task stopped by
seed 002, the last error, the remote deletes it gave up on), and the status of a data directory
read from disk, which works beside a running broker (it only reads) and on a stopped one.

Read from disk, the durable remote log metadata gives the highest tiered offset and the remote
bytes; the partition directories give the local bytes and the copy lag (closed segments above the
highest tiered offset); the status file gives the rest."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from tierlog._util.framed import FramedFileError, read_framed, write_framed
from tierlog.ids import TopicPartition, uuid_to_base64
from tierlog.storage import files
from tierlog.storage.log import UnifiedLog
from tierlog.tiered.api import (
    RemoteLogMetadataManager,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tierlog.tiered.context import PartitionState
from tierlog.tiered.layout import CACHE_DIR_NAME, METADATA_DIR_NAME, STATUS_FILE_NAME
from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager
from tierlog.tiered.policy import candidate_segments
from tierlog.tiered.segment_deleter import FailedRemoteDelete

S = RemoteLogSegmentState
_STATUS_MAGIC = b"TLTS"
#: Version 2 added "deletes" (the remote deletes given up); version 1 files still read.
_STATUS_VERSION = 2
_STATUS_VERSIONS_READ = (1, 2)


@dataclass(frozen=True)
class PartitionTierStatus:
    topic: str
    partition: int
    topic_id: str
    #: "active", "stopped" (seed 002 or removed), "disabled" (remote storage off for the topic)
    copy_task: str
    highest_tiered_offset: int
    remote_log_start_offset: int | None
    local_log_start_offset: int | None
    log_end_offset: int | None
    local_bytes: int
    remote_bytes: int
    remote_segments: int
    copy_lag_segments: int
    copy_lag_bytes: int
    last_error: str | None = None
    last_error_ms: int | None = None
    consecutive_failures: int = 0
    segments_copied: int = 0
    #: Segment bytes this process copied (``segments_copied`` counts the segments).
    bytes_copied: int = 0
    #: Failed runs of the copy task in this process (the seed 002 stop included).
    copy_errors: int = 0
    #: Segments in DELETE_SEGMENT_STARTED whose remote delete is still to be (re)tried.
    deletes_pending: int = 0
    #: Segments whose remote delete this process gave up on: their objects stay in the remote tier
    #: until ``tierlog tier retry-delete`` or ``forget-delete`` (or a restart retries them).
    deletes_given_up: int = 0
    #: Seed 001: producer snapshots this process rebuilt before uploading a segment.
    producer_snapshots_rebuilt: int = 0
    #: Remote compaction (issue 18) in the broker: finished runs, failed runs, bytes read and written,
    #: when the last run ended, and the earliest next attempt after a failure (backoff).
    compaction_runs: int = 0
    compaction_errors: int = 0
    compaction_bytes_read: int = 0
    compaction_bytes_written: int = 0
    compaction_last_run_ms: int | None = None
    compaction_retry_at_ms: int | None = None


def status_as_dict(status: PartitionTierStatus) -> dict[str, object]:
    return asdict(status)


def partition_status(tp: TopicPartition, ulog: UnifiedLog | None, state: PartitionState | None,
                     tip: TopicIdPartition | None, rlmm: RemoteLogMetadataManager, *,
                     given_up: Callable[[RemoteLogSegmentId], bool], uploaded_size: Callable[[RemoteLogSegmentMetadata], int],
                     remote_log_start_offset: int | None) -> PartitionTierStatus:
    """What the running broker knows of one partition's tiering."""
    listed = [] if tip is None else list(rlmm.list_remote_log_segments(tip))
    finished = [m for m in listed if m.state is S.COPY_SEGMENT_FINISHED]
    deleting = [m.segment_id for m in listed if m.state is S.DELETE_SEGMENT_STARTED]
    gave_up = sum(1 for sid in deleting if given_up(sid))
    highest = max((m.end_offset for m in finished), default=-1)
    lag_segments = lag_bytes = local_bytes = 0
    local_start = leo = None
    if ulog is not None:
        with ulog.lock:
            bases = ulog.segments.base_offsets
            local_bytes = ulog.size_bytes
            local_start, leo = ulog.log_start_offset, ulog.log_end_offset
            for base, _next in candidate_segments(bases, ulog.last_stable_offset, highest, local_start):
                lag_segments += 1
                lag_bytes += ulog.segments.get(base).size_bytes
    offline = None if ulog is None else ulog.offline_reason
    task = ("offline" if offline is not None else "disabled" if state is None
            else "stopped" if state.copy_stopped else "active")
    return PartitionTierStatus(
        topic=tp[0], partition=tp[1], topic_id=uuid_to_base64(tip.topic_id) if tip else "",
        copy_task=task, highest_tiered_offset=highest,
        remote_log_start_offset=remote_log_start_offset if tip else None,
        local_log_start_offset=local_start, log_end_offset=leo, local_bytes=local_bytes,
        remote_bytes=sum(uploaded_size(m) for m in finished), remote_segments=len(finished),
        copy_lag_segments=lag_segments, copy_lag_bytes=lag_bytes,
        last_error=state.last_error if state and state.last_error else offline,
        last_error_ms=state.last_error_ms if state else None,
        consecutive_failures=state.consecutive_failures if state else 0,
        segments_copied=state.segments_copied if state else 0,
        bytes_copied=state.bytes_copied if state else 0, copy_errors=state.copy_errors if state else 0,
        deletes_pending=len(deleting) - gave_up, deletes_given_up=gave_up,
        producer_snapshots_rebuilt=state.producer_snapshots_rebuilt if state else 0,
        compaction_runs=state.compaction_runs if state else 0,
        compaction_errors=state.compaction_errors if state else 0,
        compaction_bytes_read=state.compaction_bytes_read if state else 0,
        compaction_bytes_written=state.compaction_bytes_written if state else 0,
        compaction_last_run_ms=state.compaction_last_run_ms if state else None,
        compaction_retry_at_ms=state.compaction_retry_at_ms if state else None,
    )


def compaction_fields(state: PartitionState) -> dict[str, int | None]:
    """The remote compaction figures of a partition, as the status and the status file hold them."""
    return {"compaction_runs": state.compaction_runs, "compaction_errors": state.compaction_errors,
            "compaction_bytes_read": state.compaction_bytes_read,
            "compaction_bytes_written": state.compaction_bytes_written,
            "compaction_last_run_ms": state.compaction_last_run_ms,
            "compaction_retry_at_ms": state.compaction_retry_at_ms}


# -- status file ------------------------------------------------------------------------------------


def write_status_file(path: Path, payload: Mapping[str, object]) -> None:
    write_framed(path, _STATUS_MAGIC, _STATUS_VERSION, json.dumps(payload, sort_keys=True).encode("utf-8"), sync=False)


def read_status_file(path: Path) -> dict[str, object] | None:
    """The persisted task states and errors, or None if absent or damaged (version 1 files, written
    before the given-up deletes were kept, still read)."""
    try:
        found = read_framed(path, _STATUS_MAGIC, set(_STATUS_VERSIONS_READ))
    except FramedFileError:
        return None
    if found is None:
        return None
    loaded = json.loads(found[1])
    return loaded if isinstance(loaded, dict) else None


# -- from disk --------------------------------------------------------------------------------------

_SKIPPED_DIRS = (CACHE_DIR_NAME, METADATA_DIR_NAME, "__cluster_metadata-0")


def _local_segments(part_dir: Path) -> list[tuple[int, int]]:
    """(base offset, .log size) of each segment, oldest first."""
    out = []
    with os.scandir(part_dir) as it:
        for entry in it:
            stem, _, suffix = entry.name.partition(".")
            if suffix == "log" and stem.isdigit():
                out.append((int(stem), entry.stat().st_size))
    return sorted(out)


def _given_up(persisted: dict[str, object], store: FileRemoteLogMetadataManager) -> list[FailedRemoteDelete]:
    """The deletes the broker gave up on that are still DELETE_SEGMENT_STARTED (one settled since,
    by ``tier retry-delete``/``forget-delete`` or a later broker, is gone from the metadata)."""
    started = {m.segment_id.id_str for tip in store.partitions() for m in store.list_remote_log_segments(tip)
               if m.state is RemoteLogSegmentState.DELETE_SEGMENT_STARTED}
    raw = persisted.get("deletes", [])
    out = []
    for entry in raw if isinstance(raw, list) else []:
        try:
            failed = FailedRemoteDelete(**entry)
        except TypeError:
            continue  # written by another version
        if failed.segment_id in started:
            out.append(failed)
    return out


def given_up_deletes(log_dirs: Sequence[Path]) -> list[FailedRemoteDelete]:
    """The remote deletes the broker gave up on and nothing has settled since (``tier status``)."""
    first = Path(log_dirs[0])
    store = FileRemoteLogMetadataManager(first / METADATA_DIR_NAME, read_only=True)
    try:
        return _given_up(read_status_file(first / METADATA_DIR_NAME / STATUS_FILE_NAME) or {}, store)
    finally:
        store.close()


_COMPACTION_KEYS = ("compaction_runs", "compaction_errors", "compaction_bytes_read", "compaction_bytes_written",
                    "compaction_last_run_ms", "compaction_retry_at_ms")


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) else None


def offline_status(log_dirs: Sequence[Path],
                   uploaded_size: Callable[[bytes], int | None] | None = None) -> list[PartitionTierStatus]:
    """Status of every partition that has local data with tiering history or remote segments."""
    first = Path(log_dirs[0])
    store = FileRemoteLogMetadataManager(first / METADATA_DIR_NAME, read_only=True)
    persisted = read_status_file(first / METADATA_DIR_NAME / STATUS_FILE_NAME) or {}
    tasks = persisted.get("partitions", {})
    assert isinstance(tasks, dict)
    tips: dict[tuple[str, int], TopicIdPartition] = {(t.topic, t.partition): t for t in store.partitions()}
    given_up = Counter((d.topic, d.partition) for d in _given_up(persisted, store))
    local: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for d in log_dirs:
        if not Path(d).is_dir():
            continue
        with os.scandir(d) as it:
            for entry in it:
                if not entry.is_dir() or entry.name in _SKIPPED_DIRS or entry.name.endswith("-delete"):
                    continue
                try:
                    tp = files.parse_topic_partition_name(entry.name)
                except ValueError:
                    continue
                local[tp] = _local_segments(Path(entry.path))

    def size_of(md: RemoteLogSegmentMetadata) -> int:
        if md.custom_metadata is not None and uploaded_size is not None:
            try:
                size = uploaded_size(md.custom_metadata)
            except Exception:
                size = None
            if size is not None:
                return size
        return md.segment_size_in_bytes

    out = []
    for tp in sorted(set(local) | set(tips)):
        key = f"{tp[0]}-{tp[1]}"
        task = tasks.get(key)
        if tp not in tips and task is None:
            continue  # never tiered
        tip = tips.get(tp)
        listed = [] if tip is None else list(store.list_remote_log_segments(tip))
        finished = [m for m in listed if m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
        deleting = sum(1 for m in listed if m.state is RemoteLogSegmentState.DELETE_SEGMENT_STARTED)
        highest = max((m.end_offset for m in finished), default=-1)
        segs = local.get(tp, [])
        closed = segs[:-1]
        lag = [(b, s) for i, (b, s) in enumerate(closed) if segs[i + 1][0] - 1 > highest]
        remote_start = None
        if finished:
            remote_start = max(finished[0].start_offset, store.log_start_offset(tip) or 0) if tip else None
        info = task if isinstance(task, dict) else {}
        out.append(PartitionTierStatus(
            topic=tp[0], partition=tp[1], topic_id=uuid_to_base64(tip.topic_id) if tip else "",
            copy_task=str(info.get("copy_task", "unknown")), highest_tiered_offset=highest,
            remote_log_start_offset=remote_start, local_log_start_offset=segs[0][0] if segs else None,
            log_end_offset=None, local_bytes=sum(s for _, s in segs),
            remote_bytes=sum(size_of(m) for m in finished), remote_segments=len(finished),
            copy_lag_segments=len(lag), copy_lag_bytes=sum(s for _, s in lag),
            last_error=info.get("last_error"), last_error_ms=info.get("last_error_ms"),
            consecutive_failures=int(info.get("consecutive_failures", 0) or 0),
            deletes_pending=deleting - given_up[tp], deletes_given_up=given_up[tp],
            **{k: _int_or_none(info.get(k)) for k in _COMPACTION_KEYS if k in info},  # type: ignore[arg-type]
        ))
    store.close()
    return out
