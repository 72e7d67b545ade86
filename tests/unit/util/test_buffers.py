from __future__ import annotations

import pytest

from tierlog._util import buffers
from tierlog._util.buffers import UNZEROED_MIN_BYTES, unzeroed_bytearray


@pytest.mark.parametrize("size", [0, 1, UNZEROED_MIN_BYTES - 1, UNZEROED_MIN_BYTES, 3 << 20])
def test_an_unzeroed_bytearray_is_a_bytearray_of_the_size_asked_that_takes_writes(size: int) -> None:
    buf = unzeroed_bytearray(size)
    assert type(buf) is bytearray and len(buf) == size
    buf[:] = b"\x5a" * size
    assert buf == b"\x5a" * size
    del buf[:min(4, size)]  # resizable, as the frame decoder needs
    assert len(buf) == max(0, size - 4)


def test_small_ones_are_zeroed_as_bytearray_is() -> None:
    assert unzeroed_bytearray(UNZEROED_MIN_BYTES - 1) == bytes(UNZEROED_MIN_BYTES - 1)


def test_without_cpythons_call_it_is_a_plain_bytearray(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(buffers, "_unzeroed", None)
    assert unzeroed_bytearray(UNZEROED_MIN_BYTES) == bytes(UNZEROED_MIN_BYTES)
