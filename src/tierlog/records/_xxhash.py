"""XXH32, needed only for the LZ4 frame format: the header checksum byte and the optional block and
content checksums. cramjam does not expose xxhash, and the inputs on the hot path are two or three
bytes (FLG, BD), so a pure-Python implementation is fast enough; block checksums are rare in Kafka
(Kafka never writes them) and only cost time when a foreign producer sets them."""

from __future__ import annotations

import struct

_P1 = 0x9E3779B1
_P2 = 0x85EBCA77
_P3 = 0xC2B2AE3D
_P4 = 0x27D4EB2F
_P5 = 0x165667B1
_M = 0xFFFFFFFF

_STRIPE = struct.Struct("<4I")
_U32 = struct.Struct("<I")


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M


def xxh32(data: bytes | bytearray | memoryview, seed: int = 0) -> int:
    """The 32-bit xxHash of ``data`` (the reference algorithm, little-endian lanes)."""
    buf = bytes(data)
    n = len(buf)
    pos = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M
        v2 = (seed + _P2) & _M
        v3 = seed & _M
        v4 = (seed - _P1) & _M
        limit = n - 16
        while pos <= limit:
            a, b, c, d = _STRIPE.unpack_from(buf, pos)
            v1 = (_rotl((v1 + a * _P2) & _M, 13) * _P1) & _M
            v2 = (_rotl((v2 + b * _P2) & _M, 13) * _P1) & _M
            v3 = (_rotl((v3 + c * _P2) & _M, 13) * _P1) & _M
            v4 = (_rotl((v4 + d * _P2) & _M, 13) * _P1) & _M
            pos += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while pos + 4 <= n:
        (k,) = _U32.unpack_from(buf, pos)
        h = (_rotl((h + k * _P3) & _M, 17) * _P4) & _M
        pos += 4
    while pos < n:
        h = (_rotl((h + buf[pos] * _P5) & _M, 11) * _P1) & _M
        pos += 1
    h ^= h >> 15
    h = (h * _P2) & _M
    h ^= h >> 13
    h = (h * _P3) & _M
    h ^= h >> 16
    return h
