#!/usr/bin/env python3
"""librdkafka's own test suite against one ``tierlog serve``: a standing conformance check (#27).

    python scripts/librdkafka_suite.py --librdkafka-src DIR [--tests 0102,0081,...] [--timeout-s 900]

DIR is a librdkafka source tree of the pinned version (never committed; docs/compatibility.md says how
to get one). The script

1. installs the build dependencies with apt-get when they are missing (``rapidjson-dev`` must be there
   before ``configure``: without it the statistics tests are compiled out), then builds the library
   and ``tests/test-runner`` with the system's libraries (``./configure --disable-...`` is not used:
   the defaults find zlib, zstd, lz4, OpenSSL and Cyrus SASL);
2. starts ``tierlog serve`` on a free loopback port with the settings the suite's own clusters use
   (``num.partitions=4``, auto topic creation on, ``group.initial.rebalance.delay.ms`` at its 3000 ms,
   ``delete.topic.enable``; see SUITE_OVERRIDES) in a fresh data dir, and writes ``tests/test.conf``;
   the ``noautocreate`` scenario's tests get a broker without auto topic creation, the ACL tests
   (0115, 0119) one with Kafka's StandardAuthorizer, the SASL tests (0135, 0142) a SASL_PLAINTEXT PLAIN
   listener; ``$KAFKA_PATH`` is laid out from Apache Kafka's jars (``--kafka-jars``, tests/jvm's) so the
   tests that run ``kafka-topics.sh``, ``kafka-acls.sh`` or the Java helpers can;
3. runs every broker-backed test (not ``TEST_F_LOCAL``) alone (``TESTS=NNNN ./test-runner``, no quick
   mode, ``TEST_KAFKA_VERSION=4.0.0``) with a time limit, restarting the broker if a test killed it;
4. writes the table between the ``librdkafka-suite`` markers of docs/compatibility.md (PASS /
   FAIL with the first error line / needs-several-brokers / skipped-by-test / TIMEOUT) with the
   librdkafka version and commit it ran.

It takes over half an hour for the whole suite, so it is not part of ``./scripts/test``; re-run it
before resolving an issue that changes the protocol or the groups.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "compatibility.md"
BEGIN, END = "<!-- librdkafka-suite:begin -->", "<!-- librdkafka-suite:end -->"
APT_PACKAGES = ["build-essential", "pkg-config", "rapidjson-dev", "libssl-dev", "zlib1g-dev", "libzstd-dev",
                "liblz4-dev", "libsasl2-dev"]
#: What the suite's own test clusters configure (tests/scenarios/*.json, tests/cluster_testing.py and
#: trivup's KafkaBrokerApp): `group.initial.rebalance.delay.ms` is left at Kafka's 3000 ms, which 0113's
#: l_unsubscribe relies on (two consumers subscribing 1 ms apart join the same first generation).
SUITE_OVERRIDES = {
    "num.partitions": "4",
    "auto.create.topics.enable": "true",
    "delete.topic.enable": "true",
    "offsets.topic.num.partitions": "10",
    "transaction.state.log.num.partitions": "10",
}
KAFKA_VERSION = "4.0.0"
#: Failures that mean the test wants more brokers than one (replication factor 3, several leaders).
SEVERAL_BROKERS = re.compile(r"INVALID_REPLICATION_FACTOR|replication factor|at least \d+ brokers|broker_cnt|"
                             r"Need at least|expected \d+ brokers", re.I)
_TEST_NAME = re.compile(r"_TEST\((\d{4})_(\w+),")
_SCENARIO = re.compile(r'\.scenario\s*=\s*"([^"]*)"')
#: Broker overrides of the suite's scenarios (tests/scenarios/*.json) beyond SUITE_OVERRIDES, and of the
#: "authorizer" broker the ACL tests get (their own broker: the ACLs they add must not reach other tests).
SCENARIO_OVERRIDES = {"default": {}, "noautocreate": {"auto.create.topics.enable": "false"},
                      "authorizer": {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                                     "allow.everyone.if.no.acl.found": "true"}}
#: The SASL tests (0135 needs PLAIN or SCRAM credentials, 0142 SASL with connections.max.reauth.ms) get a
#: SASL_PLAINTEXT PLAIN listener of their own and a test.conf naming its user.
SASL_USER, SASL_PASSWORD = "librdkafka", "librdkafka-secret"
SCENARIO_OVERRIDES["sasl"] = {
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config":
        f'org.apache.kafka.common.security.plain.PlainLoginModule required user_{SASL_USER}="{SASL_PASSWORD}";',
    "connections.max.reauth.ms": "10000",
}
SASL_TESTS = {"0135", "0142"}
#: test.conf lines of each broker profile beyond bootstrap.servers.
PROFILE_CLIENT_CONF = {"sasl": f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username={SASL_USER}\n"
                               f"sasl.password={SASL_PASSWORD}\n"}
#: Tests that create ACLs (0081 through the Admin API, 0109/0115/0119 with kafka-acls.sh) and expect them
#: enforced (the suite's clusters run an authorizer
#: that allows everyone where no ACL is found).
AUTHORIZER_TESTS = {"0081", "0109", "0115", "0119"}
#: Kafka's bin/ scripts the tests run ($KAFKA_PATH/bin/...), as the main class each runs.
KAFKA_SCRIPTS = {"kafka-topics.sh": "org.apache.kafka.tools.TopicCommand",
                 "kafka-acls.sh": "org.apache.kafka.tools.AclCommand",
                 "kafka-configs.sh": "kafka.admin.ConfigCommand"}
#: Kafka's kafka-topics.sh and kafka-run-class.sh, as the tests call them ($KAFKA_PATH/bin/...), run from
#: Apache Kafka's jars (tests/jvm's build/kafka-jars, fetched by scripts/_env.sh).
KAFKA_TOOL_SH = """#!/bin/sh
exec java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dlog4j2.configurationFile="$KAFKA_PATH/log4j2.properties" \\
  -cp "$KAFKA_PATH/libs/*" {main} "$@"
"""
KAFKA_RUN_CLASS_SH = """#!/bin/sh
exec java -Xmx256m -XX:+UseSerialGC -Dlog4j2.configurationFile="$KAFKA_PATH/log4j2.properties" \\
  -cp "${CLASSPATH:+$CLASSPATH:}$KAFKA_PATH/libs/*" "$@"
"""
LOG4J2 = ("status = error\nappender.err.type = Console\nappender.err.name = STDERR\nappender.err.target = SYSTEM_ERR\n"
          "appender.err.layout.type = PatternLayout\nappender.err.layout.pattern = [%d] %p %m (%c)%n\n"
          "rootLogger.level = WARN\nrootLogger.appenderRef.err.ref = STDERR\n")


@dataclass
class Outcome:
    number: str
    name: str
    verdict: str  # PASS, FAIL, needs-several-brokers, skipped-by-test, TIMEOUT
    detail: str
    seconds: float


def run(cmd: list[str], cwd: Path | None = None, **kw: object) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=cwd, check=True, **kw)  # type: ignore[call-overload]


def install_build_deps() -> None:
    missing = [p for p in APT_PACKAGES
               if subprocess.run(["dpkg", "-s", p], capture_output=True).returncode != 0]
    if not missing:
        return
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    run([*sudo, "apt-get", "install", "-y", "--no-install-recommends", *missing],
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def build(src: Path, jobs: int) -> Path:
    runner = src / "tests" / "test-runner"
    if runner.exists():
        return runner
    install_build_deps()
    run(["./configure"], cwd=src)
    config_h = (src / "config.h").read_text()
    if "#define WITH_RAPIDJSON 1" not in config_h:
        raise SystemExit("configure did not find rapidjson (apt-get install rapidjson-dev)")
    run(["make", f"-j{jobs}", "libs"], cwd=src)
    run(["make", f"-j{jobs}", "build"], cwd=src / "tests")
    return runner


@dataclass(frozen=True)
class SuiteTest:
    number: str
    name: str
    scenario: str  # the first scenario the test runs in ("default", "noautocreate")


def broker_tests(src: Path) -> list[SuiteTest]:
    """Every test of tests/test.c that needs a broker (not TEST_F_LOCAL, not TEST_F_MANUAL), with its
    scenario (a test of another scenario is skipped silently by the runner unless TEST_SCENARIO names it)."""
    text = (src / "tests" / "test.c").read_text()
    text = text[text.index("struct test tests[]"):]
    out = []
    for number, name, rest in _declarations(text):
        flags = rest.split(",")[0]
        if "TEST_F_LOCAL" in flags or "TEST_F_MANUAL" in flags or number == "0000":
            continue
        scenario = _SCENARIO.search(rest)
        out.append(SuiteTest(number, name, scenario.group(1).split(",")[0] if scenario else "default"))
    return out


def _declarations(text: str) -> list[tuple[str, str, str]]:
    """(number, name, arguments after the name) of each ``_TEST(...)`` entry, parentheses balanced."""
    out = []
    for match in _TEST_NAME.finditer(text):
        depth, i = 1, match.end()
        while depth and i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        out.append((match.group(1), match.group(2), text[match.end():i - 1]))
    return out


def kafka_path(work: Path, jars: Path) -> Path:
    """A directory laid out as the tests expect $KAFKA_PATH (bin/kafka-topics.sh, kafka-acls.sh,
    kafka-configs.sh, kafka-run-class.sh, libs/) whose scripts run Apache Kafka's tool classes from
    ``jars``."""
    path = work / "kafka"
    (path / "bin").mkdir(parents=True, exist_ok=True)
    if not (path / "libs").exists():
        (path / "libs").symlink_to(jars.resolve())
    (path / "log4j2.properties").write_text(LOG4J2)
    scripts = {name: KAFKA_TOOL_SH.format(main=main) for name, main in KAFKA_SCRIPTS.items()}
    for name, body in {**scripts, "kafka-run-class.sh": KAFKA_RUN_CLASS_SH}.items():
        (path / "bin" / name).write_text(body)
        (path / "bin" / name).chmod(0o755)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Broker:
    def __init__(self, data: Path, overrides: dict[str, str]) -> None:
        self.data = data
        self.overrides = overrides
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0

    def start(self) -> None:
        self.port = free_port()
        protocol = "SASL_PLAINTEXT" if "sasl.enabled.mechanisms" in self.overrides else "PLAINTEXT"
        cmd = [sys.executable, "-m", "tierlog.cli.main", "serve",
               "--override", f"listeners={protocol}://127.0.0.1:{self.port}", "--override", f"log.dirs={self.data}"]
        for key, value in {**SUITE_OVERRIDES, **self.overrides}.items():
            cmd += ["--override", f"{key}={value}"]
        log = open(self.data.parent / f"tierlog-{self.data.name}.log", "a")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, text=True)
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"tierlog serve exited with {self.proc.returncode}; see {self.data.parent}/tierlog-*.log")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.2)
        raise SystemExit("tierlog serve did not start listening within 60 s")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


#: The line a log ends with when the test timed out or the broker died (read back by --from-logs).
MARKER = "### librdkafka_suite.py:"
_ANSI = re.compile(r"\x1b\[[0-9;]*m|\x1b\(B")


def first_error(output: str) -> str:
    """The line that says what failed: the assertion, else the failure banner, else any error."""
    lines = [_ANSI.sub("", line).strip() for line in output.splitlines()]
    for pattern in (r"^### Test .* failed", r"^Test assertion failed", r"\bFAIL|\berror\b|Error"):
        for i, line in enumerate(lines):
            if re.search(pattern, line) and "PASSED" not in line:
                if line.startswith("###") and i + 1 < len(lines) and lines[i + 1]:
                    return f"{lines[i + 1]} ({line.strip('# ')})"
                if line.endswith(":") and i + 1 < len(lines) and lines[i + 1] and not lines[i + 1].startswith("["):
                    return f"{line} {lines[i + 1]}"
                return line
    return ""


def classify(number: str, name: str, code: int | None, output: str, seconds: float) -> Outcome:
    """The verdict of one test from the runner's summary row of it (``| NNNN_name | PASSED | ...``);
    TESTS=NNNN also runs the local variants of the number (``NNNN_name_mock``), which do not count."""
    output = _ANSI.sub("", output)
    marker = re.search(rf"^{re.escape(MARKER)} (TIMEOUT|DIED) after ([\d.]+) s$", output, re.M)
    if code is None or (marker is not None and marker.group(1) == "TIMEOUT"):
        return Outcome(number, name, "TIMEOUT", "did not finish within the time limit",
                       seconds or (float(marker.group(2)) if marker else 0.0))
    if marker is not None:
        return Outcome(number, name, "FAIL", "tierlog serve died during the test", seconds or float(marker.group(2)))
    row = re.search(rf"^\|\s*{number}_{re.escape(name)}\s*\|\s*(\w+)\s*\|\s*([\d.]+)s\s*\|\s*(.*?)\s*\|?\s*$",
                    output, re.M)
    if row is not None and not seconds:
        seconds = float(row.group(2))
    if row is not None and row.group(1) == "PASSED":
        return Outcome(number, name, "PASS", "", seconds)
    if row is not None and row.group(1) == "SKIPPED":
        return Outcome(number, name, "skipped-by-test", row.group(3)[:200], seconds)
    if row is None and re.search(rf"= Test {number}_{re.escape(name)} PASSED =", output):
        # The test passed, but the runner aborted before its summary (a local mock variant of the
        # same number failed and left librdkafka threads behind): the broker-backed test counts.
        done = re.search(rf"\[{number}_{re.escape(name)}\s*/\s*([\d.]+)s\] =+ Test {number}_{re.escape(name)} PASSED",
                         output)
        return Outcome(number, name, "PASS", f"passed; a local mock variant of {number} then failed: {first_error(output)[:150]}",
                       seconds or (float(done.group(1)) if done else 0.0))
    first = first_error(output) or (f"exit code {code}, no summary row" if row is None else "")
    if SEVERAL_BROKERS.search(output):
        factor = re.search(r"The target replication factor of \d+ cannot be reached because only \d+ broker\(s\) "
                           r"are registered", output)
        topic = re.search(r'Creating topic "[^"]*" \(partitions=\d+, replication_factor=(\d+)', output)
        if factor is not None:
            first = (f"creates a topic with replication factor {topic.group(1) if topic else '>1'}: "
                     f"{factor.group(0)}")
        return Outcome(number, name, "needs-several-brokers", first[:200], seconds)
    return Outcome(number, name, "FAIL", first[:300], seconds)


def run_test(runner: Path, number: str, scenario: str, broker: Broker, kafka: Path | None,
             timeout_s: float, kafka_version: str = KAFKA_VERSION) -> tuple[int | None, str, float]:
    src = runner.parent.parent
    # As the suite's run-test.sh: the runner links the freshly built libraries, not installed ones.
    libs = os.pathsep.join([str(src / "src"), str(src / "src-cpp"), os.environ.get("LD_LIBRARY_PATH", "")])
    env = {**os.environ, "TESTS": number, "TEST_SCENARIO": scenario, "TEST_KAFKA_VERSION": kafka_version,
           "LD_LIBRARY_PATH": libs, "BROKERS": f"127.0.0.1:{broker.port}"}
    if kafka is not None:
        env["KAFKA_PATH"] = str(kafka)
    started = time.monotonic()
    proc = subprocess.Popen([str(runner)], cwd=runner.parent, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        return proc.returncode, out, time.monotonic() - started
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, out, time.monotonic() - started


def log_name(number: str, scenario: str) -> str:
    return f"{number}.log" if scenario == "default" else f"{number}-{scenario}.log"


def runs_of(tests: list[SuiteTest]) -> dict[tuple[str, str], list[SuiteTest]]:
    """The tests one ``TESTS=NNNN TEST_SCENARIO=S`` run covers (e.g. 0045's three default-scenario tests)."""
    out: dict[tuple[str, str], list[SuiteTest]] = {}
    for test in tests:
        out.setdefault((test.number, test.scenario), []).append(test)
    return out


def write_table(outcomes: list[Outcome], version: str, commit: str, note: str) -> None:
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.verdict] = counts.get(o.verdict, 0) + 1
    summary = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
    rows = "\n".join(f"| {o.number} | {o.name} | {o.verdict} | {o.detail.replace('|', '/')} | {o.seconds:.0f} |"
                     for o in outcomes)
    block = (f"{BEGIN}\nlibrdkafka {version} (commit {commit}), one `tierlog serve` with "
             f"{', '.join(f'`{k}={v}`' for k, v in SUITE_OVERRIDES.items())}, `TEST_KAFKA_VERSION={KAFKA_VERSION}`, "
             f"each test alone ({summary}). {note}\n\n"
             "| test | name | result | first error line / reason | seconds |\n| --- | --- | --- | --- | --- |\n"
             f"{rows}\n{END}")
    text = DOC.read_text()
    if BEGIN in text:
        text = text[:text.index(BEGIN)] + block + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    DOC.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--librdkafka-src", type=Path, required=True)
    parser.add_argument("--tests", default="", help="comma-separated test numbers (default: every broker-backed test)")
    parser.add_argument("--timeout-s", type=float, default=900.0, help="time limit of each test")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--commit", default="", help="the librdkafka commit, when DIR is not a git checkout")
    parser.add_argument("--note", default="", help="a sentence added to the table's heading")
    parser.add_argument("--kafka-jars", type=Path, default=ROOT / "build" / "kafka-jars",
                        help="Apache Kafka's jars (scripts/_env.sh fetches them), run as $KAFKA_PATH's "
                        "kafka-topics.sh and kafka-run-class.sh")
    parser.add_argument("--kafka-version", default=KAFKA_VERSION,
                        help="TEST_KAFKA_VERSION (the table is always run with the default; 4.2.0 runs the "
                        "share-consumer tests, to see how they fail)")
    parser.add_argument("--no-doc", action="store_true", help="print the results only")
    parser.add_argument("--from-logs", type=Path, help="classify the NNNN.log files of an earlier run again "
                        "(its logs directory) instead of running the tests")
    args = parser.parse_args()
    src: Path = args.librdkafka_src.resolve()
    runner = build(src, args.jobs)
    version_h = (src / "src" / "rdkafka.h").read_text()
    match = re.search(r"#define RD_KAFKA_VERSION\s+0x([0-9a-fA-F]{8})", version_h)
    version = ".".join(str(int(match.group(1)[i:i + 2], 16)) for i in (0, 2, 4)) if match else "?"
    commit = args.commit or subprocess.run(["git", "-C", str(src), "rev-parse", "--short=12", "HEAD"],
                                           capture_output=True, text=True).stdout.strip() or "unknown"
    wanted = {t.strip() for t in args.tests.split(",") if t.strip()}
    tests = [t for t in broker_tests(src) if not wanted or t.number in wanted]
    outcomes: list[Outcome] = []
    if args.from_logs is not None:
        outcomes = [classify(t.number, t.name, 0, (args.from_logs / log_name(t.number, t.scenario)).read_text(
                        errors="replace"), 0.0)
                    for t in tests if (args.from_logs / log_name(t.number, t.scenario)).exists()]
        for o in outcomes:
            print(f"{o.number} {o.name}: {o.verdict} {o.detail}")
        if not args.no_doc:
            write_table(outcomes, version, commit, args.note)
        return 0
    work = Path(tempfile.mkdtemp(prefix="librdkafka-suite-"))
    jars: Path = args.kafka_jars
    kafka = kafka_path(work, jars) if any(jars.glob("kafka-tools-*.jar")) else None
    if kafka is None:
        print(f"no Kafka jars in {jars}: tests that run kafka-topics.sh or Java programs will fail", flush=True)
    brokers: dict[str, Broker] = {}
    try:
        for (number, scenario), group in runs_of(tests).items():
            profile = ("authorizer" if number in AUTHORIZER_TESTS else "sasl" if number in SASL_TESTS
                       else scenario)
            broker = brokers.get(profile)
            if broker is None:
                broker = brokers[profile] = Broker(work / f"data-{profile}", SCENARIO_OVERRIDES.get(profile, {}))
                broker.start()
            if not broker.alive():
                print(f"tierlog serve died before {number}; restarting it (see {work})", flush=True)
                broker.start()
            (runner.parent / "test.conf").write_text(
                f"bootstrap.servers=127.0.0.1:{broker.port}\ntest.timeout.multiplier=3\n"
                + PROFILE_CLIENT_CONF.get(profile, ""))
            code, output, seconds = run_test(runner, number, scenario, broker, kafka, args.timeout_s,
                                             args.kafka_version)
            died = not broker.alive()
            if code is None or died:
                # So that --from-logs tells these apart from a test's own failure.
                output += f"\n{MARKER} {'TIMEOUT' if code is None else 'DIED'} after {seconds:.1f} s\n"
            (work / log_name(number, scenario)).write_text(output)
            for test in group:
                outcome = classify(number, test.name, code, output, seconds if len(group) == 1 else 0.0)
                if died:
                    outcome = Outcome(number, test.name, "FAIL", "tierlog serve died during the test", seconds)
                outcomes.append(outcome)
                print(f"{number} {test.name} [{scenario}]: {outcome.verdict} {outcome.detail} "
                      f"({outcome.seconds:.0f} s)", flush=True)
    finally:
        for broker in brokers.values():
            broker.stop()
    if not args.no_doc:
        write_table(outcomes, version, commit, args.note)
    print(f"logs in {work}")
    for profile in brokers:
        shutil.rmtree(work / f"data-{profile}", ignore_errors=True)
    return 0 if all(o.verdict != "FAIL" for o in outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
