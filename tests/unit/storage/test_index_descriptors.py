"""Open indexes hold no file descriptor (tierlog._util.mapped): a broker's descriptor budget goes to
its connections and .log files, not to two maps per active segment."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from tierlog._util.mapped import FileMap
from tierlog.storage.index import OffsetIndex, TimeIndex


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="counts descriptors through /proc")
def test_hundreds_of_open_indexes_cost_no_descriptors(tmp_path: Path) -> None:
    before = open_fds()
    offsets = [OffsetIndex(tmp_path / f"{i:05d}.index", 1000 * i) for i in range(150)]
    times = [TimeIndex(tmp_path / f"{i:05d}.timeindex", 1000 * i) for i in range(150)]
    for i, (o, t) in enumerate(zip(offsets, times, strict=True)):
        o.append(1000 * i + 5, 4096)
        t.maybe_append(10_000 + i, 1000 * i + 5)
    assert open_fds() == before
    assert offsets[7].lookup(7010) == (7005, 4096) and times[7].last_entry() == (10_007, 7005)
    for index in offsets + times:
        index.close()
    assert open_fds() == before
    # Closing trimmed them to their one entry, through the map, as before.
    reopened = OffsetIndex(tmp_path / "00007.index", 7000)
    assert reopened.entries == 1 and reopened.lookup(7010) == (7005, 4096)
    reopened.close()


def test_a_file_map_writes_through_and_flushes_to_the_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(bytes(64))
    fd = os.open(path, os.O_RDWR)
    try:
        writable = FileMap(fd, 64, writable=True)
        readonly = FileMap(fd, 64, writable=False)
    finally:
        os.close(fd)  # the maps outlive the descriptor
    struct.pack_into(">q", writable.buffer, 8, 0x0102030405060708)
    writable.flush()
    assert path.read_bytes()[8:16] == bytes(range(1, 9))
    assert struct.unpack_from(">q", readonly.buffer, 8)[0] == 0x0102030405060708
    assert readonly.buffer[8:10] == b"\x01\x02"
    writable.close()
    readonly.close()
    writable.close()  # idempotent
    assert writable.closed
    with pytest.raises(AttributeError):
        writable.buffer  # noqa: B018 - gone, instead of an address that is no longer mapped


def test_mapping_nothing_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        FileMap(0, 0, writable=False)
