"""A flush writes the segments' data back without holding the log's lock (#22), as Kafka's
``UnifiedLog.flush`` fsyncs outside its lock: appends to the partition go on while a rolled segment
(up to 1 GiB of dirty pages) is written back, and the recovery point still moves only after it."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import pytest

from tests.helpers.storage import OpenLog, batch
from tierlog.errors import KafkaStorageError


def hold_syncs_of(monkeypatch: pytest.MonkeyPatch, fd: int, entered: threading.Event, release: threading.Event,
                  fail: bool = False) -> None:
    """fsync and fdatasync of ``fd`` wait for ``release`` (or fail with EIO) the first time."""
    held = [False]

    def wrap(real: Callable[[int], None]) -> Callable[[int], None]:
        def sync(f: int) -> None:
            if f == fd and not held[0]:
                held[0] = True
                entered.set()
                assert release.wait(60), "the test never released the held sync"
                if fail:
                    raise OSError(5, "Input/output error")
            real(f)
        return sync

    monkeypatch.setattr(os, "fsync", wrap(os.fsync))
    monkeypatch.setattr(os, "fdatasync", wrap(os.fdatasync))


def test_appends_go_on_while_a_rolled_segment_is_written_back(open_log: OpenLog,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    ulog = open_log()
    ulog.append_as_leader(batch(3), 0)
    rolled = ulog.active_segment
    entered, release = threading.Event(), threading.Event()
    hold_syncs_of(monkeypatch, rolled.log.fd, entered, release)
    new_offset = ulog.log_end_offset
    errors: list[BaseException] = []

    def run(fn: Callable[[], object]) -> threading.Thread:
        def target() -> None:
            try:
                fn()
            except BaseException as e:  # reported by the assertion below
                errors.append(e)
        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        return thread

    # No scheduler: the roll flushes the rolled segment in its own thread, as the scheduler would.
    roller = run(ulog.roll)
    try:
        assert entered.wait(30), "the rolled segment's sync never started"
        appender = run(lambda: ulog.append_as_leader(batch(2), 0))
        appender.join(30)
        assert not appender.is_alive(), "an append waited for the rolled segment's writeback"
        assert ulog.log_end_offset == new_offset + 2
        assert ulog.recovery_point < new_offset, "the recovery point moved before the segment was synced"
    finally:
        release.set()
        roller.join(30)
    assert not roller.is_alive() and not errors, errors
    assert ulog.recovery_point == new_offset


def test_a_failed_writeback_outside_the_lock_is_a_storage_error(open_log: OpenLog,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    ulog = open_log()
    ulog.append_as_leader(batch(3), 0)
    entered, release = threading.Event(), threading.Event()
    release.set()
    hold_syncs_of(monkeypatch, ulog.active_segment.log.fd, entered, release, fail=True)
    with pytest.raises(KafkaStorageError):
        ulog.flush()
    assert entered.is_set()
    assert ulog.recovery_point == 0
