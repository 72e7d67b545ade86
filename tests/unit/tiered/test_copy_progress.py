"""Progress of a tiering backlog: a copy run that works through many segments says how far it got
(``remote copy progress ... copied_segments=N remaining_segments=M``), at most every
``PROGRESS_INTERVAL_S``, so an operator who turned tiering on for a large topic sees it move."""

from __future__ import annotations

import logging
import re

import pytest

from tests.helpers.tiered import Env, fill
from tierlog.testing.remote import InMemoryRemoteStorageManager
from tierlog.tiered import copier as remote_log_manager

PROGRESS = re.compile(r"remote copy progress topic=t partition=0 copied_segments=(\d+) remaining_segments=(\d+)")


def _progress(caplog: pytest.LogCaptureFixture) -> list[tuple[int, int]]:
    return [(int(m[1]), int(m[2])) for r in caplog.records if (m := PROGRESS.search(r.getMessage()))]


def test_a_backlog_reports_progress_until_its_last_segment(env: Env, caplog: pytest.LogCaptureFixture,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    ulog = env.open_log()
    fill(ulog, 30)
    backlog = len(ulog.segments.base_offsets) - 1
    assert backlog >= 4
    monkeypatch.setattr(remote_log_manager, "PROGRESS_INTERVAL_S", 0.0)  # every segment is "long enough"
    caplog.set_level(logging.INFO, logger="tierlog.tiered")
    rlm = env.rlm(InMemoryRemoteStorageManager())
    rlm.sync_partitions()
    assert rlm.copy_partition("t", 0) == backlog
    # One line after each segment but the last (whose end the "remote copy finished" line reports).
    assert _progress(caplog) == [(n, backlog - n) for n in range(1, backlog)]


def test_progress_is_rate_limited(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    ulog = env.open_log()
    fill(ulog, 30)
    caplog.set_level(logging.INFO, logger="tierlog.tiered")
    rlm = env.rlm(InMemoryRemoteStorageManager())
    rlm.sync_partitions()
    assert rlm.copy_partition("t", 0) >= 4
    # An in-memory copy of a few segments takes far less than PROGRESS_INTERVAL_S: nothing to report.
    assert remote_log_manager.PROGRESS_INTERVAL_S >= 1.0
    assert _progress(caplog) == []
    assert sum("remote copy finished" in r.getMessage() for r in caplog.records) >= 4
