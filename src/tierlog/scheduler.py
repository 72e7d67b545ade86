"""The scheduler seam: periodic and one-shot background tasks.

The real :class:`ThreadScheduler` runs tasks on a small pool of daemon threads; tests use
``tierlog.testing.ManualScheduler``, which runs due tasks when a manual clock is advanced.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from tierlog.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger(__name__)


class TaskHandle(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    def schedule(
        self, name: str, fn: Callable[[], object], delay_ms: int, period_ms: int | None = None
    ) -> TaskHandle:
        """Run ``fn`` after ``delay_ms``, then every ``period_ms`` if given."""
        ...

    def shutdown(self) -> None: ...


@dataclass(order=True)
class ScheduledTask:
    """A task in a scheduler's heap (this one's and ``tierlog.testing``'s), due first first."""

    due_ns: int
    seq: int
    name: str = field(compare=False)
    fn: Callable[[], object] = field(compare=False)
    period_ms: int | None = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class ThreadScheduler:
    """Runs tasks on ``threads`` daemon threads; a failing task is logged and keeps its period."""

    def __init__(self, threads: int = 1, clock: Clock = SYSTEM_CLOCK, name: str = "tierlog-scheduler") -> None:
        self._clock = clock
        self._heap: list[ScheduledTask] = []
        self._seq = itertools.count()
        self._cv = threading.Condition()
        self._stopped = False
        self._threads = [
            threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True) for i in range(threads)
        ]
        for t in self._threads:
            t.start()

    def schedule(
        self, name: str, fn: Callable[[], object], delay_ms: int, period_ms: int | None = None
    ) -> TaskHandle:
        entry = ScheduledTask(self._clock.monotonic_ns() + delay_ms * 1_000_000, next(self._seq), name, fn, period_ms)
        with self._cv:
            if self._stopped:
                entry.cancelled = True
                return entry
            heapq.heappush(self._heap, entry)
            self._cv.notify()
        return entry

    def _run(self) -> None:
        while True:
            with self._cv:
                while True:
                    if self._stopped:
                        return
                    if self._heap:
                        wait_ns = self._heap[0].due_ns - self._clock.monotonic_ns()
                        if wait_ns <= 0:
                            entry = heapq.heappop(self._heap)
                            break
                        self._cv.wait(wait_ns / 1e9)
                    else:
                        self._cv.wait()
            if entry.cancelled:
                continue
            try:
                entry.fn()
            except Exception:
                log.exception("scheduled task %s failed", entry.name)
            if entry.period_ms is not None and not entry.cancelled:
                entry.due_ns = self._clock.monotonic_ns() + entry.period_ms * 1_000_000
                with self._cv:
                    if not self._stopped:
                        heapq.heappush(self._heap, entry)
                        self._cv.notify()

    def shutdown(self) -> None:
        with self._cv:
            self._stopped = True
            self._heap.clear()
            self._cv.notify_all()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=10)
