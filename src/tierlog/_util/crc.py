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


#: CRC-32C of a produced batch, checked once per batch on the produce path. fastcrc (AVX-512 where
#: the CPU has it) takes ~0.7 µs per 16 KiB where crc32c takes ~1.4 µs, and ~19 µs per MiB against
#: ~38 µs; crc32c when fastcrc is not installed. (Batches over 64 KiB used to keep crc32c because it
#: lets go of the GIL while it reads, so the event loop ran meanwhile when appends were on the
#: thread pool; they run on the loop now, and the broker's CPU per 1 MiB produce request was ~8 %
#: lower with fastcrc for every size: docs/performance.md, sixth round.) The name says "small"
#: for history: it is every batch's. tests/unit/records/test_check_batch.py holds the two equal.
crc32c_small: Callable[[bytes | bytearray | memoryview], int]
try:
    from fastcrc.crc32 import iscsi as crc32c_small
except ImportError:
    crc32c_small = _crc32c.crc32c
