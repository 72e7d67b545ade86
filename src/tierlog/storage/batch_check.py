"""Checking the batches of a segment before they are served or trusted: whole, magic 2, CRC-32C,
offsets inside the segment and following each other.

The CRC covers a batch from its attributes on, so a flipped byte in the base offset, the length or
the magic escapes it; the offset rules catch the base offset. In a log written by one leader the
batches of a segment follow each other exactly (base offset = previous last offset + 1); compaction
may leave gaps, never overlaps. One damaged base offset therefore shows as a gap followed by an
overlap (raised) or an overlap followed by a gap (lowered): a batch after a gap is accepted only
once the next batch (or the end of the segment) confirms it, and on an overlap the batch after the
gap is the damaged one.

:class:`BatchWalk` is fed buffers of file bytes (``pread`` chunks on the fetch path, one mapping in
recovery) and stops at the first problem; :func:`check_record_set` checks a record set already in
memory (a remote-tier read).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from tierlog._util.crc import crc32c
from tierlog.records.header import (
    BATCH_HEADER_SIZE,
    CRC_START,
    HEADER_SIZE_UP_TO_MAGIC,
    INT32_MAX,
    LENGTH,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    Buffer,
)

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta
_HEAD = struct.Struct(">qiibIhi")
_LENGTH = struct.Struct(">i")
_CRC32 = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class BatchProblem:
    """Where a segment stops being servable and why."""

    #: File position of the first byte that cannot be served (a batch start).
    position: int
    #: The first offset the problem makes unreadable (the offset expected at ``position``).
    offset: int
    reason: str
    #: The file ends inside a batch (a truncated file), rather than holding bytes that are wrong.
    torn: bool = False
    #: The bytes are whole and intact data of a format tierlog does not read (see
    #: :func:`unsupported_format`): the partition must be refused, not repaired.
    unsupported: bool = False


def unsupported_format(buf: Buffer, at: int, size: int) -> str | None:
    """What a whole entry of ``size`` bytes at ``at`` whose magic is not 2 is, if it is intact data of
    another format: a message of magic 0 or 1 (the formats before Kafka 0.11; tierlog reads only
    record batch v2) whose CRC-32 holds, or a batch of a magic above 2 laid out as v2 whose CRC-32C
    holds. None for anything else (a torn tail, zeros, flipped bits: damage, as before). The checksum
    is what tells a format apart from garbage with a wrong byte where the magic goes."""
    magic = buf[at + MAGIC]
    if magic in (0, 1):
        # offset(8) size(4) crc(4) magic(1) attributes(1) [timestamp(8) in v1] key(4+) value(4+)
        if size < LOG_OVERHEAD + (22 if magic == 1 else 14):
            return None
        (stored,) = _CRC32.unpack_from(buf, at + LOG_OVERHEAD)
        if zlib.crc32(memoryview(buf)[at + MAGIC : at + size]) != stored:
            return None
        return f"a message set of magic {magic} (the record format before Kafka 0.11; tierlog reads only record batch v2)"
    if magic > MAGIC_V2 and size >= BATCH_HEADER_SIZE:
        (stored,) = _CRC32.unpack_from(buf, at + CRC_START - 4)
        if crc32c(memoryview(buf)[at + CRC_START : at + size]) != stored:
            return None
        return f"a record batch of magic {magic} (a record format newer than v2, which tierlog reads)"
    return None


def first_unsupported(buf: Buffer, file_end: int, segment_base: int) -> BatchProblem | None:
    """The first entry of a segment's bytes ``buf[:file_end]`` that is intact data of a format tierlog
    does not read, by the rule :class:`BatchWalk` applies (a message of magic 0/1 whose CRC-32 holds;
    a batch above v2 whose CRC-32C holds and which no v2 batch follows), found from the length and
    magic fields alone: recovery asks this before it rewrites any index, so a partition it refuses
    keeps every file as it was. None as soon as the entries stop making sense (damage is recovery's
    business) or end; the checksums of v2 batches are not read."""
    pos = 0
    previous = -1  # the last v2 batch's position: the offset expected next is read from it only if needed
    length_at = _LENGTH.unpack_from
    while file_end - pos >= HEADER_SIZE_UP_TO_MAGIC:
        (length,) = length_at(buf, pos + LENGTH)
        entry_size = LOG_OVERHEAD + length
        if length <= 0 or pos + entry_size > file_end:
            return None
        magic = buf[pos + MAGIC]
        if magic != MAGIC_V2:
            feature = unsupported_format(buf, pos, entry_size)
            after = pos + entry_size
            if (feature is not None and magic > MAGIC_V2 and after + HEADER_SIZE_UP_TO_MAGIC <= file_end
                    and buf[after + MAGIC] == MAGIC_V2):
                feature = None  # a damaged magic byte, as BatchWalk judges it
            if feature is None:
                return None
            expected = segment_base
            if previous >= 0:
                base_offset, _, _, _, _, _, last_delta = _HEAD.unpack_from(buf, previous)
                expected = base_offset + last_delta + 1
            return BatchProblem(pos, expected, feature, unsupported=True)
        if length < MIN_BATCH_LENGTH or entry_size < BATCH_HEADER_SIZE:
            return None
        previous = pos
        pos += entry_size
    return None


@dataclass(frozen=True, slots=True)
class CheckedBatch:
    position: int
    size: int
    base_offset: int
    last_offset: int


@dataclass(slots=True)
class _Pending:
    batch: CheckedBatch
    #: The offset expected before the gap; None for the first batch of an unanchored walk.
    expected: int | None


class BatchWalk:
    """Checks consecutive batches of one segment file from ``position``.

    ``expected_offset`` is the base offset the first batch should have. None means nothing vouches
    for the start (an index entry): the first batch then counts only if the next one follows it
    exactly, otherwise the walk ends with ``unanchored`` set and no problem, and the caller starts
    again from a position it trusts. ``segment_base`` and
    ``upper_offset`` (the next segment's base offset, None for the active segment) bound every
    offset. ``on_batch`` sees each batch once it is confirmed, in file order. ``v2_only``: a log
    written only as record batch v2 (the metadata log), where a batch of another magic is damage
    whatever its checksum says, never another format (see :func:`unsupported_format`).

    After :meth:`feed` returns, ``confirmed`` is the end of the batches known good, ``next_offset``
    the offset after them and ``problem`` what stopped the walk, if anything.
    """

    __slots__ = ("_anchor_first", "_exact_end", "_on_batch", "_pending", "confirmed", "done", "expected",
                 "first_offset", "found", "next_offset", "position", "problem", "segment_base", "stop_offset",
                 "unanchored", "upper_offset", "v2_only")

    def __init__(self, position: int, *, expected_offset: int | None, segment_base: int,
                 upper_offset: int | None = None, stop_offset: int | None = None, anchor_first: bool = True,
                 exact_end: int | None = None, on_batch: Callable[[CheckedBatch], None] | None = None,
                 v2_only: bool = False) -> None:
        self.position = position
        self.v2_only = v2_only
        self.confirmed = position
        self.expected = expected_offset
        self.next_offset = expected_offset
        self.first_offset: int | None = None
        self.segment_base = segment_base
        self.upper_offset = upper_offset
        self.problem: BatchProblem | None = None
        self.done = False
        self.unanchored = False
        self._anchor_first = anchor_first
        self._exact_end = exact_end
        self._pending: _Pending | None = None
        self._on_batch = on_batch
        #: With ``stop_offset``: the first confirmed batch whose last offset reaches it; the walk
        #: stops there.
        self.stop_offset = stop_offset
        self.found: CheckedBatch | None = None

    @property
    def pending(self) -> bool:
        """A batch after a gap waits for the next one to confirm it."""
        return self._pending is not None

    def _confirm(self, batch: CheckedBatch) -> None:
        if self.first_offset is None:
            self.first_offset = batch.base_offset
        self.confirmed = batch.position + batch.size
        self.next_offset = batch.last_offset + 1
        if self._on_batch is not None:
            self._on_batch(batch)
        if self.stop_offset is not None and self.found is None and batch.last_offset >= self.stop_offset:
            self.found = batch

    def _unanchored(self) -> None:
        self._pending = None
        self.unanchored = True
        self.done = True

    def _fail(self, position: int, reason: str, *, torn: bool = False, unsupported: bool = False) -> None:
        if unsupported:
            # Whatever comes before, the segment holds a format tierlog does not read.
            self.problem = BatchProblem(position, self.segment_base if self.expected is None else self.expected,
                                        reason, unsupported=True)
            self.done = True
            return
        pending = self._pending
        offset = self.expected
        if pending is not None and pending.expected is None:
            self._unanchored()
            return
        if pending is not None:
            self._pending = None
            if torn:
                # A cut-off file says nothing against the batch before the cut.
                self._confirm(pending.batch)
            else:
                # Bad bytes right after an unconfirmed gap: the gap itself is suspect, so nothing
                # from the gap on is served.
                position, offset = pending.batch.position, pending.expected
        self.problem = BatchProblem(position, self.segment_base if offset is None else offset, reason, torn)
        self.done = True

    def finish(self) -> None:
        """The file ends at ``position``. A batch still waiting after a gap is confirmed (compaction
        leaves such gaps at the end of a segment) unless the walk knows the offset the data must end
        at (``exact_end``, the log end offset of a clean shutdown) and the batch does not end there."""
        pending = self._pending
        exact_end = self._exact_end
        if pending is not None:
            ends_right = exact_end is not None and pending.batch.last_offset + 1 == exact_end
            if pending.expected is None and not ends_right:
                self._unanchored()
                return
            if pending.expected is not None and exact_end is not None and not ends_right:
                self._fail(pending.batch.position, f"base offset {pending.batch.base_offset} leaves a gap and "
                           f"the batch does not end at the log end offset {exact_end}")
                return
            self._pending = None
            self._confirm(pending.batch)
        self.done = True

    def skip_to(self, position: int, first_offset: int, next_offset: int) -> None:
        """Jump over a span checked before (the walk stands at its start expecting ``first_offset``)."""
        assert self._pending is None
        if self.first_offset is None:
            self.first_offset = first_offset
        self.position = self.confirmed = position
        self.expected = self.next_offset = next_offset

    def feed(self, buf: Buffer, buf_position: int, file_end: int, stop_at: int | None = None) -> int:
        """Check the batches in ``buf`` (the file's bytes from ``buf_position``) from ``position`` on.

        Returns how many more bytes from ``position`` it needs to go on (0 when it is done: a problem,
        the end of the file, or every batch starting before ``stop_at`` checked and confirmed)."""
        buf_end = buf_position + len(buf)
        pos = self.position
        upper = self.upper_offset
        seg_base = self.segment_base
        while not self.done:
            if self._pending is None and (self.found is not None or (stop_at is not None and pos >= stop_at)):
                break
            left = file_end - pos
            if left < HEADER_SIZE_UP_TO_MAGIC:
                self.position = pos
                if left == 0:
                    self.finish()
                else:
                    self._fail(pos, f"{left} bytes at the end of the file are not a batch",
                               torn=True)
                return 0
            if buf_end - pos < HEADER_SIZE_UP_TO_MAGIC:
                self.position = pos
                return min(BATCH_HEADER_SIZE, left)
            at = pos - buf_position
            # Kafka's order (FileLogInputStream): the length first, then whether the batch fits in
            # the file, only then the magic.
            (length,) = _LENGTH.unpack_from(buf, at + LENGTH)
            entry_size: int = LOG_OVERHEAD + length
            if (buf[at + MAGIC] != MAGIC_V2 and length > 0 and pos + entry_size <= file_end
                    and not self.v2_only):
                if pos + entry_size > buf_end:
                    self.position = pos
                    return entry_size
                feature = unsupported_format(buf, at, entry_size)
                if feature is not None and buf[at + MAGIC] > MAGIC_V2:
                    # A newer broker never writes a v2 batch after its own format in one segment, so
                    # a v2 batch right after this one says the magic byte (outside the CRC) is
                    # damaged: damage, handled below, not a format.
                    after = pos + entry_size
                    if after + HEADER_SIZE_UP_TO_MAGIC <= file_end:
                        if after + HEADER_SIZE_UP_TO_MAGIC > buf_end:
                            self.position = pos
                            return entry_size + HEADER_SIZE_UP_TO_MAGIC
                        if buf[after - buf_position + MAGIC] == MAGIC_V2:
                            feature = None
                if feature is not None:
                    self.position = pos
                    self._fail(pos, feature, unsupported=True)
                    return 0
            if length < MIN_BATCH_LENGTH:
                self.position = pos
                self._fail(pos, f"batch length {length} is below the minimum")
                return 0
            size: int = LOG_OVERHEAD + length
            if pos + size > file_end:
                self.position = pos
                self._fail(pos, f"a {size}-byte batch runs past the end of the file "
                           f"({file_end - pos} bytes left)", torn=True)
                return 0
            if buf[at + MAGIC] != MAGIC_V2:
                self.position = pos
                self._fail(pos, f"magic {buf[at + MAGIC]}, not {MAGIC_V2}")
                return 0
            if size < BATCH_HEADER_SIZE:
                self.position = pos
                self._fail(pos, f"a {size}-byte batch is smaller than its header")
                return 0
            if pos + size > buf_end:
                self.position = pos
                return size
            base, _length, _epoch, _magic, crc, _attrs, delta = _HEAD.unpack_from(buf, at)
            if crc32c(memoryview(buf)[at + CRC_START : at + size]) != crc:
                self.position = pos
                self._fail(pos, "CRC mismatch")
                return 0
            last = base + delta
            if delta < 0 or base < seg_base or last - seg_base > INT32_MAX or (upper is not None and last >= upper):
                self.position = pos
                self._fail(pos, f"offsets [{base}, {last}] are outside the segment "
                           f"[{seg_base}, {'' if upper is None else upper})")
                return 0
            batch = CheckedBatch(pos, size, base, last)
            expected = self.expected
            pending = self._pending
            if pending is not None and pending.expected is None:
                if base != expected:
                    self.position = pos
                    self._unanchored()
                    return 0
                self._pending = None
                self._confirm(pending.batch)
                pending = None
            elif expected is None and self._anchor_first:
                # The first batch of an unanchored walk: its base offset (outside the CRC) is taken
                # on trust only once the next batch follows it exactly.
                self._pending = _Pending(batch, None)
                self.expected = last + 1
                pos += size
                continue
            if expected is not None and base < expected:
                self.position = pos
                if pending is not None:
                    self._fail(pos, f"base offset {pending.batch.base_offset} leaves a gap before it and "
                               f"overlaps the next batch at {base}")
                else:
                    self._fail(pos, f"base offset {base} is below {expected}, the offset after the previous batch")
                return 0
            if pending is not None:
                self._pending = None
                self._confirm(pending.batch)
            if expected is not None and base > expected:
                self._pending = _Pending(batch, expected)
            else:
                self._confirm(batch)
            self.expected = last + 1
            pos += size
        self.position = pos
        return 0


def check_record_set(data: Buffer, *, expected_offset: int | None = None) -> tuple[int, BatchProblem | None]:
    """How many leading bytes of an in-memory record set are whole, valid batches, and the problem
    after them. A batch cut off by the end of ``data`` is not a problem (a fetch may end inside one)."""
    walk = BatchWalk(0, expected_offset=expected_offset, segment_base=0, anchor_first=False)
    end = len(data)
    walk.feed(data, 0, end)
    problem = walk.problem
    if problem is not None and problem.torn:
        return walk.confirmed, None
    return walk.confirmed, problem


@dataclass(slots=True)
class VerifiedSpan:
    """Bytes [start, end) of a segment file holding whole batches that passed the checks, with the
    base offset of the first and the offset after the last."""

    start: int
    end: int
    first_offset: int
    next_offset: int


class VerifiedSpans:
    """The checked parts of one segment file, sorted and disjoint; spans that meet with offsets that
    follow on are merged, so a reader going through a segment leaves one span behind."""

    __slots__ = ("spans",)

    def __init__(self) -> None:
        self.spans: list[VerifiedSpan] = []

    def add(self, start: int, end: int, first_offset: int, next_offset: int) -> None:
        if end <= start:
            return
        spans = self.spans
        if spans:
            last = spans[-1]
            if last.end == start and last.next_offset == first_offset:
                # The append path: the new batches follow the last span in bytes and offsets.
                last.end, last.next_offset = end, next_offset
                return
        new = VerifiedSpan(start, end, first_offset, next_offset)
        kept: list[VerifiedSpan] = []
        for s in spans:
            if s.end < new.start or s.start > new.end:
                kept.append(s)
            elif s.end == new.start and s.next_offset > new.first_offset:
                kept.append(s)  # offsets that do not follow on: keep both, the walk judged each
            elif s.start == new.end and new.next_offset > s.first_offset:
                kept.append(s)
            else:
                if s.start < new.start:
                    new.start, new.first_offset = s.start, s.first_offset
                if s.end > new.end:
                    new.end, new.next_offset = s.end, s.next_offset
        kept.append(new)
        kept.sort(key=lambda s: s.start)
        self.spans = kept

    def containing_position(self, position: int) -> VerifiedSpan | None:
        for s in self.spans:
            if s.start <= position < s.end:
                return s
        return None

    def containing_offset(self, offset: int) -> VerifiedSpan | None:
        for s in self.spans:
            if s.first_offset <= offset < s.next_offset:
                return s
        return None

    def starting_at(self, position: int) -> VerifiedSpan | None:
        for s in self.spans:
            if s.start == position:
                return s
        return None

    def last_before_offset(self, offset: int) -> VerifiedSpan | None:
        """The span ending furthest into the file whose offsets all lie below ``offset``."""
        best: VerifiedSpan | None = None
        for s in self.spans:
            if s.next_offset <= offset and (best is None or s.end > best.end):
                best = s
        return best

    def truncate(self, size: int, next_offset: int | None = None) -> None:
        """The file was cut to ``size`` bytes, at a batch boundary where ``next_offset`` (if known)
        begins: a span reaching past the cut keeps its part before it."""
        kept: list[VerifiedSpan] = []
        for s in self.spans:
            if s.end <= size:
                kept.append(s)
            elif s.start < size and next_offset is not None:
                kept.append(VerifiedSpan(s.start, size, s.first_offset, next_offset))
        self.spans = kept

    def clear(self) -> None:
        self.spans = []

    @property
    def verified_bytes(self) -> int:
        return sum(s.end - s.start for s in self.spans)


__all__ = ["BatchProblem", "BatchWalk", "CheckedBatch", "VerifiedSpan", "VerifiedSpans", "check_record_set"]
