"""The README: its two top commands are what CI and ``scripts/`` run (and ``./scripts/serve`` starts a
broker), and every command of its quick start runs — in order, for real, in one shell — against the
broker the quick start itself starts (``walkthrough.py`` lists the only rewrites: the port). A command
added to the README without an expectation here fails the test, as does one that fails."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.walkthrough import (
    REPO,
    Expectation,
    Result,
    Session,
    clean_environment,
    contains,
    fenced_blocks,
    has_lines,
    indented_blocks,
    matches,
    page_commands,
    run_page,
    table,
)

pytestmark = pytest.mark.integration

README = REPO / "README.md"
TOP_COMMANDS = ["./scripts/serve", "./scripts/test"]



def show_rows(out: str) -> list[dict[str, str]]:
    """The rows of a ``DataFrame.show()`` table."""
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in out.splitlines() if line.startswith("|")]
    assert rows, "no DataFrame table in stdout"
    return [dict(zip(rows[0], row, strict=True)) for row in rows[1:]]


class Checks:
    """What each quick-start command must show. The numbers follow from the page: three CLI batches of
    50 records (offsets 0–149, one segment each with 1 KiB segments), then kcat's record (150) and
    the Python client's (151)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.tiering = False

    def broker_log(self) -> str:
        return (self.session.directory / "tierlog.log").read_text()

    def listening(self, r: Result) -> None:
        log = self.broker_log()
        assert f"tierlog listening on 127.0.0.1:{self.session.port}" in log, f"the broker did not start:\n{log[-3000:]}"

    def stopped_cleanly(self, r: Result) -> None:
        assert "broker stopped cleanly" in self.broker_log(), self.broker_log()[-2000:]

    def local_segments(self, r: Result) -> None:
        """Listed twice: before tiering every segment is local; after it, the tiered ones are gone."""
        names = [Path(p).name for p in r.stdout.split()]
        if not self.tiering:
            assert names == ["00000000000000000000.log", "00000000000000000050.log", "00000000000000000100.log"], names
        else:
            assert names == ["00000000000000000100.log"], f"tiered segments still local: {names}"

    def tiering_on(self, r: Result) -> None:
        assert r.stdout == "altered topic orders: set remote.storage.enable=true; set local.retention.ms=1000\n"
        self.tiering = True

    @staticmethod
    def group(r: Result) -> None:
        assert r.stdout.startswith("Group: quickstart "), r.stdout
        rows = table(r.stdout, "TOPIC")
        assert [(x["TOPIC"], x["CURRENT-OFFSET"], x["LAG"]) for x in rows] == [("orders", "152", "0")], rows

    @staticmethod
    def tier_status(r: Result) -> None:
        rows = {x["PARTITION"]: x for x in table(r.stdout, "PARTITION")}
        assert "orders-0" in rows, "orders-0 is not tiered yet"
        row = rows["orders-0"]
        assert row["TIERED-TO"] == "99" and row["SEGMENTS"] == "2" and int(row["REMOTE-BYTES"]) > 0, row
        assert row["LAG-SEGMENTS"] == "0" and row["LAST-ERROR"] == "-", row
        assert r.stdout.splitlines()[-1].startswith("backlog: 0 segments (0 bytes)"), r.stdout

    @staticmethod
    def spark(r: Result) -> None:
        assert show_rows(r.stdout) == [{"records": "152", "first": "0", "last": "151"}]

    @staticmethod
    def floor_set(r: Result) -> None:
        assert re.fullmatch(r"altered topic orders: set log\.retention\.min\.timestamp=\d{13}\n", r.stdout)

    @staticmethod
    def earliest_moved(r: Result) -> None:
        assert re.search(r"^  log\.retention\.min\.timestamp=\d{13}$", r.stdout, re.MULTILINE)
        rows = table(r.stdout, "PARTITION")
        assert [(x["LOG-START"], x["LOG-END"]) for x in rows] == [("100", "152")], rows

    @staticmethod
    def dump_segment(r: Result) -> None:
        lines = r.stdout.splitlines()
        assert lines[1] == "Log starting offset: 100", lines[:3]
        batches = [line for line in lines if line.startswith("baseOffset:")]
        assert [b.split()[1:6:2] for b in batches] == [["100", "149", "50"], ["150", "150", "1"],
                                                      ["151", "151", "1"]], batches
        assert all(b.endswith("isvalid: true") for b in batches), batches


def expectations(c: Checks) -> list[Expectation]:
    return [
        Expectation(r"^source \.venv/bin/activate$"),
        Expectation(r"^tierlog serve "),
        Expectation(r'^until grep -qs "tierlog listening on"', c.listening),
        Expectation(r"^tierlog topics create orders ", has_lines("created topic orders with 1 partition, segment.bytes=1024")),
        Expectation(r"^seq \d+ \d+ \| sed 's/\^/(old|new)-/' \| tierlog produce orders$",
                    has_lines("50 of 50 records acknowledged by orders")),
        Expectation(r"^tierlog consume orders --from-beginning ",
                    has_lines("Offset:0\told-1", "Offset:1\told-2", "Offset:2\told-3")),
        Expectation(r"^ls tierlog-data/orders-0/\*\.log$", c.local_segments, eventually=True),
        Expectation(r'^echo "k1:hello from kcat" \| kcat -P '),
        Expectation(r"^kcat -C .* -o -1 ", has_lines("150 k1 hello from kcat")),
        Expectation(r"^python - <<'EOF'\nfrom confluent_kafka ", has_lines("found b'k2' b'hello from Python' at offset 151")),
        Expectation(r"^tierlog groups describe quickstart$", c.group),
        Expectation(r"^tierlog topics alter orders --config remote\.storage\.enable=true", c.tiering_on),
        Expectation(r'^until \[ "\$\(ls tierlog-data/orders-0/\*\.log \| wc -l\)" -eq 1 \]; do kill -0 %1 '),
        Expectation(r"^tierlog tier status$", c.tier_status, eventually=True),
        Expectation(r"^tierlog consume orders --offset 0 ", has_lines("Offset:0\told-1", "Offset:1\told-2")),
        Expectation(r"^python - <<'EOF'\nfrom tierlog\.pipeline import spark_session", c.spark),
        Expectation(r"^FLOOR=\$\(tierlog consume orders --offset 100 "),
        Expectation(r"^tierlog topics alter orders --config log\.retention\.min\.timestamp=\$FLOOR$", c.floor_set),
        Expectation(r"""^until \[ "\$\(tierlog topics describe orders \| awk '\$1 == "0" \{print \$5\}'\)" = 100 \]; """),
        Expectation(r"^tierlog topics describe orders$", c.earliest_moved, eventually=True),
        Expectation(r"^kcat -C .* -o beginning -c 1 ", has_lines("100 new-1")),
        Expectation(r"^tierlog metadata snapshot --data-dir tierlog-data --output-dir tierlog-backups$",
                    matches(r"^wrote tierlog-backups/\d{20}-\d{10}\.checkpoint \(\d+ bytes")),
        Expectation(r"^tierlog metadata show --snapshot ",
                    matches(r"^  orders +log\.retention\.min\.timestamp +\d{13}$")),
        Expectation(r"^kill %1; wait %1$", c.stopped_cleanly),
        Expectation(r"^tierlog dump-log tierlog-data/orders-0/00000000000000000100\.log$", c.dump_segment),
        Expectation(r"^tierlog dump-log --verify-index-only ", contains("00000000000000000100.index passed sanity check.")),
    ]


def test_quick_start_runs_for_real(tmp_path: Path) -> None:
    commands = page_commands(README.read_text())
    assert len(commands) >= 20, "the quick start lost its commands"
    session = Session(tmp_path / "quickstart")
    started = time.monotonic()
    try:
        run_page(session, commands, expectations(Checks(session)), page="README.md")
    finally:
        session.close()
    print(f"README quick start: {len(commands)} commands in {time.monotonic() - started:.1f} s")


def test_the_two_top_commands_are_what_ci_and_scripts_run(tmp_path: Path) -> None:
    text = README.read_text()
    # The only indented code blocks are the two commands, first on the page; every fenced block is
    # either the quick start (sh, run above) or declared not to be commands.
    assert [b.body for b in indented_blocks(text)] == TOP_COMMANDS
    assert text.index("    ./scripts/test") < text.index("```")
    assert {b.language for b in fenced_blocks(text)} <= {"sh", "text"}

    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert [line for line in ci if line and not line.startswith("#")][-1] == "exec ./scripts/test"
    for script in TOP_COMMANDS:
        assert (REPO / script).stat().st_mode & 0o111, f"{script} is not executable"
    serve = (REPO / "scripts" / "serve").read_text().splitlines()
    assert serve[-1] == 'exec tierlog serve "$@"'

    # ./scripts/serve starts a broker on embedded defaults (here on a free port and a data dir of the
    # test's own: it changes into the repository root, so the data dir must be absolute).
    data = tmp_path / "data"
    proc = subprocess.Popen(["./scripts/serve", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
                             "--override", f"log.dirs={data}"], cwd=REPO, env=clean_environment(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("tierlog listening on 127.0.0.1:"), (first, proc.stderr.read() if proc.stderr else "")
        assert (tmp_path / "data-remote" / "kafka-tiered-storage").is_dir()  # tiering on by default
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-2000:]
