from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.errors import TierlogError
from tierlog.protocol import FrameDecoder, FrameTooLargeError, InvalidFrameError, ProtocolError, encode_frame
from tierlog.protocol.framing import DIRECT_FRAME_BYTES, READ_BUFFER_BYTES, _read_buffer


def test_encode_frame_prefixes_the_big_endian_size() -> None:
    assert encode_frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert encode_frame(b"") == b"\x00\x00\x00\x00"
    assert encode_frame(memoryview(b"xy")) == b"\x00\x00\x00\x02xy"


def test_frame_split_across_feeds_byte_by_byte() -> None:
    decoder = FrameDecoder(1024)
    wire = encode_frame(b"hello")
    for byte in wire[:-1]:
        assert decoder.feed(bytes([byte])) == []
    assert decoder.pending_frame_bytes == 5
    assert decoder.feed(wire[-1:]) == [b"hello"]
    assert decoder.buffered_bytes == 0
    assert decoder.pending_frame_bytes is None


def test_several_frames_in_one_feed_and_a_partial_tail() -> None:
    decoder = FrameDecoder(1024)
    wire = encode_frame(b"one") + encode_frame(b"") + encode_frame(b"three") + encode_frame(b"four")[:6]
    assert decoder.feed(wire) == [b"one", b"", b"three"]
    assert decoder.buffered_bytes == 2  # "fo" of the torn fourth frame
    assert decoder.feed(b"ur") == [b"four"]


def test_size_prefix_split_between_feeds() -> None:
    decoder = FrameDecoder(1024)
    wire = encode_frame(b"abcdef")
    assert decoder.feed(wire[:2]) == []
    assert decoder.pending_frame_bytes is None
    assert decoder.feed(wire[2:5]) == []
    assert decoder.feed(wire[5:]) == [b"abcdef"]


def test_frame_of_exactly_the_maximum_is_accepted() -> None:
    decoder = FrameDecoder(4)
    assert decoder.feed(encode_frame(b"1234")) == [b"1234"]


def test_oversized_frame_is_rejected_as_soon_as_its_size_arrives() -> None:
    decoder = FrameDecoder(100)
    with pytest.raises(FrameTooLargeError) as info:
        decoder.feed(struct.pack(">i", 101))  # no body needed: the size alone condemns it
    assert info.value.size == 101
    assert info.value.max_frame_bytes == 100
    assert isinstance(info.value, ProtocolError)
    assert isinstance(info.value, TierlogError)
    # The stream is out of sync for good.
    with pytest.raises(FrameTooLargeError):
        decoder.feed(encode_frame(b"ok"))


def test_frames_before_an_oversized_one_are_lost_with_the_connection() -> None:
    decoder = FrameDecoder(10)
    with pytest.raises(FrameTooLargeError):
        decoder.feed(encode_frame(b"fine") + struct.pack(">i", 2**31 - 1))


@pytest.mark.parametrize("size", [-1, -2**31])
def test_negative_size_is_invalid(size: int) -> None:
    decoder = FrameDecoder(100)
    with pytest.raises(InvalidFrameError) as info:
        decoder.feed(struct.pack(">i", size) + b"junk")
    assert info.value.size == size
    with pytest.raises(InvalidFrameError):
        decoder.feed(b"")


def test_max_frame_bytes_is_validated() -> None:
    with pytest.raises(ValueError):
        FrameDecoder(-1)
    with pytest.raises(ValueError):
        FrameDecoder(2**31)


@settings(max_examples=50, deadline=None)
@given(
    frames=st.lists(st.binary(max_size=40), max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=10),
)
def test_any_split_of_the_stream_yields_the_same_frames(frames: list[bytes], cuts: list[int]) -> None:
    wire = b"".join(encode_frame(frame) for frame in frames)
    points = sorted({min(cut, len(wire)) for cut in cuts} | {0, len(wire)})
    decoder = FrameDecoder(40)
    received: list[bytes] = []
    for start, end in itertools.pairwise(points):
        received.extend(decoder.feed(wire[start:end]))
    assert received == frames
    assert decoder.buffered_bytes == 0


def read_in(decoder: FrameDecoder, wire: bytes, sizes: list[int]) -> list[bytes | bytearray]:
    """Feed ``wire`` as a BufferedProtocol's reads would: into the decoder's own buffer, each read
    at most the given size (and at most what the buffer has room for)."""
    frames: list[bytes | bytearray] = []
    pos, turn = 0, 0
    while pos < len(wire):
        target = decoder.get_buffer()
        assert len(target) > 0
        n = min(len(target), len(wire) - pos, max(1, sizes[turn % len(sizes)]) if sizes else len(wire))
        target[:n] = wire[pos:pos + n]
        pos += n
        turn += 1
        frames += decoder.buffer_updated(n)
    return frames


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([0, 1, 100, DIRECT_FRAME_BYTES - 5, DIRECT_FRAME_BYTES - 4, DIRECT_FRAME_BYTES,
                                    DIRECT_FRAME_BYTES + 1, 3 * DIRECT_FRAME_BYTES, READ_BUFFER_BYTES + 7]),
                   max_size=6),
    reads=st.lists(st.integers(min_value=1, max_value=READ_BUFFER_BYTES + 100), max_size=6),
)
def test_reads_into_the_decoders_buffers_yield_the_frames_of_any_size(sizes: list[int], reads: list[int]) -> None:
    frames = [bytes([i % 251]) * size for i, size in enumerate(sizes)]
    decoder = FrameDecoder(1 << 20)
    assert read_in(decoder, b"".join(encode_frame(f) for f in frames), reads) == frames
    assert decoder.buffered_bytes == 0 and decoder.pending_frame_bytes is None


def test_a_large_frame_is_collected_then_read_into_its_own_buffer() -> None:
    decoder = FrameDecoder(1 << 20)
    body = bytes(range(256)) * 1024  # 256 KiB
    wire = encode_frame(body) + encode_frame(b"next")
    assert read_in(decoder, wire[:1000], [1000]) == []
    # Less than an eighth of it: held as received, not at its declared size (a client declaring a
    # large frame and sending a little makes the broker hold what it sent, not what it declared).
    assert decoder.buffered_bytes == decoder.received_bytes == 996
    room = decoder.get_buffer()
    assert len(room) == len(body) - 996  # no more than the rest of this frame
    room[:40_000] = wire[1000:41_000]
    assert decoder.buffer_updated(40_000) == []
    # An eighth is in: from now on its bytes are read straight into a buffer of its size.
    assert decoder.buffered_bytes == len(body) and decoder.received_bytes == 40_996
    room = decoder.get_buffer()
    assert len(room) == len(body) - 40_996 and len(room.obj) == len(body)  # a view of the frame's own buffer
    room[:] = wire[41_000:4 + len(body)]
    [frame] = decoder.buffer_updated(len(room))
    assert type(frame) is bytearray and frame == body
    assert decoder.buffered_bytes == 0
    assert read_in(decoder, wire[4 + len(body):], []) == [b"next"]


def test_decoders_sharing_the_read_buffer_keep_their_partial_frames_apart() -> None:
    one, two = FrameDecoder(1 << 20), FrameDecoder(1 << 20)
    a, b = encode_frame(b"a" * 3000), encode_frame(b"b" * 5000)
    assert read_in(one, a[:1500], []) == []
    assert read_in(two, b[:2500], []) == []
    assert read_in(one, a[1500:], []) == [b"a" * 3000]
    assert read_in(two, b[2500:], []) == [b"b" * 5000]


def test_an_oversized_frame_read_into_the_buffer_is_refused_before_its_body() -> None:
    decoder = FrameDecoder(DIRECT_FRAME_BYTES)
    with pytest.raises(FrameTooLargeError):
        read_in(decoder, struct.pack(">i", DIRECT_FRAME_BYTES + 1), [])
    with pytest.raises(FrameTooLargeError):
        decoder.get_buffer()


def read_greedily(decoder: FrameDecoder, wire: bytes, sizes: list[int]) -> tuple[list[bytes | bytearray], int]:
    """As :func:`read_in`, each read taking all the room it is given when its size is 0 (a client
    that pipelines: the socket holds more than any buffer), and checking after every read that the
    decoder holds at most nine times what it has received of the frame being received (an eighth
    in, plus the lent buffer's room) or the shared buffer's size. Also counts the reads that went
    into the shared read buffer (whose bytes are then copied out) rather than a frame's own."""
    frames: list[bytes | bytearray] = []
    pos, turn, shared_reads = 0, 0, 0
    while pos < len(wire):
        target = decoder.get_buffer()
        shared_reads += target.obj is _read_buffer()
        size = sizes[turn % len(sizes)] if sizes else 0
        n = min(len(target), len(wire) - pos, size or len(target))
        target[:n] = wire[pos:pos + n]
        pos += n
        turn += 1
        frames += decoder.buffer_updated(n)
        assert decoder.buffered_bytes <= max(9 * decoder.received_bytes, READ_BUFFER_BYTES)
    return frames, shared_reads


@settings(max_examples=80, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([0, 7, DIRECT_FRAME_BYTES - 1, DIRECT_FRAME_BYTES, 100_000, 300_000, 300_000 + 37_500,
                                    300_000 - 3, 300_000 + 37_501, 2 * READ_BUFFER_BYTES, 3 * READ_BUFFER_BYTES + 5]),
                   min_size=1, max_size=8),
    reads=st.lists(st.sampled_from([0, 0, 0, 1, 3, 4, 5, 1000, 12_000, 37_504, 300_004, READ_BUFFER_BYTES]), max_size=6),
)
def test_reads_into_buffers_lent_for_the_next_large_frame_yield_the_frames(sizes: list[int], reads: list[int]) -> None:
    # Large frames of equal, smaller, slightly and much larger sizes, small ones between them, read
    # in pieces of any size or greedily: the same frames, in order, and never more held than allowed.
    frames = [bytes([i % 251]) * size for i, size in enumerate(sizes)]
    decoder = FrameDecoder(4 << 20)
    got, _ = read_greedily(decoder, b"".join(encode_frame(f) for f in frames), reads)
    assert got == frames
    assert decoder.buffered_bytes == 0 and decoder.pending_frame_bytes is None


def test_pipelined_large_frames_of_one_size_are_read_with_no_copy() -> None:
    body = bytes(range(256)) * 4096  # 1 MiB
    frames = [body[i:] + body[:i] for i in range(5)]
    decoder = FrameDecoder(4 << 20)
    got, shared_reads = read_greedily(decoder, b"".join(encode_frame(f) for f in frames), [])
    assert got == frames
    # Only the first read went through the shared buffer (one copy of what it brought); every later
    # one into the buffer lent for the next frame, which is the frame returned.
    assert shared_reads == 1
    assert all(type(f) is bytearray for f in got)


def test_a_frame_a_little_larger_than_the_last_fits_the_lent_buffers_room() -> None:
    first, second = b"a" * 1_000_000, b"b" * 1_100_000  # within an eighth more
    decoder = FrameDecoder(4 << 20)
    got, shared_reads = read_greedily(decoder, encode_frame(first) + encode_frame(second) + encode_frame(b"c"), [])
    assert got == [first, second, b"c"] and shared_reads == 1


def test_a_smaller_frame_after_a_large_one_leaves_the_next_ones_start_to_be_cut() -> None:
    # The read lent the first's size brings the second, the third and the fourth's start.
    frames = [b"a" * 1_000_000, b"b" * 600_000, b"c" * 3, b"d" * 1_000_000, b"e" * 1_000_000]
    decoder = FrameDecoder(4 << 20)
    got, _ = read_greedily(decoder, b"".join(encode_frame(f) for f in frames), [])
    assert got == frames


def test_a_buffer_lent_but_not_read_into_is_lent_again() -> None:
    # asyncio asks for a buffer and may find nothing to read (EAGAIN): buffer_updated is not called.
    frames = [b"a" * 300_000, b"b" * 300_000]
    wire = b"".join(encode_frame(f) for f in frames)
    decoder = FrameDecoder(1 << 20)
    got, _ = read_greedily(decoder, wire[:4 + 300_000], [])
    assert got == frames[:1]
    first = decoder.get_buffer()  # lent, nothing read
    assert len(first) == 4 + 300_000
    lent = first.obj
    target = decoder.get_buffer()
    assert target.obj is lent
    target[:len(wire) - 300_004] = wire[300_004:]
    assert decoder.buffer_updated(len(wire) - 300_004) == frames[1:]


def test_a_lent_buffer_still_viewed_elsewhere_is_copied_not_resized() -> None:
    frames = [b"a" * 300_000, b"b" * 300_000]
    decoder = FrameDecoder(1 << 20)
    assert read_greedily(decoder, encode_frame(frames[0]), [])[0] == frames[:1]
    target = decoder.get_buffer()
    held = target.obj
    kept = memoryview(held)  # a reader that holds a view of what it was lent
    wire = encode_frame(frames[1])
    target[:len(wire)] = wire
    [frame] = decoder.buffer_updated(len(wire))
    assert frame == frames[1] and frame is not held
    kept.release()


def test_a_large_frame_declared_after_a_large_one_and_barely_sent_is_not_held_at_its_size() -> None:
    decoder = FrameDecoder(8 << 20)
    assert read_greedily(decoder, encode_frame(b"a" * 1_000_000), [])[0] == [b"a" * 1_000_000]
    # The next read goes into a buffer of ~1 MB; it brings only the prefix and 1,000 bytes of a
    # 900 KB frame: what came is kept, not the lent buffer.
    target = decoder.get_buffer()
    assert len(target) == 4 + 1_000_000
    target[:1004] = struct.pack(">i", 900_000) + b"x" * 1000
    assert decoder.buffer_updated(1004) == []
    assert decoder.buffered_bytes == decoder.received_bytes == 1000
    assert decoder.pending_frame_bytes == 900_000


def test_frames_smaller_than_a_read_are_still_read_several_at_once() -> None:
    # 20 KB produce requests pipelined: one read into the shared buffer brings many; a buffer lent
    # for one at a time would cost a read (an event-loop turn) each.
    frames = [bytes([i]) * 20_000 for i in range(10)]
    decoder = FrameDecoder(1 << 20)
    reads = 0
    wire = b"".join(encode_frame(f) for f in frames)
    got: list[bytes | bytearray] = []
    pos = 0
    while pos < len(wire):
        target = decoder.get_buffer()
        n = min(len(target), len(wire) - pos)
        target[:n] = wire[pos:pos + n]
        pos += n
        reads += 1
        got += decoder.buffer_updated(n)
    assert got == frames and reads == 1
