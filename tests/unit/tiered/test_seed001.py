"""Seed 001 (KIP-952): a data directory whose older segments have no producer snapshots (as Kafka
< 2.8 wrote them) gets tiering enabled; every segment is uploaded with a snapshot rebuilt from the
segments within producer.id.expiration.ms, never an empty placeholder; after the local copies are
gone, state restored from the remote tier still catches a duplicate from a producer that last wrote
inside the window."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tests.helpers.tiered import T0, Env, batch, fill, tiered_config
from tierlog.records.header import BatchHeader
from tierlog.storage.producer_state import ProducerStateManager, read_snapshot
from tierlog.testing.remote import InMemoryRemoteStorageManager
from tierlog.tiered.api import IndexType, TopicIdPartition

WINDOW_MS = 20_000
A, B, C = 100, 200, 300  # A writes early only, B always, C in the middle (inside the final window)
TIP = TopicIdPartition(b"\x01" * 16, "t", 0)


def writer(i: int) -> int:
    if i < 3:
        return A
    if 20 <= i < 25:
        return C
    return B


def producer_batches(count: int) -> list[bytes]:
    seqs = dict.fromkeys((A, B, C), 0)
    out = []
    for i in range(count):
        pid = writer(i)
        out.append(batch(3, ts=T0 + i * 1000, producer_id=pid, producer_epoch=0, base_sequence=seqs[pid], seed=i))
        seqs[pid] += 3
    return out


@pytest.mark.parametrize("keep_shutdown_snapshot", [True, False], ids=["pre-2.8-shutdown-snapshot", "no-snapshots"])
def test_upgrade_without_snapshots_tiers_everything_and_keeps_producer_state(
        env: Env, tmp_path: Path, keep_shutdown_snapshot: bool) -> None:
    batches = producer_batches(40)
    ulog = env.open_log(config=tiered_config(), expiration_ms=WINDOW_MS)
    for b in batches:
        ulog.append_as_leader(b)
    leo = ulog.log_end_offset
    ulog.close()
    del env.logs.logs[("t", 0)]
    part_dir = ulog.dir
    for snap in part_dir.glob("*.snapshot"):
        if not (keep_shutdown_snapshot and snap.name == f"{leo:020d}.snapshot"):
            snap.unlink()

    env.clock.set_wall_ms(T0 + 40_000)
    ulog = env.open_log(config=tiered_config(**{"local.retention.bytes": 1}), expiration_ms=WINDOW_MS)
    bases = ulog.segments.base_offsets
    assert len(bases) >= 6
    rsm = InMemoryRemoteStorageManager()
    rlm = env.rlm(rsm, producer_id_expiration_ms=WINDOW_MS)
    assert rlm.copy_all() == len(bases) - 1
    remote = list(rlm.rlmm.list_remote_log_segments(TIP))
    assert [(m.start_offset, m.end_offset) for m in remote] == [(b, n - 1) for b, n in itertools.pairwise(bases)]

    def producers_in(md_index: int) -> set[int]:
        md = remote[md_index]
        path = tmp_path / f"check-{md_index}.snapshot"
        with rsm.fetch_index(md, IndexType.PRODUCER_SNAPSHOT) as f:
            path.write_bytes(f.read())
        return {e.producer_id for e in read_snapshot(path)}

    uploaded = [producers_in(i) for i in range(len(remote))]
    assert all(uploaded), "an empty placeholder snapshot was uploaded"
    assert A in uploaded[0]  # the log is younger than the window there: replayed from the log start
    assert A not in uploaded[-1] and {B, C} <= uploaded[-1]  # only the window before the end is replayed
    # the rebuilt snapshots are also in the partition dir, aligned to each segment's end
    assert all(ulog.producer_state.snapshot_file_for(n) is not None for n in bases[1:])

    # local retention now deletes every tiered local copy
    ulog.delete_old_segments()
    assert ulog.segments.base_offsets == bases[-1:]

    # a broker restored from the remote tier: the last remote segment's snapshot in a fresh dir
    last = remote[-1]
    fresh = tmp_path / "restored"
    fresh.mkdir()
    with rsm.fetch_index(last, IndexType.PRODUCER_SNAPSHOT) as f:
        (fresh / f"{last.end_offset + 1:020d}.snapshot").write_bytes(f.read())
    psm = ProducerStateManager(fresh, WINDOW_MS)
    psm.truncate_and_reload(0, last.end_offset + 1, T0 + 40_000)
    entry = psm.last_entry(C)
    assert entry is not None, "producer C, which wrote inside the window, must not look expired"
    retry = batches[24]  # C's last batch, sent again by a producer that did not see the ack
    assert psm.check_duplicate(BatchHeader(bytearray(retry))) is not None
    assert psm.last_entry(A) is None


# -- issue 20, case 1: placeholders are known as such, whatever the newest segments hold ---------------

P1, P2 = 11, 22


def _state(path: Path) -> dict[int, tuple[int, int, int]]:
    """Per producer: (epoch, last sequence, last offset) -- what deduplication after a restore needs."""
    return {e.producer_id: (e.producer_epoch, e.last_seq, e.last_data_offset) for e in read_snapshot(path)}


def test_placeholders_written_by_the_loader_are_never_uploaded(env: Env, tmp_path: Path) -> None:
    """Every snapshot removed, restart (the loader writes empty placeholders, as Kafka's does), the
    newest segments hold only non-idempotent batches, tiering on: every uploaded snapshot equals the
    one a broker that never restarted wrote at the same offset, and none is empty."""
    seqs = {P1: 0, P2: 0}
    idempotent = []
    for i in range(24):  # P1 and P2 alternate over several segments
        pid = P1 if i % 2 == 0 else P2
        idempotent.append(batch(2, ts=T0 + i * 100, producer_id=pid, producer_epoch=3, base_sequence=seqs[pid],
                                seed=i))
        seqs[pid] += 2
    plain = [batch(3, ts=T0 + 5_000 + i * 100, seed=100 + i) for i in range(30)]

    # The truth: the same appends into a log that is never restarted and keeps its snapshots.
    truth = env.open_log("t-0", config=tiered_config())
    del env.logs.logs[("t", 0)]
    truth_dir = tmp_path / "truth-t-0"
    for b in idempotent + plain:
        truth.append_as_leader(b)
    truth.flush()
    truth_dir.mkdir()
    for snap in truth.dir.glob("*.snapshot"):
        truth_dir.joinpath(snap.name).write_bytes(snap.read_bytes())
    truth.delete()

    ulog = env.open_log("t-0", config=tiered_config())
    for b in idempotent:
        ulog.append_as_leader(b)
    ulog.close()
    del env.logs.logs[("t", 0)]
    for snap in ulog.dir.glob("*.snapshot"):
        snap.unlink()
    ulog = env.open_log("t-0", config=tiered_config())
    placeholders = sorted(ulog.dir.glob("*.snapshot"))
    assert placeholders and all(not read_snapshot(p) for p in placeholders), "the loader writes empty placeholders"
    for b in plain:
        ulog.append_as_leader(b)
    bases = ulog.segments.base_offsets
    assert len(bases) >= 6

    rsm = InMemoryRemoteStorageManager()
    rlm = env.rlm(rsm)
    assert rlm.copy_all() == len(bases) - 1
    remote = list(rlm.rlmm.list_remote_log_segments(TIP))
    assert len(remote) == len(bases) - 1
    for md in remote:
        uploaded = tmp_path / f"uploaded-{md.end_offset + 1}.snapshot"
        with rsm.fetch_index(md, IndexType.PRODUCER_SNAPSHOT) as f:
            uploaded.write_bytes(f.read())
        expected = _state(truth_dir / f"{md.end_offset + 1:020d}.snapshot")
        assert set(expected) == {P1, P2}
        assert _state(uploaded) == expected, f"segment [{md.start_offset}, {md.end_offset}]"


def test_snapshots_of_a_complete_state_are_uploaded_as_they_are(env: Env) -> None:
    """No horizon recorded: the snapshot a roll wrote is uploaded unread by any replay, even an empty
    one of a log without idempotent producers (a replay per segment would cost a day of log each)."""
    ulog = env.open_log("t-0", config=tiered_config())
    fill(ulog, 30)
    rsm = InMemoryRemoteStorageManager()
    rlm = env.rlm(rsm)
    rebuilt: list[int] = []
    original = rlm.copier._producer_snapshot

    def spy(state, ulog, base, next_base):  # type: ignore[no-untyped-def]
        before = ulog.producer_state.snapshot_file_for(next_base)
        stamp = before.stat().st_mtime_ns if before is not None else None
        path = original(state, ulog, base, next_base)
        if stamp is None or path.stat().st_mtime_ns != stamp:
            rebuilt.append(base)
        return path

    rlm.copier._producer_snapshot = spy  # type: ignore[method-assign]
    assert rlm.copy_all() == len(ulog.segments.base_offsets) - 1
    assert rebuilt == []
    assert ulog.producer_state_horizon() is None


def test_the_horizon_goes_once_the_log_start_passes_it(env: Env) -> None:
    ulog = env.open_log("t-0", config=tiered_config())
    fill(ulog, 20, producer=lambda i: (P1, 0, 3 * i))
    leo = ulog.log_end_offset
    ulog.close()
    del env.logs.logs[("t", 0)]
    for snap in ulog.dir.glob("*.snapshot"):
        snap.unlink()
    ulog = env.open_log("t-0", config=tiered_config())
    assert ulog.producer_state_horizon() == leo
    fill(ulog, 10, start_ts=T0 + 50_000)
    ulog.maybe_increment_log_start_offset(leo, "test")
    assert ulog.producer_state_horizon() is None
    assert not any(p.name.startswith("tierlog-producer-state") for p in ulog.dir.iterdir())
