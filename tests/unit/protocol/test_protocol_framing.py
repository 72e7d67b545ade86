from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.errors import TierlogError
from tierlog.protocol import FrameDecoder, FrameTooLargeError, InvalidFrameError, ProtocolError, encode_frame
from tierlog.protocol.framing import DIRECT_FRAME_BYTES, READ_BUFFER_BYTES


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
