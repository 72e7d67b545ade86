"""The batch checks behind every read of data the broker did not write or scan itself."""

from __future__ import annotations

from tests.helpers.storage import batch
from tierlog.records.header import iter_headers, set_base_offset
from tierlog.storage.batch_check import BatchWalk, CheckedBatch, VerifiedSpans, check_record_set


def chain(counts: list[int], first: int = 100) -> bytearray:
    """Batches of ``counts`` records at consecutive offsets from ``first``."""
    out = bytearray()
    offset = first
    for n in counts:
        b = bytearray(batch(n, value_size=30))
        set_base_offset(b, 0, offset)
        out += b
        offset += n
    return out


def positions(buf: bytes | bytearray) -> list[int]:
    return [h.position for h in iter_headers(buf)]


def walk_all(buf: bytes | bytearray, **kw: object) -> tuple[BatchWalk, list[CheckedBatch]]:
    seen: list[CheckedBatch] = []
    kw.setdefault("expected_offset", 100)
    kw.setdefault("segment_base", 100)
    walk = BatchWalk(0, on_batch=seen.append, **kw)  # type: ignore[arg-type]
    assert walk.feed(buf, 0, len(buf)) == 0
    return walk, seen


def test_a_good_chain_is_confirmed_to_the_end() -> None:
    buf = chain([3, 4, 5])
    walk, seen = walk_all(buf)
    assert walk.problem is None and walk.confirmed == len(buf)
    assert [(b.base_offset, b.last_offset) for b in seen] == [(100, 102), (103, 106), (107, 111)]
    assert walk.next_offset == 112


def test_a_flipped_record_byte_fails_the_crc_and_stops_before_the_batch() -> None:
    buf = chain([3, 4, 5])
    second = positions(buf)[1]
    buf[second + 70] ^= 0x40
    walk, seen = walk_all(buf)
    assert walk.problem is not None and walk.problem.reason == "CRC mismatch"
    assert (walk.problem.position, walk.problem.offset) == (second, 103)
    assert walk.confirmed == second and len(seen) == 1


def test_a_raised_base_offset_is_blamed_on_its_own_batch_not_the_next() -> None:
    # The CRC does not cover the base offset: 103 -> 103 + 16 leaves a gap and then an overlap.
    buf = chain([3, 20, 5])
    second = positions(buf)[1]
    buf[second + 7] ^= 0x10
    walk, seen = walk_all(buf)
    assert walk.problem is not None
    assert (walk.problem.position, walk.problem.offset) == (second, 103)
    assert [b.base_offset for b in seen] == [100]


def test_a_lowered_base_offset_is_blamed_on_its_own_batch() -> None:
    buf = chain([3, 20, 5])
    third = positions(buf)[2]
    buf[third + 7] ^= 0x02  # 123 -> 121: below the offset after the previous batch
    walk, _ = walk_all(buf)
    assert walk.problem is not None
    assert (walk.problem.position, walk.problem.offset) == (third, 123)


def test_a_gap_confirmed_by_the_next_batch_is_compaction_not_damage() -> None:
    buf = chain([3]) + chain([4, 5], first=110)
    walk, seen = walk_all(buf)
    assert walk.problem is None and [b.base_offset for b in seen] == [100, 110, 114]


def test_a_raised_last_base_offset_fails_only_against_the_next_segment_or_the_log_end() -> None:
    buf = chain([3, 4])
    last = positions(buf)[1]
    buf[last + 7] ^= 0x08  # 103 -> 111
    assert walk_all(buf)[0].problem is None  # compaction could leave that gap at the end
    walk, _ = walk_all(buf, upper_offset=107)  # the next segment starts at 107
    assert walk.problem is not None and walk.problem.position == last
    walk, _ = walk_all(buf, exact_end=107)  # a clean shutdown left the log end at 107
    assert walk.problem is not None and walk.problem.position == last


def test_a_file_cut_inside_a_batch_is_torn() -> None:
    buf = chain([3, 4, 5])
    third = positions(buf)[2]
    walk, seen = walk_all(buf[: third + 30])
    assert walk.problem is not None and walk.problem.torn
    assert (walk.problem.position, walk.problem.offset) == (third, 107)
    assert len(seen) == 2


def test_an_unanchored_start_needs_the_next_batch_to_follow_exactly() -> None:
    buf = chain([3, 4, 5])
    second = positions(buf)[1]
    walk = BatchWalk(second, expected_offset=None, segment_base=100)
    walk.feed(buf[second:], second, len(buf))
    assert not walk.unanchored and walk.problem is None and walk.first_offset == 103
    buf[second + 7] ^= 0x01  # 103 -> 102: nothing before it to compare with, the next batch tells
    walk = BatchWalk(second, expected_offset=None, segment_base=100)
    walk.feed(buf[second:], second, len(buf))
    assert walk.unanchored and walk.problem is None and walk.confirmed == second


def test_feeding_in_pieces_asks_for_the_bytes_it_needs() -> None:
    buf = bytes(chain([3, 4, 5]))
    walk = BatchWalk(0, expected_offset=100, segment_base=100)
    position = 0
    while not walk.done:
        need = walk.feed(buf[position : position + 50], position, len(buf))
        position = walk.position
        if need:
            walk.feed(buf[position : position + need], position, len(buf))
            position = walk.position
    assert walk.problem is None and walk.confirmed == len(buf)


def test_a_record_set_in_memory_is_cut_before_its_first_bad_batch() -> None:
    buf = chain([3, 4, 5])
    third = positions(buf)[2]
    assert check_record_set(buf) == (len(buf), None)
    assert check_record_set(buf[: third + 20]) == (third, None)  # a fetch may end inside a batch
    buf[third + 80] ^= 1
    valid, problem = check_record_set(buf)
    assert valid == third and problem is not None and problem.reason == "CRC mismatch"


def test_verified_spans_merge_when_they_meet_with_following_offsets() -> None:
    spans = VerifiedSpans()
    spans.add(100, 200, 10, 20)
    spans.add(0, 100, 0, 10)
    spans.add(300, 400, 30, 40)
    assert [(s.start, s.end) for s in spans.spans] == [(0, 200), (300, 400)]
    assert spans.containing_offset(15) is not None and spans.containing_offset(25) is None
    last = spans.last_before_offset(35)
    assert last is not None and last.end == 200
    spans.add(200, 300, 20, 30)
    assert [(s.start, s.end, s.first_offset, s.next_offset) for s in spans.spans] == [(0, 400, 0, 40)]
    spans.truncate(250, 25)
    assert [(s.start, s.end, s.next_offset) for s in spans.spans] == [(0, 250, 25)]
