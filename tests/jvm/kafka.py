"""Apache Kafka itself, as a peer for tierlog: its jars, its tools and a single-node KRaft broker.

The jars are fetched by scripts/_env.sh (tests/jvm/pom.xml, Kafka 4.3.1) into build/kafka-jars/.
Nothing here is mocked: tools run as ``java -cp 'build/kafka-jars/*' MAIN ARGS`` and the broker is
``kafka.Kafka`` with a generated server.properties on free loopback ports. When ``java`` or the jars
are missing, the ``kafka_jars`` fixture (tests/jvm/conftest.py) skips the test naming what is missing
(:func:`java_missing`).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KAFKA_VERSION = "4.3.1"
KAFKA_JARS = ROOT / "build" / "kafka-jars"
SPARK_KAFKA_JARS = ROOT / "build" / "spark-kafka-jars"
JAVA_SOURCES = Path(__file__).parent / "java"
CLASSES_DIR = ROOT / "build" / "jvm-classes"

# Kafka 4.3.1's main classes (bin/kafka-*.sh name them).
DUMP_LOG = "org.apache.kafka.tools.DumpLogSegments"
STORAGE_TOOL = "kafka.tools.StorageTool"
METADATA_SHELL = "org.apache.kafka.shell.MetadataShell"
TOPICS = "org.apache.kafka.tools.TopicCommand"
CONFIGS = "kafka.admin.ConfigCommand"
CONSUMER_GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"
BROKER_API_VERSIONS = "org.apache.kafka.tools.BrokerApiVersionsCommand"
CONNECT_DISTRIBUTED = "org.apache.kafka.connect.cli.ConnectDistributed"
MIRROR_MAKER = "org.apache.kafka.connect.mirror.MirrorMaker"

TOOL_TIMEOUT_S = 120.0
START_TIMEOUT_S = 120.0

# Tools log to stderr at WARN so their stdout is only what they print; the broker logs INFO to its file.
_LOG4J2_TOOLS = """\
status = error
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = STDERR
"""


def java_missing() -> str | None:
    if shutil.which("java") is None:
        return "java is not installed (scripts/_env.sh installs Java 17 with apt-get)"
    if not (KAFKA_JARS / f"kafka_2.13-{KAFKA_VERSION}.jar").exists():
        return (f"Apache Kafka {KAFKA_VERSION}'s jars are missing from {KAFKA_JARS} "
                "(scripts/_env.sh fetches them: mvn -f tests/jvm/pom.xml dependency:copy-dependencies)")
    return None


def _log4j_tools_config() -> Path:
    path = ROOT / "build" / "log4j2-tools.properties"
    if not path.exists() or path.read_text() != _LOG4J2_TOOLS:
        # Written beside and renamed: another pytest-xdist worker may be starting a tool that reads it.
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(_LOG4J2_TOOLS)
        os.replace(tmp, path)
    return path


def classpath(extra: list[Path] | None = None) -> str:
    parts = [str(p) for p in extra or []] + [f"{KAFKA_JARS}/*"]
    return os.pathsep.join(parts)


def java_command(main: str, args: list[str], *, heap: str = "256m", extra_cp: list[Path] | None = None,
                 log4j: Path | None = None) -> list[str]:
    return ["java", f"-Xmx{heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            f"-Dlog4j2.configurationFile={log4j or _log4j_tools_config()}",
            "-cp", classpath(extra_cp), main, *args]


def run_tool(main: str, *args: str, timeout: float = TOOL_TIMEOUT_S, check: bool = True,
             input_text: str | None = None, extra_cp: list[Path] | None = None,
             heap: str = "256m") -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's tools by its main class; on failure the assertion shows its output."""
    proc = subprocess.run(java_command(main, list(args), extra_cp=extra_cp, heap=heap), capture_output=True,
                          text=True, timeout=timeout, input=input_text)
    if check:
        assert proc.returncode == 0, (f"{main} {' '.join(args)} exited {proc.returncode}\n"
                                      f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}")
    return proc


def compiled_classes() -> Path:
    """tests/jvm/java/*.java compiled against Kafka's jars into build/jvm-classes/<hash> (cached)."""
    if shutil.which("javac") is None:
        pytest.skip("javac is missing: the Java test programs need a JDK (apt-get install openjdk-17-jdk-headless)")
    sources = sorted(JAVA_SOURCES.glob("*.java"))
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources) + KAFKA_VERSION.encode()).hexdigest()[:16]
    out = CLASSES_DIR / digest
    if (out / ".compiled").exists():
        return out
    # Compiled into a directory of this process's own and renamed into place: pytest-xdist workers may
    # compile at the same time, and none may see another's half-written classes.
    CLASSES_DIR.mkdir(parents=True, exist_ok=True)
    tmp = CLASSES_DIR / f"{digest}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    proc = subprocess.run(["javac", "-nowarn", "-d", str(tmp), "-cp", classpath(), *map(str, sources)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"javac failed:\n{proc.stdout}\n{proc.stderr}"
    (tmp / ".compiled").touch()
    try:
        tmp.rename(out)
    except OSError:  # another worker's copy got there first (or a stale one without .compiled)
        if not (out / ".compiled").exists():
            shutil.rmtree(out, ignore_errors=True)
            with contextlib.suppress(OSError):
                tmp.rename(out)
    shutil.rmtree(tmp, ignore_errors=True)
    assert (out / ".compiled").exists(), f"{out} was not compiled"
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def random_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class KafkaBroker:
    """A single-node Apache Kafka in KRaft combined mode (broker + controller, node id 1)."""

    def __init__(self, home: Path, *, heap: str = "512m", overrides: dict[str, str] | None = None) -> None:
        self.home = home
        self.data_dir = home / "data"
        self.heap = heap
        self.overrides = overrides or {}
        self.port = free_port()
        self.controller_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = home / "server.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def properties(self) -> dict[str, str]:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        props.update(self.overrides)
        return props

    def format(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        props = self.home / "server.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        log4j = self.home / "log4j2.properties"
        log4j.write_text(_LOG4J2_TOOLS.replace("SYSTEM_ERR", "SYSTEM_OUT").replace("WARN", "INFO"))
        run_tool(STORAGE_TOOL, "format", f"--cluster-id={random_cluster_id()}", "-c", str(props))

    def start(self, timeout_s: float = START_TIMEOUT_S) -> KafkaBroker:
        if not (self.home / "server.properties").exists():
            self.format()
        seen = self.log_path.stat().st_size if self.log_path.exists() else 0  # a restart appends
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the process
        cmd = java_command("kafka.Kafka", [str(self.home / "server.properties")], heap=self.heap,
                           log4j=self.home / "log4j2.properties")
        # The broker runs its JIT fully: TieredStopAtLevel=1 is for short-lived tools only.
        cmd.remove("-XX:TieredStopAtLevel=1")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"Kafka exited {self.proc.returncode} while starting:\n{self.log_tail()}")
            if "Kafka Server started" in self._log_text()[seen:]:
                return self
            time.sleep(0.2)
        self.kill()
        raise AssertionError(f"Kafka did not start in {timeout_s}s:\n{self.log_tail()}")

    def _log_text(self) -> str:
        try:
            return self.log_path.read_bytes().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self._log_text().splitlines()[-lines:])

    def stop(self, timeout: float = 60.0) -> int:
        """A clean shutdown (SIGTERM): Kafka flushes, writes its snapshots and a clean-shutdown marker."""
        proc = self.proc
        assert proc is not None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise AssertionError(f"Kafka ignored SIGTERM:\n{self.log_tail()}") from None
        return proc.returncode

    def kill(self) -> None:
        """An unclean stop (SIGKILL)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def wait_for(condition, timeout_s: float = 60.0, what: str = "condition"):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.2)
