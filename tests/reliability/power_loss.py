"""The power-loss loop: the crash loop (an idempotent acks=all librdkafka producer and a committing
consumer group) with the broker's data on :mod:`tests.reliability.lazyfs`, and each SIGKILL
followed by a simulated power cut -- every write not fsynced is undone, every file or directory
whose entry was not fsynced disappears -- before the broker starts again on the remounted data.

Besides the records and the group's commits (``__consumer_offsets``, checked by the crash loop), the
metadata log goes through the cuts too: after every start a topic is created, and after every later
start each topic whose creation was acknowledged must still be there with its partitions. The
idempotent producer's state is checked directly by :mod:`tests.reliability.producer_probe`: the
producer snapshots each cut leaves, a batch in flight at each cut retried after it, the last
acknowledged batch answered as a duplicate with its offset.

Two harnesses model the page cache; which one ran is said in the result: ``lazyfs`` (FUSE: needs
/dev/fuse, fusermount3 and mfusepy) or ``shim`` (:mod:`tests.reliability.pageshim`, an LD_PRELOAD
library built with the machine's C compiler: for machines without FUSE, such as many CI runners).
``TIERLOG_POWER_HARNESS=lazyfs|shim`` chooses one; by default lazyfs where it can run, else the shim.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.reliability.crash_loop import CrashLoopResult, run_crash_loop
from tests.reliability.harness import ChaosBroker, RawClient, create_topic
from tests.reliability.lazyfs import command, mount
from tests.reliability.pageshim import PageShim
from tests.reliability.pageshim import unavailable as shim_unavailable
from tests.reliability.producer_probe import ProbeResult, ProducerProbe
from tierlog.protocol import ApiKey

HARNESSES = ("lazyfs", "shim")


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


def harness_unavailable(harness: str) -> str | None:
    """None when that harness can run here, else why not."""
    return fuse_available() if harness == "lazyfs" else shim_unavailable()


def chosen_harness() -> str:
    """``TIERLOG_POWER_HARNESS`` when set, else lazyfs where FUSE works, else the shim."""
    forced = os.environ.get("TIERLOG_POWER_HARNESS", "")
    if forced:
        if forced not in HARNESSES:
            raise ValueError(f"TIERLOG_POWER_HARNESS={forced!r}: expected one of {', '.join(HARNESSES)}")
        return forced
    return "lazyfs" if fuse_available() is None else "shim"


@dataclass
class PowerLossResult:
    harness: str = "lazyfs"
    cuts: int = 0
    bytes_lost_at_cuts: list[int] = field(default_factory=list)
    loop: CrashLoopResult = field(default_factory=CrashLoopResult)
    #: Topics whose creation was acknowledged (each after a start), and those later missing.
    topics_created: int = 0
    topics_missing: list[str] = field(default_factory=list)
    probe: ProbeResult = field(default_factory=ProbeResult)
    #: shim only: writable shared mappings of data files (index maps), whose stores a cut keeps.
    writable_maps: int = 0

    @property
    def ok(self) -> bool:
        return self.loop.ok and not self.topics_missing and not self.probe.problems


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
                   seed: int | None = None, progress: bool = False, tiered: bool = False,
                   harness: str | None = None) -> PowerLossResult:
    result = PowerLossResult(harness=harness or chosen_harness())
    created: dict[str, int] = {}
    probe: list[ProducerProbe] = []

    def create_and_check_topics(broker: ChaosBroker) -> bool:
        """The metadata log through the cuts: every acknowledged topic creation survives; and the
        producer probe's checks after each start."""
        probe_held = probe[0].after_start(broker)
        present = _topics(broker)
        for name, count in created.items():
            if present.get(name) != count and name not in result.topics_missing:
                result.topics_missing.append(name)
        name = f"power-{len(created)}"
        create_topic(broker.port, name, 1 + len(created) % 3)
        created[name] = 1 + len(created) % 3
        result.topics_created = len(created)
        return not result.topics_missing and probe_held

    def loop(data_dir: Path, cut_power: Callable[[], None], broker_env: dict[str, str] | None) -> CrashLoopResult:
        probe.append(ProducerProbe(data_dir))
        result.probe = probe[0].result

        def cut_and_inspect() -> None:
            cut_power()
            probe[0].after_cut()

        return run_crash_loop(
            data_dir, kills=cuts, partitions=partitions, rate=rate, min_uptime_s=1.0, max_uptime_s=3.0,
            kill_while_starting=0.0, seed=seed, progress=progress, after_kill=cut_and_inspect,
            before_kill=probe[0].before_kill,
            overrides={"log.durable.acks": durable_acks,
                       **({**TIERING, "rsm.config.dir": str(work / "remote")} if tiered else {})},
            topic_configs=TIERED_TOPIC if tiered else None,
            # Batches below the 16 KiB segments (a batch larger than segment.bytes is refused, as in Kafka).
            producer_config={"batch.size": 8192} if tiered else None, stop_on_loss=durable_acks != "none",
            broker_log=work / "broker.stderr.log", after_start=create_and_check_topics, broker_env=broker_env)

    if result.harness == "shim":
        data = work / "data"
        data.mkdir(parents=True, exist_ok=True)
        shim = PageShim(work, data)

        def shim_cut() -> None:
            report = shim.power_cut()
            result.cuts += 1
            result.bytes_lost_at_cuts.append(report.bytes_lost)
            result.writable_maps += report.writable_maps

        result.loop = loop(shim.root, shim_cut, shim.env())
        return result

    backing, mountpoint = work / "backing", work / "mnt"
    backing.mkdir(parents=True, exist_ok=True)
    mountpoint.mkdir(parents=True, exist_ok=True)
    fs: list[subprocess.Popen[str]] = [mount(backing, mountpoint)]

    def lazyfs_cut() -> None:
        answer = command(fs[0], "cut")
        fs[0].wait(600)  # undoing a cut's writes takes a while on a loaded machine
        result.cuts += 1
        result.bytes_lost_at_cuts.append(int(answer.split("lost_bytes=")[1].split()[0]))
        fs[0] = mount(backing, mountpoint)

    try:
        result.loop = loop(mountpoint / "data", lazyfs_cut, None)
    finally:
        if fs[0].poll() is None:
            subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], check=False)
            fs[0].kill()
            fs[0].wait(30)
    return result
