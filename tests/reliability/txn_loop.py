"""Exactly once under crashes: a consume-transform-produce application (confluent-kafka, a
transaction per batch with ``send_offsets_to_transaction``; ``tests/reliability/txn_app.py``) runs as its
own process while the broker, the application or both are SIGKILLed at random moments; afterwards the
output topic read ``read_committed`` must hold every input record exactly once.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.helpers.waits import wait_until
from tests.reliability.harness import ChaosBroker, committed_offsets, create_topic
from tests.reliability.txn_app import GROUP, IN_TOPIC, OUT_TOPIC

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class TxnLoopResult:
    inputs: int
    kills: int = 0
    broker_kills: int = 0
    app_kills: int = 0
    app_starts: int = 0
    #: Application processes that ended by themselves (their watchdog's ``hang`` line says why).
    app_exits: int = 0
    commits: int = 0
    aborts: int = 0
    fatal_restarts: int = 0
    lost: int = 0
    duplicated: int = 0
    finished: bool = False
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    #: What each step did and when (seconds since the start): a slow run shows where its time went.
    steps: list[str] = field(default_factory=list)
    broker_log: Path | None = field(default=None, repr=False)
    app_log: Path | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.finished and self.lost == 0 and self.duplicated == 0

    def logs(self, tail_lines: int = 150) -> str:
        """The broker's log (its last ``tail_lines``) and the application's outcome lines, for a failure."""
        out = []
        for name, path in (("broker", self.broker_log), ("application", self.app_log)):
            try:
                lines = path.read_text(errors="replace").splitlines() if path is not None else []
            except FileNotFoundError:
                lines = []
            if name == "application":  # librdkafka's own lines (%N|...) are in it too; its outcomes are not
                lines = [line for line in lines if not line.startswith("%")]
            out.append(f"--- {name} log ({path}), last {tail_lines} lines ---")
            out += lines[-tail_lines:]
        return "\n".join(out)


class AppProcess:
    """``txn_app`` as a child process; its stdout lines (one per outcome) go to ``log_path``."""

    def __init__(self, bootstrap: str, partitions: int, log_path: Path) -> None:
        self.bootstrap, self.partitions, self.log_path = bootstrap, partitions, log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._log_offset = 0

    def start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        with open(self.log_path, "ab") as out:
            self._log_offset = out.tell()
            self.proc = subprocess.Popen([sys.executable, "-m", "tests.reliability.txn_app", self.bootstrap,
                                          str(self.partitions)], stdout=out, stderr=subprocess.STDOUT, env=env,
                                         cwd=ROOT)
        self.starts += 1

    def exited(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.returncode

    def running(self) -> bool:
        """The last started process is past its imports, in its loop (it printed ``started``)."""
        with open(self.log_path, "rb") as f:
            f.seek(self._log_offset)
            return b"started\n" in f.read()

    def sigkill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self, timeout_s: float = 120.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.sigkill()

    def lines(self) -> list[str]:
        try:
            return self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return []


def _feed(bootstrap: str, inputs: int, partitions: int, seconds: float, result: TxnLoopResult) -> None:
    """Produce ``inputs`` records, idempotent and acks=all, spread over ``seconds``; the broker's kills
    only delay them (no delivery times out), so every one of them is in the input topic once."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                  "message.timeout.ms": 600_000})
    failed: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(str(err))

    t0 = time.monotonic()
    chunk = max(1, inputs // max(1, int(seconds * 10)))
    for start in range(0, inputs, chunk):
        for i in range(start, min(start + chunk, inputs)):
            p.produce(IN_TOPIC, value=f"{i}".encode(), partition=i % partitions, on_delivery=on_delivery)
        p.poll(0)
        lag_s = t0 + seconds * (start + chunk) / inputs - time.monotonic()
        if lag_s > 0:
            time.sleep(lag_s)
    left = p.flush(600)
    if left or failed:
        result.notes.append(f"input not delivered: {left} left, failed {failed[:3]}")


def _committed_total(bootstrap: str, partitions: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(IN_TOPIC, p) for p in range(partitions)], timeout=10)
        return sum(max(tp.offset, 0) for tp in got)
    except KafkaException:
        return -1
    finally:
        c.close()


def _committed_now(port: int, partitions: int) -> int | str:
    """The group's committed input offsets summed (one OffsetFetch, not waiting for pending ones), or why
    not: for the step log only."""
    try:
        return sum(committed_offsets(port, GROUP, IN_TOPIC, partitions).values())
    except (OSError, AssertionError) as e:
        return f"? ({type(e).__name__})"


def _read_output(bootstrap: str, partitions: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-verifier", "isolation.level": "read_committed",
                  "enable.auto.commit": False})
    try:
        ends = [c.get_watermark_offsets(TopicPartition(OUT_TOPIC, p), timeout=30)[1] for p in range(partitions)]
        c.assign([TopicPartition(OUT_TOPIC, p, 0) for p in range(partitions)])
        out: list[bytes] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                if m.error() is None:
                    out.append(m.value())
            positions = c.position([TopicPartition(OUT_TOPIC, p) for p in range(partitions)])
            if all(tp.offset >= end for tp, end in zip(positions, ends, strict=True)):
                break
        return out
    finally:
        c.close()


def _wait_for_commits(port: int, partitions: int, inputs: int, stall_s: float, deadline: float,
                      keep_running: Callable[[], bool]) -> bool:
    """Until the group has committed every input's offset: False once the committed total has not
    moved for ``stall_s`` (a stall, however loaded the machine) or at ``deadline``. ``keep_running``
    restarts an application that ended by itself (True when it did: its recovery starts the wait anew)."""
    best, moved_at = -1, time.monotonic()
    while time.monotonic() < deadline:
        if keep_running():
            moved_at = time.monotonic()
        total = _committed_now(port, partitions)
        if isinstance(total, int):
            if total >= inputs:
                return True
            if total > best:
                best, moved_at = total, time.monotonic()
        if time.monotonic() - moved_at > stall_s:
            return False
        time.sleep(0.5)
    return False


def run_txn_loop(data_dir: Path, *, inputs: int, kills: int, partitions: int = 2, max_uptime_s: float = 3.0,
                 seed: int = 0, stall_s: float = 120.0, timeout_s: float = 900.0, progress: bool = False,
                 force_both: bool = False) -> TxnLoopResult:
    """``kills`` rounds, each SIGKILLing the broker, the application or both (drawn by ``seed``) after
    0.5 to ``max_uptime_s`` seconds of work, then restarting what was killed. ``force_both``: the first
    two rounds kill the application and then the broker, whatever the draw (a short run kills each).

    Time is bounded by progress, not by the clock: a round's uptime starts once what it restarted runs
    (the broker listening, the application past its imports, within ``stall_s``), and afterwards the
    run is unfinished only when the committed input offsets stop moving for ``stall_s``. A loaded
    machine makes each step slower, never a stall. ``timeout_s`` caps the whole run."""
    rng = random.Random(seed)
    result = TxnLoopResult(inputs)
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    data_dir.mkdir(parents=True, exist_ok=True)
    broker = ChaosBroker(data_dir, {"transaction.state.log.num.partitions": "3",
                                    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"})
    result.broker_log, result.app_log = broker.log_path, data_dir.parent / "txn-app.log"
    broker.start()
    app: AppProcess | None = None

    def step(what: str) -> None:
        line = f"{time.monotonic() - t0:.1f}s {what}"
        result.steps.append(line)
        if progress:
            print(line, flush=True)

    def start_app() -> None:
        assert app is not None
        started_at = time.monotonic()
        app.start()
        if not wait_until(app.running, min(stall_s, max(deadline - time.monotonic(), 1)), interval_s=0.05):
            step(f"the application did not start within {time.monotonic() - started_at:.0f}s")

    def keep_app_running() -> bool:
        """Start the application again if it ended by itself (its watchdog, on a hung client call)."""
        if app is None or not app.exited():
            return False
        result.app_exits += 1
        step(f"the application ended by itself (exit status {app.returncode()}); starting it again")
        start_app()
        return True

    try:
        create_topic(broker.port, IN_TOPIC, partitions)
        create_topic(broker.port, OUT_TOPIC, partitions)
        # The input arrives over the whole kill phase, so that every kill lands on work in progress.
        feed_s = kills * (0.5 + max_uptime_s) / 2
        feeder = threading.Thread(target=_feed, args=(broker.bootstrap, inputs, partitions, feed_s, result),
                                  daemon=True)
        feeder.start()
        app = AppProcess(broker.bootstrap, partitions, result.app_log)
        start_app()
        step("broker and application running")
        while result.kills < kills and time.monotonic() < deadline:
            keep_app_running()
            time.sleep(rng.uniform(0.5, max_uptime_s))
            victim = rng.choices(["broker", "app", "both"], weights=[4, 4, 2])[0]
            if force_both and result.kills < 2:
                victim = ("app", "broker")[result.kills]
            committed = _committed_now(broker.port, partitions)
            if victim in ("app", "both"):
                app.sigkill()
                result.app_kills += 1
            restarted_at = time.monotonic()
            if victim in ("broker", "both"):
                broker.sigkill()
                result.broker_kills += 1
                broker.start()
            if victim in ("app", "both"):
                start_app()
            result.kills += 1
            step(f"kill {result.kills}/{kills}: {victim} (committed {committed}/{inputs} before it); running "
                 f"again after {time.monotonic() - restarted_at:.1f}s")
        feeder.join(max(deadline - time.monotonic(), 10))
        fed = not feeder.is_alive() and not any(n.startswith("input not delivered") for n in result.notes)
        step(f"input {'fed' if fed else 'NOT fed'}; committed {_committed_now(broker.port, partitions)}/{inputs}")
        # Every offset committed, and so read back by a transactional client (stable offsets only).
        result.finished = (fed and _wait_for_commits(broker.port, partitions, inputs, stall_s, deadline,
                                                     keep_app_running)
                           and wait_until(lambda: _committed_total(broker.bootstrap, partitions) >= inputs,
                                          stall_s, interval_s=0.5))
        step(f"{'all' if result.finished else 'NOT all'} committed: {_committed_now(broker.port, partitions)}/{inputs}")
        app.stop()
        counts = Counter(_read_output(broker.bootstrap, partitions))
        expected = {f"out-{i}".encode() for i in range(inputs)}
        result.lost = len(expected - set(counts))
        result.duplicated = sum(n - 1 for n in counts.values() if n > 1) + sum(
            n for v, n in counts.items() if v not in expected)
        step(f"output read: {result.lost} lost, {result.duplicated} duplicated")
        return result
    finally:
        if app is not None:
            app.stop(10)
            lines = app.lines()
            result.app_starts = app.starts
            result.commits = sum(1 for line in lines if line == "commit")
            result.aborts = sum(1 for line in lines if line == "abort")
            result.fatal_restarts = sum(1 for line in lines if line.startswith("restart"))
            result.notes += [line for line in lines if line.startswith(("restart", "note", "hang", "Traceback"))][-10:]
        result.seconds = time.monotonic() - t0
        if broker.alive():
            broker.stop()
