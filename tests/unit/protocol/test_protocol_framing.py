from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.errors import TierlogError
from tierlog.protocol import FrameDecoder, FrameTooLargeError, InvalidFrameError, ProtocolError, encode_frame


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
