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


def test_min_record_timestamp_is_the_smallest_a_reader_gets(tmp_path: Path) -> None:
    """Smallest over the data records: inside a compressed CreateTime batch (not its first record),
    a LogAppendTime batch's own timestamp, control batches left out; -1 as soon as a batch's records
    carry none; None for a file without data records."""
    from tierlog.records import CompressionType, SimpleRecord, build_batch
    from tierlog.records.control import EndTransactionMarker, build_end_txn_marker_batch
    from tierlog.records.header import LOG_APPEND_TIME
    from tierlog.storage.producer_state import CONTROL_TYPE_COMMIT

    def file(name: str, *batches: bytes) -> FileRecords:
        records = FileRecords(tmp_path / name, create=True)
        records.append(list(batches))
        return records

    create_time = build_batch([SimpleRecord(b"k", b"v", (), ts) for ts in (5_000, 3_000, 4_000)],
                              compression=CompressionType.GZIP)
    append_time = build_batch([SimpleRecord(b"k", b"v", (), 100)], base_offset=3, timestamp_type=LOG_APPEND_TIME,
                              log_append_time_ms=4_500)
    marker = build_end_txn_marker_batch(EndTransactionMarker(CONTROL_TYPE_COMMIT, 0), producer_id=7,
                                        producer_epoch=0, timestamp_ms=10, base_offset=4)
    no_time = build_batch([SimpleRecord(b"k", b"v", (), -1)], base_offset=5)
    for records, want in [(file("a.log", create_time, append_time, marker), 3_000),
                          (file("b.log", append_time, marker), 4_500),
                          (file("c.log", create_time, no_time), -1),
                          (file("d.log", marker), None),
                          (file("e.log"), None)]:
        try:
            assert records.min_record_timestamp() == want, records.path.name
        finally:
            records.close()
