"""The clock seam: every decision that depends on time takes it from here (or as ``now_ms``)."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def wall_ms(self) -> int:
        """Milliseconds since the Unix epoch (for timestamps and retention)."""
        ...

    def monotonic_ns(self) -> int:
        """A monotonic reading in nanoseconds (for measuring intervals)."""
        ...


class SystemClock:
    """The real clock."""

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ns(self) -> int:
        return time.monotonic_ns()


SYSTEM_CLOCK = SystemClock()


def monotonic_s(clock: Clock) -> float:
    """``clock``'s monotonic reading in seconds, for durations logged or compared in seconds."""
    return clock.monotonic_ns() / 1e9


def system_monotonic_s() -> float:
    """The real clock's monotonic reading in seconds: the default of a part that takes ``now_s``."""
    return monotonic_s(SYSTEM_CLOCK)
