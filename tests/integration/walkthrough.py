"""Running the shell blocks of a Markdown page (the README's quick start, the docs' worked examples)
for real, command by command, in one bash process — so ``source``, shell variables and background
jobs carry over from one command to the next exactly as in the reader's terminal.

What a page shows is what runs, with these rewrites and nothing else:

* the well-known ports a page uses — ``127.0.0.1:9092`` (the default bootstrap address),
  ``127.0.0.1:9404`` (a metrics listener), ``127.0.0.1:9405`` (the web console) and ``127.0.0.1:5000`` / ``-p 5000`` (a local S3 server) —
  become free ports of the session's own, so a test never binds a port another process on this
  machine may hold;
* ``tierlog serve`` gets ``--override listeners=PLAINTEXT://127.0.0.1:<port>`` for the same reason;
* the client commands that talk to a broker (``tierlog topics|produce|consume|groups|features``) get
  ``--bootstrap-server 127.0.0.1:<port>``, which a reader leaves at its default.

Each session runs in its own temporary directory in which ``.venv`` is a link to the repository's
virtualenv, so relative paths (``.venv/bin/activate``, ``tierlog-data``) mean what they mean in the
repository root and nothing lands in the checkout. PATH holds no virtualenv: a page that needs one
must activate it.
"""

from __future__ import annotations

import os
import queue
import re
import shlex
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: Languages of fenced blocks that are commands to run; every other fence must say what it is.
SHELL_LANGUAGES = frozenset({"sh", "bash", "shell"})
#: Languages of fenced blocks that are not commands (output, diagrams, file contents).
NON_COMMAND_LANGUAGES = frozenset({"text", "properties", "mermaid"})

_FENCE = re.compile(r"^```(\S*)\s*$")
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")
_CLIENT_COMMAND = re.compile(r"\btierlog((?:\s+--log-\S+\s+\S+)*)\s+(topics\s+\S+|groups\s+\S+|features\s+\S+|produce|consume)\b")
_SERVE = re.compile(r"\btierlog((?:\s+--log-\S+\s+\S+)*)\s+serve\b")
#: Where a ``tierlog serve`` command sends its output (``> tierlog.log 2>&1 &``): the broker's log.
_SERVE_OUTPUT = re.compile(r"\bserve\b.*?(?<![0-9&<])>>?\s*([^\s&;|<>]+)", re.DOTALL)
#: Lines of each broker log a failing step prints.
BROKER_LOG_TAIL_LINES = 80


@dataclass(frozen=True)
class Block:
    language: str
    body: str
    #: 1-based line of the first line of the body in the page.
    line: int


@dataclass(frozen=True)
class Command:
    text: str
    line: int


@dataclass(frozen=True)
class Result:
    command: str
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def describe(self) -> str:
        return (f"$ {self.command}\n[exit {self.returncode} after {self.seconds:.1f} s]\n"
                f"--- stdout\n{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-3000:]}")


def fenced_blocks(markdown: str) -> list[Block]:
    """Every fenced code block of the page, in order."""
    blocks: list[Block] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        start = i + 1
        j = start
        while j < len(lines) and lines[j].rstrip() != "```":
            j += 1
        if j == len(lines):
            raise AssertionError(f"the code block opened on line {i + 1} is never closed")
        blocks.append(Block(m.group(1), "\n".join(lines[start:j]), start + 1))
        i = j + 1
    return blocks


def indented_blocks(markdown: str) -> list[Block]:
    """Code blocks indented by four spaces after a blank line, outside fences (Markdown's other kind)."""
    blocks: list[Block] = []
    lines = markdown.splitlines()
    in_fence = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if _FENCE.match(line) or line.rstrip() == "```":
            in_fence = not in_fence
            i += 1
            continue
        if not in_fence and line.startswith("    ") and line.strip() and (i == 0 or not lines[i - 1].strip()):
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                j += 1
            body = "\n".join(x[4:] for x in lines[i:j]).strip("\n")
            blocks.append(Block("", body, i + 1))
            i = j
            continue
        i += 1
    return blocks


def shell_commands(block: Block) -> list[Command]:
    """The commands of a shell block: one per line, a trailing backslash continues a line, a here
    document runs to its terminator; blank lines and whole-line comments are not commands."""
    out: list[Command] = []
    lines = block.body.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            i += 1
            continue
        first = i
        parts = [line]
        while parts[-1].endswith("\\") and i + 1 < len(lines):
            i += 1
            parts.append(lines[i])
        heredoc = _HEREDOC.search(parts[-1])
        if heredoc is not None:
            terminator = heredoc.group(2)
            while True:
                i += 1
                if i == len(lines):
                    raise AssertionError(f"line {block.line + first}: here document {terminator} never ends")
                parts.append(lines[i])
                if lines[i].strip() == terminator:
                    break
        out.append(Command("\n".join(parts), block.line + first))
        i += 1
    return out


def page_commands(markdown: str) -> list[Command]:
    """Every command of every shell block of the page, in order; a fence without a language, or with
    one that is neither a shell nor a known non-command kind, is an error (it could hide a command)."""
    commands: list[Command] = []
    for block in fenced_blocks(markdown):
        if block.language in SHELL_LANGUAGES:
            commands += shell_commands(block)
        elif block.language not in NON_COMMAND_LANGUAGES:
            raise AssertionError(f"line {block.line}: a code block fenced as {block.language or 'nothing'!r}; "
                                 f"use sh (run by the tests) or one of {sorted(NON_COMMAND_LANGUAGES)}")
    return commands


def free_port(taken: Iterable[int] = ()) -> int:
    """A port nothing listens on now (and not one of ``taken``), for a process about to bind it."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port not in taken:
            return port


#: The ports pages may name, each replaced by a free port of the session.
WELL_KNOWN_PORTS = (9092, 9404, 9405, 5000)


def rewrite(command: str, ports: dict[int, int]) -> str:
    """The rewrites of the module docstring; ``ports`` maps each well-known port to the session's."""
    bootstrap = f"127.0.0.1:{ports[9092]}"
    out = command
    for default, port in ports.items():
        out = out.replace(f"127.0.0.1:{default}", f"127.0.0.1:{port}")
        out = re.sub(rf"(?<=\s-p ){default}\b", str(port), out)
    if "listeners=" not in out:
        out = _SERVE.sub(lambda m: f"{m.group(0)} --override listeners=PLAINTEXT://{bootstrap}", out)
    if "--bootstrap-server" not in out:
        out = _CLIENT_COMMAND.sub(lambda m: f"{m.group(0)} --bootstrap-server {bootstrap}", out)
    return out


def clean_environment() -> dict[str, str]:
    """The environment of a new terminal on this machine: no virtualenv on PATH, no pytest leftovers."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONHOME")
           and not k.startswith(("PYTEST_", "COV_"))}
    venv = str(REPO / ".venv")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and not p.startswith(venv) and "/.venv/" not in p)
    return env


class Session:
    """One bash process in a directory of its own; :meth:`run` sends it one command and waits for it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.ports: dict[int, int] = {}
        for default in WELL_KNOWN_PORTS:
            self.ports[default] = free_port(self.ports.values())
        #: The broker's port (the bootstrap address's).
        self.port = self.ports[9092]
        venv = REPO / ".venv"
        assert (venv / "bin" / "activate").exists(), f"{venv} is missing: run ./scripts/test once"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / ".venv").symlink_to(venv, target_is_directory=True)
        self._io = directory.parent / f"{directory.name}.io"
        self._io.mkdir(exist_ok=True)
        # A session of its own, so every process a page starts (a broker in the background) can be
        # ended with the shell by process group.
        self.proc = subprocess.Popen(["bash", "--noprofile", "--norc"], cwd=directory, env=clean_environment(),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, bufsize=1, start_new_session=True)
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._count = 0
        self.results: list[Result] = []
        #: The files the page's ``tierlog serve`` commands write their log to, relative to the directory.
        self.broker_logs: list[str] = []

    def note_command(self, command: str) -> None:
        """Remember where a ``tierlog serve`` command logs, for :meth:`broker_log_tail`."""
        if _SERVE.search(command):
            m = _SERVE_OUTPUT.search(command)
            if m is not None and m.group(1) not in self.broker_logs:
                self.broker_logs.append(m.group(1))

    def broker_log_tail(self, lines: int = BROKER_LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of each broker log the page wrote, for a failing step's message."""
        out = []
        for name in self.broker_logs:
            text = _read(self.directory / name)
            tail = text.splitlines()[-lines:]
            out.append(f"--- broker log {name} (last {len(tail)} lines)\n" + "\n".join(tail))
        return "\n".join(out) if out else "--- no broker log: no `tierlog serve ... > FILE` ran before this step"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def run(self, command: str, timeout_s: float = 60.0) -> Result:
        """Run ``command`` (already rewritten) in the shell; its stdout and stderr are kept apart."""
        self._count += 1
        n = self._count
        out, err = self._io / f"{n}.out", self._io / f"{n}.err"
        marker = f"__walkthrough_done_{n}__"
        script = f"{{ {command}\n}} > {shlex.quote(str(out))} 2> {shlex.quote(str(err))}\necho {marker} $?\n"
        assert self.proc.stdin is not None
        started = time.monotonic()
        self.proc.stdin.write(script)
        self.proc.stdin.flush()
        deadline = started + timeout_s
        noise: list[str] = []
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.close()
                raise AssertionError(f"timed out after {timeout_s:.0f} s:\n$ {command}\n"
                                     f"stdout so far:\n{_read(out)[-3000:]}\nstderr so far:\n{_read(err)[-3000:]}") from None
            if line is None:
                raise AssertionError(f"the shell exited while running:\n$ {command}\n{''.join(noise)}"
                                     f"\nstdout:\n{_read(out)[-3000:]}\nstderr:\n{_read(err)[-3000:]}")
            if line.startswith(marker):
                rc = int(line.split()[1])
                break
            noise.append(line)  # the shell's own messages (job notices) land here
        result = Result(command, rc, _read(out), _read(err), time.monotonic() - started)
        self.results.append(result)
        return result

    def close(self) -> None:
        """End the shell and whatever it left running (by its process group, which is only ours)."""
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write("exit\n")
                self.proc.stdin.flush()
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            time.sleep(0.5 if sig == signal.SIGTERM else 0)
        if self.proc.poll() is None:
            self.proc.wait(5)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


#: A check of one command's result; raising AssertionError fails it.
Check = Callable[[Result], None]


def table(text: str, first_column: str) -> list[dict[str, str]]:
    """The rows of the space-aligned table whose header starts with ``first_column``."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.split()[:1] == [first_column]:
            header = line.split()
            return [dict(zip(header, row.split(), strict=False)) for row in lines[i + 1:]
                    if row.strip() and ":" not in row.split()[0]]
    raise AssertionError(f"no table with a {first_column} column")


def has_lines(*expected: str) -> Check:
    def check(r: Result) -> None:
        lines = r.stdout.splitlines()
        for line in expected:
            assert line in lines, f"expected the line {line!r}"
    return check


def contains(*parts: str) -> Check:
    def check(r: Result) -> None:
        for part in parts:
            assert part in r.stdout, f"expected {part!r} in stdout"
    return check


def matches(pattern: str) -> Check:
    def check(r: Result) -> None:
        assert re.search(pattern, r.stdout, re.MULTILINE), f"expected {pattern!r} in stdout"
    return check


@dataclass(frozen=True)
class Expectation:
    """How the test judges every command that ``pattern`` matches (``re.search`` on the command as
    the page shows it). ``eventually``: the command reports a state that settles within seconds
    (tiering, retention), so it is run again until ``check`` passes or ``within_s`` is over — what a
    reader does who sees the old state."""

    pattern: str
    check: Check | None = None
    eventually: bool = False
    within_s: float = 20.0
    # A hang guard only: a passing command never waits for it (generous for a loaded machine; a
    # command that starts Spark gets SPARK_TIMEOUT_S instead, see timeout_of).
    timeout_s: float = 300.0


#: What a command no expectation matches must do, where that is allowed: exit 0.
EXIT_ZERO = Expectation("")

#: The timeout of a command that starts Spark (a JVM, then Python workers): on a 2-core machine shared
#: with other jobs that takes minutes (at load 20-30, 60-120 s timed out), and the timeout is only there
#: to stop a hang.
SPARK_TIMEOUT_S = 600.0
_STARTS_SPARK = re.compile(r"^tierlog spark |spark_session\(", re.MULTILINE)


def timeout_of(command: str, exp: Expectation) -> float:
    return max(exp.timeout_s, SPARK_TIMEOUT_S) if _STARTS_SPARK.search(command) else exp.timeout_s


def run_page(session: Session, commands: list[Command], expectations: list[Expectation],
             *, page: str, every_command_checked: bool = True) -> list[Result]:
    """Run every command in order; each must exit 0 and pass the check of the one expectation that
    matches it. With ``every_command_checked``, a command no expectation matches fails the test (a
    command added to a page needs a check here); without, it only has to exit 0. A command matched
    by two expectations fails, as does an expectation that matches no command (a stale one)."""
    used: set[int] = set()
    plan: list[tuple[Command, Expectation]] = []
    for cmd in commands:
        matching = [i for i, e in enumerate(expectations) if re.search(e.pattern, cmd.text)]
        if not matching and not every_command_checked:
            plan.append((cmd, EXIT_ZERO))
            continue
        assert matching, f"{page}:{cmd.line}: no test checks this command; add an Expectation for it:\n{cmd.text}"
        assert len(matching) == 1, (f"{page}:{cmd.line}: expectations {[expectations[i].pattern for i in matching]} "
                                    f"all match:\n{cmd.text}")
        used.add(matching[0])
        plan.append((cmd, expectations[matching[0]]))
    stale = [e.pattern for i, e in enumerate(expectations) if i not in used]
    assert not stale, f"{page}: expectations that match no command any more: {stale}"
    results = []
    for cmd, exp in plan:
        command = rewrite(cmd.text, session.ports)
        session.note_command(command)
        deadline = time.monotonic() + exp.within_s
        while True:
            try:
                result = session.run(command, timeout_of(command, exp))
            except AssertionError as e:  # timed out, or the shell exited
                raise AssertionError(f"{page}:{cmd.line}: {e}\n{session.broker_log_tail()}") from None
            try:
                assert result.returncode == 0, "non-zero exit"
                if exp.check is not None:
                    exp.check(result)
                break
            except AssertionError as e:
                if exp.eventually and time.monotonic() < deadline:
                    time.sleep(0.5)
                    continue
                raise AssertionError(f"{page}:{cmd.line}: {e}\n{result.describe()}\n{session.broker_log_tail()}"
                                     ) from None
        results.append(result)
    return results
