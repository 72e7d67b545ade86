"""The power-loss loop: the crash loop (an idempotent acks=all librdkafka producer and a committing
consumer group) with the broker's data on :mod:`tests.reliability.lazyfs`, and each SIGKILL
followed by a simulated power cut -- every write not fsynced is undone, every file or directory
whose entry was not fsynced disappears -- before the broker starts again on the remounted data.

Which one ran is said in the result: ``fuse`` (lazyfs needs /dev/fuse, fusermount3 and mfusepy).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.reliability.crash_loop import CrashLoopResult, run_crash_loop
from tests.reliability.lazyfs import command, mount


def fuse_available() -> str | None:
    """None when lazyfs can run here, else why not."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is missing (apt-get install fuse3)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as e:
        return f"mfusepy cannot load libfuse: {e}"
    return None


@dataclass
class PowerLossResult:
    harness: str = "fuse"
    cuts: int = 0
    bytes_lost_at_cuts: list[int] = field(default_factory=list)
    loop: CrashLoopResult = field(default_factory=CrashLoopResult)


def run_power_loss(work: Path, *, cuts: int, durable_acks: str, partitions: int = 3, rate: int = 1000,
                   seed: int | None = None, progress: bool = False) -> PowerLossResult:
    backing, mountpoint = work / "backing", work / "mnt"
    backing.mkdir(parents=True, exist_ok=True)
    mountpoint.mkdir(parents=True, exist_ok=True)
    result = PowerLossResult()
    fs: list[subprocess.Popen[str]] = [mount(backing, mountpoint)]

    def cut_power() -> None:
        answer = command(fs[0], "cut")
        fs[0].wait(60)
        result.cuts += 1
        result.bytes_lost_at_cuts.append(int(answer.split("lost_bytes=")[1].split()[0]))
        fs[0] = mount(backing, mountpoint)

    try:
        result.loop = run_crash_loop(
            mountpoint / "data", kills=cuts, partitions=partitions, rate=rate, min_uptime_s=1.0, max_uptime_s=3.0,
            kill_while_starting=0.0, seed=seed, progress=progress, after_kill=cut_power,
            overrides={"log.durable.acks": durable_acks}, stop_on_loss=durable_acks != "none",
            broker_log=work / "broker.stderr.log")
    finally:
        if fs[0].poll() is None:
            subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], check=False)
            fs[0].kill()
            fs[0].wait(30)
    return result
