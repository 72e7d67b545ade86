"""The produce path's write of one batch (issue 22, fifth round): ``_cwalk.write_patched`` writes the
bytes its Python reference (``records.header.write_patched``: a patched header copy and the body by
``os.pwritev``) writes, for batches anywhere in any kind of buffer, refuses what it refuses, and
leaves the request's buffer as it was; ``FileRecords.append_patched`` finishes a short write; and
a log written through it (a client's one batch per append) holds the same bytes as one written by
the Python reference, replicas and leader epochs included."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.storage import OpenLog, batch
from tierlog.records import header as header_module
from tierlog.records.header import BATCH_HEADER_SIZE, fast_write_patched, header_copy, write_patched
from tierlog.storage import file_records
from tierlog.storage.file_records import FileRecords

needs_c = pytest.mark.skipif(fast_write_patched is write_patched,
                             reason="tierlog.records._cwalk is not built (the install step found no C compiler)")


def _written(tmp: Path, name: str, write: object, *args: object) -> tuple[int, bytes]:
    path = tmp / name
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    try:
        n = write(fd, *args)  # type: ignore[operator]
    finally:
        os.close(fd)
    return n, path.read_bytes()


@needs_c
@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=61, max_size=400), st.data(), st.integers(-(1 << 63), (1 << 63) - 1),
       st.integers(-(1 << 31), (1 << 31) - 1), st.integers(0, 5000), st.sampled_from(["bytes", "bytearray", "view"]))
def test_c_write_patched_writes_what_the_python_reference_writes(
    tmp_path_factory: pytest.TempPathFactory, raw: bytes, data: st.DataObject, base_offset: int, epoch: int,
    file_position: int, kind: str,
) -> None:
    tmp = tmp_path_factory.mktemp("w")
    size = data.draw(st.integers(BATCH_HEADER_SIZE, len(raw)))
    position = data.draw(st.integers(0, len(raw) - size))
    buf: bytes | bytearray | memoryview = {"bytes": raw, "bytearray": bytearray(raw),
                                           "view": memoryview(bytearray(b"xx" + raw))[2:]}[kind]
    args = (buf, position, size, file_position, base_offset, epoch)
    c = _written(tmp, "c", fast_write_patched, *args)
    py = _written(tmp, "py", write_patched, *args)
    assert c == py
    n, contents = c
    assert n == size
    assert contents[file_position:] == bytes(header_copy(memoryview(raw), position, base_offset, epoch)) \
        + raw[position + BATCH_HEADER_SIZE:position + size]
    assert bytes(buf) == raw  # the request's own bytes are not touched


@needs_c
@pytest.mark.parametrize(("position", "size", "file_position"),
                         [(-1, 61, 0), (0, 60, 0), (40, 61, 0), (0, 101, 0), (0, 61, -1)])
def test_c_write_patched_refuses_what_the_python_reference_refuses(
    tmp_path: Path, position: int, size: int, file_position: int,
) -> None:
    buf = bytes(range(100))
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        for write in (fast_write_patched, write_patched):
            with pytest.raises(ValueError):
                write(fd, buf, position, size, file_position, 5, 1)
        with pytest.raises(OSError):  # a closed descriptor: the errno as os.pwritev raises it
            fast_write_patched(10_000, buf, 0, 61, 0, 5, 1)
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b""


def test_append_patched_finishes_a_short_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that stops part way (a full disk, a signal) is finished from where it stopped."""
    one = batch(3)
    records = FileRecords(tmp_path / "00000000000000000000.log", create=True)
    try:
        records.append(b"\0" * 7)
        cuts: list[int] = []

        def short(fd: int, buf: bytes, position: int, size: int, file_position: int, base_offset: int,
                  epoch: int) -> int:
            whole = bytes(header_copy(memoryview(buf), position, base_offset, epoch)) + buf[position + 61:position + size]
            cut = 30 if not cuts else 70  # inside the header, then inside the body
            cuts.append(cut)
            return os.pwrite(fd, whole[:cut], file_position)

        monkeypatch.setattr(file_records, "fast_write_patched", short)
        assert records.append_patched(one, 0, len(one), 42, 3) == len(one)
        assert records.append_patched(one, 0, len(one), 45, 3) == len(one)
        assert records.size_bytes == 7 + 2 * len(one)
        expected = bytes(header_copy(memoryview(one), 0, 42, 3)) + one[61:] \
            + bytes(header_copy(memoryview(one), 0, 45, 3)) + one[61:]
        assert (tmp_path / "00000000000000000000.log").read_bytes() == b"\0" * 7 + expected
    finally:
        records.close()


def _appended(open_log: OpenLog, name: str) -> bytes:
    log = open_log(name=name)
    try:
        for i in range(6):
            # Memoryviews, bytes and bytearrays, as the request parser hands them over; a new
            # leader epoch part way; a replica's append keeps the epoch its batch carries.
            data = batch(i + 1, ts=1_700_000_000_000 + i)
            records = (memoryview(bytearray(b"ab" + data))[2:], data, bytearray(data))[i % 3]
            log.append_as_leader(records, leader_epoch=0 if i < 3 else 4)
            assert bytes(records) == data
        data = log.read(0, 1 << 20)
        assert data is not None
        return data.read_bytes()
    finally:
        log.close()


def test_a_log_written_by_the_c_call_holds_what_the_python_reference_writes(
    open_log: OpenLog, monkeypatch: pytest.MonkeyPatch,
) -> None:
    with_c = _appended(open_log, "t-0")
    monkeypatch.setattr(file_records, "fast_write_patched", header_module.write_patched)
    monkeypatch.setattr(file_records, "fast_header_copy", header_module.header_copy)
    assert _appended(open_log, "t-1") == with_c
    assert len(with_c) > 0

