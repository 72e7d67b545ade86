"""The console's view models, state in and drawing out, without a broker or a browser."""

from __future__ import annotations

import struct

import pytest

from tierlog.server.console import views
from tierlog.server.console.views import SegmentState


def seg(base: int, end: int, ts: int | None, *, local: bool = True, remote: bool = False, size: int = 100,
        unchecked: bool = False) -> SegmentState:
    return SegmentState(base, end, size, ts, local, remote, unchecked)


def test_paginate_clamps_and_counts() -> None:
    items = list(range(105))
    page = views.paginate(items, 3, 50)
    assert page.items == list(range(100, 105)) and page.pages == 3 and page.total == 105
    assert page.has_previous and not page.has_next
    assert views.paginate(items, 99, 50).number == 3
    assert views.paginate([], 1, 50).pages == 1 and views.paginate(items, 0, 50).items == list(range(50))


def test_merge_marks_a_segment_in_both_tiers_once() -> None:
    remote = [seg(0, 10, 5, local=False, remote=True), seg(10, 20, 15, local=False, remote=True)]
    local = [seg(10, 20, 15), seg(20, 25, None, unchecked=True)]
    merged = views.merge_segments(local, remote)
    assert [(s.base_offset, s.local, s.remote) for s in merged] == [(0, False, True), (10, True, True), (20, True, False)]


def test_timeline_counts_kinds_and_spans_the_width() -> None:
    segments = [seg(0, 10, 1, local=False, remote=True), seg(10, 20, 2, remote=True), seg(20, 60, 3)]
    t = views.segment_timeline(segments, now_ms=100, retention_ms=-1, floor_ms=0)
    assert (t.remote_count, t.both_count, t.local_count) == (1, 1, 1)
    assert [b.kind for b in t.bars] == ["remote", "both", "local"]
    assert sum(b.width_pct for b in t.bars) == pytest.approx(100.0, abs=0.01)
    assert t.bars[2].width_pct > t.bars[0].width_pct  # by offset span
    assert t.lines == []


def test_floor_and_retention_lines_fall_on_the_first_segment_not_below_them() -> None:
    segments = [seg(0, 10, 1000), seg(10, 20, 2000), seg(20, 30, 3000)]
    t = views.segment_timeline(segments, now_ms=10_000, retention_ms=8_500, floor_ms=2500)
    lines = {line.kind: line for line in t.lines}
    assert lines["floor"].at_base_offset == 20 and lines["floor"].x_pct == pytest.approx(t.bars[2].x_pct)
    # now - retention = 1500: the segment with largest timestamp 1000 is behind it
    assert lines["retention"].at_base_offset == 10
    moved = views.segment_timeline(segments, now_ms=10_000, retention_ms=-1, floor_ms=5000)
    assert [line.at_base_offset for line in moved.lines] == [None] and moved.lines[0].x_pct == 100.0


def test_an_unchecked_segment_stops_the_cut_and_is_marked() -> None:
    segments = [seg(0, 10, 1000), seg(10, 20, None, unchecked=True), seg(20, 30, 500)]
    t = views.segment_timeline(segments, now_ms=0, retention_ms=-1, floor_ms=9999, doomed=[0])
    assert t.lines[0].at_base_offset == 10
    assert [b.unchecked for b in t.bars] == [False, True, False]
    assert [b.doomed for b in t.bars] == [True, False, False]


def test_timeline_draws_only_the_newest_segments() -> None:
    segments = [seg(i * 10, i * 10 + 10, i) for i in range(500)]
    t = views.segment_timeline(segments, now_ms=0, retention_ms=-1, floor_ms=0, max_bars=150)
    assert len(t.bars) == 150 and t.hidden_segments == 350 and t.bars[0].base_offset == 3500


def test_rates_and_sparkline() -> None:
    samples = [(0, 0.0), (1000, 100.0), (3000, 500.0), (4000, 10.0)]
    assert views.rates(samples) == [(1000, 100.0), (3000, 200.0), (4000, 0.0)]
    s = views.sparkline([0.0, 50.0, 100.0], width=100, height=21)
    assert s.points == "0.0,20.0 50.0,10.5 100.0,1.0" and s.peak == 100.0 and s.last == 100.0
    assert views.sparkline([]).points == ""
    assert views.sparkline([0.0, 0.0], 10, 10).points == "0.0,9.0 10.0,9.0"


def _assignment(parts: dict[str, list[int]]) -> bytes:
    out = struct.pack(">hi", 0, len(parts))
    for topic, ps in parts.items():
        out += struct.pack(">h", len(topic)) + topic.encode() + struct.pack(">i", len(ps))
        out += b"".join(struct.pack(">i", p) for p in ps)
    return out + struct.pack(">i", -1)


def test_decode_consumer_assignment() -> None:
    assert views.decode_consumer_assignment(_assignment({"a": [0, 2], "b": [1]})) == [("a", [0, 2]), ("b", [1])]
    assert views.decode_consumer_assignment(b"\x00\x00\x00\x00\x00\x05") == []  # truncated
    assert views.decode_consumer_assignment(b"") == []


def test_lag_rows_and_total() -> None:
    committed = {("t", 0): 5, ("t", 1): 10}
    ends = {("t", 0): 8, ("t", 1): 10, ("t", 2): 4}
    rows = views.lag_rows(committed, ends, {("t", 2): "m1"})
    assert [(r.partition, r.lag, r.member) for r in rows] == [(0, 3, None), (1, 0, None), (2, None, "m1")]
    assert views.total_lag(committed, ends) == 3


def test_render_bytes_formats_and_bounds() -> None:
    assert views.render_bytes(None, "text").is_null
    assert views.render_bytes(b'{"a":1}', "json").text == '{\n  "a": 1\n}'
    assert views.render_bytes(b"plain", "json").note == "not JSON"
    assert views.render_bytes(b"\x00\xff", "hex").text == "00 ff"
    cut = views.render_bytes(b"x" * 5000, "text", max_bytes=100)
    assert len(cut.text) == 100 and "first 100 of 5000 bytes" in cut.note
    assert "not UTF-8" in views.render_bytes(b"\xff\xfe", "text").note


def test_next_snapshot_due() -> None:
    assert views.next_snapshot_due(10, 1000, 100, 3600).due_ms == 4600
    assert views.next_snapshot_due(10, 1000, 100, 3600).bytes_left == 90
    assert views.next_snapshot_due(0, None, 100, 3600).due_ms is None
    assert views.next_snapshot_due(10, 1000, 100, 0).due_ms is None


def test_units() -> None:
    assert views.format_bytes(512) == "512 B" and views.format_bytes(1536) == "1.5 KiB"
    assert views.format_duration_ms(65_000) == "1 min 5 s" and views.format_duration_ms(-1) == "–"


def test_exposure_warning_only_beyond_loopback_with_secured_listeners() -> None:
    from tierlog.server.console.server import exposure_warning

    secured = {"PLAIN": "PLAINTEXT", "OUTSIDE": "SASL_SSL"}
    assert exposure_warning("127.0.0.1", secured) is None
    assert exposure_warning("::1", secured) is None
    assert exposure_warning("localhost", secured) is None
    assert exposure_warning("0.0.0.0", {"PLAIN": "PLAINTEXT"}) is None  # nothing is secured: nothing to leak
    warning = exposure_warning("", secured)
    assert warning is not None and "0.0.0.0" in warning and "OUTSIDE" in warning and "PLAIN," not in warning
    assert exposure_warning("10.1.2.3", {"TLS": "SSL"}) is not None
