"""The produce path's one-call batch check (``check_batch`` in the C extension) answers what the Python
checks it stands for answer, on valid batches and on batches damaged anywhere -- the header's length,
magic, CRC, attributes, offsets, producer fields and record count, and the records -- with and
without a CRC recomputed over the damage; parse_and_validate gives the same batches, the same
stats and the same errors with it as without it; and the C header_copy makes the Python one's bytes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog._util.crc import crc32c, crc32c_small
from tierlog.config import LogConfig
from tierlog.errors import TierlogError
from tierlog.records import SimpleRecord, build_batch, reader
from tierlog.records.compression import CompressionType
from tierlog.records.header import CRC, CRC_START, NO_PRODUCER_ID, BatchHeader, fast_header_copy, header_copy
from tierlog.records.reader import check_batch_python, check_header_python
from tierlog.storage import append_validation
from tierlog.storage.append_validation import parse_and_validate

BASE_TS = 1_700_000_000_000
#: length, magic, attributes (high and low byte), lastOffsetDelta, baseTimestamp, producer id,
#: producer epoch, base sequence, record count; and the last byte of the count and of the length.
FIELD_STARTS = [8, 11, 16, 21, 22, 23, 26, 27, 43, 51, 53, 57, 60]


def c_check(buf: bytes | bytearray, computed_crc: int, from_client: bool) -> tuple[int, int, int, bool] | None:
    if reader.c_check_batch is None:
        pytest.skip("tierlog.records._cwalk is not built (the install step found no C compiler)")
    return reader.c_check_batch(buf, computed_crc, from_client)


@st.composite
def batches(draw: st.DrawFn) -> bytearray:
    """A batch as producers send it, maybe damaged: bytes overwritten (in the header more often than
    not), its CRC recomputed over the damage or not, bytes cut off or added at the end."""
    records = [
        SimpleRecord(draw(st.one_of(st.none(), st.binary(max_size=8))), draw(st.binary(max_size=40)),
                     timestamp=draw(st.one_of(st.none(), st.integers(BASE_TS - 10**6, BASE_TS + 10**6))))
        for _ in range(draw(st.integers(1, 12)))
    ]
    producer_id = draw(st.sampled_from([NO_PRODUCER_ID, 7, 1 << 40]))
    buf = bytearray(build_batch(
        records,
        compression=draw(st.sampled_from([CompressionType.NONE] * 4 + [CompressionType.GZIP])),
        producer_id=producer_id,
        producer_epoch=draw(st.integers(0, 3)) if producer_id != NO_PRODUCER_ID else -1,
        base_sequence=draw(st.integers(0, 100)) if producer_id != NO_PRODUCER_ID else -1,
        is_transactional=producer_id != NO_PRODUCER_ID and draw(st.booleans()),
        is_control=draw(st.integers(0, 9)) == 0,
        base_offset=draw(st.sampled_from([0, 5])),
        partition_leader_epoch=draw(st.sampled_from([-1, 3])),
    ))
    for _ in range(draw(st.integers(0, 3))):
        # The first byte of a header field (its sign and magnitude), any header byte, any byte.
        where = draw(st.one_of(st.sampled_from(FIELD_STARTS), st.integers(0, 60), st.integers(0, len(buf) - 1)))
        buf[where % len(buf)] = draw(st.sampled_from([0, 1, 2, 0x7F, 0x80, 0xFF, draw(st.integers(0, 255))]))
    if draw(st.booleans()):
        buf[CRC:CRC + 4] = crc32c(bytes(buf[CRC_START:])).to_bytes(4, "big")
    cut = draw(st.integers(-3, 3))
    if cut < 0:
        del buf[cut:]
    elif cut > 0 and draw(st.integers(0, 3)) == 0:
        buf += bytes(cut)
    return buf


@settings(max_examples=600, deadline=None)
@given(batches(), st.booleans(), st.booleans())
def test_c_check_batch_answers_what_the_python_checks_answer(buf: bytearray, from_client: bool,
                                                             as_bytes: bool) -> None:
    data: bytes | bytearray = bytes(buf) if as_bytes else buf
    computed = crc32c(bytes(buf[CRC_START:]))
    assert c_check(data, computed, from_client) == check_batch_python(data, computed, from_client)


def _slots(header: BatchHeader) -> dict[str, object]:
    return {name: getattr(header, name) for name in BatchHeader.__slots__}


@settings(max_examples=600, deadline=None)
@given(batches(), st.booleans(), st.sampled_from([bytes, bytearray, memoryview]))
def test_c_check_header_answers_what_the_python_checks_answer_slot_by_slot(buf: bytearray, from_client: bool,
                                                                            kind: type) -> None:
    """The header the C call builds (without BatchHeader's __init__) has every slot BatchHeader(buf, 0)
    has, the buffer object itself as its ``buf``; the rest of the answer is check_batch's."""
    if reader.c_check_header is None:
        pytest.skip("tierlog.records._cwalk is not built (the install step found no C compiler)")
    data = kind(bytes(buf))
    computed = crc32c(bytes(buf[CRC_START:]))
    with_c = reader.c_check_header(data, computed, from_client)
    reference = check_header_python(data, computed, from_client)
    if reference is None:
        assert with_c is None
        return
    assert with_c is not None
    assert type(with_c[0]) is BatchHeader and with_c[0].buf is data
    assert _slots(with_c[0]) == _slots(reference[0])
    assert with_c[1:] == reference[1:] == check_batch_python(data, computed, from_client)
    assert with_c[0].last_offset == reference[0].last_offset and with_c[0].is_valid()


def test_c_check_header_fills_extreme_header_fields() -> None:
    """Every field at the ends of its range (negative offsets and epochs, an unsigned CRC over 2^31)."""
    if reader.c_check_header is None:
        pytest.skip("tierlog.records._cwalk is not built (the install step found no C compiler)")
    for producer_id, epoch, sequence, base_offset, leader_epoch in ((NO_PRODUCER_ID, -1, -1, -(1 << 63), -(1 << 31)),
                                                                    ((1 << 63) - 1, (1 << 15) - 1, (1 << 31) - 1,
                                                                     (1 << 63) - 1, (1 << 31) - 1)):
        batch = build_batch([SimpleRecord(b"k", b"v", timestamp=BASE_TS)], producer_id=producer_id,
                            producer_epoch=epoch, base_sequence=sequence, base_offset=base_offset,
                            partition_leader_epoch=leader_epoch)
        computed = crc32c(batch[CRC_START:])
        with_c, reference = reader.c_check_header(batch, computed, False), check_header_python(batch, computed, False)
        assert with_c is not None and reference is not None
        assert _slots(with_c[0]) == _slots(reference[0])


def test_the_c_extension_refuses_a_header_class_with_other_slots() -> None:
    """A field added to BatchHeader that the C call would leave unset fails at import, not later."""
    if reader.c_check_header is None:
        pytest.skip("tierlog.records._cwalk is not built (the install step found no C compiler)")
    from tierlog.records import _cwalk

    class Wider(BatchHeader):
        __slots__ = ("extra",)

    class Narrower:
        __slots__ = (*BatchHeader.__slots__[:-1], "other")

    for cls in (Wider, Narrower, int):
        with pytest.raises(TypeError):
            _cwalk.set_header_type(cls)
    _cwalk.set_header_type(BatchHeader)  # still BatchHeader's after the refusals
    batch = build_batch([SimpleRecord(b"k", b"v", timestamp=BASE_TS)])
    answer = reader.c_check_header(batch, crc32c(batch[CRC_START:]), True)
    assert answer is not None and type(answer[0]) is BatchHeader


def test_c_check_batch_takes_every_kind_of_buffer_and_refuses_a_wrong_crc() -> None:
    batch = build_batch([SimpleRecord(b"k", b"v" * 100, timestamp=BASE_TS + i) for i in range(3)])
    computed = crc32c(batch[CRC_START:])
    expected = (BASE_TS, BASE_TS + 2, 2, False)
    for buf in (batch, bytearray(batch), memoryview(batch)):
        assert c_check(buf, computed, True) == expected == check_batch_python(buf, computed, True)
    assert c_check(batch, computed ^ 1, True) is None
    assert c_check(batch[:40], computed, True) is None


def test_c_check_batch_walks_a_batch_long_enough_to_let_go_of_the_gil() -> None:
    records = [SimpleRecord(None, b"x" * 10, timestamp=BASE_TS + i % 7) for i in range(2000)]
    batch = build_batch(records)
    computed = crc32c(batch[CRC_START:])
    assert c_check(batch, computed, True) == (BASE_TS, BASE_TS + 6, 6, True) == check_batch_python(batch, computed, True)


def _outcome(buf: bytes, config: LogConfig, from_client: bool) -> Iterator[object]:
    try:
        headers, stats = parse_and_validate(buf, config, from_client=from_client, topic_partition="t-0",
                                            now_ms=BASE_TS)
    except TierlogError as e:
        yield type(e), str(e), getattr(e, "record_errors", None)
        return
    for h, s in zip(headers, stats, strict=True):
        yield (h.position, h.size_bytes, h.base_offset, h.records_count, h.max_timestamp, h.producer_id, h.buf is buf)
        yield s


@settings(max_examples=400, deadline=None)
@given(batches(), st.booleans(), st.booleans(), st.integers(-80, 80), st.integers(-80, 80), st.booleans())
def test_parse_and_validate_is_the_same_with_and_without_the_c_check(
    buf: bytearray, from_client: bool, compact: bool, max_message_skew: int, segment_skew: int, two: bool,
) -> None:
    if reader.c_check_batch is None:
        pytest.skip("tierlog.records._cwalk is not built (the install step found no C compiler)")
    data = bytes(buf + buf) if two else bytes(buf)  # two batches: never taken by the one-call check
    config = LogConfig(cleanup_policy=("compact",) if compact else ("delete",),
                       max_message_bytes=max(1, len(data) + max_message_skew),
                       segment_bytes=max(14, len(data) + segment_skew))
    with_c = list(_outcome(data, config, from_client))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(append_validation, "c_check_header", None)
        without_c = list(_outcome(data, config, from_client))
    assert with_c == without_c


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=61, max_size=200), st.data(), st.integers(-(1 << 63), (1 << 63) - 1),
       st.integers(-(1 << 31), (1 << 31) - 1))
def test_c_header_copy_is_header_copy(buf: bytes, data: st.DataObject, base_offset: int, epoch: int) -> None:
    if fast_header_copy is header_copy:
        pytest.skip("tierlog.records._cwalk is not built (the install step found no C compiler)")
    position = data.draw(st.integers(0, len(buf) - 61))
    view = memoryview(bytearray(buf))
    copy = fast_header_copy(view, position, base_offset, epoch)
    assert type(copy) is bytearray and copy == header_copy(view, position, base_offset, epoch)
    with pytest.raises(ValueError):
        fast_header_copy(view, len(buf) - 60, base_offset, epoch)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=70_000), st.integers(0, 30), st.sampled_from([bytes, bytearray, memoryview]))
def test_the_small_buffer_crc_is_crc32c(data: bytes, start: int, kind: type) -> None:
    """The produce path's CRC of a batch (fastcrc when installed) is CRC-32C, on every kind of buffer
    it is given, a slice of one too."""
    buf = memoryview(kind(data))[min(start, len(data)):] if kind is memoryview else kind(data)
    assert crc32c_small(buf) == crc32c(bytes(buf))


@pytest.mark.parametrize("size", [(64 << 10) + 1, (1 << 20) - 61, 1 << 20, (8 << 20) + 3])
def test_the_batch_crc_of_large_batches_is_crc32c(size: int) -> None:
    data = bytes(range(256)) * (size // 256 + 1)
    view = memoryview(bytearray(data[:size + 61]))[61:]  # where a batch's CRC starts, in a frame
    assert crc32c_small(view) == crc32c(bytes(view))
