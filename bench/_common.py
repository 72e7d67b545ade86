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


def perf_producer_command(bootstrap: str, topic: str, records: int, size: int, props: dict[str, str],
                          throughput: float = -1) -> list[str]:
    """Apache Kafka's own ``kafka-producer-perf-test`` (the Java client; the jars scripts/_env.sh
    fetches), producing ``records`` records of ``size`` bytes as fast as it can (or at ``throughput``
    records/s, the tool's own pacing) with ``props`` over its defaults."""
    from tests.jvm.kafka import PRODUCER_PERF, java_command

    return java_command(PRODUCER_PERF, ["--topic", topic, "--num-records", str(records), "--record-size", str(size),
                                        "--throughput", str(int(throughput)), "--producer-props", f"bootstrap.servers={bootstrap}",
                                        *(f"{k}={v}" for k, v in props.items())])


def perf_producer_rate(stdout: str) -> float:
    """Records per second from the perf test's summary line (its last): "N records sent, R records/sec ..."."""
    import re

    m = re.search(r"\d+ records sent, ([\d.]+) records/sec", stdout.splitlines()[-1] if stdout else "")
    if m is None:
        raise SystemExit(f"producer perf test printed no summary:\n{stdout[-2000:]}")
    return float(m.group(1))
