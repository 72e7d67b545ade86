"""Shared bits of the benchmarks: the command line and the figure-next-to-baseline line every bench prints."""

from __future__ import annotations

import shlex
import sys


def command_line() -> str:
    return "python " + " ".join(shlex.quote(a) for a in sys.argv)


def report(name: str, value: float, unit: str, baseline_name: str, baseline: float, *, higher_is_better: bool = True) -> str:
    ratio = value / baseline if baseline else float("nan")
    line = f"{name}: {value:,.1f} {unit}  |  baseline {baseline_name}: {baseline:,.1f} {unit}  |  ratio {ratio:.2f}"
    print(line, flush=True)
    return line
