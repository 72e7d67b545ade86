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
