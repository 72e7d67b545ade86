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
