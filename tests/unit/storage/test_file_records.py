from __future__ import annotations

import os
from pathlib import Path

import pytest

from tierlog.storage import file_records
from tierlog.storage.file_records import FileRecords


def test_append_of_pieces_survives_short_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pwritev may write less than asked: the rest follows from exactly where it stopped."""
    real = os.pwritev
    calls: list[int] = []

    def short(fd: int, buffers: list[memoryview], offset: int) -> int:
        # At most 3 bytes per call, so a write stops inside a buffer and between buffers.
        total = sum(len(b) for b in buffers)
        calls.append(len(buffers))
        want = min(3, total)
        taken: list[memoryview] = []
        for b in buffers:
            if want <= 0:
                break
            taken.append(b[:want])
            want -= len(taken[-1])
        return real(fd, taken, offset)

    monkeypatch.setattr(file_records.os, "pwritev", short)
    records = FileRecords(tmp_path / "00000000000000000000.log", create=True)
    try:
        pieces = [b"abcde", bytearray(b"f"), memoryview(b"ghijklmn"), b""]
        assert records.append(b"0123") == 4
        assert records.append(pieces) == 14
        assert records.size_bytes == 18
    finally:
        records.close()
    assert (tmp_path / "00000000000000000000.log").read_bytes() == b"0123abcdefghijklmn"
    assert len(calls) > 5
