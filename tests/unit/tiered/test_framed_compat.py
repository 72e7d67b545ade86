"""The tierlog files moved onto _util/framed.py keep their bytes: a file written by the hand-rolled
framing before the move (magic, u16 version, u32 CRC-32C of the rest, payload) still reads."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from tierlog._util.crc import crc32c
from tierlog.tiered import metadata_store
from tierlog.tiered.metadata_store import RemoteLogMetadataCorruptError, decode_snapshot, encode_snapshot
from tierlog.tiered.status import read_status_file, write_status_file


def _old_framing(magic: bytes, version: int, payload: bytes) -> bytes:
    return struct.pack(">4sHI", magic, version, crc32c(payload)) + payload


def test_metadata_snapshot_bytes_are_unchanged() -> None:
    old = _old_framing(metadata_store.SNAPSHOT_MAGIC, metadata_store.FORMAT_VERSION, struct.pack(">QI", 7, 0))
    assert encode_snapshot([], 7) == old
    assert decode_snapshot(old) == (7, [])
    damaged = old[:-1] + bytes([old[-1] ^ 1])
    with pytest.raises(RemoteLogMetadataCorruptError):
        decode_snapshot(damaged)


def test_status_file_bytes_are_unchanged(tmp_path: Path) -> None:
    payload = {"a": 1}
    path = tmp_path / "status"
    write_status_file(path, payload)
    assert path.read_bytes() == _old_framing(b"TLTS", 2, json.dumps(payload, sort_keys=True).encode())
    assert read_status_file(path) == payload
    path.write_bytes(path.read_bytes()[:-1])
    assert read_status_file(path) is None
