"""``tierlog tier status`` read from a data directory, beside the running remote log manager."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from tests.helpers.tiered import Env, fill
from tierlog.cli import tier_cmd
from tierlog.testing.remote import InMemoryRemoteStorageManager


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tierlog")
    sub = parser.add_subparsers(dest="command")
    tier_cmd.register(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_tier_status_shows_progress_lag_and_the_seed002_error(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    good = env.open_log("good-0", topic_id=b"\x0a" * 16)
    bad = env.open_log("bad-0", topic_id=b"\x0b" * 16)
    fill(good, 20)
    fill(bad, 20)
    rsm = InMemoryRemoteStorageManager(
        custom_metadata=lambda md: b"x" * 200 if md.topic_id_partition.topic == "bad" else None)
    rlm = env.rlm(rsm)
    rlm.copy_all()
    data_dir = str(env.root / "data")

    assert run(["tier", "status", "--data-dir", data_dir, "--json"]) == 0
    rows = {r["topic"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    live = {s.topic: s for s in rlm.status()}
    assert rows["good"]["highest_tiered_offset"] == good.segments.base_offsets[-1] - 1
    assert rows["good"]["remote_bytes"] == live["good"].remote_bytes > 0
    assert rows["good"]["copy_lag_segments"] == 0 and rows["good"]["copy_task"] == "active"
    assert rows["good"]["local_bytes"] == good.size_bytes
    assert rows["bad"]["copy_task"] == "stopped" and "200 bytes" in rows["bad"]["last_error"]
    assert rows["bad"]["highest_tiered_offset"] == -1
    assert rows["bad"]["copy_lag_segments"] == len(bad.segments) - 1

    assert run(["tier", "status", "--data-dir", data_dir]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].startswith("PARTITION") and "bad-0" in text and "stopped" in text
    lag = rows["bad"]["copy_lag_segments"]
    assert text.splitlines()[-1] == (f"backlog: {lag} segments ({rows['bad']['copy_lag_bytes']} bytes) waiting to be "
                                     "copied, in 1 of 2 partitions")


def test_tier_status_runs_without_importing_numba(env: Env) -> None:
    """A light command: numba (~0.5 s of CPU to import) is for the cleaner's and the pipeline's
    loops, which ``tier status`` imports only on the way (the remote log manager's compaction)."""
    fill(good := env.open_log("good-0", topic_id=b"\x0a" * 16), 20)
    env.rlm(InMemoryRemoteStorageManager()).copy_all()
    code = ("import sys; from tierlog.cli.main import main; "
            f"rc = main(['tier', 'status', '--data-dir', {str(env.root / 'data')!r}, '--json']); "
            "print('numba imported' if 'numba' in sys.modules else 'numba not imported', rc)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    *rows, last = done.stdout.splitlines()
    assert last == "numba not imported 0"
    row = json.loads(rows[0])
    assert row["topic"] == "good" and row["highest_tiered_offset"] == good.segments.base_offsets[-1] - 1


def test_tier_status_of_an_untiered_dir(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    fill(env.open_log("plain-0"), 3)
    assert run(["tier", "status", "--data-dir", str(env.root / "data")]) == 0
    assert capsys.readouterr().out.strip() == "no tiered partitions"


def test_tier_status_follows_the_running_manager_not_a_previous_one(env: Env,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A task shows as active as soon as it exists, and a restart replaces the previous process's
    stopped task and its error (as Kafka re-creates the copy task on restart)."""
    bad = env.open_log("bad-0", topic_id=b"\x0b" * 16)
    fill(bad, 20)
    data_dir = str(env.root / "data")
    first = env.rlm(InMemoryRemoteStorageManager(custom_metadata=lambda md: b"x" * 200))
    first.sync_partitions()
    assert run(["tier", "status", "--data-dir", data_dir, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["copy_task"] == "active"  # not "unknown" before any copy
    first.copy_all()
    first.close()
    assert run(["tier", "status", "--data-dir", data_dir, "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["copy_task"] == "stopped" and "200 bytes" in row["last_error"]

    second = env.rlm(InMemoryRemoteStorageManager())
    second.sync_partitions()
    assert run(["tier", "status", "--data-dir", data_dir, "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["copy_task"] == "active" and row["last_error"] is None
    second.close()
