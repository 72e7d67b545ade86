"""A bytearray whose bytes are not zeroed first, for buffers that are written whole before they are read.

``bytearray(n)`` fills its ``n`` bytes with zeros: ~12 µs per MiB on this project's VM, paid for every
large request buffer that the socket then overwrites anyway. CPython's own
``PyByteArray_FromStringAndSize(NULL, n)`` leaves them as malloc returned them; it is called
through ctypes (``pythonapi`` holds the GIL across the call), ~0.3 µs a call, so only buffers of at
least :data:`UNZEROED_MIN_BYTES` take it. Elsewhere than CPython it is ``bytearray(n)``.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable

#: Below this the zero fill costs less than the ctypes call.
UNZEROED_MIN_BYTES = 64 << 10


def _unzeroed_factory() -> Callable[[None, int], bytearray] | None:
    if sys.implementation.name != "cpython":
        return None
    try:
        fn = ctypes.pythonapi.PyByteArray_FromStringAndSize
    except AttributeError:
        return None
    fn.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)
    fn.restype = ctypes.py_object
    return fn


_unzeroed = _unzeroed_factory()


def unzeroed_bytearray(size: int) -> bytearray:
    """A bytearray of ``size`` bytes whose content is undefined (not zeroed when large): for a
    buffer the caller fills before anything reads it. Never hand one out unfilled: it may hold
    bytes this process freed earlier."""
    if size < UNZEROED_MIN_BYTES or _unzeroed is None:
        return bytearray(size)
    return _unzeroed(None, size)
