"""Seed 001 (KIP-952): a data directory whose older segments have no producer snapshots (as Kafka
< 2.8 wrote them) gets tiering enabled; every segment is uploaded with a snapshot rebuilt from the
segments within producer.id.expiration.ms, never an empty placeholder; after the local copies are
gone, state restored from the remote tier still catches a duplicate from a producer that last wrote
inside the window."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tierlog.records.header import BatchHeader
from tierlog.storage.producer_state import ProducerStateManager, read_snapshot
from tierlog.testing.remote import InMemoryRemoteStorageManager
from tierlog.tiered.api import IndexType, TopicIdPartition

from .conftest import T0, Env, batch, tiered_config

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
