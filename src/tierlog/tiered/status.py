"""Tiering status of a data directory read from disk, for ``tierlog tier status``: it works beside a
running broker (it only reads) and on a stopped one.

The durable remote log metadata gives the highest tiered offset and the remote bytes; the partition
directories give the local bytes and the copy lag (closed segments above the highest tiered offset);
the broker's status file gives what only the running process knows (a copy task stopped by seed 002,
the last error)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from tierlog.ids import uuid_to_base64
from tierlog.storage import files
from tierlog.tiered.api import RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager
from tierlog.tiered.remote_log_manager import (
    METADATA_DIR_NAME,
    STATUS_FILE_NAME,
    PartitionTierStatus,
    read_status_file,
)

_SKIPPED_DIRS = ("remote-log-index-cache", METADATA_DIR_NAME, "__cluster_metadata-0")


def _local_segments(part_dir: Path) -> list[tuple[int, int]]:
    """(base offset, .log size) of each segment, oldest first."""
    out = []
    with os.scandir(part_dir) as it:
        for entry in it:
            stem, _, suffix = entry.name.partition(".")
            if suffix == "log" and stem.isdigit():
                out.append((int(stem), entry.stat().st_size))
    return sorted(out)


def offline_status(log_dirs: Sequence[Path],
                   uploaded_size: Callable[[bytes], int | None] | None = None) -> list[PartitionTierStatus]:
    """Status of every partition that has local data with tiering history or remote segments."""
    first = Path(log_dirs[0])
    store = FileRemoteLogMetadataManager(first / METADATA_DIR_NAME, read_only=True)
    persisted = read_status_file(first / METADATA_DIR_NAME / STATUS_FILE_NAME) or {}
    tasks = persisted.get("partitions", {})
    assert isinstance(tasks, dict)
    tips: dict[tuple[str, int], TopicIdPartition] = {(t.topic, t.partition): t for t in store.partitions()}
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
        finished = [] if tip is None else [m for m in store.list_remote_log_segments(tip)
                                           if m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
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
        ))
    store.close()
    return out
