"""Cleaning a log whose segments were loaded lazily (seed 003, LoadOptions(sanity_check_all=False))
checks no more than it reads: no segment gets its indexes checked (the cleaner reads the .log files
of the segments it rewrites, every batch CRC-checked, and replaces their indexes), and of the
segments past the cleanable range only the first one -- whose largest timestamp ends the range under
min.compaction.lag.ms -- is opened at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.storage.loader import LoadOptions, load_log
from tierlog.storage.segment import LogSegment
from tierlog.testing import ManualClock

from .helpers import TS, clean, compact_config, put, table

LAG_MS = 60_000


def test_cleaning_lazily_loaded_segments_checks_no_more_than_it_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = compact_config(min_compaction_lag_ms=LAG_MS)
    ulog = load_log(tmp_path / "t-0", config, LoadOptions(had_clean_shutdown=True), clock=ManualClock(TS))
    for i in range(120):  # old enough to clean
        put(ulog, b"k%d" % (i % 6), b"old-%d" % i, ts=TS)
    ulog.roll()
    young_from = ulog.log_end_offset
    for i in range(120):  # too young: their segments end the cleanable range
        put(ulog, b"k%d" % (i % 6), b"new-%d" % i, ts=TS + 2 * LAG_MS)
    ulog.roll()
    ulog.close()

    ulog = load_log(tmp_path / "t-0", config, LoadOptions(had_clean_shutdown=True, sanity_check_all=False),
                    clock=ManualClock(TS))
    bases = ulog.segments.base_offsets
    young = [b for b in bases[:-1] if b >= young_from]
    assert len(young) >= 3 and not any(ulog.segments.is_materialized(b) for b in bases[:-1])
    checked: list[int] = []
    original = LogSegment.sanity_check

    def spy(self: LogSegment, *args: object, **kwargs: object) -> None:
        checked.append(self.base_offset)
        original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(LogSegment, "sanity_check", spy)
    result = clean(ulog, TS + 2 * LAG_MS + 1)
    assert result.end_offset == young_from  # cleaned up to the young segments
    assert checked == []  # no index checked: the rewritten ones are replaced, the rest unread
    opened = [b for b in young if ulog.segments.is_materialized(b)]
    assert opened == young[:1]  # only the first young one, for its largest timestamp
    assert table(ulog) == {b"k%d" % k: b"new-%d" % (114 + k) for k in range(6)}
