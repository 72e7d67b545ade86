"""CRC-32C (Castagnoli), the checksum of record batches, producer snapshots and tierlog's own files."""

from __future__ import annotations

from collections.abc import Callable

import crc32c as _crc32c


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC-32C of ``data``, continuing from ``value`` (0 to start)."""
    return int(_crc32c.crc32c(data, value))


#: The library's function itself, for the produce path's once-per-batch check: the wrapper above
#: costs a Python call more (its result is an int there too).
crc32c_unwrapped: Callable[[bytes | bytearray | memoryview], int] = _crc32c.crc32c


#: CRC-32C of a small buffer: a produced batch of up to :data:`SMALL_CRC_BYTES` (Java's default
#: batch is 16 KiB), checked once per batch on the produce path. fastcrc (AVX-512 where the CPU has
#: it) takes ~0.7 µs per 16 KiB where crc32c takes ~1.4 µs; crc32c when fastcrc is not installed.
#: Larger buffers keep crc32c, which lets go of the GIL while it reads a large batch, so the event
#: loop runs meanwhile. tests/unit/records/test_check_batch.py holds the two equal.
crc32c_small: Callable[[bytes | bytearray | memoryview], int]
try:
    from fastcrc.crc32 import iscsi as crc32c_small
except ImportError:
    crc32c_small = _crc32c.crc32c
SMALL_CRC_BYTES = 64 << 10
