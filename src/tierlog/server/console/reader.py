"""What each console page shows, read from the broker's in-memory state.

Called on the console's HTTP threads, never on the event loop. Each read takes a log's lock only
for the few fields it copies; the group coordinator's maps are copied (they change on the event
loop) and read from the copy. Nothing here opens a Kafka connection, and nothing loads a segment a
lazy start left alone (seed 003).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import tierlog
from tierlog.records import decode_batch, iter_headers
from tierlog.server.console import views
from tierlog.server.console.sampler import LocalSizes, Sampler
from tierlog.server.handlers.configs import ConfigSource, topic_config_entries
from tierlog.storage import files
from tierlog.storage.log import UnifiedLog
from tierlog.storage.retention import SegmentInfo, deletable_segments
from tierlog.tiered.api import RemoteLogSegmentState

if TYPE_CHECKING:
    from tierlog.server.context import BrokerContext

T = TypeVar("T")

TOPICS_PER_PAGE = 50
PARTITIONS_PER_PAGE = 20
TIER_ROWS_PER_PAGE = 50
GROUPS_PER_PAGE = 50
LAG_ROWS_PER_PAGE = 100
MAX_MESSAGES = 50
#: What the Messages page reads by default, and at most (the form's "read at most" field, in KiB).
DEFAULT_MESSAGE_READ_BYTES = 64 * 1024
MAX_MESSAGE_READ_BYTES = 1 << 20

SOURCE_NAMES = {
    ConfigSource.DYNAMIC_TOPIC_CONFIG: "topic",
    ConfigSource.DYNAMIC_BROKER_CONFIG: "broker (dynamic)",
    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG: "cluster default (dynamic)",
    ConfigSource.STATIC_BROKER_CONFIG: "broker",
    ConfigSource.DEFAULT_CONFIG: "default",
}


class NotFound(Exception):
    """The page names a topic, partition or group the broker does not have (HTTP 404)."""


def _copied(read: Callable[[], T]) -> T:
    """``read()`` of a map the event loop may resize meanwhile: retried until it copies cleanly."""
    for _ in range(100):
        try:
            return read()
        except RuntimeError:  # "dictionary changed size during iteration"
            continue
    return read()


# -- overview -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogDirRow:
    path: str
    partitions: int
    tierlog_bytes: int
    used_bytes: int
    free_bytes: int
    total_bytes: int


def local_sizes(ctx: BrokerContext, now_ms: int) -> LocalSizes:
    """Every log's local bytes summed per log dir and per topic, and the unchecked segments (the
    sampler's input)."""
    by_dir: dict[str, tuple[int, int]] = {str(d): (0, 0) for d in ctx.log_manager.log_dirs}
    by_topic: dict[str, int] = {}
    unchecked = 0
    for (topic_name, _), ulog in ctx.log_manager.all_logs().items():
        if ulog.deleted:
            continue
        unchecked += ulog.unchecked_segments()
        size = ulog.size_bytes_unloaded()
        d = str(ulog.dir.parent)
        count, total = by_dir.get(d, (0, 0))
        by_dir[d] = (count + 1, total + size)
        by_topic[topic_name] = by_topic.get(topic_name, 0) + size
    return LocalSizes(now_ms, by_dir, by_topic, unchecked)


def overview(ctx: BrokerContext, sampler: Sampler, started_ms: int, page: int) -> dict[str, Any]:
    now = ctx.clock.wall_ms()
    manager = ctx.log_manager
    sizes = sampler.local_sizes() or local_sizes(ctx, now)
    dirs = []
    for d in manager.log_dirs:
        usage = shutil.disk_usage(d)
        count, size = sizes.by_dir.get(str(d), (0, 0))
        dirs.append(LogDirRow(str(d), count, size, usage.used, usage.free, usage.total))
    local_bytes = sum(row.tierlog_bytes for row in dirs)
    image = ctx.image
    topics = sorted(image.topics_by_name.values(), key=lambda t: t.name)
    topic_page = views.paginate(topics, page, TOPICS_PER_PAGE)
    topic_rows = [{"name": t.name, "partitions": t.num_partitions, "local_bytes": sizes.by_topic.get(t.name, 0),
                   "remote": image.topic_configs(t.name).get("remote.storage.enable") == "true"}
                  for t in topic_page.items]
    samples = sampler.throughput()
    produce = views.rates([(t, p) for t, p, _ in samples])
    fetch = views.rates([(t, f) for t, _, f in samples])
    tiers = sampler.tiers()
    controller = ctx.controller
    return {
        "node_id": ctx.node_id, "cluster_id": ctx.cluster_id, "version": tierlog.__version__,
        "uptime_ms": now - started_ms, "log_dirs": dirs, "topic_count": len(topics),
        "partition_count": sum(t.num_partitions for t in topics), "local_bytes": local_bytes,
        "tiers": tiers, "tiers_age_ms": None if tiers is None else now - tiers.taken_ms,
        "remote_enabled": ctx.remote_log_manager is not None,
        "produce": views.sparkline([r for _, r in produce]), "fetch": views.sparkline([r for _, r in fetch]),
        "sample_interval_ms": sampler.interval_ms, "samples": len(samples),
        "lazy_checked": manager.lazy_checked_segments, "unchecked": sizes.unchecked_segments,
        "snapshot_age_ms": controller.latest_snapshot_age_ms, "topics": topic_rows, "topic_page": topic_page,
        "sizes_age_ms": now - sizes.taken_ms,
    }


# -- topic --------------------------------------------------------------------------------------------


def _local_segments(ulog: UnifiedLog) -> tuple[list[views.SegmentState], int]:
    """The local segments without loading an untouched one (its size from the file, its timestamp
    unknown), and the log's size."""
    out: list[views.SegmentState] = []
    unloaded: list[int] = []
    with ulog.lock:
        bases = ulog.segments.base_offsets
        for i, base in enumerate(bases):
            end = bases[i + 1] if i + 1 < len(bases) else ulog.log_end_offset
            if ulog.segments.is_materialized(base):
                seg = ulog.segments.get(base)
                ts = seg.largest_timestamp if seg.checked else None
                out.append(views.SegmentState(base, end, seg.size_bytes, ts, True, False, not seg.checked))
            else:
                unloaded.append(len(out))
                out.append(views.SegmentState(base, end, 0, None, True, False, True))
    for i in unloaded:
        s = out[i]
        try:
            size = files.log_file(ulog.dir, s.base_offset).stat().st_size
        except FileNotFoundError:
            size = 0
        out[i] = views.SegmentState(s.base_offset, s.end_offset, size, None, True, False, True)
    return out, sum(s.size_bytes for s in out)


def _retention_plan(ulog: UnifiedLog, local: list[views.SegmentState], total_bytes: int, now_ms: int) -> list[int]:
    """Base offsets the next local retention pass deletes, computed as retention does but stopping
    at the first segment whose timestamp is unknown without loading it (retention would load it)."""
    with ulog.lock:
        if ulog.offline_reason is not None:
            return []
        policy = ulog.retention_policy(local=ulog.remote_log_enabled)
    infos = []
    for i, s in enumerate(local):
        if s.largest_timestamp_ms is None:
            break
        infos.append(SegmentInfo(s.base_offset, s.end_offset, s.size_bytes, s.largest_timestamp_ms,
                                 i == len(local) - 1))
    return [d.segment.base_offset for d in deletable_segments(infos, policy, now_ms, total_bytes)]


def _remote_segments(ctx: BrokerContext, topic: str, partition: int) -> list[views.SegmentState]:
    rlm = ctx.remote_log_manager
    if rlm is None:
        return []
    return [views.SegmentState(m.start_offset, m.end_offset + 1, m.segment_size_in_bytes, m.max_timestamp_ms,
                               False, True)
            for m in rlm.remote_segments(topic, partition) if m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED]


def topic(ctx: BrokerContext, name: str, page: int) -> dict[str, Any]:
    image = ctx.image
    t = image.topics_by_name.get(name)
    if t is None:
        raise NotFound(f"no topic {name}")
    now = ctx.clock.wall_ms()
    configs = [{"name": e["name"], "value": e["value"], "source": SOURCE_NAMES.get(ConfigSource(e["config_source"]),
                                                                                   "unknown")}
               for e in topic_config_entries(ctx, image.topic_configs(name))]
    part_page = views.paginate(sorted(t.partitions), page, PARTITIONS_PER_PAGE)
    parts: list[dict[str, Any]] = []
    for p in part_page.items:
        ulog = ctx.log_manager.get_log(name, p)
        if ulog is None:
            parts.append({"partition": p, "missing": True})
            continue
        local, size = _local_segments(ulog)
        remote = _remote_segments(ctx, name, p)
        doomed = _retention_plan(ulog, local, size, now)
        with ulog.lock:
            config = ulog.config
            row: dict[str, Any] = {"partition": p, "missing": False, "log_start_offset": ulog.log_start_offset,
                   "log_end_offset": ulog.log_end_offset, "last_stable_offset": ulog.last_stable_offset,
                   "offline": ulog.offline_reason}
        row.update(local_bytes=size, remote_bytes=sum(s.size_bytes for s in remote),
                   remote_start=min((s.base_offset for s in remote), default=None),
                   timeline=views.segment_timeline(views.merge_segments(local, remote), now_ms=now,
                                                   retention_ms=config.retention_ms,
                                                   floor_ms=config.retention_min_timestamp_ms, doomed=doomed),
                   doomed=len(doomed))
        parts.append(row)
    return {"name": name, "topic_id": t.topic_id_string, "partition_count": t.num_partitions, "configs": configs,
            "partitions": parts, "part_page": part_page, "now_ms": now}


# -- tiering ------------------------------------------------------------------------------------------


def tiering(ctx: BrokerContext, sampler: Sampler, page: int) -> dict[str, Any]:
    rlm = ctx.remote_log_manager
    if rlm is None:
        return {"enabled": False}
    listed = sampler.tier_partitions()
    tier_page = views.paginate(listed, page, TIER_ROWS_PER_PAGE)
    limit = rlm.config.custom_metadata_max_bytes
    rows = []
    for topic_name, partition in tier_page.items:
        status = rlm.partition_status(topic_name, partition)
        if status is None:
            continue
        segments = rlm.remote_segments(topic_name, partition)
        custom = [len(m.custom_metadata) for m in segments
                  if m.custom_metadata is not None and m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
        rejected = [len(m.rejected_custom_metadata) for m in segments if m.rejected_custom_metadata is not None]
        rows.append({"s": status, "custom_max": max(custom, default=None), "rejected": rejected,
                     "over_limit": bool(rejected) or any(n > limit for n in custom)})
    return {"enabled": True, "rows": rows, "tier_page": tier_page, "limit": limit, "tiers": sampler.tiers()}


# -- consumer groups ----------------------------------------------------------------------------------


def _end_offsets(ctx: BrokerContext, tps: Any) -> dict[tuple[str, int], int]:
    out = {}
    for tp in tps:
        ulog = ctx.log_manager.get_log(*tp)
        if ulog is not None:
            # A consumer's lag is to what it can read (Kafka's tools ask ListOffsets for "latest").
            out[tp] = ulog.high_watermark
    return out


def group_lags(ctx: BrokerContext) -> dict[str, int]:
    """Every group's total lag (the sampler's input)."""
    coordinator = ctx.groups
    if coordinator is None:
        return {}
    offsets = _copied(lambda: {g: dict(o) for g, o in list(coordinator.offsets.items())})
    return {g: views.total_lag({tp: v.offset for tp, v in committed.items()}, _end_offsets(ctx, committed))
            for g, committed in offsets.items()}


@dataclass(frozen=True)
class GroupSummary:
    """One group of either protocol as the console shows it."""

    state: str
    members: int
    protocol: str | None
    generation: int | None = None
    leader: str | None = None


def _summaries(ctx: BrokerContext) -> dict[str, GroupSummary]:
    """Every live group: the classic ones and those of the consumer protocol (KIP-848), whose
    generation is the group epoch and whose protocol is shown with its server-side assignor."""
    coordinator = ctx.groups
    if coordinator is None:
        return {}
    classic = _copied(lambda: list(coordinator.list_groups()))
    out = {g.group_id: GroupSummary(g.state.value, len(g.members), g.protocol_name, g.generation_id, g.leader_id)
           for g in classic}
    for g in _copied(lambda: list(coordinator.consumer.groups.values())):
        out[g.group_id] = GroupSummary(g.state.value, len(g.members), f"consumer ({g.assignor})", g.group_epoch)
    return out


def groups(ctx: BrokerContext, sampler: Sampler, page: int) -> dict[str, Any]:
    coordinator = ctx.groups
    live = _summaries(ctx)
    committed = {} if coordinator is None else _copied(lambda: {g: len(o) for g, o in list(coordinator.offsets.items())})
    names = sorted(set(live) | set(committed))
    group_page = views.paginate(names, page, GROUPS_PER_PAGE)
    rows = []
    for g in group_page.items:
        summary = live.get(g)
        history = sampler.group_lag(g)
        rows.append({"id": g, "state": summary.state if summary else "Empty",
                     "members": summary.members if summary else 0,
                     "protocol": summary.protocol if summary else None, "partitions": committed.get(g, 0),
                     "lag": history[-1][1] if history else None,
                     "spark": views.sparkline([float(v) for _, v in history], 160, 24)})
    return {"rows": rows, "group_page": group_page}


def _members(ctx: BrokerContext, group_id: str) -> list[dict[str, Any]] | None:
    """The members of a live group with their assignments as (topic, partitions), or None."""
    coordinator = ctx.groups
    if coordinator is None:
        return None
    classic = coordinator.describe(group_id)
    if classic is not None:
        rows = []
        for m in _copied(lambda: list(classic.members.values())):
            assigned = views.decode_consumer_assignment(m.assignment) if m.protocol_type == "consumer" else []
            rows.append({"member_id": m.member_id, "instance": m.group_instance_id, "client_id": m.client_id,
                         "host": m.client_host, "assignment": assigned})
        return rows
    group = coordinator.consumer.groups.get(group_id)
    if group is None:
        return None
    names = {tid: t.name for tid, t in ctx.image.topics_by_id.items()}
    rows = []
    for cm in _copied(lambda: list(group.members.values())):
        assigned = sorted((names.get(tid, tid.hex()), sorted(ps)) for tid, ps in cm.assigned.items())
        rows.append({"member_id": cm.member_id, "instance": cm.instance_id, "client_id": cm.client_id,
                     "host": cm.client_host, "assignment": assigned})
    return rows


def group(ctx: BrokerContext, sampler: Sampler, group_id: str, page: int) -> dict[str, Any]:
    coordinator = ctx.groups
    if coordinator is None:
        raise NotFound(f"no group {group_id}")
    summary = _summaries(ctx).get(group_id)
    member_rows = _members(ctx, group_id) or []
    committed_values = _copied(lambda: dict(coordinator.offsets.get(group_id, {})))
    if summary is None and not committed_values:
        raise NotFound(f"no group {group_id}")
    owners: dict[tuple[str, int], str] = {}
    for m in member_rows:
        for topic_name, partitions in m["assignment"]:
            for p in partitions:
                owners[(topic_name, p)] = m["member_id"]
    committed = {tp: v.offset for tp, v in committed_values.items()}
    # Rows are built for the shown page only; the total needs every partition's end offset, which is
    # one lookup each (a group with 10,000 partitions would otherwise build 10,000 rows per render).
    ends = _end_offsets(ctx, set(committed) | set(owners))
    keys = views.paginate(sorted(set(committed) | set(owners)), page, LAG_ROWS_PER_PAGE)
    shown = set(keys.items)
    rows = views.lag_rows({tp: c for tp, c in committed.items() if tp in shown}, ends,
                          {tp: m for tp, m in owners.items() if tp in shown})
    lag_page = views.Page(rows, keys.number, keys.pages, keys.total)
    history = sampler.group_lag(group_id)
    return {"id": group_id, "state": summary.state if summary else "Empty",
            "generation": summary.generation if summary else None,
            "protocol": summary.protocol if summary else None, "leader": summary.leader if summary else None,
            "members": member_rows, "lag_page": lag_page,
            "total_lag": views.total_lag(committed, ends),
            "lag_spark": views.sparkline([float(v) for _, v in history]), "samples": len(history),
            "sample_interval_ms": sampler.interval_ms}


# -- messages -----------------------------------------------------------------------------------------


@dataclass
class MessageQuery:
    topic: str
    partition: int = 0
    offset: int | None = None
    timestamp_ms: int | None = None
    count: int = 10
    fmt: str = "text"
    max_bytes: int = DEFAULT_MESSAGE_READ_BYTES


@dataclass
class MessageResult:
    query: MessageQuery
    start_offset: int | None = None
    #: "local" or "remote": where the records were read from.
    tier: str | None = None
    records: list[views.RecordRow] = field(default_factory=list)
    error: str | None = None
    log_start_offset: int | None = None
    log_end_offset: int | None = None


def messages(ctx: BrokerContext, q: MessageQuery) -> MessageResult:
    q.count = min(max(1, q.count), MAX_MESSAGES)
    q.max_bytes = min(max(1024, q.max_bytes), MAX_MESSAGE_READ_BYTES)
    result = MessageResult(q)
    ulog = ctx.log_manager.get_log(q.topic, q.partition)
    if ulog is None:
        raise NotFound(f"no partition {q.topic}-{q.partition}")
    rlm = ctx.remote_log_manager
    result.log_start_offset = ulog.log_start_offset
    result.log_end_offset = ulog.log_end_offset
    if rlm is not None:
        remote_start = rlm.remote_log_start_offset(q.topic, q.partition)
        if remote_start is not None:
            result.log_start_offset = min(remote_start, ulog.log_start_offset)
    start = q.offset
    if q.timestamp_ms is not None:
        found = None
        if rlm is not None:
            found = rlm.find_offset_by_timestamp(q.topic, q.partition, q.timestamp_ms)
        if found is None:
            found = ulog.fetch_offset_by_timestamp(q.timestamp_ms)
        if found is None:
            result.error = f"no record at or after timestamp {q.timestamp_ms}"
            return result
        start = found[0]
    if start is None:
        start = result.log_start_offset
    result.start_offset = start
    data: bytes | None
    if start < ulog.log_start_offset:
        data = None if rlm is None else rlm.read(q.topic, q.partition, start, q.max_bytes)
        result.tier = "remote"
    else:
        data = ulog.read_bytes(start, q.max_bytes) if start < ulog.log_end_offset else b""
        result.tier = "local"
    if data is None:
        result.error = f"offset {start} is not in the log [{result.log_start_offset}, {result.log_end_offset})"
        return result
    for header in iter_headers(data):
        if header.is_control:
            continue
        for record in decode_batch(header):
            if record.offset < start:
                continue
            size = len(record.key or b"") + len(record.value or b"")
            result.records.append(views.RecordRow(
                record.offset, record.timestamp, views.render_bytes(record.key, q.fmt),
                views.render_bytes(record.value, q.fmt),
                [(hk, views.render_bytes(hv, q.fmt)) for hk, hv in record.headers], size))
            if len(result.records) >= q.count:
                return result
    return result


# -- metadata -----------------------------------------------------------------------------------------


def metadata(ctx: BrokerContext) -> dict[str, Any]:
    controller = ctx.controller
    mlog = controller.metadata_log
    m = controller.metrics
    reasons = dict(m.reason_by_end_offset)
    snaps = []
    for s in reversed(mlog.snapshots()):
        try:
            written_ms = int(os.stat(s.path).st_mtime * 1000)
        except FileNotFoundError:
            continue  # removed by snapshot retention meanwhile
        reason = reasons.get(s.snapshot_id.end_offset)
        snaps.append({"end_offset": s.snapshot_id.end_offset, "epoch": s.snapshot_id.epoch, "size_bytes": s.size_bytes,
                      "written_ms": written_ms, "file": s.path.name,
                      "reason": reason.value if reason else "unknown (written before this start)"})
    settings = controller.effective_snapshot_settings()
    due = views.next_snapshot_due(m.bytes_since_last_snapshot, m.oldest_unsnapshotted_append_time_ms,
                                  settings.max_record_bytes_between_snapshots, settings.max_snapshot_interval_ms)
    image = controller.image
    return {"log_start_offset": mlog.log_start_offset, "log_end_offset": mlog.log_end_offset,
            "image_offset": image.provenance.last_offset, "snapshots": snaps, "settings": settings, "due": due,
            "bytes_since": m.bytes_since_last_snapshot, "failures": m.snapshot_failures,
            "counts": {r.value: n for r, n in m.snapshots_generated.items()}, "now_ms": ctx.clock.wall_ms(),
            "features": dict(image.features)}
