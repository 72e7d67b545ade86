"""A real ``tierlog serve`` process for tests: started as ``python -m tierlog.cli.main serve`` on
port 0, the port read from its ``tierlog listening on HOST:PORT`` line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

LISTENING = "tierlog listening on "
START_TIMEOUT_S = 60.0

#: Settings that keep the suite fast without changing behaviour under test: no initial rebalance
#: delay (3 s per new group otherwise) and a retention check every half second.
TEST_OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "log.retention.check.interval.ms": "500",
    "offsets.topic.num.partitions": "10",
}


class BrokerProcess:
    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.overrides = {**TEST_OVERRIDES, **(overrides or {})}
        #: Extra environment variables of the broker process (on top of this process's).
        self.env = env
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0
        self.stdout_lines: list[str] = []
        self.log_path = data_dir.parent / f"{data_dir.name}.stderr.log"
        self._drainer: threading.Thread | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        # TIERLOG_IT_LOG_LEVEL=DEBUG shows, among others, the API versions each client negotiated.
        cmd = [sys.executable, "-m", "tierlog.cli.main", "--log-level", os.environ.get("TIERLOG_IT_LOG_LEVEL", "INFO"),
               "serve",
               "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={self.data_dir}"]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    def start(self) -> BrokerProcess:
        assert self.proc is None or self.proc.poll() is not None
        self.stdout_lines = []
        stderr = open(self.log_path, "a")  # noqa: SIM115 - owned by the process
        env = None if self.env is None else {**os.environ, **self.env}
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=stderr, text=True, bufsize=1,
                                     env=env)
        stderr.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.stdout_lines.append(line)
            if line.startswith(LISTENING):
                self.port = int(line.strip().rsplit(":", 1)[1])
                # Keep draining stdout so the broker never blocks on a full pipe.
                self._drainer = threading.Thread(target=self._drain, daemon=True)
                self._drainer.start()
                return self
        self.kill()
        raise AssertionError(f"broker did not start; stdout={self.stdout_lines!r}; stderr tail:\n{self.stderr_tail()}")

    def _drain(self) -> None:
        proc = self.proc
        assert proc is not None and proc.stdout is not None
        for line in proc.stdout:
            self.stdout_lines.append(line)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        proc = self.proc
        assert proc is not None
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise AssertionError(f"broker ignored signal {sig}; stderr tail:\n{self.stderr_tail()}") from None
        if self._drainer is not None:
            self._drainer.join(10)  # every line the broker printed is in stdout_lines
        return proc.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stderr_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text().splitlines()[-lines:])
        except FileNotFoundError:
            return ""


def message_count(default: int) -> int:
    """TIERLOG_IT_MESSAGES overrides how many messages the throughput-style tests send."""
    return int(os.environ.get("TIERLOG_IT_MESSAGES", default))
