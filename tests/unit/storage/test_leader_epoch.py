"""Leader-epoch cache semantics (KAFKA-FACTS §2.15; cases after LeaderEpochFileCacheTest)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tierlog.storage.checkpoints import LeaderEpochCheckpointFile
from tierlog.storage.leader_epoch import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    InMemoryLeaderEpochCheckpoint,
    LeaderEpochFileCache,
)

E = EpochEntry
UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


@pytest.fixture
def checkpoint(tmp_path: Path) -> LeaderEpochCheckpointFile:
    return LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint")


@pytest.fixture
def cache(checkpoint: LeaderEpochCheckpointFile) -> LeaderEpochFileCache:
    return LeaderEpochFileCache(checkpoint)


def test_add_epoch_and_offset(cache: LeaderEpochFileCache) -> None:
    assert cache.latest_epoch is None and cache.latest_entry is None and cache.earliest_entry is None
    assert not cache.non_empty
    cache.assign(2, 10)
    assert cache.entries() == [E(2, 10)]
    assert cache.latest_epoch == 2 and cache.latest_entry == E(2, 10) == cache.earliest_entry
    assert cache.end_offset_for(2, 11) == (2, 11)


def test_checkpoint_is_written_on_each_change(cache: LeaderEpochFileCache, checkpoint: LeaderEpochCheckpointFile) -> None:
    cache.assign(0, 0)
    assert checkpoint.path.read_bytes() == b"0\n1\n0 0\n"
    cache.assign(1, 5)
    assert checkpoint.path.read_bytes() == b"0\n2\n0 0\n1 5\n"
    cache.truncate_from_end(5)
    assert checkpoint.path.read_bytes() == b"0\n1\n0 0\n"
    cache.clear_and_flush()
    assert checkpoint.path.read_bytes() == b"0\n0\n" and cache.entries() == []


def test_entries_persist_between_instances(cache: LeaderEpochFileCache, checkpoint: LeaderEpochCheckpointFile) -> None:
    cache.assign(2, 6)
    cache.assign(3, 9)
    again = LeaderEpochFileCache(checkpoint)
    assert again.entries() == [E(2, 6), E(3, 9)]


def test_same_epoch_later_offset_is_ignored(cache: LeaderEpochFileCache, checkpoint: LeaderEpochCheckpointFile) -> None:
    cache.assign(2, 6)
    before = checkpoint.path.stat().st_mtime_ns
    cache.assign(2, 7)
    cache.assign(2, 6)
    assert cache.entries() == [E(2, 6)]
    assert checkpoint.path.stat().st_mtime_ns == before, "no change, no write"


def test_same_epoch_earlier_offset_replaces_it(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 6)
    cache.assign(2, 5)
    assert cache.entries() == [E(2, 5)]


def test_monotonic_start_offsets_are_enforced(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 6)
    cache.assign(3, 5)  # a later epoch starting earlier truncates the conflicting tail
    assert cache.entries() == [E(3, 5)]


def test_monotonic_epochs_are_enforced(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 6)
    cache.assign(3, 8)
    cache.assign(1, 7)  # a lower epoch removes every entry with a higher or equal epoch
    assert cache.entries() == [E(1, 7)]


def test_assign_that_truncates_many_entries(cache: LeaderEpochFileCache) -> None:
    for epoch, start in [(0, 0), (1, 7), (2, 10), (3, 15)]:
        cache.assign(epoch, start)
    cache.assign(4, 9)
    assert cache.entries() == [E(0, 0), E(1, 7), E(4, 9)]


def test_invalid_entries_are_rejected(cache: LeaderEpochFileCache) -> None:
    with pytest.raises(ValueError):
        cache.assign(-1, 0)
    with pytest.raises(ValueError):
        cache.assign(0, -1)


def test_end_offset_for_latest_epoch_is_log_end(cache: LeaderEpochFileCache) -> None:
    for epoch, start in [(2, 5), (3, 6), (4, 7)]:
        cache.assign(epoch, start)
    assert cache.end_offset_for(4, 8) == (4, 8)


def test_end_offset_for_undefined_or_unknown(cache: LeaderEpochFileCache) -> None:
    assert cache.end_offset_for(0, 0) == UNDEFINED, "empty cache"
    assert cache.end_offset_for(UNDEFINED_EPOCH, 73) == UNDEFINED
    cache.assign(2, 10)
    assert cache.end_offset_for(UNDEFINED_EPOCH, 73) == UNDEFINED
    assert cache.end_offset_for(3, 100) == UNDEFINED, "above every known epoch"


def test_end_offset_for_epoch_below_the_first(cache: LeaderEpochFileCache) -> None:
    for epoch, start in [(5, 11), (6, 12), (7, 13)]:
        cache.assign(epoch, start)
    # The requested epoch itself, ending where the first known epoch starts.
    assert cache.end_offset_for(4, 0) == (4, 11)


def test_end_offset_for_previous_epoch_is_next_epoch_start(cache: LeaderEpochFileCache) -> None:
    cache.assign(1, 5)
    cache.assign(2, 8)
    assert cache.end_offset_for(1, 20) == (1, 8)


def test_end_offset_for_missing_epoch_uses_floor_epoch(cache: LeaderEpochFileCache) -> None:
    for epoch, start in [(0, 10), (2, 13), (4, 17)]:
        cache.assign(epoch, start)
    assert cache.end_offset_for(0, 20) == (0, 13)
    assert cache.end_offset_for(1, 20) == (0, 13)
    assert cache.end_offset_for(2, 20) == (2, 17)
    assert cache.end_offset_for(3, 20) == (2, 17)
    assert cache.end_offset_for(4, 20) == (4, 20)


def test_epoch_for_offset(cache: LeaderEpochFileCache) -> None:
    assert cache.epoch_for_offset(5) is None
    for epoch, start in [(1, 10), (2, 15), (4, 30)]:
        cache.assign(epoch, start)
    assert cache.epoch_for_offset(9) is None, "before the first epoch"
    assert cache.epoch_for_offset(10) == 1
    assert cache.epoch_for_offset(14) == 1
    assert cache.epoch_for_offset(15) == 2
    assert cache.epoch_for_offset(29) == 2
    assert cache.epoch_for_offset(30) == 4
    assert cache.epoch_for_offset(10**12) == 4


def test_neighbour_queries(cache: LeaderEpochFileCache) -> None:
    for epoch, start in [(1, 10), (3, 15), (4, 30)]:
        cache.assign(epoch, start)
    assert cache.previous_epoch() == 3
    assert cache.previous_epoch(3) == 1 and cache.previous_epoch(2) == 1 and cache.previous_epoch(1) is None
    assert cache.previous_entry(4) == E(3, 15)
    assert cache.next_epoch(1) == 3 and cache.next_epoch(2) == 3 and cache.next_epoch(4) is None
    assert cache.epoch_entry(3) == E(3, 15) and cache.epoch_entry(2) is None
    assert cache.epoch_with_offsets() == {1: 10, 3: 15, 4: 30}


@pytest.fixture
def three(cache: LeaderEpochFileCache) -> LeaderEpochFileCache:
    for epoch, start in [(2, 6), (3, 8), (4, 11)]:
        cache.assign(epoch, start)
    return cache


@pytest.mark.parametrize(
    ("end", "expected"),
    [
        (12, [E(2, 6), E(3, 8), E(4, 11)]),  # after the last start: nothing
        (11, [E(2, 6), E(3, 8)]),  # exactly a start offset: that entry goes
        (9, [E(2, 6), E(3, 8)]),
        (8, [E(2, 6)]),
        (6, []),
        (0, []),
        (-1, [E(2, 6), E(3, 8), E(4, 11)]),  # a negative offset does nothing
    ],
)
def test_truncate_from_end(three: LeaderEpochFileCache, end: int, expected: list[EpochEntry]) -> None:
    three.truncate_from_end(end)
    assert three.entries() == expected
    assert LeaderEpochFileCache(three.checkpoint).entries() == expected, "persisted"


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        (5, [E(2, 6), E(3, 8), E(4, 11)]),  # before the first start: nothing
        (6, [E(2, 6), E(3, 8), E(4, 11)]),  # exactly the first start: unchanged
        (7, [E(2, 7), E(3, 8), E(4, 11)]),  # inside epoch 2: it now starts there
        (8, [E(3, 8), E(4, 11)]),
        (9, [E(3, 9), E(4, 11)]),
        (11, [E(4, 11)]),
        (15, [E(4, 15)]),  # past every start: the latest epoch covers it
    ],
)
def test_truncate_from_start(three: LeaderEpochFileCache, start: int, expected: list[EpochEntry]) -> None:
    three.truncate_from_start(start)
    assert three.entries() == expected
    assert LeaderEpochFileCache(three.checkpoint).entries() == expected, "persisted"


def test_truncations_on_empty_cache_do_nothing(cache: LeaderEpochFileCache, checkpoint: LeaderEpochCheckpointFile) -> None:
    cache.truncate_from_end(0)
    cache.truncate_from_start(100)
    assert cache.entries() == [] and not checkpoint.path.exists()


def test_epoch_entries_in_range(cache: LeaderEpochFileCache) -> None:
    for epoch, start in [(0, 0), (1, 5), (2, 10), (3, 20)]:
        cache.assign(epoch, start)
    assert cache.epoch_entries_in_range(6, 15) == [E(1, 6), E(2, 10)]
    assert cache.epoch_entries_in_range(-1, 10) == [E(0, 0), E(1, 5)]
    assert cache.epoch_entries_in_range(20, 30) == [E(3, 20)]
    assert cache.epoch_entries_in_range(25, 30) == [E(3, 25)]
    assert cache.entries() == [E(0, 0), E(1, 5), E(2, 10), E(3, 20)], "the cache is untouched"


def test_loading_a_non_monotonic_checkpoint_restores_order(checkpoint: LeaderEpochCheckpointFile) -> None:
    checkpoint.path.write_bytes(b"0\n3\n1 5\n2 3\n3 10\n")
    cache = LeaderEpochFileCache(checkpoint)
    assert cache.entries() == [E(2, 3), E(3, 10)]


class _CollectingScheduler:
    def __init__(self) -> None:
        self.tasks: list[Callable[[], None]] = []

    def schedule(self, name: str, fn: Callable[[], None], delay_ms: int, period_ms: int | None = None) -> _CollectingScheduler:
        assert name.startswith("leader-epoch-cache-flush-") and period_ms is None
        self.tasks.append(fn)
        return self

    def cancel(self) -> None:  # TaskHandle
        pass

    def shutdown(self) -> None:
        pass


def test_truncation_flush_through_scheduler_writes_current_entries(checkpoint: LeaderEpochCheckpointFile) -> None:
    scheduler = _CollectingScheduler()
    cache = LeaderEpochFileCache(checkpoint, scheduler, "t-0")
    cache.assign(1, 0)
    cache.assign(2, 10)
    cache.truncate_from_end(10)
    assert checkpoint.read() == [E(1, 0), E(2, 10)], "not flushed yet"
    cache.assign(3, 12)  # a later synchronous write
    assert len(scheduler.tasks) == 1
    scheduler.tasks[0]()
    assert checkpoint.read() == [E(1, 0), E(3, 12)], "the queued flush must not resurrect older state"


def test_in_memory_checkpoint_and_with_checkpoint(cache: LeaderEpochFileCache, checkpoint: LeaderEpochCheckpointFile) -> None:
    cache.assign(1, 0)
    cache.assign(2, 10)
    memory = InMemoryLeaderEpochCheckpoint()
    clone = cache.with_checkpoint(memory)
    clone.truncate_from_start(5)
    assert memory.read() == [E(1, 5), E(2, 10)]
    assert cache.entries() == [E(1, 0), E(2, 10)] and checkpoint.read() == [E(1, 0), E(2, 10)]


def test_concurrent_assigns_keep_entries_monotonic(cache: LeaderEpochFileCache) -> None:
    def worker(base: int) -> None:
        for i in range(20):
            cache.assign(base + i, (base + i) * 10)
            cache.latest_epoch  # noqa: B018 - readers interleave with writers

    threads = [threading.Thread(target=worker, args=(b,)) for b in (0, 100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    entries = cache.entries()
    assert all(a.epoch < b.epoch and a.start_offset < b.start_offset for a, b in itertools.pairwise(entries))
    assert LeaderEpochFileCache(cache.checkpoint).entries() == entries
