"""Shared file mappings that hold no file descriptor.

Python's ``mmap.mmap`` keeps a duplicate of the descriptor it maps for as long as the map lives
(for ``resize`` and ``size``, which tierlog never calls on a file map). Every open index is a map, so
a broker with 10,000 partitions would spend 20,000 descriptors on its active segments' offset and
time indexes alone -- more than a common ``ulimit -n``. The kernel needs no descriptor to keep a
mapping (Kafka closes its file channel right after mapping), so on Linux the map is made with libc's
``mmap`` through ctypes (Python 3.13's ``trackfd=False``, before 3.13); elsewhere Python's mmap is
used as it is.

The buffer of a :class:`FileMap` must not be used after :meth:`FileMap.close`: unlike Python's
mmap, which raises, touching an unmapped address ends the process. Callers (the indexes) use it
only under their lock and close it under the same lock.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from typing import Any

from tierlog._util.libc import LIBC, check_result

#: msync(2)'s MS_SYNC on Linux.
_MS_SYNC = 4
_LIBC: Any = LIBC
if _LIBC is not None:
    try:
        _LIBC.mmap.restype = ctypes.c_void_p
        _LIBC.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                               ctypes.c_long]
        _LIBC.munmap.restype = ctypes.c_int
        _LIBC.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        _LIBC.msync.restype = ctypes.c_int
        _LIBC.msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    except (OSError, AttributeError):
        _LIBC = None
_MAP_FAILED = ctypes.c_void_p(-1).value

#: What a map's bytes are read and written through: ``struct.unpack_from``/``pack_into`` and slices.
MappedBuffer = mmap.mmap | ctypes.Array[ctypes.c_char]


class FileMap:
    """``length`` bytes of a file mapped shared, read-only or writable."""

    __slots__ = ("_address", "_mm", "buffer", "length")

    def __init__(self, fd: int, length: int, *, writable: bool) -> None:
        if length <= 0:
            raise ValueError(f"cannot map {length} bytes")
        self.length = length
        self._address: int | None = None
        self._mm: mmap.mmap | None = None
        self.buffer: MappedBuffer
        if _LIBC is None:
            self._mm = mmap.mmap(fd, length, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ)
            self.buffer = self._mm
            return
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        address = _LIBC.mmap(None, length, prot, mmap.MAP_SHARED, fd, 0)
        if address is None or address == _MAP_FAILED:
            err = ctypes.get_errno()
            raise OSError(err, f"mmap of {length} bytes: {os.strerror(err)}")
        self._address = int(address)
        self.buffer = (ctypes.c_char * length).from_address(self._address)

    @property
    def closed(self) -> bool:
        return self._address is None and self._mm is None

    def flush(self) -> None:
        """Write dirty pages to the file (msync)."""
        if self._mm is not None:
            self._mm.flush()
        elif self._address is not None:
            check_result(_LIBC.msync(self._address, self.length, _MS_SYNC), "msync")

    def close(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        elif self._address is not None:
            address, self._address = self._address, None
            # Drop the array before the memory goes: nothing may reach the address afterwards.
            del self.buffer
            check_result(_LIBC.munmap(address, self.length), "munmap")

    def __del__(self) -> None:
        # A map nobody closed (an index dropped without close) must not leak its address space.
        if getattr(self, "_address", None) is not None:
            try:
                self.close()
            except OSError:
                pass
