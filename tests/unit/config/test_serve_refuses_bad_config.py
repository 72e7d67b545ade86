"""``tierlog serve`` with a bad configuration: exit code 2, one line on stderr naming the key, and
nothing started — no data directory is created.

Each case runs the real entry point (``python -m tierlog.cli.main serve``) as a subprocess, side by
side; finer variations of each kind of error are checked in-process in test_validation.py.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Case:
    overrides: tuple[str, ...] = ()
    #: Lines of a --config file; "{data}" is replaced by the data directory.
    config_lines: tuple[str, ...] | None = None
    #: What the one stderr line must say after "tierlog: invalid configuration: " ("{config}" is the file).
    expect: str = ""


CASES: dict[str, Case] = {
    "unknown key": Case(("BAD=1",), expect="BAD: unknown config key"),
    "unknown key, did you mean": Case(
        ("log.retention.hourz=24",),
        expect="log.retention.hourz: unknown config key; did you mean log.retention.hours?"),
    "wrong type": Case(("node.id=abc",), expect="node.id: expected an integer, got 'abc'; valid values: [0,...]"),
    "out of range": Case(("log.segment.bytes=13",), expect="log.segment.bytes: value 13 is below the minimum 14"),
    "conflicting broker.id and node.id": Case(
        ("node.id=1", "broker.id=2"), expect="broker.id: value 2 conflicts with node.id 1"),
    "a key under its deprecated name and Kafka's name together": Case(
        ("transactions.remove.expired.transaction.cleanup.interval.ms=1000",
         "transaction.remove.expired.transaction.cleanup.interval.ms=2000"),
        expect="transaction.remove.expired.transaction.cleanup.interval.ms: given twice, as "
               "transaction.remove.expired.transaction.cleanup.interval.ms and "
               "transactions.remove.expired.transaction.cleanup.interval.ms (its deprecated name); set only "
               "transaction.remove.expired.transaction.cleanup.interval.ms"),
    "conflicting local and total retention": Case(
        ("log.retention.ms=1000", "log.local.retention.ms=2000"),
        expect="log.local.retention.ms: value 2000 is larger than the total retention 1000"),
    "bad line in the config file": Case(
        config_lines=("# a broker", "log.dirs={data}", "this line is not a property", "node.id=1"),
        expect="{config}:3: expected KEY=VALUE, got 'this line is not a property'"),
    "bad value in the config file": Case(
        config_lines=("log.dirs={data}", "num.partitions=many"),
        expect="num.partitions: expected an integer, got 'many'; valid values: [1,...] (from {config}:2)"),
}


@dataclass(frozen=True)
class Outcome:
    returncode: int
    stdout: str
    stderr: str
    workdir: Path
    data_dir: Path
    config: Path | None


def _run(case: Case, workdir: Path) -> Outcome:
    workdir.mkdir(parents=True)
    data_dir = workdir / "data"
    argv = [sys.executable, "-m", "tierlog.cli.main", "serve"]
    config: Path | None = None
    if case.config_lines is not None:
        config = workdir / "server.properties"
        config.write_text("\n".join(line.format(data=data_dir) for line in case.config_lines) + "\n",
                          encoding="utf-8")
        argv += ["--config", str(config)]
    else:
        argv += ["--override", f"log.dirs={data_dir}"]
    for item in case.overrides:
        argv += ["--override", item]
    try:
        proc = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as e:  # it started: the configuration was accepted
        raise AssertionError(f"serve did not refuse {case}; it was still running after 60 s") from e
    return Outcome(proc.returncode, proc.stdout, proc.stderr, workdir, data_dir, config)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    root = tmp_path_factory.mktemp("serve-bad-config")
    with ThreadPoolExecutor(max_workers=len(CASES)) as pool:
        futures = {name: pool.submit(_run, case, root / f"case{i}") for i, (name, case) in enumerate(CASES.items())}
        return {name: f.result() for name, f in futures.items()}


@pytest.mark.parametrize("name", list(CASES))
def test_serve_refuses_with_one_line_and_starts_nothing(outcomes: dict[str, Outcome], name: str) -> None:
    case, out = CASES[name], outcomes[name]
    assert out.returncode == 2, out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    expected = case.expect.format(config=out.config)
    assert lines[0].startswith(f"tierlog: invalid configuration: {expected}"), lines[0]
    assert out.stdout == ""
    assert not out.data_dir.exists()
    leftovers = {p.name for p in out.workdir.iterdir()} - {"server.properties"}
    assert leftovers == set(), "nothing may be created in the working directory"
