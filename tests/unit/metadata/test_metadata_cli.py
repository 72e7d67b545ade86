"""``tierlog metadata snapshot | show | restore`` through the subcommand module's argparse wiring."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tests.helpers.metadata import Env
from tierlog.cli import metadata_cmd
from tierlog.metadata.snapshot import list_snapshots


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="tierlog")
    sub = parser.add_subparsers(dest="command")
    metadata_cmd.register(sub)
    args = parser.parse_args(["metadata", *argv])
    return int(args.func(args))


def populated(env: Env) -> Path:
    c = env.open()
    c.create_topic("orders", 3, configs={"retention.ms": "86400000"})
    c.create_topic("payments", 1, configs={"log.retention.min.timestamp": "1700000000000"})
    c.close()
    return env.dir.parent


def test_snapshot_then_nothing_new(env: Env, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data_dir = populated(env)
    config = tmp_path / "server.properties"
    config.write_text("metadata.log.max.snapshot.interval.ms=0\n")  # no time trigger while opening
    assert run("snapshot", "--data-dir", str(data_dir), "--config", str(config)) == 0
    (snap,) = list_snapshots(env.dir)
    assert f"wrote {snap.path}" in capsys.readouterr().out
    assert run("snapshot", "--data-dir", str(env.dir), "--config", str(config)) == 0
    assert "nothing new" in capsys.readouterr().out
    assert len(list_snapshots(env.dir)) == 1


def test_snapshot_of_a_missing_dir_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("snapshot", "--data-dir", str(tmp_path)) == 1
    assert "no metadata log" in capsys.readouterr().err


def test_show_data_dir_and_snapshot(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    data_dir = populated(env)
    assert run("show", "--data-dir", str(data_dir)) == 0
    out = capsys.readouterr().out
    assert "metadata.version" in out and "21" in out
    assert "orders" in out and "payments" in out
    assert "retention.ms" in out and "86400000" in out
    assert "log.retention.min.timestamp" in out
    assert out.count("[1]") >= 8  # replicas and isr of 4 partitions
    # show never writes
    assert list_snapshots(env.dir) == []
    run("snapshot", "--data-dir", str(data_dir))
    capsys.readouterr()
    (snap,) = list_snapshots(env.dir)
    assert run("show", "--snapshot", str(snap.path), "--topic", "payments") == 0
    out = capsys.readouterr().out
    assert "payments" in out and "Topics (1 of 2)" in out


def test_show_rejects_a_corrupt_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "00000000000000000005-0000000001.checkpoint"
    bad.write_bytes(b"nope" * 20)
    assert run("show", "--snapshot", str(bad)) == 1
    assert "error" in capsys.readouterr().err


def test_restore_rebuilds_metadata_from_a_snapshot(env: Env, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data_dir = populated(env)
    run("snapshot", "--data-dir", str(data_dir))
    (snap,) = list_snapshots(env.dir)
    backup = tmp_path / f"backup-{snap.path.name}"
    backup.write_bytes(snap.path.read_bytes())
    c = env.open()
    image = c.image
    c.delete_topic("orders")
    c.create_topic("later", 1)
    c.snapshot_now()
    c.close()
    assert run("restore", str(backup), "--data-dir", str(data_dir)) == 0
    assert "now starts at offset" in capsys.readouterr().out
    assert [s.path.name for s in list_snapshots(env.dir)] == [snap.path.name]
    c2 = env.open()
    assert c2.image == image
    assert c2.metadata_log.log_start_offset == snap.snapshot_id.end_offset
    # The restored broker goes on from there.
    c2.create_topic("after-restore", 1)
    assert c2.image.topic("after-restore") is not None


def test_restore_refuses_a_corrupt_snapshot(env: Env, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data_dir = populated(env)
    bad = tmp_path / "00000000000000000005-0000000001.checkpoint"
    bad.write_bytes(b"\x00" * 100)
    assert run("restore", str(bad), "--data-dir", str(data_dir)) == 1
    assert env.open().image.topic("orders") is not None  # nothing was touched


def test_snapshot_due_at_open_is_reported(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    # The manual clock stamped the records in 2023: opening with the system clock finds them over an
    # hour old, so the time trigger writes the snapshot while the log is opened.
    data_dir = populated(env)
    assert run("snapshot", "--data-dir", str(data_dir)) == 0
    (snap,) = list_snapshots(env.dir)
    assert f"wrote {snap.path}" in capsys.readouterr().out
