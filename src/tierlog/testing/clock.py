"""A clock that moves only when told to, and a scheduler that runs due tasks as it moves."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

from tierlog.scheduler import ScheduledTask


class ManualClock:
    def __init__(self, wall_ms: int = 1_700_000_000_000) -> None:
        self._wall_ms = wall_ms
        self._mono_ns = 0
        self._listeners: list[Callable[[], None]] = []

    def wall_ms(self) -> int:
        return self._wall_ms

    def monotonic_ns(self) -> int:
        return self._mono_ns

    def advance(self, ms: int) -> None:
        self._wall_ms += ms
        self._mono_ns += ms * 1_000_000
        for listener in list(self._listeners):
            listener()

    def set_wall_ms(self, wall_ms: int) -> None:
        self._wall_ms = wall_ms


class ManualScheduler:
    """Runs tasks synchronously, in due order, whenever its clock advances."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self._heap: list[ScheduledTask] = []
        self._seq = itertools.count()
        clock._listeners.append(self.run_due)

    def schedule(
        self, name: str, fn: Callable[[], object], delay_ms: int, period_ms: int | None = None
    ) -> ScheduledTask:
        task = ScheduledTask(self.clock.monotonic_ns() + delay_ms * 1_000_000, next(self._seq), name, fn, period_ms)
        heapq.heappush(self._heap, task)
        return task

    def run_due(self) -> None:
        now = self.clock.monotonic_ns()
        while self._heap and self._heap[0].due_ns <= now:
            task = heapq.heappop(self._heap)
            if task.cancelled:
                continue
            task.fn()
            if task.period_ms is not None and not task.cancelled:
                task.due_ns = now + task.period_ms * 1_000_000
                heapq.heappush(self._heap, task)

    def task_names(self) -> list[str]:
        return sorted(t.name for t in self._heap if not t.cancelled)

    def shutdown(self) -> None:
        self._heap.clear()
