"""The C library through ctypes, for the few calls Python's ``os`` lacks (mmap without a held
descriptor, msync, syncfs). Linux only: elsewhere :data:`LIBC` is None and callers use ``os``."""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Any

LIBC: Any = None
if sys.platform.startswith("linux"):
    try:
        LIBC = ctypes.CDLL(None, use_errno=True)
    except OSError:
        LIBC = None


def check_result(result: int, what: str) -> None:
    """Raise OSError with errno's message when a libc call returned non-zero."""
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


#: mallopt parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def keep_freed_memory(mmap_threshold_bytes: int = 32 << 20, trim_threshold_bytes: int = 64 << 20) -> bool:
    """Make glibc's malloc reuse freed memory for large buffers instead of mapping fresh pages.

    By default an allocation of 128 KiB or more gets its own ``mmap`` (glibc raises that bar only
    after such a block is freed) and memory freed at the top of the heap is handed back above 128 KiB,
    so a broker that allocates a 1 MiB buffer per produce request pays a page fault for every 4 KiB of
    it, every time: 2.4 ms per MiB on this project's VM against 0.04 ms for the copy itself. Serving
    allocations up to ``mmap_threshold_bytes`` from the heap and keeping up to ``trim_threshold_bytes``
    freed at its top turns those into reused, already-mapped memory. Returns whether both took
    (False off glibc)."""
    if LIBC is None or not hasattr(LIBC, "mallopt"):
        return False
    return bool(LIBC.mallopt(_M_MMAP_THRESHOLD, mmap_threshold_bytes)) and bool(
        LIBC.mallopt(_M_TRIM_THRESHOLD, trim_threshold_bytes))


def syncfs_reports_errors() -> bool:
    """Whether ``syncfs`` is there and reports the filesystem's writeback errors: Linux 5.8 and later
    (before, it returned 0 after a failed writeback, so it could not stand in for an fdatasync)."""
    if LIBC is None or not hasattr(LIBC, "syncfs"):
        return False
    try:
        major, minor = (int(part) for part in os.uname().release.split("-")[0].split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (5, 8)


def syncfs(fd: int, what: str) -> None:
    """``syncfs(2)`` of the filesystem holding ``fd``; OSError when it fails."""
    check_result(LIBC.syncfs(fd), what)


#: statfs f_type of the filesystems whose syncfs writes every dirty page and inode and then commits
#: their journal and flushes the device's cache, as an fdatasync of each file would: ext2/3/4, XFS,
#: Btrfs. Not FUSE (its syncfs writes the kernel's pages to the daemon without asking it to sync, as
#: an fdatasync does), nor network filesystems.
SYNCFS_FILESYSTEMS = frozenset({0xEF53, 0x58465342, 0x9123683E})


def filesystem_type(fd: int) -> int | None:
    """The statfs ``f_type`` (magic number) of the filesystem holding ``fd``; None off Linux or on error."""
    if LIBC is None or not hasattr(LIBC, "fstatfs"):
        return None
    buf = ctypes.create_string_buffer(512)  # struct statfs is 120 bytes on x86-64 and aarch64
    if LIBC.fstatfs(fd, buf) != 0:
        return None
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF
