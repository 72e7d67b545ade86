"""Snapshot triggers through the controller with a manual clock (seed 000), retention, metrics and
loading: fallback past a corrupt snapshot, and refusing a log no snapshot covers."""

from __future__ import annotations

import pytest

from tests.helpers.metadata import HOUR_MS, Env, make_settings
from tierlog.metadata.controller import Controller
from tierlog.metadata.errors import InconsistentMetadataLogError
from tierlog.metadata.policy import SnapshotReason
from tierlog.metadata.snapshot import list_snapshots

MINUTE_MS = 60_000


def generated(c: Controller) -> dict[SnapshotReason, int]:
    return {r: n for r, n in c.metrics.snapshots_generated.items() if n}


def fill(c: Controller, prefix: str, min_bytes: int) -> None:
    """Commit topics until at least ``min_bytes`` are not in a snapshot (bounded, so a broken counter
    fails the test instead of looping)."""
    for i in range(100):
        if c.metrics.bytes_since_last_snapshot >= min_bytes:
            return
        c.create_topic(f"{prefix}{i}", 2)
    raise AssertionError(f"{min_bytes} unsnapshotted bytes never accumulated")


def names(env: Env) -> list[int]:
    return [s.snapshot_id.end_offset for s in list_snapshots(env.dir)]


def test_time_trigger_fires_once_a_record_is_older_than_the_interval(env: Env) -> None:
    c = env.open(make_settings(interval_ms=10 * MINUTE_MS))
    env.clock.advance(5 * MINUTE_MS)
    c.create_topic("orders", 1)  # bootstrap record is 5 minutes old now
    env.clock.advance(5 * MINUTE_MS - 1000)
    assert names(env) == []
    env.clock.advance(1000)  # the bootstrap record is 10 minutes old: the periodic check fires
    assert generated(c) == {SnapshotReason.MAX_INTERVAL: 1}
    assert names(env) == [c.image.provenance.end_offset]


def test_time_trigger_never_fires_while_everything_is_in_a_snapshot(env: Env) -> None:
    c = env.open(make_settings(interval_ms=MINUTE_MS))
    env.clock.advance(MINUTE_MS)
    assert generated(c) == {SnapshotReason.MAX_INTERVAL: 1}
    for _ in range(10):
        env.clock.advance(HOUR_MS)
    assert generated(c) == {SnapshotReason.MAX_INTERVAL: 1}
    assert len(names(env)) == 1


def test_zero_interval_disables_time_based_snapshots(env: Env) -> None:
    c = env.open(make_settings(interval_ms=0))
    c.create_topic("orders", 1)
    for _ in range(48):
        env.clock.advance(HOUR_MS)
    assert names(env) == [] and generated(c) == {}


def test_no_snapshot_every_few_milliseconds(env: Env) -> None:
    """KAFKA-14531: the interval is milliseconds; 3.6 ms must not count as an hour."""
    c = env.open(make_settings(interval_ms=HOUR_MS))
    for _ in range(1000):
        env.clock.advance(4)
    c.create_topic("orders", 1)
    assert names(env) == []


def test_byte_trigger_fires_right_after_the_commit(env: Env) -> None:
    c = env.open(make_settings(max_bytes=2000, interval_ms=0))
    for i in range(100):
        c.create_topic(f"t{i}", 3)
        if names(env):
            break
    assert generated(c) == {SnapshotReason.MAX_BYTES: 1}
    assert names(env) == [c.image.provenance.end_offset]
    assert c.metrics.latest_snapshot_size_bytes * 100 >= 2000  # sanity: a real file was written
    assert c.metrics.bytes_since_last_snapshot == 0


def test_metadata_version_change_trigger(env: Env) -> None:
    c = env.open(make_settings(bootstrap_version=20))
    assert names(env) == []  # bootstrapping the level is not a change
    c.set_metadata_version(21)
    assert generated(c) == {SnapshotReason.METADATA_VERSION_CHANGED: 1}
    assert names(env) == [c.image.provenance.end_offset]


def test_time_snapshot_resets_the_byte_counter(env: Env) -> None:
    """Kafka's testTimeBasedSnapshots: after a time-triggered snapshot, bytes below the limit trigger nothing."""
    c = env.open(make_settings(max_bytes=3000, interval_ms=10 * MINUTE_MS))
    fill(c, "a", 2000)
    env.clock.advance(10 * MINUTE_MS)
    assert generated(c) == {SnapshotReason.MAX_INTERVAL: 1}
    fill(c, "b", 2000)
    assert generated(c) == {SnapshotReason.MAX_INTERVAL: 1}
    # The time counter restarted with the first record after the snapshot.
    env.clock.advance(10 * MINUTE_MS - 1000)
    assert generated(c) == {SnapshotReason.MAX_INTERVAL: 1}
    env.clock.advance(1000)
    assert generated(c) == {SnapshotReason.MAX_INTERVAL: 2}


def test_byte_snapshot_resets_the_time_counter(env: Env) -> None:
    c = env.open(make_settings(max_bytes=2000, interval_ms=10 * MINUTE_MS))
    env.clock.advance(9 * MINUTE_MS)  # the bootstrap record is 9 minutes old
    for i in range(100):
        c.create_topic(f"t{i}", 3)
        if names(env):
            break
    assert generated(c) == {SnapshotReason.MAX_BYTES: 1}
    env.clock.advance(2 * MINUTE_MS)  # 11 minutes after the bootstrap record, but it is in the snapshot
    assert generated(c) == {SnapshotReason.MAX_BYTES: 1}


def test_version_snapshot_resets_both_counters(env: Env) -> None:
    c = env.open(make_settings(max_bytes=3000, interval_ms=10 * MINUTE_MS, bootstrap_version=20))
    fill(c, "a", 2000)
    env.clock.advance(9 * MINUTE_MS)
    c.set_metadata_version(21)
    assert generated(c) == {SnapshotReason.METADATA_VERSION_CHANGED: 1}
    c.create_topic("late", 1)
    env.clock.advance(2 * MINUTE_MS)
    assert generated(c) == {SnapshotReason.METADATA_VERSION_CHANGED: 1}


def test_requested_snapshot_and_nothing_new(env: Env) -> None:
    c = env.open()
    c.create_topic("orders", 1)
    snap = c.snapshot_now()
    assert snap is not None and snap.snapshot_id.end_offset == c.image.provenance.end_offset
    assert c.snapshot_now() is None
    assert generated(c) == {SnapshotReason.REQUESTED: 1}


def test_metrics(env: Env) -> None:
    c = env.open()
    assert c.metrics.latest_snapshot_age_ms(env.clock.wall_ms()) == -1
    c.create_topic("orders", 1)
    snap = c.snapshot_now()
    assert snap is not None
    m = c.metrics
    assert m.latest_snapshot_size_bytes == snap.size_bytes == snap.path.stat().st_size
    assert m.latest_snapshot_end_offset == snap.snapshot_id.end_offset
    env.clock.advance(1234)
    assert m.latest_snapshot_age_ms(env.clock.wall_ms()) == 1234


def test_retention_deletes_old_snapshots_and_segments_but_keeps_the_newest(env: Env) -> None:
    c = env.open(make_settings(retention_bytes=1, segment_bytes=4096))
    for round_ in range(4):
        for i in range(6):
            c.create_topic(f"t{round_}-{i}", 4)
        c.snapshot_now()
    newest = c.image.provenance.end_offset
    assert names(env) == [newest]
    assert c.metadata_log.log_start_offset == newest
    assert c.metadata_log.log.segments.first.base_offset <= newest  # type: ignore[union-attr]
    image = c.image
    c2 = env.reopen(c)
    assert c2.image == image


def test_retention_by_time(env: Env) -> None:
    c = env.open(make_settings(retention_ms=HOUR_MS))
    c.create_topic("a", 1)
    c.snapshot_now()
    env.clock.advance(2 * HOUR_MS)
    c.create_topic("b", 1)
    c.snapshot_now()
    env.clock.advance(MINUTE_MS)  # the cleaner runs every minute
    assert names(env) == [c.image.provenance.end_offset]
    env.clock.advance(10 * HOUR_MS)
    assert names(env) == [c.image.provenance.end_offset]  # the newest always stays


def test_snapshot_due_at_startup_is_taken(env: Env) -> None:
    c = env.open(make_settings(interval_ms=HOUR_MS))
    c.create_topic("orders", 1)
    c.close()
    env.clock.advance(2 * HOUR_MS)  # the broker was down: the unsnapshotted records are 2 h old now
    c2 = env.open(make_settings(interval_ms=HOUR_MS))
    assert generated(c2) == {SnapshotReason.MAX_INTERVAL: 1}


def test_corrupt_newest_snapshot_falls_back_to_an_older_one(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    c = env.open()
    c.create_topic("a", 2)
    c.snapshot_now()
    c.create_topic("b", 2)
    newest = c.snapshot_now()
    assert newest is not None
    c.create_topic("c", 1)
    image = c.image
    c.close()
    data = bytearray(newest.path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    newest.path.write_bytes(bytes(data))
    c2 = env.open()
    assert c2.image == image
    assert any("unusable" in w for w in c2.load_result.warnings)
    assert "unusable" in caplog.text
    assert c2.load_result.snapshot is not None and c2.load_result.snapshot.path != newest.path
    assert not newest.path.exists() and newest.path.with_name(newest.path.name + ".corrupt").exists()


def test_missing_footer_falls_back_too(env: Env) -> None:
    c = env.open()
    c.create_topic("a", 2)
    newest = c.snapshot_now()
    assert newest is not None
    c.create_topic("b", 1)
    image = c.image
    c.close()
    newest.path.write_bytes(newest.path.read_bytes()[:-30])
    assert env.open().image == image  # no older snapshot, but the log starts at 0


def test_no_usable_snapshot_covering_the_log_start_is_a_clear_error(env: Env) -> None:
    c = env.open(make_settings(retention_bytes=1, segment_bytes=4096))
    for round_ in range(3):
        for i in range(6):
            c.create_topic(f"t{round_}-{i}", 4)
        c.snapshot_now()
    assert c.metadata_log.log_start_offset > 0
    assert c.metadata_log.log.segments.first.base_offset > 0  # type: ignore[union-attr]
    c.close()
    (only,) = list_snapshots(env.dir)
    only.path.write_bytes(b"\x00" * 10)
    with pytest.raises(InconsistentMetadataLogError, match="no usable snapshot covers"):
        env.open(make_settings(retention_bytes=1, segment_bytes=4096))
