"""The power-loss loop: the crash loop (an idempotent acks=all librdkafka producer and a committing
consumer group) with the broker's data on :mod:`tests.reliability.lazyfs`, and each SIGKILL
followed by a simulated power cut -- every write not fsynced is undone, every file or directory
whose entry was not fsynced disappears -- before the broker starts again on the remounted data.

Besides the records and the group's commits (``__consumer_offsets``, checked by the crash loop), and
the idempotent producer's state (a duplicate after a cut would show a producer snapshot or its
rebuild wrong), the metadata log goes through the cuts too: after every start a topic is created,
and after every later start each topic whose creation was acknowledged must still be there with
its partitions.

Which one ran is said in the result: ``fuse`` (lazyfs needs /dev/fuse, fusermount3 and mfusepy).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.reliability.crash_loop import CrashLoopResult, run_crash_loop
from tests.reliability.harness import ChaosBroker, RawClient, create_topic
from tests.reliability.lazyfs import command, mount
from tierlog.protocol import ApiKey


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
    #: Topics whose creation was acknowledged (each after a start), and those later missing.
    topics_created: int = 0
    topics_missing: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.loop.ok and not self.topics_missing


def _topics(broker: ChaosBroker) -> dict[str, int]:
    with RawClient(broker.port) as c:
        body = c.call(ApiKey.METADATA, 9, {"topics": None, "allow_auto_topic_creation": False,
                                           "include_cluster_authorized_operations": False,
                                           "include_topic_authorized_operations": False})
    return {t.name: len(t.partitions) for t in body.topics if t.error_code == 0}


#: With ``tiered``: the embedded local-directory remote tier, outside lazyfs (the remote store is
#: another machine), tiering as soon as a segment closes and keeping one byte locally, so reads of
#: all but the newest segments go through the remote log metadata journal, which lives in the
#: first log dir on lazyfs and so goes through the cuts.
TIERING = {"remote.log.storage.system.enable": "true", "remote.log.manager.task.interval.ms": "100",
           "log.retention.check.interval.ms": "100", "log.segment.delete.delay.ms": "0"}
TIERED_TOPIC = {"remote.storage.enable": "true", "local.retention.bytes": "1", "retention.ms": "-1",
                "segment.bytes": str(16 << 10)}


def run_power_loss(work: Path, *, cuts: int, durable_acks: str, partitions: int = 3, rate: int = 1000,
                   seed: int | None = None, progress: bool = False, tiered: bool = False) -> PowerLossResult:
    backing, mountpoint = work / "backing", work / "mnt"
    backing.mkdir(parents=True, exist_ok=True)
    mountpoint.mkdir(parents=True, exist_ok=True)
    result = PowerLossResult()
    fs: list[subprocess.Popen[str]] = [mount(backing, mountpoint)]

    def cut_power() -> None:
        answer = command(fs[0], "cut")
        fs[0].wait(600)  # undoing a cut's writes takes a while on a loaded machine
        result.cuts += 1
        result.bytes_lost_at_cuts.append(int(answer.split("lost_bytes=")[1].split()[0]))
        fs[0] = mount(backing, mountpoint)

    created: dict[str, int] = {}

    def create_and_check_topics(broker: ChaosBroker) -> bool:
        """The metadata log through the cuts: every acknowledged topic creation survives."""
        present = _topics(broker)
        for name, count in created.items():
            if present.get(name) != count and name not in result.topics_missing:
                result.topics_missing.append(name)
        name = f"power-{len(created)}"
        create_topic(broker.port, name, 1 + len(created) % 3)
        created[name] = 1 + len(created) % 3
        result.topics_created = len(created)
        return not result.topics_missing

    try:
        result.loop = run_crash_loop(
            mountpoint / "data", kills=cuts, partitions=partitions, rate=rate, min_uptime_s=1.0, max_uptime_s=3.0,
            kill_while_starting=0.0, seed=seed, progress=progress, after_kill=cut_power,
            overrides={"log.durable.acks": durable_acks,
                       **({**TIERING, "rsm.config.dir": str(work / "remote")} if tiered else {})},
            topic_configs=TIERED_TOPIC if tiered else None,
            # Batches below the 16 KiB segments (a batch larger than segment.bytes is refused, as in Kafka).
            producer_config={"batch.size": 8192} if tiered else None, stop_on_loss=durable_acks != "none",
            broker_log=work / "broker.stderr.log", after_start=create_and_check_topics)
    finally:
        if fs[0].poll() is None:
            subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], check=False)
            fs[0].kill()
            fs[0].wait(30)
    return result
