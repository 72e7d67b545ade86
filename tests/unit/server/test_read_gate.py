"""The connection's pause/resume decisions, as the sans-IO read gate makes them."""

from __future__ import annotations

from tierlog.server.read_gate import ReadActions, ReadGate, Timer


def test_a_full_queue_pauses_reading_until_it_is_below_half_of_both_bounds() -> None:
    gate = ReadGate(max_frames=8, max_bytes=1000)
    gate.queued(7, 100)
    assert gate.decide(receiving=False, timeout_set=True) == ReadActions(None, Timer.KEEP)
    gate.queued(8, 120)
    assert gate.decide(receiving=False, timeout_set=True) == ReadActions(True, Timer.KEEP)
    gate.taken(5, 90)  # not below half of the frames bound yet
    assert gate.queue_full
    assert gate.decide(receiving=False, timeout_set=True) == ReadActions(None, Timer.KEEP)
    gate.taken(3, 90)
    assert not gate.queue_full
    assert gate.decide(receiving=False, timeout_set=True) == ReadActions(False, Timer.KEEP)


def test_the_bytes_bound_counts_too() -> None:
    gate = ReadGate(max_frames=8, max_bytes=1000)
    gate.queued(1, 1000)
    assert gate.queue_full
    gate.taken(0, 600)  # no frames left but above half the bytes: still full
    assert gate.queue_full
    gate.taken(0, 499)
    assert not gate.queue_full


def test_waiting_for_memory_pauses_reading_but_keeps_the_receive_clock_running() -> None:
    gate = ReadGate(max_frames=8, max_bytes=1000)
    gate.waiting_for_memory = True
    assert gate.decide(receiving=True, timeout_set=True) == ReadActions(True, Timer.START)
    assert gate.decide(receiving=True, timeout_set=True) == ReadActions(None, Timer.KEEP)
    gate.waiting_for_memory = False
    assert gate.decide(receiving=True, timeout_set=True) == ReadActions(False, Timer.KEEP)


def test_the_receive_timer_runs_only_while_part_of_a_request_is_in_and_the_queue_is_not_full() -> None:
    gate = ReadGate(max_frames=8, max_bytes=1000)
    assert gate.decide(receiving=False, timeout_set=True).timer is Timer.KEEP
    assert gate.decide(receiving=True, timeout_set=True).timer is Timer.START
    assert gate.decide(receiving=True, timeout_set=True).timer is Timer.KEEP
    gate.queued(8, 10)  # behind a full queue the client waits on the broker: its clock stops
    assert gate.decide(receiving=True, timeout_set=True) == ReadActions(True, Timer.CANCEL)
    assert gate.decide(receiving=True, timeout_set=True) == ReadActions(None, Timer.KEEP)
    gate.taken(0, 0)
    assert gate.decide(receiving=True, timeout_set=True) == ReadActions(False, Timer.START)
    assert gate.decide(receiving=False, timeout_set=True).timer is Timer.CANCEL


def test_no_timer_without_a_timeout_and_a_cancelled_timer_starts_again() -> None:
    gate = ReadGate(max_frames=8, max_bytes=1000)
    assert gate.decide(receiving=True, timeout_set=False).timer is Timer.KEEP
    assert gate.decide(receiving=True, timeout_set=True).timer is Timer.START
    gate.timer_cancelled()  # a frame completed (or the timer fired)
    assert gate.decide(receiving=True, timeout_set=True).timer is Timer.START
