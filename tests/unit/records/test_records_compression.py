"""The codecs: round trips, Kafka's exact framing, foreign framings, corrupt input."""

from __future__ import annotations

import gzip
import random
import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.errors import ConfigError, CorruptRecordError, UnsupportedCompressionTypeError
from tierlog.records import CompressionType, compress, compression_type_for_name, decompress
from tierlog.records._xxhash import xxh32
from tierlog.records.compression import LZ4_FRAME_HEADER, XERIAL_HEADER

CODECS = [0, 1, 2, 3, 4]


def _data(size: int, seed: int = 1) -> bytes:
    """Compressible but not trivial: random words."""
    rng = random.Random(seed)
    words = [bytes(rng.choices(b"abcdefghij", k=rng.randint(1, 8))) for _ in range(200)]
    out = bytearray()
    while len(out) < size:
        out += rng.choice(words) + b" "
    return bytes(out[:size])


def _lz4_blocks(frame: bytes) -> list[tuple[bool, bytes]]:
    """Split one of our LZ4 frames into (is_uncompressed, payload) blocks, checking the end mark."""
    assert frame[:7] == LZ4_FRAME_HEADER
    pos = 7
    blocks = []
    while True:
        (word,) = struct.unpack_from("<I", frame, pos)
        pos += 4
        if word == 0:
            break
        size = word & 0x7FFFFFFF
        blocks.append((bool(word & 0x80000000), frame[pos : pos + size]))
        pos += size
    assert pos == len(frame), "no content checksum or trailing bytes after the end mark"
    return blocks


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("size", [0, 1, 1000, 100_000, 300_000])
def test_round_trip(codec: int, size: int) -> None:
    data = _data(size)
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_incompressible(codec: int) -> None:
    data = random.Random(5).randbytes(200_000)
    assert decompress(codec, compress(codec, data)) == data


def test_gzip_and_zstd_are_standard_streams() -> None:
    data = _data(50_000)
    assert gzip.decompress(compress(1, data)) == data
    assert bytes(cramjam.zstd.decompress(compress(4, data))) == data
    # and we read what the standard library writes, at any level
    assert decompress(1, gzip.compress(data, compresslevel=1)) == data


def test_lz4_writes_independent_blocks_of_at_most_64k_that_decode_on_their_own() -> None:
    data = _data(200_000)
    frame = compress(3, data)
    flg = frame[4]
    assert flg == 0x60
    assert flg & 0x20, "block independence flag"
    assert not flg & 0x1C, "no block checksum, content size or content checksum"
    blocks = _lz4_blocks(frame)
    assert len(blocks) == 4  # 64 KiB + 64 KiB + 64 KiB + the rest
    pieces = []
    for uncompressed, payload in blocks:
        assert not uncompressed
        # Each block must decompress with no history from the one before it.
        pieces.append(bytes(cramjam.lz4.decompress_block(payload, output_len=65536)))
    assert [len(p) for p in pieces[:3]] == [65536] * 3
    assert b"".join(pieces)[: len(data)] == data


def test_lz4_stores_incompressible_blocks_raw() -> None:
    data = random.Random(3).randbytes(70_000)
    blocks = _lz4_blocks(compress(3, data))
    assert [(raw, len(p)) for raw, p in blocks] == [(True, 65536), (True, 70_000 - 65536)]
    assert b"".join(p for _, p in blocks) == data


@pytest.mark.parametrize("level", [1, 9, 17])
def test_lz4_levels_round_trip(level: int) -> None:
    data = _data(100_000)
    assert decompress(3, compress(3, data, level)) == data


def test_lz4_reads_frames_other_writers_produce() -> None:
    lz4_frame = pytest.importorskip("lz4.frame")
    data = _data(300_000)
    variants = {
        "content size (kafka-python)": lz4_frame.compress(data, block_linked=False),
        "block + content checksums": lz4_frame.compress(
            data, block_linked=False, block_checksum=True, content_checksum=True, store_size=False
        ),
        "256 KiB blocks": lz4_frame.compress(data, block_linked=False, block_size=lz4_frame.BLOCKSIZE_MAX256KB),
        "linked blocks": lz4_frame.compress(data, block_linked=True),
    }
    for name, frame in variants.items():
        assert decompress(3, frame) == data, name
    # cramjam's own frame writer: linked blocks with block and content checksums
    assert decompress(3, bytes(cramjam.lz4.compress(data))) == data


def test_lz4_concatenated_frames() -> None:
    assert decompress(3, compress(3, b"abc" * 100) + compress(3, b"xyz")) == b"abc" * 100 + b"xyz"


def test_lz4_checksum_failures_are_detected() -> None:
    lz4_frame = pytest.importorskip("lz4.frame")
    data = _data(10_000)
    frame = bytearray(lz4_frame.compress(data, block_linked=False, block_checksum=True, store_size=False))
    frame[-5] ^= 0xFF  # the last block's checksum, just before the 4-byte end mark
    with pytest.raises(CorruptRecordError, match="checksum"):
        decompress(3, bytes(frame))
    frame = bytearray(lz4_frame.compress(data, block_linked=False, content_checksum=True, store_size=False))
    frame[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="content checksum"):
        decompress(3, bytes(frame))


def test_lz4_header_checksum_is_verified() -> None:
    frame = bytearray(compress(3, b"hello" * 50))
    frame[6] ^= 0x01
    with pytest.raises(CorruptRecordError, match="header checksum"):
        decompress(3, bytes(frame))
    # A descriptor other than Kafka's is checked against xxh32 too (content-size flag set here).
    desc = bytes([0x68, 0x40]) + struct.pack("<Q", 5)
    good = b"\x04\x22\x4d\x18" + desc + bytes([(xxh32(desc) >> 8) & 0xFF])
    body = struct.pack("<I", 0x80000005) + b"hello" + b"\x00\x00\x00\x00"
    assert decompress(3, good + body) == b"hello"
    with pytest.raises(CorruptRecordError, match="declares 6 content bytes"):
        desc6 = bytes([0x68, 0x40]) + struct.pack("<Q", 6)
        decompress(3, b"\x04\x22\x4d\x18" + desc6 + bytes([(xxh32(desc6) >> 8) & 0xFF]) + body)


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (b"\x04\x22\x4d", "shorter than"),
        (b"\x05\x22\x4d\x18\x60\x40\x82\x00\x00\x00\x00", "bad magic"),
        (LZ4_FRAME_HEADER, "end mark"),
        (LZ4_FRAME_HEADER + struct.pack("<I", 100) + b"abc", "declares 100 bytes"),
        (LZ4_FRAME_HEADER + struct.pack("<I", 70_000) + bytes(70_000), "exceeds"),
        (LZ4_FRAME_HEADER + struct.pack("<I", 5) + b"\xff\xff\xff\xff\xff" + b"\x00" * 4, "corrupt lz4"),
        (LZ4_FRAME_HEADER + b"\x00\x00\x00\x00" + b"junk", "shorter than"),
    ],
)
def test_lz4_corrupt_frames(frame: bytes, message: str) -> None:
    with pytest.raises(CorruptRecordError, match=message):
        decompress(3, frame)


def test_snappy_writes_xerial_chunks_of_32k_input() -> None:
    data = _data(100_000)
    out = compress(2, data)
    assert out[:16] == XERIAL_HEADER
    pos = 16
    chunks = []
    while pos < len(out):
        (length,) = struct.unpack_from(">i", out, pos)
        pos += 4
        chunks.append(bytes(cramjam.snappy.decompress_raw(out[pos : pos + length])))
        pos += length
    assert [len(c) for c in chunks] == [32768, 32768, 32768, 100_000 - 3 * 32768]
    assert b"".join(chunks) == data


def test_snappy_reads_a_raw_block_as_librdkafka_writes_it() -> None:
    data = _data(100_000)
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert raw[:8] != XERIAL_HEADER[:8]
    assert decompress(2, raw) == data


def test_snappy_ignores_the_xerial_version_fields() -> None:
    data = _data(1000)
    framed = bytearray(compress(2, data))
    framed[8:16] = struct.pack("<ii", 1, 1)  # written little-endian by some producers
    assert decompress(2, bytes(framed)) == data


def test_snappy_empty_stream() -> None:
    assert decompress(2, b"") == b""
    assert decompress(2, XERIAL_HEADER) == b""


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (XERIAL_HEADER[:12], "header is truncated"),
        (XERIAL_HEADER + b"\x00\x00", "chunk length"),
        (XERIAL_HEADER + struct.pack(">i", 50) + b"abc", "declares 50 bytes"),
        (XERIAL_HEADER + struct.pack(">i", -1), "declares -1 bytes"),
        (XERIAL_HEADER + struct.pack(">i", 3) + b"\xff\xff\xff", "corrupt snappy"),
        (b"\xff\xff\xff\x0fgarbage", "corrupt snappy"),
    ],
)
def test_snappy_corrupt(data: bytes, message: str) -> None:
    with pytest.raises(CorruptRecordError, match=message):
        decompress(2, data)


@pytest.mark.parametrize("codec", [1, 3, 4])
def test_truncated_streams_are_corrupt(codec: int) -> None:
    stream = compress(codec, _data(100_000))
    with pytest.raises(CorruptRecordError):
        decompress(codec, stream[: len(stream) // 2])


@pytest.mark.parametrize("codec", [1, 4])
def test_garbage_is_corrupt(codec: int) -> None:
    with pytest.raises(CorruptRecordError, match=CompressionType(codec).name.lower()):
        decompress(codec, b"definitely not compressed")


@pytest.mark.parametrize("codec", [5, 6, 7, -1])
def test_unknown_codec(codec: int) -> None:
    with pytest.raises(UnsupportedCompressionTypeError, match=str(codec)):
        compress(codec, b"x")
    with pytest.raises(UnsupportedCompressionTypeError):
        decompress(codec, b"x")


@pytest.mark.parametrize(
    ("codec", "level", "key"),
    [(1, 0, "gzip"), (1, 10, "gzip"), (3, 0, "lz4"), (3, 18, "lz4"), (4, 23, "zstd"), (4, -131073, "zstd")],
)
def test_levels_out_of_range(codec: int, level: int, key: str) -> None:
    with pytest.raises(ConfigError, match=f"compression.{key}.level"):
        compress(codec, b"x", level)


@pytest.mark.parametrize(("codec", "level"), [(1, -1), (1, 1), (1, 9), (4, -5), (4, 22)])
def test_levels_in_range(codec: int, level: int) -> None:
    data = _data(10_000)
    assert decompress(codec, compress(codec, data, level)) == data


def test_names() -> None:
    assert compression_type_for_name("uncompressed") is CompressionType.NONE
    assert compression_type_for_name("ZSTD") is CompressionType.ZSTD
    with pytest.raises(UnsupportedCompressionTypeError):
        compression_type_for_name("brotli")


@settings(max_examples=300, deadline=None)
@given(codec=st.sampled_from([1, 2, 3, 4]), garbage=st.binary(max_size=64), prefix=st.booleans())
def test_garbage_raises_only_corrupt_record(codec: int, garbage: bytes, prefix: bool) -> None:
    # With the right magic in front, the codec's own parser gets past the first check.
    lead = {1: b"\x1f\x8b\x08\x00", 2: XERIAL_HEADER, 3: LZ4_FRAME_HEADER, 4: b"\x28\xb5\x2f\xfd"}[codec]
    try:
        decompress(codec, (lead if prefix else b"") + garbage)
    except CorruptRecordError:
        pass


@settings(max_examples=200, deadline=None)
@given(codec=st.sampled_from([1, 2, 3, 4]), position=st.integers(0, 10_000), bit=st.integers(0, 7))
def test_bit_flips_raise_only_corrupt_record_or_decode(codec: int, position: int, bit: int) -> None:
    stream = bytearray(compress(codec, _data(3_000, seed=9)))
    stream[position % len(stream)] ^= 1 << bit
    try:
        decompress(codec, bytes(stream))
    except CorruptRecordError:
        pass
