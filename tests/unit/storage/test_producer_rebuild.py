"""Rebuilding producer state from segments by header-only replay (KAFKA-FACTS §4.6) and seed 001's
rebuild of a missing segment-aligned snapshot (§5.7)."""

from __future__ import annotations

import inspect
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.helpers.storage import T0, build_batch
from tierlog.errors import CorruptRecordError
from tierlog.records.header import BatchHeader, iter_headers
from tierlog.storage import producer_rebuild
from tierlog.storage.producer_rebuild import (
    FileSegmentSource,
    SegmentSource,
    load_producers_from_headers,
    rebuild_missing_snapshot,
    rebuild_producer_state,
    rebuild_snapshot_for_range,
    replay_window_start,
    segment_sources_in,
)
from tierlog.storage.producer_snapshot import snapshot_file_name
from tierlog.storage.producer_state import (
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    AppendOrigin,
    ProducerStateEntry,
    ProducerStateManager,
    read_snapshot,
)

HOUR = 3_600_000
EMPTY_SNAPSHOT = bytes.fromhex("0001 48674BC7 00000000")


class SegmentedLog:
    """A minimal log: appends through the producer state like UnifiedLog, one ``.log`` per segment,
    a snapshot at every roll."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.dir = directory
        self.psm = ProducerStateManager(directory)
        self.next_offset = 0
        self.bases = [0]

    @property
    def active(self) -> Path:
        return self.dir / f"{self.bases[-1]:020d}.log"

    def append(self, origin: AppendOrigin = AppendOrigin.CLIENT, **kwargs: object) -> BatchHeader:
        buf = build_batch(base_offset=self.next_offset, **kwargs)  # type: ignore[arg-type]
        h = BatchHeader(buf)
        staged = self.psm.validate_and_stage([h], origin)
        assert staged.duplicate is None
        with open(self.active, "ab") as f:
            f.write(buf)
        self.psm.commit_staged(staged, h.last_offset)
        self.next_offset = h.last_offset + 1
        return h

    def roll(self) -> None:
        self.bases.append(self.next_offset)
        self.active.touch()
        self.psm.update_map_end_offset(self.next_offset)
        self.psm.take_snapshot(sync=False)

    def close(self) -> None:
        self.psm.update_map_end_offset(self.next_offset)
        self.psm.take_snapshot()


def random_workload(log: SegmentedLog, steps: int = 400, seed: int = 7, roll_every: int = 60) -> dict[int, dict[int, ProducerStateEntry]]:
    """Idempotent and transactional producers, epoch bumps, aborts and commits, plain batches.
    Returns a copy of the reference state at every offset where a batch ended."""
    rng = random.Random(seed)
    epoch = dict.fromkeys(range(1, 7), 0)
    seq = dict.fromkeys(range(1, 7), 0)
    in_txn = dict.fromkeys(range(1, 7), False)
    coordinator_epoch = 0
    history: dict[int, dict[int, ProducerStateEntry]] = {}
    for step in range(steps):
        if step and step % roll_every == 0:
            log.roll()
        ts = T0 + step * 1000
        pid = rng.randint(0, 6)
        if pid == 0:
            log.append(count=rng.randint(1, 4), timestamp=ts)
        elif pid <= 3:  # idempotent only
            if rng.random() < 0.05:
                epoch[pid] += 1
                seq[pid] = 0
            n = rng.randint(1, 5)
            log.append(producer_id=pid, epoch=epoch[pid], base_seq=seq[pid], count=n, timestamp=ts)
            seq[pid] += n
        elif in_txn[pid] and rng.random() < 0.3:
            coordinator_epoch += rng.randint(0, 1)
            bump = rng.random() < 0.2  # a timed-out transaction is aborted with a bumped epoch
            if bump:
                epoch[pid] += 1
                seq[pid] = 0
            control = CONTROL_TYPE_ABORT if bump or rng.random() < 0.5 else CONTROL_TYPE_COMMIT
            log.append(AppendOrigin.COORDINATOR, producer_id=pid, epoch=epoch[pid], control=control,
                       coordinator_epoch=coordinator_epoch, timestamp=ts)
            in_txn[pid] = False
        else:
            n = rng.randint(1, 3)
            log.append(producer_id=pid, epoch=epoch[pid], base_seq=seq[pid], count=n, timestamp=ts,
                       transactional=True)
            seq[pid] += n
            in_txn[pid] = True
        history[log.next_offset] = {p: e.copy() for p, e in log.psm.producers.items()}
    return history


def copy_logs(src: Path, dst: Path, with_snapshots: bool = False) -> Path:
    dst.mkdir()
    for p in src.iterdir():
        if p.suffix == ".log" or (with_snapshots and p.suffix == ".snapshot"):
            shutil.copy(p, dst / p.name)
    return dst


class RecordingSource:
    """A segment that remembers whether the replay opened it."""

    def __init__(self, inner: FileSegmentSource) -> None:
        self.inner = inner
        self.opened = False

    @property
    def base_offset(self) -> int:
        return self.inner.base_offset

    @property
    def log_path(self) -> Path:
        self.opened = True
        return self.inner.log_path

    @property
    def size_bytes(self) -> int:
        return self.inner.size_bytes

    def start_position_for(self, offset: int) -> int:
        return 0


@pytest.fixture
def written(tmp_path: Path) -> tuple[SegmentedLog, dict[int, dict[int, ProducerStateEntry]]]:
    log = SegmentedLog(tmp_path / "leader")
    history = random_workload(log)
    log.close()
    return log, history


def test_header_only_rebuild_equals_the_append_path_state(
    tmp_path: Path, written: tuple[SegmentedLog, dict[int, dict[int, ProducerStateEntry]]]
) -> None:
    log, _ = written
    assert len(log.bases) >= 5 and log.psm.ongoing_txns, "the workload should leave a transaction open"
    replica = copy_logs(log.dir, tmp_path / "replica")
    psm = ProducerStateManager(replica)
    rebuild_producer_state(psm, segment_sources_in(replica), 0, log.next_offset, T0, reload_from_clean_shutdown=False)
    assert dict(psm.producers) == dict(log.psm.producers)  # every field, including the 5-batch windows
    assert set(psm.ongoing_txns) == set(log.psm.ongoing_txns)
    assert psm.first_undecided_offset() == log.psm.first_undecided_offset()
    assert psm.map_end_offset == log.next_offset
    # snapshots at the bases of the last two segments and at the log end, the last one identical
    assert [s.offset for s in psm.list_snapshots()] == [log.bases[-2], log.bases[-1], log.next_offset]
    leo = snapshot_file_name(log.next_offset)
    assert (replica / leo).read_bytes() == (log.dir / leo).read_bytes()


@pytest.mark.parametrize("chunk", [65_536, 7, 1])
def test_replay_equals_batch_by_batch_replay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """The grouped replay against the plain loop over every header, on replicated data whose epochs go
    up and down (a replica accepts that) and with producers writing many batches per chunk."""
    monkeypatch.setattr(producer_rebuild, "_REPLAY_CHUNK_BATCHES", chunk)
    rng = random.Random(chunk)
    path = tmp_path / "00000000000000000000.log"
    offset = 0
    with open(path, "wb") as f:
        for i in range(600):
            pid = rng.choice([1, 2, 3, 4, -1])
            kind = rng.random()
            if pid == 4 and kind < 0.3:
                buf = build_batch(base_offset=offset, producer_id=4, epoch=rng.randint(0, 2),
                                  control=rng.choice([CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT]),
                                  coordinator_epoch=rng.randint(0, 3), timestamp=T0 + i)
            else:
                buf = build_batch(base_offset=offset, producer_id=pid, epoch=rng.choice([0, 0, 0, 1, 2]),
                                  base_seq=rng.randint(0, 50), count=rng.randint(1, 3), timestamp=T0 + i,
                                  transactional=pid == 4 and kind < 0.8)
            f.write(buf)
            offset = BatchHeader(buf).last_offset + 1
    segment = FileSegmentSource(path)
    for start, end in [(0, offset), (37, offset - 20)]:
        fast = ProducerStateManager.detached()
        producer_rebuild.replay_segment(fast, segment, start, end)
        slow = ProducerStateManager.detached()
        load_producers_from_headers(slow, producer_rebuild.iter_segment_headers(segment, start, end))
        assert dict(fast.producers) == dict(slow.producers)
        assert set(fast.ongoing_txns) == set(slow.ongoing_txns)
        assert fast.first_unstable_offset() == slow.first_unstable_offset()


def test_zero_filled_tail_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(build_batch(producer_id=1, epoch=0, base_seq=0) + bytes(100))
    with pytest.raises(CorruptRecordError):
        producer_rebuild.replay_segment(ProducerStateManager.detached(), FileSegmentSource(path), 0, None)
    # the segment's valid size (what recovery found) stops the replay before the preallocated zeros
    valid = FileSegmentSource(path, size_bytes=path.stat().st_size - 100)
    psm = ProducerStateManager.detached()
    producer_rebuild.replay_segment(psm, valid, 0, None)
    assert psm.producers[1].last_seq == 0


def _tail(length: int, magic: int, present: int) -> bytes:
    head = struct.pack(">qiib", 9, length, 0, magic)
    return (head + bytes(max(0, present - len(head))))[:present]


@pytest.mark.parametrize(
    ("tail", "corrupt"),
    [
        pytest.param(bytes(100), True, id="zero-filled"),
        pytest.param(bytes(10), False, id="under-17-bytes"),
        pytest.param(_tail(1000, 7, 80), False, id="torn-with-bad-magic"),
        pytest.param(_tail(1000, 2, 30), False, id="torn-short"),
        pytest.param(_tail(88, 7, 100), True, id="whole-batch-bad-magic"),
        pytest.param(_tail(14, 2, 26), True, id="batch-smaller-than-a-header"),
    ],
)
def test_end_of_data_rules_match_kafkas_iterator(tmp_path: Path, tail: bytes, corrupt: bool) -> None:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(build_batch(producer_id=1, epoch=0, base_seq=0) + tail)
    segment = FileSegmentSource(path)
    for replay in (
        lambda psm: producer_rebuild.replay_segment(psm, segment, 0, None),
        lambda psm: load_producers_from_headers(psm, producer_rebuild.iter_segment_headers(segment, 0)),
    ):
        psm = ProducerStateManager.detached()
        if corrupt:
            with pytest.raises(CorruptRecordError):
                replay(psm)
        else:
            replay(psm)
            assert psm.producers[1].last_seq == 0


def test_rebuild_never_reads_data_batch_bodies(
    tmp_path: Path, written: tuple[SegmentedLog, dict[int, dict[int, ProducerStateEntry]]]
) -> None:
    log, _ = written
    replica = copy_logs(log.dir, tmp_path / "replica")
    for seg in segment_sources_in(replica):
        data = bytearray(seg.log_path.read_bytes())
        for h in list(iter_headers(bytes(data))):
            if not h.is_control:
                data[h.position + 61 : h.position + h.size_bytes] = b"\xff" * (h.size_bytes - 61)
        seg.log_path.write_bytes(data)
    psm = ProducerStateManager(replica)
    rebuild_producer_state(psm, segment_sources_in(replica), 0, log.next_offset, T0, reload_from_clean_shutdown=False)
    assert dict(psm.producers) == dict(log.psm.producers)


def test_rebuild_starts_from_the_newest_snapshot(
    tmp_path: Path, written: tuple[SegmentedLog, dict[int, dict[int, ProducerStateEntry]]]
) -> None:
    log, _ = written
    replica = copy_logs(log.dir, tmp_path / "replica", with_snapshots=True)
    (replica / snapshot_file_name(log.next_offset)).unlink()  # as after an unclean shutdown
    sources = [RecordingSource(s) for s in segment_sources_in(replica)]
    psm = ProducerStateManager(replica)
    rebuild_producer_state(psm, sources, 0, log.next_offset, T0, reload_from_clean_shutdown=False)
    assert [s.opened for s in sources] == [False] * (len(sources) - 1) + [True]
    leo = snapshot_file_name(log.next_offset)
    assert (replica / leo).read_bytes() == (log.dir / leo).read_bytes()
    # a snapshot keeps one batch per producer, the replay adds the rest of the last segment's
    for pid, e in psm.producers.items():
        assert e.last_seq == log.psm.producers[pid].last_seq
        assert e.producer_epoch == log.psm.producers[pid].producer_epoch


def test_truncation_rebuilds_the_state_at_the_target(
    tmp_path: Path, written: tuple[SegmentedLog, dict[int, dict[int, ProducerStateEntry]]]
) -> None:
    log, history = written
    replica = copy_logs(log.dir, tmp_path / "replica", with_snapshots=True)
    # a batch boundary inside the second-to-last segment, below the snapshot at the last base
    target = max(o for o in history if log.bases[-2] < o < log.bases[-1])
    psm = ProducerStateManager(replica)
    rebuild_producer_state(psm, segment_sources_in(replica), 0, log.next_offset, T0, reload_from_clean_shutdown=False)
    rebuild_producer_state(psm, segment_sources_in(replica), 0, target, T0, reload_from_clean_shutdown=False)
    assert psm.map_end_offset == target
    assert all(s.offset <= target for s in psm.list_snapshots())
    expected = history[target]
    assert set(psm.producers) == set(expected)
    for pid, e in psm.producers.items():
        assert (e.last_seq, e.last_data_offset, e.producer_epoch, e.current_txn_first_offset) == (
            expected[pid].last_seq, expected[pid].last_data_offset, expected[pid].producer_epoch,
            expected[pid].current_txn_first_offset,
        )


def test_clean_shutdown_without_snapshots_writes_empty_ones_without_scanning(
    tmp_path: Path, written: tuple[SegmentedLog, dict[int, dict[int, ProducerStateEntry]]]
) -> None:
    log, _ = written
    replica = copy_logs(log.dir, tmp_path / "replica")
    sources = [RecordingSource(s) for s in segment_sources_in(replica)]
    psm = ProducerStateManager(replica)
    rebuild_producer_state(psm, sources, 0, log.next_offset, T0, reload_from_clean_shutdown=True)
    assert not any(s.opened for s in sources)
    assert psm.active_producers_count == 0
    offsets = [s.offset for s in psm.list_snapshots()]
    assert offsets == [log.bases[-2], log.bases[-1], log.next_offset]
    assert all(s.path.read_bytes() == EMPTY_SNAPSHOT for s in psm.list_snapshots())


def test_unclean_shutdown_without_snapshots_replays_from_log_start(tmp_path: Path) -> None:
    log = SegmentedLog(tmp_path / "leader")
    log.append(producer_id=1, epoch=0, base_seq=0, count=3)
    log.roll()
    log.append(producer_id=1, epoch=0, base_seq=3, count=3)
    log.append(producer_id=2, epoch=0, base_seq=0)
    replica = copy_logs(log.dir, tmp_path / "replica")
    psm = ProducerStateManager(replica)
    rebuild_producer_state(psm, segment_sources_in(replica), 3, log.next_offset, T0, reload_from_clean_shutdown=False)
    # replay starts at the log start offset 3: producer 1's first batch (0-2) is below it
    assert [m.last_seq for m in psm.producers[1].batch_metadata] == [5]
    assert sorted(psm.producers) == [1, 2]


def test_torn_tail_is_ignored(tmp_path: Path) -> None:
    log = SegmentedLog(tmp_path / "leader")
    log.append(producer_id=1, epoch=0, base_seq=0, count=2)
    h = log.append(producer_id=1, epoch=0, base_seq=2, count=2)
    with open(log.active, "ab") as f:
        f.write(build_batch(base_offset=4, producer_id=1, epoch=0, base_seq=4, count=2)[:40])
    psm = ProducerStateManager(log.dir)
    rebuild_producer_state(psm, segment_sources_in(log.dir), 0, h.last_offset + 1, T0, False)
    assert psm.producers[1].last_seq == 3


def test_segment_sources_satisfy_the_protocol(tmp_path: Path) -> None:
    (tmp_path / "00000000000000000042.log").write_bytes(b"")
    (tmp_path / "00000000000000000042.index").write_bytes(b"")
    (tmp_path / "00000000000000000007.log.deleted").write_bytes(b"")
    sources: list[SegmentSource] = list(segment_sources_in(tmp_path))
    assert [(s.base_offset, s.size_bytes) for s in sources] == [(42, 0)]


# -- seed 001 ---------------------------------------------------------------------------------------------


def test_replay_window_start() -> None:
    stamps = [(0, T0), (10, T0 + 10 * HOUR), (20, T0 + 30 * HOUR), (30, T0 + 40 * HOUR)]
    assert replay_window_start(stamps, T0 + 40 * HOUR, 24 * HOUR, 0) == 20
    # exactly expiration old: expired (now - last >= expiration)
    assert replay_window_start(stamps, T0 + 34 * HOUR, 24 * HOUR, 0) == 20
    assert replay_window_start(stamps, T0 + 34 * HOUR - 1, 24 * HOUR, 0) == 10
    # a log younger than the window is replayed from its start offset, not its first base
    assert replay_window_start(stamps, T0 + 40 * HOUR, 100 * HOUR, 4) == 4
    # one late timestamp keeps everything after it in the window
    skewed = [(0, T0), (10, T0 + 39 * HOUR), (20, T0 + 1), (30, T0 + 40 * HOUR)]
    assert replay_window_start(skewed, T0 + 40 * HOUR, 24 * HOUR, 0) == 10
    assert replay_window_start(stamps, -1, 24 * HOUR, 5) == 5  # unknown time: replay everything
    assert replay_window_start([], T0, 24 * HOUR, 5) == 5


def build_aged_log(directory: Path) -> SegmentedLog:
    """Segments 40 hours apart in time: producer 1 only in the oldest, 2 in the two oldest, 3 and 4 later."""
    log = SegmentedLog(directory)
    log.append(producer_id=1, epoch=0, base_seq=0, count=2, timestamp=T0)
    log.append(producer_id=2, epoch=0, base_seq=0, count=2, timestamp=T0)
    log.roll()
    log.append(producer_id=2, epoch=0, base_seq=2, count=2, timestamp=T0 + 10 * HOUR)
    log.roll()
    log.append(producer_id=3, epoch=0, base_seq=0, count=2, timestamp=T0 + 30 * HOUR)
    log.append(count=2, timestamp=T0 + 30 * HOUR)
    log.roll()
    log.append(producer_id=4, epoch=0, base_seq=0, count=2, timestamp=T0 + 40 * HOUR)
    log.append(producer_id=3, epoch=0, base_seq=2, count=1, timestamp=T0 + 40 * HOUR)
    log.roll()
    log.append(producer_id=4, epoch=0, base_seq=2, count=2, timestamp=T0 + 41 * HOUR)
    return log


def test_rebuild_snapshot_for_range_within_the_expiration_window(tmp_path: Path) -> None:
    log = build_aged_log(tmp_path / "leader")
    target, end = log.bases[3], log.bases[4]
    # a pre-2.8 segment: the snapshot the tiered copy needs is missing
    segments = segment_sources_in(log.dir)
    stamps = [(s.base_offset, max(h.max_timestamp for h in iter_headers(s.log_path.read_bytes())))
              for s in segments if s.base_offset <= target]
    start = replay_window_start(stamps, stamps[-1][1], 24 * HOUR, 0)
    assert start == log.bases[2]
    out = tmp_path / "out"
    out.mkdir()
    path = rebuild_snapshot_for_range(segments, start, end, end, out)
    assert path == out / snapshot_file_name(end)
    rebuilt = {e.producer_id: e for e in read_snapshot(path)}
    assert sorted(rebuilt) == [3, 4]  # producers 1 and 2 had expired when the target segment ended
    # what the leader wrote at the roll, minus the producers expired at the segment's end
    leader = {e.producer_id: e for e in read_snapshot(log.dir / snapshot_file_name(end))}
    for pid in (3, 4):
        assert rebuilt[pid] == leader[pid]
    # producers were in the window, so the file is not the empty placeholder
    assert path.read_bytes() != EMPTY_SNAPSHOT
    # the one-call helper scans the timestamps itself and writes the same bytes
    out2 = tmp_path / "out2"
    out2.mkdir()
    again = rebuild_missing_snapshot(segments, target, end, 0, 24 * HOUR, out2)
    assert again.read_bytes() == path.read_bytes()


def test_rebuild_for_a_young_log_replays_from_the_log_start(tmp_path: Path) -> None:
    log = build_aged_log(tmp_path / "leader")
    target, end = log.bases[3], log.bases[4]
    out = tmp_path / "out"
    out.mkdir()
    path = rebuild_missing_snapshot(segment_sources_in(log.dir), target, end, 0, 100 * HOUR, out)
    assert path.read_bytes() == (log.dir / snapshot_file_name(end)).read_bytes()


def test_rebuilt_snapshot_in_the_live_dir_is_found_after_refresh(tmp_path: Path) -> None:
    log = build_aged_log(tmp_path / "leader")
    end = log.bases[4]
    log.psm.delete_snapshot(end)
    assert log.psm.snapshot_file_for(end) is None
    rebuild_missing_snapshot(segment_sources_in(log.dir), log.bases[3], end, 0, 24 * HOUR, log.dir)
    log.psm.refresh_snapshots()
    assert log.psm.snapshot_file_for(end) == log.dir / snapshot_file_name(end)


# -- crash ----------------------------------------------------------------------------------------------------

_CHILD = """
import itertools, os, sys
from pathlib import Path
from tierlog.records.header import BatchHeader
from tierlog.storage.producer_state import AppendOrigin, ProducerStateManager
T0 = {t0}
{builder}
directory = Path(sys.argv[1])
psm = ProducerStateManager(directory)
fd = os.open(directory / "00000000000000000000.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
offset, seqs = 0, {{}}
for i in range(200_000):
    pid = i % 7 + 1
    buf = build_batch(base_offset=offset, producer_id=pid, epoch=0, base_seq=seqs.get(pid, 0), count=3,
                      timestamp=T0 + i)
    h = BatchHeader(buf)
    staged = psm.validate_and_stage([h], AppendOrigin.CLIENT)
    os.write(fd, buf)
    psm.commit_staged(staged, h.last_offset)
    offset, seqs[pid] = h.last_offset + 1, seqs.get(pid, 0) + 3
    if i % 50 == 49:
        psm.update_map_end_offset(offset)
        psm.take_snapshot()
        print("rolled", offset, flush=True)
"""


@pytest.mark.integration
def test_state_survives_sigkill_of_the_writer(tmp_path: Path) -> None:
    child = _CHILD.format(t0=T0, builder=textwrap.dedent(inspect.getsource(build_batch)))
    script = tmp_path / "writer.py"
    script.write_text("from __future__ import annotations\nimport struct\n"
                      "from tierlog._util.crc import crc32c\nfrom tierlog._util.varint import write_varint\n" + child)
    data = tmp_path / "data"
    data.mkdir()
    proc = subprocess.Popen([sys.executable, str(script), str(data)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        rolls = 0
        for line in proc.stdout:
            rolls += line.startswith("rolled")
            if rolls == 3:
                break
        # let it write past the snapshot, so the reload needs snapshot + replay
        log_file = data / "00000000000000000000.log"
        at_roll = log_file.stat().st_size
        deadline = time.monotonic() + 10
        while log_file.stat().st_size <= at_roll and time.monotonic() < deadline:
            time.sleep(0.001)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL and rolls == 3

    segment = FileSegmentSource(data / "00000000000000000000.log")
    headers = list(iter_headers(segment.log_path.read_bytes()))
    last = headers[-1]
    leo = last.last_offset + 1
    assert leo > 150 * 3, "the writer should have gone past the third roll"
    psm = ProducerStateManager(data)
    psm.remove_stray_snapshots([0])
    # normally below the log end; equal if the kill landed right after a roll
    assert psm.latest_snapshot_offset is not None and psm.latest_snapshot_offset <= leo
    rebuild_producer_state(psm, [segment], 0, leo, T0, reload_from_clean_shutdown=False)

    # the retry of the last written batch is recognised, with its original offsets
    retry = BatchHeader(build_batch(base_offset=leo, producer_id=last.producer_id, epoch=0,
                                    base_seq=last.base_sequence, count=3))
    dup = psm.check_duplicate(retry)
    assert dup is not None and (dup.first_offset, dup.last_offset) == (last.base_offset, last.last_offset)
    # and the producer continues where it left off
    nxt = BatchHeader(build_batch(base_offset=leo, producer_id=last.producer_id, epoch=0,
                                  base_seq=last.last_sequence + 1))
    assert psm.validate_and_stage([nxt], AppendOrigin.CLIENT).duplicate is None
    # the snapshot-plus-replay state is what a replay of the whole file gives
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    full = ProducerStateManager(scratch)
    rebuild_producer_state(full, [segment], 0, leo, T0, reload_from_clean_shutdown=False)
    for pid, e in full.producers.items():
        assert (psm.producers[pid].last_seq, psm.producers[pid].last_data_offset) == (e.last_seq, e.last_data_offset)
