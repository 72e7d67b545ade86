"""Restoring a tiered partition from the remote tier when its local log is lost (issue 20, case 2):
the log resumes at the remote end + 1 with the remote tier's producer state and leader epochs, no
offset the remote tier holds is handed out again, a retried batch keeps its original offset, and a
local log that disagrees with the remote tier takes the partition offline instead."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from tests.helpers.tiered import T0, Env, batch, tiered_config
from tierlog.errors import KafkaStorageError, OffsetOutOfRangeError
from tierlog.records.header import iter_headers
from tierlog.storage.log import UnifiedLog
from tierlog.storage.log_restore import RESTORE_MARKER_FILE
from tierlog.storage.producer_snapshot import decode_snapshot, encode_snapshot
from tierlog.storage.producer_state import ProducerStateManager, entry_to_snapshot
from tierlog.testing.remote import FailurePlan, FlakyRemoteStorageManager
from tierlog.tiered.api import IndexType, RemoteStorageManager, TopicIdPartition
from tierlog.tiered.backends.local import LocalDirectoryRemoteStorageManager
from tierlog.tiered.remote_log_manager import RemoteLogManager
from tierlog.tiered.restore import RestoreAction, plan_restore

TIP = TopicIdPartition(b"\x01" * 16, "t", 0)
P1 = 7


@pytest.mark.parametrize(("local", "remote_end", "pending", "action"), [
    ((0, 0), -1, False, RestoreAction.NONE),
    ((0, 100), -1, False, RestoreAction.NONE),
    ((0, 0), 95, False, RestoreAction.RESTART),
    ((96, 96), 95, False, RestoreAction.NONE),  # already restarted there: nothing overlaps
    ((96, 150), 95, False, RestoreAction.NONE),
    ((50, 150), 95, False, RestoreAction.CHECK_BOUNDARY),
    ((0, 150), 95, False, RestoreAction.CHECK_BOUNDARY),
    ((0, 40), 95, False, RestoreAction.COMPARE_THEN_RESTART),
    ((0, 96), 95, False, RestoreAction.CHECK_BOUNDARY),
    ((96, 96), 95, True, RestoreAction.RESTART),
])
def test_plan(local: tuple[int, int], remote_end: int, pending: bool, action: RestoreAction) -> None:
    assert plan_restore(local[0], local[1], remote_end, pending) is action


def rsm_in(env: Env) -> LocalDirectoryRemoteStorageManager:
    rsm = LocalDirectoryRemoteStorageManager()
    rsm.configure({"dir": str(env.root / "remote"), "fsync": "false"})
    return rsm


def idempotent(i: int, seq: int, epoch: int = 0) -> bytes:
    return batch(3, ts=T0 + i * 100, producer_id=P1, producer_epoch=epoch, base_sequence=seq, seed=i)


def write_and_tier(env: Env, batches: int = 30) -> tuple[UnifiedLog, RemoteLogManager, list[bytes], list[tuple[int, int, int]]]:
    """An idempotent producer's batches over several segments, every closed one tiered. Returns the
    log, its manager, the batches and the bytes of the whole log."""
    ulog = env.open_log(config=tiered_config())
    sent = [idempotent(i, 3 * i) for i in range(batches)]
    for b in sent:
        ulog.append_as_leader(b)
    rlm = env.rlm(rsm_in(env))
    assert rlm.copy_all() == len(ulog.segments.base_offsets) - 1
    return ulog, rlm, sent, read_everything(ulog, rlm)


def reopen(env: Env, rsm: RemoteStorageManager | None = None, *, clean: bool = True) -> tuple[UnifiedLog, RemoteLogManager]:
    ulog = env.open_log(config=tiered_config(), clean=clean)
    rlm = env.rlm(rsm if rsm is not None else rsm_in(env))
    rlm.sync_partitions()
    return ulog, rlm


def stop(env: Env, ulog: UnifiedLog, rlm: RemoteLogManager, *, clean: bool = True) -> None:
    rlm.close()
    if clean:
        ulog.close()
    del env.logs.logs[("t", 0)]


def read_everything(ulog: UnifiedLog, rlm: RemoteLogManager) -> list[tuple[int, int, int]]:
    """(base offset, last offset, crc) of every batch, remote ones first, as a consumer reads them."""
    out: list[tuple[int, int, int]] = []
    offset = rlm.earliest_offset("t", 0) or 0
    while offset < ulog.log_end_offset:
        try:
            data = ulog.read_bytes(offset)
        except OffsetOutOfRangeError:
            data = rlm.read("t", 0, offset, 1 << 20) or b""
        headers = list(iter_headers(data))
        assert headers, f"nothing readable at offset {offset}"
        out.extend((h.base_offset, h.last_offset, h.crc) for h in headers)
        offset = headers[-1].last_offset + 1
    return out


def test_a_wiped_partition_resumes_after_the_remote_end(env: Env) -> None:
    ulog, rlm, sent, original = write_and_tier(env)
    remote_end = ulog.highest_offset_in_remote_storage
    leo = ulog.log_end_offset
    assert 0 < remote_end < leo - 1
    stop(env, ulog, rlm)
    shutil.rmtree(ulog.dir)

    ulog, rlm = reopen(env)
    assert ulog.log_start_offset == ulog.log_end_offset == remote_end + 1
    assert rlm.earliest_offset("t", 0) == 0
    assert ulog.leader_epoch_cache.non_empty
    # every offset the remote tier holds is served once, with the bytes it had
    restored = read_everything(ulog, rlm)
    assert restored == [k for k in original if k[1] <= remote_end]
    # the producer is known from the remote snapshot: its last tiered batch, retried, keeps its offset
    last_tiered = max(i for i, b in enumerate(sent) if iter_headers_last(b, i) <= remote_end)
    retry = ulog.append_as_leader(sent[last_tiered])
    assert retry.duplicate and retry.last_offset == 3 * last_tiered + 2
    # the batches lost with the disk are appended after the remote end, never at an offset it holds
    nxt = ulog.append_as_leader(sent[last_tiered + 1])
    assert not nxt.duplicate and nxt.first_offset == remote_end + 1
    assert ulog.log_end_offset == remote_end + 4
    assert not (ulog.dir / RESTORE_MARKER_FILE).exists()

    # a clean restart keeps the restored producer state (the snapshot at the local log start)
    stop(env, ulog, rlm)
    ulog, rlm = reopen(env)
    assert ulog.log_start_offset == remote_end + 1
    again = ulog.append_as_leader(sent[last_tiered + 1])
    assert again.duplicate and again.first_offset == remote_end + 1


def iter_headers_last(b: bytes, i: int) -> int:
    """The offset the i-th batch of write_and_tier ends at (3 records each from offset 0)."""
    return 3 * i + 2


def test_restored_producer_state_survives_an_unclean_restart(env: Env) -> None:
    ulog, rlm, sent, _ = write_and_tier(env)
    remote_end = ulog.highest_offset_in_remote_storage
    stop(env, ulog, rlm)
    shutil.rmtree(ulog.dir)
    ulog, rlm = reopen(env)
    stop(env, ulog, rlm, clean=False)
    ulog, rlm = reopen(env, clean=False)
    last_tiered = (remote_end - 2) // 3
    assert ulog.append_as_leader(sent[last_tiered]).duplicate


def test_a_local_log_holding_less_than_the_remote_tier_is_restarted_when_it_agrees(env: Env, tmp_path: Path) -> None:
    """A partition directory restored from an old backup: its data is the remote tier's own."""
    ulog = env.open_log(config=tiered_config())
    sent = [idempotent(i, 3 * i) for i in range(30)]
    for b in sent[:8]:
        ulog.append_as_leader(b)
    ulog.flush()
    backup = tmp_path / "backup"
    shutil.copytree(ulog.dir, backup)
    for b in sent[8:]:
        ulog.append_as_leader(b)
    rlm = env.rlm(rsm_in(env))
    rlm.copy_all()
    remote_end = ulog.highest_offset_in_remote_storage
    assert remote_end > 8 * 3
    stop(env, ulog, rlm)
    shutil.rmtree(ulog.dir)
    shutil.copytree(backup, ulog.dir)

    ulog, rlm = reopen(env, clean=False)
    assert ulog.offline_reason is None
    assert ulog.log_start_offset == ulog.log_end_offset == remote_end + 1


def test_a_local_log_that_disagrees_below_the_remote_end_takes_the_partition_offline(env: Env) -> None:
    ulog, rlm, _, _ = write_and_tier(env)
    stop(env, ulog, rlm)
    shutil.rmtree(ulog.dir)
    other = env.open_log(config=tiered_config())
    other.append_as_leader(batch(5, ts=T0, seed=99))  # written by a broker that knew nothing of the remote tier
    other.close()
    del env.logs.logs[("t", 0)]

    ulog, rlm = reopen(env)
    assert ulog.offline_reason is not None and "hold different data at offset 0" in ulog.offline_reason
    with pytest.raises(KafkaStorageError):
        ulog.append_as_leader(batch(1))
    with pytest.raises(KafkaStorageError):
        ulog.read(0, 100)
    assert ulog.log_end_offset == 5  # nothing was deleted or overwritten
    assert [s.copy_task for s in rlm.status()] == ["offline"]
    assert rlm.copy_all() == 0


def test_a_local_log_that_disagrees_across_the_remote_end_goes_offline_at_the_first_copy_run(env: Env) -> None:
    ulog, rlm, _, _ = write_and_tier(env)
    remote_end = ulog.highest_offset_in_remote_storage
    stop(env, ulog, rlm)
    shutil.rmtree(ulog.dir)
    other = env.open_log(config=tiered_config())
    for i in range(remote_end + 10):  # what tierlog before this fix did: a fresh log from offset 0
        other.append_as_leader(batch(1, ts=T0 + i, seed=i))
    other.close()
    del env.logs.logs[("t", 0)]

    ulog, rlm = reopen(env)
    assert ulog.offline_reason is None  # the startup reads nothing remote for an overlap
    assert rlm.copy_all() == 0
    assert ulog.offline_reason is not None and f"hold different data at offset {remote_end}" in ulog.offline_reason
    with pytest.raises(KafkaStorageError):
        ulog.read(remote_end + 1, 100)


def test_an_unreachable_remote_tier_keeps_the_partition_offline_until_it_answers(env: Env) -> None:
    ulog, rlm, _, _ = write_and_tier(env)
    remote_end = ulog.highest_offset_in_remote_storage
    stop(env, ulog, rlm)
    shutil.rmtree(ulog.dir)
    plan = FailurePlan(down=True)
    ulog, rlm = reopen(env, FlakyRemoteStorageManager(rsm_in(env), plan))
    assert ulog.offline_reason is not None and "restoring from the remote tier failed" in ulog.offline_reason
    with pytest.raises(KafkaStorageError):
        ulog.append_as_leader(batch(1))
    assert ulog.log_end_offset == 0
    plan.down = False
    rlm.sync_partitions()
    assert ulog.offline_reason is None
    assert ulog.log_end_offset == remote_end + 1


def test_a_restore_cut_short_runs_again_at_the_next_start(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    ulog, rlm, sent, _ = write_and_tier(env)
    remote_end = ulog.highest_offset_in_remote_storage
    stop(env, ulog, rlm)
    shutil.rmtree(ulog.dir)

    def crash(self: ProducerStateManager, offset: int, snapshot: bytes, now_ms: int) -> int:
        raise SystemExit("killed in the middle of the restore")

    with monkeypatch.context() as m:
        m.setattr(ProducerStateManager, "install_snapshot", crash)
        with pytest.raises(SystemExit):
            reopen(env)
    assert (ulog.dir / RESTORE_MARKER_FILE).exists()
    del env.logs.logs[("t", 0)]
    # the process is gone: the next start finds the marker (an unclean start)
    ulog, rlm = reopen(env, clean=False)
    assert ulog.log_end_offset == remote_end + 1
    assert not (ulog.dir / RESTORE_MARKER_FILE).exists()
    assert ulog.append_as_leader(sent[(remote_end - 2) // 3]).duplicate


def test_an_empty_remote_producer_snapshot_is_rebuilt_from_the_remote_segments(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    """Seed 001's rejected placeholder, uploaded by an older tierlog for the newest remote segment:
    the restore replays the remote segments within producer.id.expiration.ms instead of trusting it."""
    ulog, rlm, sent, _ = write_and_tier(env)
    remote_end = ulog.highest_offset_in_remote_storage
    newest = max(rlm.remote_segments("t", 0), key=lambda m: m.end_offset)
    assert newest.end_offset == remote_end
    rsm = rsm_in(env)
    with rsm.fetch_index(newest, IndexType.PRODUCER_SNAPSHOT) as f:
        honest = decode_snapshot(f.read())
    assert [e.producer_id for e in honest] == [P1]
    snapshot_file = next((env.root / "remote").rglob(f"*{newest.segment_id.id_str}*.snapshot"))
    snapshot_file.write_bytes(encode_snapshot([]))  # what an older tierlog uploaded
    stop(env, ulog, rlm)
    shutil.rmtree(ulog.dir)

    with caplog.at_level(logging.WARNING, logger="tierlog.tiered.restore"):
        ulog, rlm = reopen(env)
    assert ulog.log_start_offset == ulog.log_end_offset == remote_end + 1
    assert any("is empty" in r.getMessage() and "rebuilt" in r.getMessage() for r in caplog.records), caplog.text
    restored = {e.producer_id: e for e in (entry_to_snapshot(p) for p in ulog.producer_state.producers.values())}
    assert restored == {e.producer_id: e for e in honest}
    # the producer's last tiered batch, retried, is answered with its original offset
    last_tiered = (remote_end - 2) // 3
    retry = ulog.append_as_leader(sent[last_tiered])
    assert retry.duplicate and retry.last_offset == remote_end
    assert ulog.log_end_offset == remote_end + 1


def test_an_empty_remote_producer_snapshot_stays_empty_when_no_idempotent_producer_wrote(env: Env) -> None:
    ulog = env.open_log(config=tiered_config())
    for i in range(30):
        ulog.append_as_leader(batch(3, ts=T0 + i * 100, seed=i))
    rlm = env.rlm(rsm_in(env))
    assert rlm.copy_all() > 0
    remote_end = ulog.highest_offset_in_remote_storage
    stop(env, ulog, rlm)
    shutil.rmtree(ulog.dir)
    ulog, rlm = reopen(env)
    assert ulog.log_start_offset == remote_end + 1
    assert not ulog.producer_state.producers


def test_a_wiped_partition_of_a_topic_no_longer_tiered_stays_offline_until_tiering_is_back(
        env: Env, caplog: pytest.LogCaptureFixture) -> None:
    """remote.storage.enable turned off for the topic while its remote segments remain: the wiped
    partition would start at offset 0 and hand out again the offsets the remote tier holds."""
    ulog, rlm, sent, original = write_and_tier(env)
    remote_end = ulog.highest_offset_in_remote_storage
    stop(env, ulog, rlm)
    shutil.rmtree(ulog.dir)

    off = tiered_config(**{"remote.storage.enable": False})
    ulog = env.open_log(config=off)
    rlm = env.rlm(rsm_in(env))
    with caplog.at_level(logging.ERROR, logger="tierlog.tiered"):
        rlm.sync_partitions()
    reason = ulog.offline_reason
    assert reason is not None and f"offsets [0, {remote_end}]" in reason and "remote.storage.enable" in reason
    assert any(r.levelno == logging.ERROR and f"[0, {remote_end}]" in r.getMessage() for r in caplog.records)
    with pytest.raises(KafkaStorageError):
        ulog.append_as_leader(sent[0])
    assert ulog.log_end_offset == 0
    rlm.sync_partitions()  # checked once: nothing changes while the topic stays untiered
    assert ulog.offline_reason == reason

    # Tiering back on: the partition is restored from the remote tier and serves again.
    ulog.update_config(tiered_config())
    rlm.sync_partitions()
    assert ulog.offline_reason is None
    assert ulog.log_start_offset == ulog.log_end_offset == remote_end + 1
    assert read_everything(ulog, rlm) == [k for k in original if k[1] <= remote_end]
    last_tiered = (remote_end - 2) // 3
    assert ulog.append_as_leader(sent[last_tiered]).duplicate


def test_an_untiered_topic_whose_local_log_goes_past_the_remote_tier_is_served(env: Env) -> None:
    ulog, rlm, _, _ = write_and_tier(env)
    stop(env, ulog, rlm)
    ulog = env.open_log(config=tiered_config(**{"remote.storage.enable": False}))
    rlm = env.rlm(rsm_in(env))
    rlm.sync_partitions()
    assert ulog.offline_reason is None
    assert not ulog.append_as_leader(batch(1, seed=5)).duplicate


def test_with_the_remote_tier_switched_off_a_wiped_partition_stays_offline(env: Env) -> None:
    """remote.log.storage.system.enable=false: no remote log manager runs, but the broker still reads
    the remote log metadata once at startup and keeps a partition whose local log ends at or below the
    remote tier's end offline, naming both ranges."""
    from tierlog.server.remote_tier import guard_without_remote_tier

    ulog, rlm, _, _ = write_and_tier(env)
    remote_end = ulog.highest_offset_in_remote_storage
    stop(env, ulog, rlm)
    shutil.rmtree(ulog.dir)
    wiped = env.open_log(config=tiered_config())
    intact = env.open_log("u-0", config=tiered_config())
    intact.append_as_leader(batch(3))
    metadata_dir = env.root / "data" / "remote-log-metadata"
    before = sorted((f.name, f.read_bytes()) for f in metadata_dir.iterdir())
    offline = guard_without_remote_tier(metadata_dir, env.logs)
    assert list(offline) == [("t", 0)]
    reason = wiped.offline_reason
    assert reason is not None and f"offsets [0, {remote_end}]" in reason
    assert "remote.log.storage.system.enable=false" in reason
    assert intact.offline_reason is None
    with pytest.raises(KafkaStorageError):
        wiped.append_as_leader(batch(1))
    assert sorted((f.name, f.read_bytes()) for f in metadata_dir.iterdir()) == before, "read only"
