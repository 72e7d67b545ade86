"""Shared bits of the benchmarks: timing and the figure-next-to-baseline line every bench prints."""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Callable


def command_line() -> str:
    return "python " + " ".join(shlex.quote(a) for a in sys.argv)


def best_of(n: int, fn: Callable[[], object]) -> float:
    """The fastest of ``n`` runs in seconds (the least disturbed by the noisy machine)."""
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def report(name: str, value: float, unit: str, baseline_name: str, baseline: float, *, higher_is_better: bool = True) -> str:
    ratio = value / baseline if baseline else float("nan")
    line = f"{name}: {value:,.1f} {unit}  |  baseline {baseline_name}: {baseline:,.1f} {unit}  |  ratio {ratio:.2f}"
    print(line, flush=True)
    return line
