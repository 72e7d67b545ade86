"""Seed 002's delete of an upload whose custom metadata was over the limit, and every failed remote
delete: the oversize custom metadata reaches each attempt, attempts back off (manual clock), a
delete that never succeeds is given up and reported (status, metric, ERROR line, tier status), the
tier commands settle it, and other partitions keep tiering meanwhile."""

from __future__ import annotations

import argparse
import itertools
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tests.helpers.tiered import T0, Env, fill, tiered_config
from tierlog.cli import tier_cmd
from tierlog.metadata.snapshot_generator import SnapshotMetrics
from tierlog.server.metrics import BrokerCollector
from tierlog.storage.dir_lock import DirLock
from tierlog.storage.log_manager import LogManager, LogManagerSettings
from tierlog.testing.remote import BucketedRemoteStorageManager, InMemoryRemoteStorageManager
from tierlog.tiered.api import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteStorageError,
    TopicIdPartition,
)
from tierlog.tiered.remote_log_manager import RemoteLogManager
from tierlog.tiered.status import read_status_file

S = RemoteLogSegmentState
OVER = TopicIdPartition(b"\x0a" * 16, "over", 0)
UNDER = TopicIdPartition(b"\x0b" * 16, "under", 0)
CUSTOM_BYTES = 200


class ClockedBuckets(BucketedRemoteStorageManager):
    """The bucketed plugin, noting the manual clock's time of each delete call."""

    def __init__(self, env: Env) -> None:
        super().__init__()
        self.env = env
        self.delete_times: list[int] = []

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        self.delete_times.append(self.env.clock.wall_ms())
        super().delete_log_segment_data(metadata)


def plugin_props(env: Env, failures: int) -> dict[str, str]:
    return {"dir": str(env.root / "remote"), "buckets.custom.metadata.bytes": str(CUSTOM_BYTES),
            "buckets.pad.topics": "over", "buckets.delete.failures": str(failures)}


def buckets(env: Env, failures: int) -> ClockedBuckets:
    rsm = ClockedBuckets(env)
    rsm.configure(plugin_props(env, failures))
    return rsm


def remote_files(env: Env, topic: str) -> list[Path]:
    return [p for p in (env.root / "remote").rglob("*") if p.is_file() and p.parent.name.startswith(f"{topic}-")]


def start(env: Env, rsm: ClockedBuckets, **config: object) -> RemoteLogManager:
    over = env.open_log("over-0", topic_id=OVER.topic_id)
    under = env.open_log("under-0", topic_id=UNDER.topic_id)
    fill(over, 20)
    fill(under, 20)
    rlm = env.rlm(rsm, scheduler=True, task_interval_ms=1000, delete_retry_backoff_max_ms=8000, **config)
    rlm.start()
    env.clock.advance(1)  # the first copy runs: "over" stops, its delete is attempted once
    return rlm


def run_passes(env: Env, rsm: ClockedBuckets, rlm: RemoteLogManager, until_ms: int) -> None:
    """Advance the manual clock pass by pass, "under" taking new segments all along."""
    under = env.logs.get_log("under", 0)
    assert under is not None
    i = 0
    while env.clock.wall_ms() < until_ms:
        fill(under, 2, start_ts=T0 + 100_000 + i * 10_000)
        env.clock.advance(500)
        i += 1


def gaps(times: list[int]) -> list[int]:
    return [b - a for a, b in itertools.pairwise(times)]


def finished(rlm: RemoteLogManager, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
    return [m for m in rlm.rlmm.list_remote_log_segments(tip) if m.state is S.COPY_SEGMENT_FINISHED]


def test_delete_failing_three_times_then_succeeding_gets_the_custom_metadata_every_time(env: Env) -> None:
    rsm = buckets(env, failures=3)
    rlm = start(env, rsm)
    [(sid, returned)] = [(k, v) for k, v in rsm.returned.items() if k.topic_id_partition == OVER]
    assert len(returned) == CUSTOM_BYTES and returned.startswith(b"bucket=")
    [kept] = list(rlm.rlmm.list_remote_log_segments(OVER))
    # Kept with DELETE_SEGMENT_STARTED for the retries, never as the segment's custom metadata.
    assert kept.state is S.DELETE_SEGMENT_STARTED and kept.custom_metadata is None
    assert kept.rejected_custom_metadata == returned
    assert rlm.rlmm.remote_log_segment_metadata(OVER, 0) is None and remote_files(env, "over")
    [over_status] = [s for s in rlm.status() if s.topic == "over"]
    assert over_status.copy_task == "stopped" and over_status.deletes_pending == 1

    under_before = len(finished(rlm, UNDER))
    run_passes(env, rsm, rlm, env.clock.wall_ms() + 30_000)

    calls = [(custom, ok) for s, custom, ok in rsm.delete_calls if s == sid]
    assert calls == [(returned, False)] * 3 + [(returned, True)]  # the same bytes, every attempt
    # Backoff: one interval, then twice, then four times the interval.
    assert gaps(rsm.delete_times) == [1000, 2000, 4000]
    assert remote_files(env, "over") == [] and list(rlm.rlmm.list_remote_log_segments(OVER)) == []
    assert rlm.failed_deletes() == []
    statuses = {s.topic: s for s in rlm.status()}
    assert statuses["over"].deletes_pending == 0 and statuses["over"].deletes_given_up == 0
    assert statuses["over"].copy_task == "stopped"  # seed 002's stop stays
    # The other partition went on tiering meanwhile.
    assert len(finished(rlm, UNDER)) > under_before
    assert statuses["under"].copy_lag_segments == 0 and statuses["under"].copy_task == "active"


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tierlog")
    tier_cmd.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return int(args.func(args))


def metrics_of(env: Env, rlm: RemoteLogManager) -> CollectorRegistry:
    manager = LogManager([env.root / "empty"], lambda t: None, LogManagerSettings())  # type: ignore[arg-type,return-value]
    manager.startup_logs()
    ctx: Any = SimpleNamespace(
        log_manager=manager, remote_log_manager=rlm, listeners=[],
        controller=SimpleNamespace(metrics=SnapshotMetrics(), latest_snapshot_age_ms=-1,
                                   metadata_log=SimpleNamespace(dir=env.root / "missing")))
    registry = CollectorRegistry()
    registry.register(BrokerCollector(ctx, lambda: ["PLAINTEXT"]))
    return registry


def test_delete_that_never_succeeds_is_given_up_reported_and_settled_by_the_tier_commands(
        env: Env, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.WARNING, logger="tierlog.tiered")
    rsm = buckets(env, failures=-1)
    rlm = start(env, rsm, delete_retry_max_attempts=4)
    [(sid, returned)] = [(k, v) for k, v in rsm.returned.items() if k.topic_id_partition == OVER]
    under_before = len(finished(rlm, UNDER))
    run_passes(env, rsm, rlm, env.clock.wall_ms() + 60_000)

    # Four attempts in all, backing off, each handed the oversize custom metadata; then no more.
    assert [(custom, ok) for s, custom, ok in rsm.delete_calls if s == sid] == [(returned, False)] * 4
    assert gaps(rsm.delete_times) == [1000, 2000, 4000]
    assert len(finished(rlm, UNDER)) > under_before  # the other partition kept tiering

    [given_up] = rlm.failed_deletes()
    assert given_up.given_up and given_up.attempts == 4 and given_up.segment_id == sid.id_str
    [md] = list(rlm.rlmm.list_remote_log_segments(OVER))
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR and "given up" in r.getMessage()]
    assert errors == [f"remote delete given up segment_id={sid.id_str} topic=over partition=0 start_offset=0 "
                      f"end_offset={md.end_offset} after 4 attempts: its objects stay in the remote tier (tierlog "
                      f"tier retry-delete or forget-delete {sid.id_str}, docs/operations.md); last error: "
                      f"RemoteStorageError: injected delete failure 4 of {sid}"]
    statuses = {s.topic: s for s in rlm.status()}
    assert statuses["over"].deletes_given_up == 1 and statuses["over"].deletes_pending == 0
    registry = metrics_of(env, rlm)
    labels = {"topic": "over", "partition": "0"}
    assert registry.get_sample_value("tierlog_remote_delete_given_up_segments", labels) == 1
    assert registry.get_sample_value("tierlog_remote_delete_pending_segments", labels) == 0
    assert registry.get_sample_value("tierlog_remote_delete_given_up_segments",
                                     {"topic": "under", "partition": "0"}) == 0
    persisted = read_status_file(env.root / "data" / "remote-log-metadata" / "tier-status")
    assert persisted is not None and [d["segment_id"] for d in persisted["deletes"]] == [sid.id_str]  # type: ignore[attr-defined]

    data_dir = str(env.root / "data")
    assert run_cli(["tier", "status", "--data-dir", data_dir]) == 0
    out = capsys.readouterr().out.splitlines()
    at = out.index("remote deletes given up: 1 segments left in the remote tier (tierlog tier retry-delete / "
                   "forget-delete SEGMENT-ID, broker stopped)")
    assert out[at + 1].split()[:4] == ["SEGMENT-ID", "PARTITION", "OFFSETS", "ATTEMPTS"]
    assert out[at + 2].split()[:4] == [sid.id_str, "over-0", f"0-{md.end_offset}", "4"]

    # The tier commands refuse while a broker holds the data directory.
    rlm.close()
    overrides = ["--override", "remote.log.storage.manager.class.name=tierlog.testing.remote.BucketedRemoteStorageManager",
                 *itertools.chain.from_iterable(("--override", f"rsm.config.{k}={v}")
                                                for k, v in plugin_props(env, failures=0).items()),
                 "--data-dir", data_dir]
    with DirLock(env.root / "data"):
        assert run_cli(["tier", "retry-delete", *overrides, "--", sid.id_str]) == 1
        assert "in use by another process" in capsys.readouterr().err
    assert remote_files(env, "over")
    # retry-delete with a plugin that works now: the objects go, found through the kept metadata.
    assert run_cli(["tier", "retry-delete", *overrides, "--", sid.id_str]) == 0
    assert f"custom metadata: {returned.hex()}" in capsys.readouterr().out
    assert remote_files(env, "over") == []
    assert run_cli(["tier", "status", "--data-dir", data_dir]) == 0
    assert "given up" not in capsys.readouterr().out
    assert run_cli(["tier", "forget-delete", "--data-dir", data_dir, "--", sid.id_str]) == 1
    assert "no remote segment" in capsys.readouterr().err


def test_forget_delete_drops_the_record_and_leaves_the_objects(env: Env,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    rsm = buckets(env, failures=-1)
    rlm = start(env, rsm, delete_retry_max_attempts=1)
    [sid] = [k for k in rsm.returned if k.topic_id_partition == OVER]
    assert rlm.failed_deletes()[0].given_up  # one attempt allowed: given up at once
    rlm.close()
    files = remote_files(env, "over")
    assert files
    assert run_cli(["tier", "forget-delete", "--data-dir", str(env.root / "data"), "--", sid.id_str]) == 0
    assert "forgotten" in capsys.readouterr().out
    assert remote_files(env, "over") == files
    again = env.rlm(buckets(env, failures=0))
    assert list(again.rlmm.list_remote_log_segments(OVER)) == []
    again.close()


def test_a_restart_retries_a_given_up_delete_with_the_kept_custom_metadata(env: Env) -> None:
    rsm = buckets(env, failures=-1)
    rlm = start(env, rsm, delete_retry_max_attempts=1)
    [(sid, returned)] = [(k, v) for k, v in rsm.returned.items() if k.topic_id_partition == OVER]
    rlm.close()
    working = buckets(env, failures=0)
    again = env.rlm(working)
    again.sync_partitions()
    again.expire_all()
    assert working.delete_calls == [(sid, returned, True)]
    assert remote_files(env, "over") == []
    again.close()


class FirstSegmentUndeletable(InMemoryRemoteStorageManager):
    """Deletes of the segment starting at offset 0 always fail; the clock time of each is noted."""

    def __init__(self, env: Env) -> None:
        super().__init__()
        self.env = env
        self.failed_times: list[int] = []

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        if metadata.start_offset == 0:
            self.failed_times.append(self.env.clock.wall_ms())
            raise RemoteStorageError("injected: access denied")
        super().delete_log_segment_data(metadata)


def test_retention_delete_failures_back_off_too_and_do_not_hold_up_other_deletes(env: Env) -> None:
    """Not only seed 002's: a retention delete that fails is retried on the same schedule, given up
    after the attempts, and no longer holds up retention of the segments after it."""
    ulog = env.open_log(config=tiered_config(**{"retention.ms": 0}))
    fill(ulog, 20)
    rsm = FirstSegmentUndeletable(env)
    rlm = env.rlm(rsm, delete_retry_max_attempts=3)
    rlm.copy_all()
    tip = TopicIdPartition(b"\x01" * 16, "t", 0)
    assert len(finished(rlm, tip)) > 2
    assert rlm.expire_partition("t", 0) == []  # the first delete fails and stops this pass
    assert finished(rlm, tip)
    for _ in range(12):
        env.clock.advance(1000)
        rlm.expire_partition("t", 0)
    assert gaps(rsm.failed_times) == [1000, 2000]  # three attempts, then given up
    [md] = list(rlm.rlmm.list_remote_log_segments(tip))
    assert md.start_offset == 0 and md.state is S.DELETE_SEGMENT_STARTED
    assert {sid for sid in rsm.segment_ids()} == {md.segment_id}  # every other segment went
    [entry] = rlm.failed_deletes()
    assert entry.given_up and entry.attempts == 3 and entry.last_error == "RemoteStorageError: injected: access denied"
    assert [s.deletes_given_up for s in rlm.status()] == [1]
