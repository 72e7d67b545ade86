"""Pure view models of the web console: plain state in, what a template draws out.

Nothing here touches the broker: the readers in :mod:`.reader` take the state, these functions turn
it into bars, lines, points and rows, so they are tested without a browser or a broker.
"""

from __future__ import annotations

import itertools
import json
import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

#: Longest shown rendering of one key, value or header value (the rest is cut with a note).
MAX_SHOWN_BYTES = 2048


# -- pagination ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    #: 1-based.
    number: int
    pages: int
    total: int

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def has_next(self) -> bool:
        return self.number < self.pages


def paginate(items: Sequence[T], number: int, per_page: int) -> Page[T]:
    """The ``number``-th page (clamped into range) of ``per_page`` items."""
    pages = max(1, math.ceil(len(items) / per_page))
    number = min(max(1, number), pages)
    start = (number - 1) * per_page
    return Page(list(items[start:start + per_page]), number, pages, len(items))


# -- units --------------------------------------------------------------------------------------------


def format_bytes(n: float | None) -> str:
    if n is None:
        return "–"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_duration_ms(ms: int | float | None) -> str:
    if ms is None or ms < 0:
        return "–"
    s = int(ms // 1000)
    if s < 60:
        return f"{ms / 1000:.1f} s" if s < 10 else f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


# -- segment timeline ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SegmentState:
    """One segment of a partition in either tier; local and remote copies of the same offsets are one."""

    base_offset: int
    #: Exclusive: the next segment's base offset (or the log end offset for the active segment).
    end_offset: int
    size_bytes: int
    #: None when not known without loading the segment (seed 003: still unchecked).
    largest_timestamp_ms: int | None
    local: bool
    remote: bool
    #: Seed 003: the segment's indexes have not been sanity-checked yet.
    unchecked: bool = False


@dataclass(frozen=True)
class Bar:
    base_offset: int
    end_offset: int
    #: "local", "remote" or "both".
    kind: str
    unchecked: bool
    #: The next retention pass deletes it.
    doomed: bool
    x_pct: float
    width_pct: float
    title: str


@dataclass(frozen=True)
class Line:
    #: "retention" (now - retention.ms) or "floor" (seed 004's log.retention.min.timestamp).
    kind: str
    x_pct: float
    #: Base offset of the segment the line is drawn at (the first one not below the threshold), or
    #: None when every drawn segment is below it (the line is at the end).
    at_base_offset: int | None
    threshold_ms: int
    title: str


@dataclass(frozen=True)
class Timeline:
    bars: list[Bar]
    lines: list[Line]
    #: Older segments left out of the drawing (summarised in a note).
    hidden_segments: int
    local_count: int
    remote_count: int
    both_count: int


def merge_segments(local: Iterable[SegmentState], remote: Iterable[SegmentState]) -> list[SegmentState]:
    """One list by base offset: a remote copy of a local segment (same base offset) makes it "both"."""
    by_base: dict[int, SegmentState] = {}
    for seg in remote:
        by_base[seg.base_offset] = seg
    for seg in local:
        other = by_base.get(seg.base_offset)
        if other is None:
            by_base[seg.base_offset] = seg
        else:
            ts = seg.largest_timestamp_ms if seg.largest_timestamp_ms is not None else other.largest_timestamp_ms
            by_base[seg.base_offset] = SegmentState(seg.base_offset, seg.end_offset, seg.size_bytes, ts,
                                                    local=True, remote=True, unchecked=seg.unchecked)
    return [by_base[b] for b in sorted(by_base)]


def _cut_index(segments: Sequence[SegmentState], threshold_ms: int) -> int:
    """Index of the first segment not wholly below ``threshold_ms`` (retention and the floor delete
    leading segments whose largest timestamp is below it); a segment of unknown timestamp stops the
    walk, as retention would look at it before deleting anything after it."""
    for i, seg in enumerate(segments):
        if seg.largest_timestamp_ms is None or seg.largest_timestamp_ms >= threshold_ms:
            return i
    return len(segments)


def segment_timeline(segments: Sequence[SegmentState], *, now_ms: int, retention_ms: int, floor_ms: int,
                     doomed: Iterable[int] = (), max_bars: int = 150, min_width_pct: float = 0.4) -> Timeline:
    """Bars from each segment's base offset to its end (width by offset span, never thinner than
    ``min_width_pct``), the newest ``max_bars`` of them; the time-retention cut-off (``retention_ms``
    ≥ 0) and seed 004's floor (``floor_ms`` > 0) as lines at the segment they fall on."""
    doomed_bases = set(doomed)
    hidden = max(0, len(segments) - max_bars)
    shown = list(segments[hidden:])
    spans = [max(1, s.end_offset - s.base_offset) for s in shown]
    total = sum(spans) or 1
    widths = [max(min_width_pct, 100.0 * n / total) for n in spans]
    scale = 100.0 / (sum(widths) or 1.0)
    widths = [w * scale for w in widths]
    bars: list[Bar] = []
    lefts: list[float] = []
    x = 0.0
    local_count = remote_count = both_count = 0
    for seg, w in zip(shown, widths, strict=True):
        kind = "both" if seg.local and seg.remote else "local" if seg.local else "remote"
        if kind == "both":
            both_count += 1
        elif kind == "local":
            local_count += 1
        else:
            remote_count += 1
        ts = "unknown (unchecked)" if seg.largest_timestamp_ms is None else str(seg.largest_timestamp_ms)
        title = (f"[{seg.base_offset}, {seg.end_offset}) {kind}, {format_bytes(seg.size_bytes)}, largest "
                 f"timestamp {ts}" + (", unchecked" if seg.unchecked else "")
                 + (", deleted by the next retention pass" if seg.base_offset in doomed_bases else ""))
        bars.append(Bar(seg.base_offset, seg.end_offset, kind, seg.unchecked, seg.base_offset in doomed_bases,
                        round(x, 3), round(w, 3), title))
        lefts.append(x)
        x += w
    lines: list[Line] = []
    thresholds = []
    if retention_ms >= 0:
        thresholds.append(("retention", now_ms - retention_ms, f"time retention cut-off (now - {retention_ms} ms)"))
    if floor_ms > 0:
        thresholds.append(("floor", floor_ms, "timestamp floor (log.retention.min.timestamp)"))
    for kind, threshold, what in thresholds:
        i = _cut_index(shown, threshold)
        at = shown[i].base_offset if i < len(shown) else None
        x_pct = lefts[i] if i < len(shown) else 100.0
        where = f"at segment {at}" if at is not None else "after the last segment"
        lines.append(Line(kind, round(x_pct, 3), at, threshold, f"{what} = {threshold}, {where}"))
    return Timeline(bars, lines, hidden, local_count, remote_count, both_count)


# -- sparklines ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sparkline:
    #: SVG polyline points, "x,y x,y ...".
    points: str
    width: int
    height: int
    last: float
    peak: float


def rates(samples: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
    """Per-second rates between successive (wall ms, cumulative counter) samples; a counter that went
    down (a restart) counts as 0."""
    out: list[tuple[int, float]] = []
    for (t0, v0), (t1, v1) in itertools.pairwise(samples):
        dt_s = (t1 - t0) / 1000.0
        out.append((t1, max(0.0, v1 - v0) / dt_s if dt_s > 0 else 0.0))
    return out


def sparkline(values: Sequence[float], width: int = 240, height: int = 40) -> Sparkline:
    """Points scaled into ``width`` × ``height`` (y down, the peak at the top; all zero stays at the
    bottom)."""
    if not values:
        return Sparkline("", width, height, 0.0, 0.0)
    peak = max(values)
    n = len(values)
    step = width / (n - 1) if n > 1 else 0.0
    pts = []
    for i, v in enumerate(values):
        y = height - 1 - ((height - 2) * v / peak if peak > 0 else 0.0)
        pts.append(f"{i * step:.1f},{y:.1f}")
    if n == 1:
        pts.append(f"{width:.1f},{pts[0].split(',')[1]}")
    return Sparkline(" ".join(pts), width, height, float(values[-1]), float(peak))


# -- consumer groups ----------------------------------------------------------------------------------


def decode_consumer_assignment(data: bytes) -> list[tuple[str, list[int]]]:
    """The topic partitions of a consumer protocol Assignment (version, [topic, [partition]], user
    data); [] for anything else (another protocol type, or bytes that do not parse)."""
    try:
        pos = 2  # version: every version starts with the same layout
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out: list[tuple[str, list[int]]] = []
        for _ in range(max(0, count)):
            (n,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = bytes(data[pos:pos + n]).decode()
            pos += n
            (m,) = struct.unpack_from(">i", data, pos)
            pos += 4
            partitions = list(struct.unpack_from(f">{max(0, m)}i", data, pos))
            pos += 4 * max(0, m)
            out.append((topic, partitions))
        return out
    except (struct.error, UnicodeDecodeError):
        return []


@dataclass(frozen=True)
class LagRow:
    topic: str
    partition: int
    committed_offset: int | None
    log_end_offset: int | None
    lag: int | None
    member: str | None


def lag_rows(committed: Mapping[tuple[str, int], int], end_offsets: Mapping[tuple[str, int], int],
             owners: Mapping[tuple[str, int], str]) -> list[LagRow]:
    """A row per partition committed or assigned: lag = log end offset - committed offset (None when
    either is unknown)."""
    rows = []
    for tp in sorted(set(committed) | set(owners)):
        c = committed.get(tp)
        end = end_offsets.get(tp)
        lag = max(0, end - c) if c is not None and end is not None else None
        rows.append(LagRow(tp[0], tp[1], c, end, lag, owners.get(tp)))
    return rows


def total_lag(committed: Mapping[tuple[str, int], int], end_offsets: Mapping[tuple[str, int], int]) -> int:
    return sum(max(0, end_offsets[tp] - c) for tp, c in committed.items() if tp in end_offsets)


# -- messages -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shown:
    text: str
    #: Why the text is not the data as it is (cut, not JSON, not UTF-8), or "".
    note: str = ""
    is_null: bool = False


def render_bytes(data: bytes | None, fmt: str, max_bytes: int = MAX_SHOWN_BYTES) -> Shown:
    """``data`` as ``fmt`` ("text", "json" or "hex"), at most ``max_bytes`` of it."""
    if data is None:
        return Shown("null", is_null=True)
    cut = len(data) > max_bytes
    part = data[:max_bytes]
    note = f"first {max_bytes} of {len(data)} bytes" if cut else ""
    if fmt == "hex":
        return Shown(" ".join(part[i:i + 16].hex(" ") for i in range(0, len(part), 16)), note)
    try:
        text = part.decode("utf-8")
    except UnicodeDecodeError:
        return Shown(part.decode("utf-8", errors="replace"), "; ".join(filter(None, [note, "not UTF-8"])))
    if fmt == "json" and not cut:
        try:
            return Shown(json.dumps(json.loads(text), indent=2, ensure_ascii=False))
        except ValueError:
            return Shown(text, "not JSON")
    return Shown(text, note)


@dataclass(frozen=True)
class RecordRow:
    offset: int
    timestamp_ms: int
    key: Shown
    value: Shown
    headers: list[tuple[str, Shown]] = field(default_factory=list)
    size_bytes: int = 0


# -- metadata -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SnapshotDue:
    #: Wall ms when seed 000's interval trigger fires, None when no record waits or the interval is off.
    due_ms: int | None
    #: Bytes still to append before the size trigger fires.
    bytes_left: int


def next_snapshot_due(bytes_since_last_snapshot: int, oldest_unsnapshotted_append_ms: int | None,
                      max_bytes: int, max_interval_ms: int) -> SnapshotDue:
    """When the next metadata snapshot is due (seed 000: the interval runs from the oldest record not
    in the latest snapshot; the size trigger from the bytes appended since)."""
    due = None
    if bytes_since_last_snapshot > 0 and max_interval_ms > 0 and oldest_unsnapshotted_append_ms is not None:
        due = oldest_unsnapshotted_append_ms + max_interval_ms
    return SnapshotDue(due, max(0, max_bytes - bytes_since_last_snapshot))
