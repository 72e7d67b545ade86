"""Offset and time index files (KAFKA-FACTS §2.3, §2.4; cases after OffsetIndexTest/TimeIndexTest)."""

from __future__ import annotations

import os
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.errors import CorruptIndexError, IndexOffsetOverflowError, InvalidOffsetError
from tierlog.storage.index import (
    IndexFullError,
    OffsetIndex,
    OffsetPosition,
    TimeIndex,
    TimestampOffset,
    TimestampOrderError,
    looks_untrimmed,
)

BASE = 45


def offset_index(tmp_path: Path, max_size: int = 30 * 8, base: int = BASE) -> OffsetIndex:
    return OffsetIndex(tmp_path / f"{base:020d}.index", base, max_size)


def time_index(tmp_path: Path, max_size: int = 30 * 12, base: int = BASE) -> TimeIndex:
    return TimeIndex(tmp_path / f"{base:020d}.timeindex", base, max_size)


# -- format --------------------------------------------------------------------------------------------


def test_offset_entry_golden_bytes(tmp_path: Path) -> None:
    idx = offset_index(tmp_path, base=100)
    idx.append(105, 4096)
    idx.append(100 + 0x01020304, 0x7FFFFFFF)
    idx.close()
    assert idx.path.read_bytes() == bytes.fromhex("00000005" "00001000" "01020304" "7fffffff")


def test_time_entry_golden_bytes(tmp_path: Path) -> None:
    idx = time_index(tmp_path, base=100)
    idx.maybe_append(0x0102030405060708, 107)
    idx.close()
    assert idx.path.read_bytes() == bytes.fromhex("0102030405060708" "00000007")


def test_default_preallocated_sizes(tmp_path: Path) -> None:
    oi = OffsetIndex(tmp_path / "a.index", 0)
    ti = TimeIndex(tmp_path / "a.timeindex", 0)
    assert os.stat(oi.path).st_size == 10485760 and oi.max_entries == 1310720
    assert os.stat(ti.path).st_size == 10485756 and ti.max_entries == 873813
    assert oi.entries == ti.entries == 0 and oi.size_bytes == 0
    assert not oi.is_full and not ti.is_full
    # Preallocation is sparse: nothing is written until entries are.
    assert os.stat(oi.path).st_blocks * 512 < 1024 * 1024
    oi.close()
    ti.close()
    assert os.stat(oi.path).st_size == 0 and os.stat(ti.path).st_size == 0


def test_preallocation_rounds_down_to_entry_size(tmp_path: Path) -> None:
    oi = OffsetIndex(tmp_path / "a.index", 0, 100)
    ti = TimeIndex(tmp_path / "a.timeindex", 0, 100)
    assert (oi.length, oi.max_entries) == (96, 12)
    assert (ti.length, ti.max_entries) == (96, 8)


def test_max_index_size_below_one_entry_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="invalid max index size"):
        OffsetIndex(tmp_path / "a.index", 0, 7)
    assert not (tmp_path / "a.index").exists()


# -- offset index --------------------------------------------------------------------------------------


def test_lookup_extreme_cases(tmp_path: Path) -> None:
    idx = offset_index(tmp_path)
    assert idx.lookup(BASE) == OffsetPosition(BASE, 0), "empty index"
    assert idx.lookup(0) == (BASE, 0)
    for i in range(1, 11):
        idx.append(BASE + i * 2, i * 100)
    assert idx.lookup(BASE) == (BASE, 0), "below the first entry"
    assert idx.lookup(BASE + 1) == (BASE, 0)
    assert idx.lookup(BASE + 2) == (BASE + 2, 100), "exactly the first entry"
    assert idx.lookup(BASE + 5) == (BASE + 4, 200), "between entries"
    assert idx.lookup(BASE + 20) == (BASE + 20, 1000), "exactly the last entry"
    assert idx.lookup(2**62) == (BASE + 20, 1000), "far beyond the last entry"


@settings(max_examples=40, deadline=None)
@given(
    offsets=st.lists(st.integers(0, 5000), unique=True, max_size=60).map(sorted),
    targets=st.lists(st.integers(-10, 5100), min_size=1, max_size=30),
)
def test_random_offset_lookups_match_brute_force(offsets: list[int], targets: list[int]) -> None:
    with tempfile.TemporaryDirectory() as d:
        idx = OffsetIndex(Path(d) / "x.index", BASE, 64 * 8)
        for n, rel in enumerate(offsets):
            idx.append(BASE + rel, n * 7)
        for t in targets:
            target = BASE + t
            below = [(BASE + rel, n * 7) for n, rel in enumerate(offsets) if BASE + rel <= target]
            assert idx.lookup(target) == (below[-1] if below else (BASE, 0))
        idx.close()


def test_append_out_of_order_or_repeated_is_rejected(tmp_path: Path) -> None:
    idx = offset_index(tmp_path)
    idx.append(BASE + 10, 100)
    with pytest.raises(InvalidOffsetError, match="no larger than the last offset"):
        idx.append(BASE + 10, 200)
    with pytest.raises(InvalidOffsetError):
        idx.append(BASE + 9, 200)
    assert idx.entries == 1


def test_offset_must_fit_relative_int32(tmp_path: Path) -> None:
    idx = offset_index(tmp_path)
    with pytest.raises(IndexOffsetOverflowError):
        idx.append(BASE - 1, 0)
    with pytest.raises(IndexOffsetOverflowError):
        idx.append(BASE + 2**31, 0)
    assert idx.can_append_offset(BASE + 2**31 - 1) and not idx.can_append_offset(BASE + 2**31)
    idx.append(BASE + 2**31 - 1, 0)
    assert idx.last_entry() == (BASE + 2**31 - 1, 0)


def test_full_at_max_entries(tmp_path: Path) -> None:
    idx = offset_index(tmp_path, max_size=5 * 8)
    for i in range(5):
        assert not idx.is_full
        idx.append(BASE + i, i)
    assert idx.is_full
    with pytest.raises(IndexFullError):
        idx.append(BASE + 10, 10)


def test_reopen_recovers_entries_from_length(tmp_path: Path) -> None:
    idx = offset_index(tmp_path)
    for i in range(1, 8):
        idx.append(BASE + i, i * 10)
    idx.close()
    assert os.stat(idx.path).st_size == 7 * 8
    again = offset_index(tmp_path)
    assert again.entries == again.max_entries == 7
    assert again.is_full, "an existing file is full until resized"
    assert again.last_entry() == (BASE + 7, 70)
    assert again.lookup(BASE + 4) == (BASE + 4, 40)
    again.resize(30 * 8)
    assert again.max_entries == 30 and not again.is_full
    again.append(BASE + 8, 80)
    assert again.entries == 8


def test_reopen_of_untrimmed_file_counts_every_slot(tmp_path: Path) -> None:
    idx = offset_index(tmp_path)
    idx.append(BASE + 1, 10)
    idx.flush()  # crash here: never trimmed
    again = offset_index(tmp_path)
    assert again.entries == 30, "Kafka trusts an existing file: every slot counts"
    assert again.last_entry() == (BASE, 0)
    with pytest.raises(CorruptIndexError, match=r"entry 1 has offset .* not above"):
        again.sanity_check()


def test_read_only_open(tmp_path: Path) -> None:
    idx = offset_index(tmp_path)
    idx.append(BASE + 3, 30)
    idx.close()
    ro = OffsetIndex(idx.path, BASE, writable=False)
    assert ro.lookup(BASE + 5) == (BASE + 3, 30)
    with pytest.raises(ValueError, match="read-only"):
        ro.append(BASE + 4, 40)
    ro.close()
    with pytest.raises(FileNotFoundError):
        OffsetIndex(tmp_path / "missing.index", 0, writable=False)


def test_truncate_to(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "t.index", 0, 10 * 8)
    for i in range(1, 10):
        idx.append(i, i)
    idx.truncate_to(12)
    assert idx.lookup(10) == (9, 9), "truncating past the end changes nothing"
    idx.truncate_to(10)
    assert idx.lookup(10) == (9, 9)
    idx.truncate_to(9)
    assert idx.lookup(10) == (8, 8), "an entry for exactly the offset is removed"
    idx.truncate_to(5)
    assert idx.lookup(10) == (4, 4)
    assert idx.last_offset == 4 and idx.entries == 4
    idx.truncate_to(0)
    assert idx.lookup(10) == (0, 0) and idx.entries == 0
    idx.append(3, 3)  # appends continue after the truncation point
    assert idx.entries == 1


def test_reset_and_truncate_empty_and_regrow(tmp_path: Path) -> None:
    idx = offset_index(tmp_path)
    idx.append(BASE + 1, 1)
    idx.trim_to_valid_size()
    assert idx.length == 8
    idx.reset()
    assert idx.entries == 0 and idx.length == 30 * 8 and idx.max_entries == 30
    idx.append(BASE + 1, 1)
    idx.trim_to_valid_size()
    idx.truncate()
    assert idx.entries == 0 and idx.length == 30 * 8


def test_trim_and_resize(tmp_path: Path) -> None:
    idx = offset_index(tmp_path)
    for i in range(1, 4):
        idx.append(BASE + i, i)
    assert idx.trim_to_valid_size()
    assert os.stat(idx.path).st_size == 24 and idx.is_full and idx.size_bytes == 24
    assert not idx.trim_to_valid_size(), "already trimmed"
    with pytest.raises(ValueError, match="holds 3 entries"):
        idx.resize(16)
    assert idx.resize(100)
    assert idx.length == 96 and idx.max_entries == 12
    assert idx.lookup(BASE + 3) == (BASE + 3, 3), "entries survive a remap"


def test_fetch_upper_bound_offset(tmp_path: Path) -> None:
    idx = offset_index(tmp_path)
    for i, pos in enumerate((0, 1000, 2000, 3000)):
        idx.append(BASE + i, pos)
    assert idx.fetch_upper_bound_offset(0, 5) == (BASE + 1, 1000)
    assert idx.fetch_upper_bound_offset(0, 1000) == (BASE + 1, 1000)
    assert idx.fetch_upper_bound_offset(0, 1001) == (BASE + 2, 2000)
    assert idx.fetch_upper_bound_offset(1000, 2000) == (BASE + 3, 3000)
    assert idx.fetch_upper_bound_offset(3000, 1) is None


def test_sanity_last_offset_equal_to_base_offset(tmp_path: Path) -> None:
    idx = offset_index(tmp_path)
    idx.append(BASE, 0)
    idx.sanity_check()


def _raw_index(path: Path, data: bytes) -> None:
    path.write_bytes(data)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (struct.pack(">ii", 5, 10) + struct.pack(">ii", -1, 20), "less than the base offset"),
        (struct.pack(">ii", 5, 10) + b"\x00\x00\x00", "not a multiple of 8"),
        (struct.pack(">iiiiii", 5, 10, 3, 20, 9, 30), "entry 1 has offset"),
        (struct.pack(">iiii", 5, 10, 5, 20), "entry 1 has offset"),
        (struct.pack(">iiii", 5, 20, 6, 10), "entry 1 has position"),
        (struct.pack(">ii", -3, 0) + struct.pack(">ii", 2, 10), "entry 0 is negative"),
    ],
)
def test_offset_sanity_check_catches_corruption(tmp_path: Path, data: bytes, problem: str) -> None:
    path = tmp_path / "c.index"
    _raw_index(path, data)
    idx = OffsetIndex(path, BASE)
    with pytest.raises(CorruptIndexError, match=problem) as e:
        idx.sanity_check()
    assert str(path) in str(e.value)


def test_lifecycle_rename_delete_close(tmp_path: Path) -> None:
    idx = offset_index(tmp_path)
    idx.append(BASE + 1, 10)
    new = tmp_path / "renamed.index.deleted"
    idx.rename_to(new)
    assert idx.path == new and new.exists()
    idx.append(BASE + 2, 20)  # the map survives the rename
    idx.close()
    idx.close()  # idempotent
    assert new.read_bytes() == struct.pack(">iiii", 1, 10, 2, 20)
    with pytest.raises(ValueError, match="closed"):
        idx.lookup(BASE)
    other = OffsetIndex(new, BASE)
    assert other.delete_if_exists()
    assert not new.exists() and not other.delete_if_exists()


def test_close_does_not_resurrect_a_deleted_file(tmp_path: Path) -> None:
    idx = offset_index(tmp_path)
    idx.append(BASE + 1, 1)
    idx.path.unlink()
    idx.close()
    assert not idx.path.exists()


def test_empty_existing_file_is_full_and_resizable(tmp_path: Path) -> None:
    path = tmp_path / "e.index"
    path.write_bytes(b"")
    idx = OffsetIndex(path, BASE)
    assert idx.entries == 0 and idx.max_entries == 0 and idx.is_full
    assert idx.lookup(BASE + 100) == (BASE, 0)
    idx.sanity_check()
    idx.resize(80)
    idx.append(BASE + 1, 1)
    assert idx.entries == 1


# -- time index ----------------------------------------------------------------------------------------


def test_time_lookup(tmp_path: Path) -> None:
    idx = time_index(tmp_path)
    assert idx.lookup(100) == TimestampOffset(-1, BASE), "empty index"
    for i in range(1, 10):
        idx.maybe_append(i * 10, BASE + i * 10)
    assert idx.lookup(5) == (-1, BASE), "below the first timestamp"
    assert idx.lookup(10) == (10, BASE + 10)
    assert idx.lookup(15) == (10, BASE + 10)
    assert idx.lookup(90) == (90, BASE + 90)
    assert idx.lookup(2**62) == (90, BASE + 90)


@settings(max_examples=40, deadline=None)
@given(
    timestamps=st.lists(st.integers(0, 10_000), unique=True, max_size=40).map(sorted),
    targets=st.lists(st.integers(-5, 10_100), min_size=1, max_size=30),
)
def test_random_time_lookups_match_brute_force(timestamps: list[int], targets: list[int]) -> None:
    with tempfile.TemporaryDirectory() as d:
        idx = TimeIndex(Path(d) / "x.timeindex", BASE, 64 * 12)
        for n, ts in enumerate(timestamps):
            idx.maybe_append(ts, BASE + n * 3)
        for t in targets:
            below = [(ts, BASE + n * 3) for n, ts in enumerate(timestamps) if ts <= t]
            assert idx.lookup(t) == (below[-1] if below else (-1, BASE))
        idx.close()


def test_time_append_rules(tmp_path: Path) -> None:
    idx = time_index(tmp_path)
    idx.maybe_append(-1, BASE)  # NO_TIMESTAMP is never indexed
    assert idx.entries == 0
    idx.maybe_append(100, BASE + 5)
    idx.maybe_append(100, BASE + 5)  # identical: ignored (roll/close re-append the max)
    idx.maybe_append(100, BASE + 7)  # same timestamp, later offset: ignored too
    assert idx.entries == 1
    with pytest.raises(InvalidOffsetError):
        idx.maybe_append(200, BASE + 4)
    with pytest.raises(TimestampOrderError):
        idx.maybe_append(99, BASE + 8)
    idx.maybe_append(200, BASE + 7)
    assert idx.entries == 2 and idx.last_entry() == (200, BASE + 7)
    with pytest.raises(IndexOffsetOverflowError):
        idx.maybe_append(300, BASE + 2**31)


def test_time_index_full_at_max_entries_minus_one(tmp_path: Path) -> None:
    idx = time_index(tmp_path, max_size=5 * 12)
    for i in range(4):
        assert not idx.is_full
        idx.maybe_append(10 + i, BASE + i)
    assert idx.is_full and idx.entries == 4 == idx.max_entries - 1
    with pytest.raises(IndexFullError):
        idx.maybe_append(100, BASE + 10)
    idx.maybe_append(100, BASE + 10, skip_full_check=True)  # the reserved slot
    assert idx.entries == 5
    with pytest.raises(IndexFullError):
        idx.maybe_append(101, BASE + 11, skip_full_check=True)


def test_time_truncate(tmp_path: Path) -> None:
    idx = time_index(tmp_path)
    for i in range(1, 10):
        idx.maybe_append(i * 10, BASE + i * 10)
    idx.truncate_to(BASE + 10)
    assert idx.entries == 0 and idx.last_entry() == (-1, BASE)
    for i in range(1, 10):
        idx.maybe_append(i * 10, BASE + i * 10)
    idx.truncate_to(BASE + 20)
    assert idx.entries == 1 and idx.last_entry() == (10, BASE + 10)
    idx.truncate_to(BASE + 15)
    assert idx.entries == 1
    idx.truncate_to(BASE + 11)
    assert idx.entries == 1, "an entry below the offset stays"


def test_time_resize_and_last_entry(tmp_path: Path) -> None:
    idx = time_index(tmp_path)
    assert idx.last_entry() == (-1, BASE)
    idx.maybe_append(10, BASE + 1)
    idx.maybe_append(20, BASE + 2)
    idx.trim_to_valid_size()
    assert idx.length == 24 and idx.entry(1) == (20, BASE + 2)
    idx.resize(12 * 10)
    assert idx.max_entries == 10 and idx.last_entry() == (20, BASE + 2)
    with pytest.raises(IndexError):
        idx.entry(2)
    idx.close()
    again = time_index(tmp_path)
    assert again.entries == 2 and again.last_entry() == (20, BASE + 2)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (struct.pack(">qi", 50, 1) + struct.pack(">qi", 40, 2), "last timestamp is 40, which is less than the first"),
        (struct.pack(">qi", 50, 1) + struct.pack(">qi", 60, -1), "less than the base offset"),
        (struct.pack(">qi", 50, 1) + b"\x00" * 5, "not a multiple of 12"),
        (struct.pack(">qiqiqi", 50, 1, 50, 2, 70, 3), "entry 1 has timestamp 50"),
        (struct.pack(">qiqiqi", 50, 1, 40, 2, 70, 3), "entry 1 has timestamp 40"),
        (struct.pack(">qiqiqi", 50, 5, 60, 3, 70, 6), "entry 1 has offset"),
        (struct.pack(">qiqi", 50, 5, 60, 6) + bytes(24), "last timestamp is 0"),
        (struct.pack(">qiqiqiqi", 50, 5, 60, 6, 0, 0, 70, 7), "entry 2 has timestamp 0"),
    ],
)
def test_time_sanity_check_catches_corruption(tmp_path: Path, data: bytes, problem: str) -> None:
    path = tmp_path / "c.timeindex"
    path.write_bytes(data)
    idx = TimeIndex(path, BASE)
    with pytest.raises(CorruptIndexError, match=problem) as e:
        idx.sanity_check()
    assert str(path) in str(e.value)


def test_time_sanity_check_passes_valid_index(tmp_path: Path) -> None:
    idx = time_index(tmp_path)
    for i in range(5):
        idx.maybe_append(1000 + i, BASE + i)
    idx.close()
    again = time_index(tmp_path)
    again.sanity_check()


def test_last_timestamp_from_file(tmp_path: Path) -> None:
    path = tmp_path / "l.timeindex"
    assert TimeIndex.last_timestamp_from_file(path) is None
    path.write_bytes(b"")
    assert TimeIndex.last_timestamp_from_file(path) is None
    path.unlink()
    idx = TimeIndex(path, BASE, 10 * 12)
    idx.maybe_append(1_700_000_000_000, BASE + 3)
    idx.maybe_append(1_700_000_000_500, BASE + 9)
    idx.close()
    assert TimeIndex.last_timestamp_from_file(path) == 1_700_000_000_500
    assert TimeIndex.last_entry_from_file(path, BASE) == (1_700_000_000_500, BASE + 9)


# -- seed 003: the cheap untrimmed check ---------------------------------------------------------------


def test_looks_untrimmed_detects_preallocated_zero_tail(tmp_path: Path) -> None:
    oi, ti = offset_index(tmp_path), time_index(tmp_path)
    assert looks_untrimmed(oi.path, 8, 30 * 8) and looks_untrimmed(ti.path, 12, 30 * 12), "fresh, empty"
    oi.append(BASE + 1, 10)
    ti.maybe_append(1000, BASE + 1)
    oi.flush()
    ti.flush()
    assert looks_untrimmed(oi.path, 8, 30 * 8)
    assert looks_untrimmed(ti.path, 12, 30 * 12)
    # A different configured size does not hide it (segment.index.bytes may have changed).
    assert looks_untrimmed(oi.path, 8, 10485760)
    oi.close()
    ti.close()
    assert not looks_untrimmed(oi.path, 8, 30 * 8), "trimmed"
    assert not looks_untrimmed(ti.path, 12, 30 * 12), "trimmed"


def test_looks_untrimmed_false_for_full_legit_index(tmp_path: Path) -> None:
    oi = offset_index(tmp_path, max_size=10 * 8)
    for i in range(10):
        oi.append(BASE + i, i * 100)
    ti = time_index(tmp_path, max_size=10 * 12)
    for i in range(9):
        ti.maybe_append(10 + i, BASE + i)
    ti.maybe_append(100, BASE + 20, skip_full_check=True)
    oi.close()
    ti.close()
    assert os.stat(oi.path).st_size == 80 and os.stat(ti.path).st_size == 120, "full = preallocated size"
    assert not looks_untrimmed(oi.path, 8, 10 * 8)
    assert not looks_untrimmed(ti.path, 12, 10 * 12)


def test_looks_untrimmed_edge_files(tmp_path: Path) -> None:
    assert not looks_untrimmed(tmp_path / "missing.index", 8, 80)
    one = tmp_path / "one.index"
    one.write_bytes(bytes(8))  # a single (base, 0) entry can be legitimate
    assert not looks_untrimmed(one, 8, 80)
    empty = tmp_path / "empty.index"
    empty.write_bytes(b"")
    assert not looks_untrimmed(empty, 8, 80)


# -- writing ahead of the map ---------------------------------------------------------------------------


def _spy_pwrite(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, bool]]:
    """(start, length, all zeros) of every pwrite the index module makes."""
    import tierlog.storage.index.base as index_module

    calls: list[tuple[int, int, bool]] = []
    real = os.pwrite

    def spy(fd: int, data: bytes, offset: int) -> int:
        calls.append((offset, len(data), not any(data)))
        return real(fd, data, offset)

    monkeypatch.setattr(index_module.os, "pwrite", spy)
    return calls


def test_each_new_page_is_written_ahead_once_and_never_over_entries(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store into a hole of the sparse file allocates inside a page fault (milliseconds on ext4
    with many maps): each page gets zeros through pwrite first, from the first free byte only."""
    page = 4096
    calls = _spy_pwrite(monkeypatch)
    idx = offset_index(tmp_path, max_size=1 << 20)
    for i in range(1100):  # 8-byte entries, 512 a page: three pages
        idx.append(BASE + i, i * 10)
    assert calls == [(0, page, True), (page, page, True), (2 * page, page, True)]
    assert idx.lookup(BASE + 777) == OffsetPosition(BASE + 777, 7770)
    # Trimmed and grown again (a reopened active segment): the pages past the trim are holes again.
    idx.truncate_to(BASE + 600)
    idx.trim_to_valid_size()
    calls.clear()
    idx.resize(1 << 20)
    for i in range(600, 1100):
        idx.append(BASE + i, i * 10 + 1)
    # From the first free byte (entry 600 at byte 4,800) to the end of its page, then the next page.
    assert calls == [(4800, 2 * page - 4800, True), (2 * page, page, True)]
    assert [idx.entry(n) for n in (599, 600, 1099)] == [
        OffsetPosition(BASE + 599, 5990), OffsetPosition(BASE + 600, 6001), OffsetPosition(BASE + 1099, 10991)]


def test_a_time_index_entry_across_two_pages_writes_ahead_the_second(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _spy_pwrite(monkeypatch)
    idx = time_index(tmp_path, max_size=1 << 20)
    for i in range(342):  # entry 341 spans bytes 4092..4104
        idx.maybe_append(1_000 + i, BASE + i)
    assert calls == [(0, 4096, True), (4096, 4096, True)]
    assert idx.entry(341) == TimestampOffset(1_341, BASE + 341)
