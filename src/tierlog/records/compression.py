"""The five batch compression codecs with Kafka's framing (KAFKA-FACTS §1.5), on top of cramjam.

cramjam gives raw algorithms; the framing around them is ours where Kafka's differs from cramjam's
defaults:

* snappy: Kafka (via xerial) writes a 16-byte header then ``int32 BE length + raw block`` chunks of
  32 KiB input. librdkafka writes one raw block without any framing, so the reader accepts both.
* lz4: Kafka needs independent blocks of at most 64 KiB, no checksums and no content size. cramjam's
  frame writer always sets the block-checksum flag and picks its own block size, so the frame is
  assembled here from cramjam's block compressor.
* gzip and zstd are standard streams and cramjam's framing is already right.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Final

import cramjam

from tierlog.errors import ConfigError, CorruptRecordError, UnsupportedCompressionTypeError
from tierlog.records._xxhash import xxh32

Buffer = bytes | bytearray | memoryview


class CompressionType(IntEnum):
    """Codec ids as stored in bits 0-2 of the batch attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


_NAMES: Final = {
    "none": CompressionType.NONE,
    # BrokerCompressionType spells "no compression" this way in compression.type.
    "uncompressed": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}


def compression_type_for_name(name: str) -> CompressionType:
    """Map a ``compression.type`` value (other than ``producer``) to its codec id."""
    try:
        return _NAMES[name.strip().lower()]
    except KeyError:
        raise UnsupportedCompressionTypeError(f"unknown compression type {name!r}") from None


def as_compression_type(codec: int) -> CompressionType:
    """The codec for an attributes id; UnsupportedCompressionTypeError for ids Kafka does not know."""
    try:
        return CompressionType(codec)
    except ValueError:
        raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec}") from None


# ---------------------------------------------------------------------------------------------- levels
# Ranges and defaults are Kafka's (GzipCompression, Lz4Compression, ZstdCompression; KIP-390).
GZIP_DEFAULT_LEVEL: Final = -1
LZ4_MIN_LEVEL, LZ4_MAX_LEVEL, LZ4_DEFAULT_LEVEL = 1, 17, 9
ZSTD_MIN_LEVEL, ZSTD_MAX_LEVEL, ZSTD_DEFAULT_LEVEL = -131072, 22, 3
# java.util.zip.Deflater's DEFAULT_COMPRESSION (-1) means zlib's level 6.
_ZLIB_DEFAULT_LEVEL: Final = 6


def _gzip_level(level: int | None) -> int:
    if level is None or level == GZIP_DEFAULT_LEVEL:
        return _ZLIB_DEFAULT_LEVEL
    if not 1 <= level <= 9:
        raise ConfigError("compression.gzip.level", f"{level} is not -1 or within [1, 9]")
    return level


def _check_range(key: str, level: int, low: int, high: int) -> int:
    if not low <= level <= high:
        raise ConfigError(key, f"{level} is not within [{low}, {high}]")
    return level


# ---------------------------------------------------------------------------------------------- public


def compress(codec: int, data: Buffer, level: int | None = None) -> bytes:
    """Compress ``data`` into the stream Kafka's producer would put after the batch header."""
    kind = as_compression_type(codec)
    if kind is CompressionType.NONE:
        return bytes(data)
    if kind is CompressionType.GZIP:
        return bytes(cramjam.gzip.compress(data, level=_gzip_level(level)))
    if kind is CompressionType.SNAPPY:
        return _snappy_compress(data)
    if kind is CompressionType.LZ4:
        lz4_level = LZ4_DEFAULT_LEVEL if level is None else level
        return _lz4_compress(data, _check_range("compression.lz4.level", lz4_level, LZ4_MIN_LEVEL, LZ4_MAX_LEVEL))
    zstd_level = ZSTD_DEFAULT_LEVEL if level is None else level
    _check_range("compression.zstd.level", zstd_level, ZSTD_MIN_LEVEL, ZSTD_MAX_LEVEL)
    return bytes(cramjam.zstd.compress(data, level=zstd_level))


def decompress(codec: int, data: Buffer) -> bytes:
    """Undo :func:`compress`, also accepting what other clients write (raw snappy, any LZ4 frame).

    Raises CorruptRecordError when the stream is damaged.
    """
    kind = as_compression_type(codec)
    if kind is CompressionType.NONE:
        return bytes(data)
    try:
        if kind is CompressionType.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if kind is CompressionType.SNAPPY:
            return _snappy_decompress(data)
        if kind is CompressionType.LZ4:
            return _lz4_decompress(data)
        return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as e:
        raise CorruptRecordError(f"corrupt {kind.name.lower()} data in record batch: {e}") from None


# ---------------------------------------------------------------------------------------------- snappy

XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
# magic + int32 BE version 1 + int32 BE minimum compatible version 1, as SnappyOutputStream writes it.
XERIAL_HEADER: Final = XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01"
XERIAL_BLOCK_SIZE: Final = 32 * 1024
_I32_BE = struct.Struct(">i")


def _snappy_compress(data: Buffer) -> bytes:
    view = memoryview(data)
    out = bytearray(XERIAL_HEADER)
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE])
        out += _I32_BE.pack(len(block))
        out += block
    return bytes(out)


def _snappy_decompress(data: Buffer) -> bytes:
    view = memoryview(data)
    if len(view) == 0:
        # xerial's SnappyOutputStream writes nothing at all for an empty stream.
        return b""
    if view[: len(XERIAL_MAGIC)].tobytes() != XERIAL_MAGIC:
        # librdkafka: one raw snappy block, no framing (xerial's reader falls back the same way).
        return bytes(cramjam.snappy.decompress_raw(view))
    if len(view) < len(XERIAL_HEADER):
        raise CorruptRecordError(f"snappy xerial header is truncated ({len(view)} of 16 bytes)")
    # The version fields are not checked: some producers write them little-endian, and there has only
    # ever been one xerial block format.
    out = bytearray()
    pos = len(XERIAL_HEADER)
    end = len(view)
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError(f"snappy xerial chunk length at byte {pos} is truncated")
        (length,) = _I32_BE.unpack_from(view, pos)
        pos += 4
        if length < 0 or length > end - pos:
            raise CorruptRecordError(
                f"snappy xerial chunk at byte {pos - 4} declares {length} bytes but {end - pos} remain"
            )
        out += cramjam.snappy.decompress_raw(view[pos : pos + length])
        pos += length
    return bytes(out)


# ---------------------------------------------------------------------------------------------- lz4

LZ4_MAGIC: Final = 0x184D2204
_LZ4_MAGIC_BYTES: Final = b"\x04\x22\x4d\x18"
LZ4_FLG_VERSION_MASK: Final = 0xC0
LZ4_FLG_BLOCK_INDEPENDENCE: Final = 0x20
LZ4_FLG_BLOCK_CHECKSUM: Final = 0x10
LZ4_FLG_CONTENT_SIZE: Final = 0x08
LZ4_FLG_CONTENT_CHECKSUM: Final = 0x04
LZ4_FLG_RESERVED: Final = 0x02
LZ4_FLG_DICT_ID: Final = 0x01
LZ4_BLOCK_SIZE: Final = 64 * 1024
_LZ4_UNCOMPRESSED_BIT: Final = 0x80000000
# Kafka's descriptor: version 01 + independent blocks (FLG 0x60), 64 KiB blocks (BD 0x40); the
# checksum byte is (xxh32(FLG, BD) >> 8) & 0xFF.
_LZ4_FLG: Final = 0x60
_LZ4_BD: Final = 0x40
LZ4_FRAME_HEADER: Final = _LZ4_MAGIC_BYTES + bytes(
    [_LZ4_FLG, _LZ4_BD, (xxh32(bytes([_LZ4_FLG, _LZ4_BD])) >> 8) & 0xFF]
)
_LZ4_END_MARK: Final = b"\x00\x00\x00\x00"
_LZ4_BLOCK_MAX: Final = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}
_U32_LE = struct.Struct("<I")
_U64_LE = struct.Struct("<Q")


def _lz4_compress(data: Buffer, level: int) -> bytes:
    view = memoryview(data)
    out = bytearray(LZ4_FRAME_HEADER)
    for start in range(0, len(view), LZ4_BLOCK_SIZE):
        chunk = view[start : start + LZ4_BLOCK_SIZE]
        # Kafka uses lz4-java's fast compressor at its default level 9 and the HC one otherwise.
        if level == LZ4_DEFAULT_LEVEL:
            block = cramjam.lz4.compress_block(chunk, store_size=False)
        else:
            block = cramjam.lz4.compress_block(chunk, store_size=False, mode="high_compression", compression=level)
        if len(block) >= len(chunk):
            # As Lz4BlockOutputStream does: store the block raw when compression does not shrink it.
            out += _U32_LE.pack(len(chunk) | _LZ4_UNCOMPRESSED_BIT)
            out += chunk
        else:
            out += _U32_LE.pack(len(block))
            out += block
    out += _LZ4_END_MARK
    return bytes(out)


def _lz4_decompress(data: Buffer) -> bytes:
    view = memoryview(data)
    out = bytearray()
    pos = 0
    # Standard LZ4 readers continue with the next frame after an end mark; do the same.
    while True:
        pos = _lz4_frame(view, pos, out)
        if pos == len(view):
            return bytes(out)


def _lz4_frame(view: memoryview, pos: int, out: bytearray) -> int:
    """Decode the frame starting at ``pos`` into ``out``; return the position after it."""
    end = len(view)
    frame_start = pos
    if end - pos < 7:
        raise CorruptRecordError(f"lz4 frame at byte {pos} is shorter than the 7-byte minimum header")
    if view[pos : pos + 4].tobytes() != _LZ4_MAGIC_BYTES:
        raise CorruptRecordError(f"lz4 frame at byte {pos} has bad magic {bytes(view[pos : pos + 4]).hex()}")
    flg = view[pos + 4]
    bd = view[pos + 5]
    if flg & LZ4_FLG_VERSION_MASK != 0x40:
        raise CorruptRecordError(f"lz4 frame version {(flg >> 6) & 3} is not supported (FLG {flg:#04x})")
    if flg & LZ4_FLG_RESERVED or bd & 0x8F:
        raise CorruptRecordError(f"lz4 frame descriptor has reserved bits set (FLG {flg:#04x}, BD {bd:#04x})")
    block_max = _LZ4_BLOCK_MAX.get((bd >> 4) & 0x07)
    if block_max is None:
        raise CorruptRecordError(f"lz4 frame block size code {(bd >> 4) & 0x07} is invalid (BD {bd:#04x})")
    if flg & LZ4_FLG_DICT_ID:
        raise CorruptRecordError("lz4 frame needs a preset dictionary, which Kafka never uses")
    descriptor_end = pos + 6 + (8 if flg & LZ4_FLG_CONTENT_SIZE else 0)
    if descriptor_end >= end:
        raise CorruptRecordError("lz4 frame descriptor is truncated")
    header_checksum = view[descriptor_end]
    if (flg, bd, header_checksum) != (_LZ4_FLG, _LZ4_BD, LZ4_FRAME_HEADER[6]):
        expected = (xxh32(view[pos + 4 : descriptor_end]) >> 8) & 0xFF
        if header_checksum != expected:
            raise CorruptRecordError(
                f"lz4 frame header checksum is {header_checksum:#04x}, expected {expected:#04x}"
            )
    content_size = _U64_LE.unpack_from(view, pos + 6)[0] if flg & LZ4_FLG_CONTENT_SIZE else None
    pos = descriptor_end + 1

    if not flg & LZ4_FLG_BLOCK_INDEPENDENCE:
        # Linked blocks need the previous 64 KiB as a dictionary, which cramjam's block decoder cannot
        # take; its frame decoder handles them. Kafka never writes such frames, so this path is rare.
        frame = bytes(cramjam.lz4.decompress(view[frame_start:]))
        out += frame
        return end

    content_start = len(out)
    block_checksum = bool(flg & LZ4_FLG_BLOCK_CHECKSUM)
    # cramjam's decompress_block pads its output to output_len; decompressing into a scratch buffer
    # returns the real length instead.
    scratch = bytearray(block_max)
    scratch_view = memoryview(scratch)
    while True:
        if end - pos < 4:
            raise CorruptRecordError("lz4 frame ends without an end mark")
        (word,) = _U32_LE.unpack_from(view, pos)
        pos += 4
        if word == 0:
            break
        size = word & ~_LZ4_UNCOMPRESSED_BIT
        if size > block_max:
            raise CorruptRecordError(f"lz4 block of {size} bytes exceeds the frame's {block_max}-byte maximum")
        if size + (4 if block_checksum else 0) > end - pos:
            raise CorruptRecordError(f"lz4 block at byte {pos - 4} declares {size} bytes but {end - pos} remain")
        block = view[pos : pos + size]
        pos += size
        if block_checksum:
            (stored,) = _U32_LE.unpack_from(view, pos)
            pos += 4
            if xxh32(block) != stored:
                raise CorruptRecordError(f"lz4 block checksum mismatch at byte {pos - size - 8}")
        if word & _LZ4_UNCOMPRESSED_BIT:
            out += block
        else:
            produced = cramjam.lz4.decompress_block_into(block, scratch_view)
            out += scratch_view[:produced]

    if flg & LZ4_FLG_CONTENT_CHECKSUM:
        if end - pos < 4:
            raise CorruptRecordError("lz4 content checksum is truncated")
        (stored,) = _U32_LE.unpack_from(view, pos)
        pos += 4
        if xxh32(out[content_start:]) != stored:
            raise CorruptRecordError("lz4 content checksum mismatch")
    if content_size is not None and content_size != len(out) - content_start:
        raise CorruptRecordError(
            f"lz4 frame declares {content_size} content bytes but holds {len(out) - content_start}"
        )
    return pos
