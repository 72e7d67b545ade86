"""The hand-written Fetch response encoder must produce exactly kio's bytes for every version."""

from __future__ import annotations

import os
import tempfile
import uuid

import pytest

from tierlog.protocol import ApiKey, build_response, encode_response
from tierlog.server.connection import FileSlice
from tierlog.server.fetch_response import (
    MAX_VERSION,
    MIN_VERSION,
    PartitionData,
    TopicData,
    encode_fetch_response,
)

TOPIC_ID = uuid.UUID("12345678-1234-5678-1234-567812345678")
RECORDS_A = bytes(range(200)) * 3
RECORDS_B = b"\x07" * 33


def _flatten(parts: tuple[bytes | FileSlice, ...]) -> bytes:
    out = bytearray()
    for part in parts:
        if isinstance(part, bytes):
            out += part
        else:
            out += os.pread(part.fd, part.size, part.position)
    return bytes(out)


def _expected(version: int, aborted: bool) -> bytes:
    topic_key = {"topic_id": TOPIC_ID} if version >= 13 else {"topic": "orders"}
    body = build_response(ApiKey.FETCH, version, {
        "throttle_time": 0, "error_code": 0, "session_id": 0,
        "responses": [
            {**topic_key, "partitions": [
                {"partition_index": 0, "error_code": 0, "high_watermark": 10, "last_stable_offset": 9,
                 "log_start_offset": 2, "aborted_transactions": [{"producer_id": 5, "first_offset": 3}] if aborted else None,
                 "preferred_read_replica": -1, "records": RECORDS_A},
                {"partition_index": 3, "error_code": 1, "high_watermark": -1, "last_stable_offset": -1,
                 "log_start_offset": -1, "aborted_transactions": None, "preferred_read_replica": -1, "records": b""},
                {"partition_index": 4, "error_code": 0, "high_watermark": 1, "last_stable_offset": 1,
                 "log_start_offset": 0, "aborted_transactions": [] if aborted else None,
                 "preferred_read_replica": -1, "records": RECORDS_B},
            ]},
        ],
    })
    return encode_response(ApiKey.FETCH, version, 77, body)


def _topics(version: int, aborted: bool, first_records: bytes | FileSlice) -> list[TopicData]:
    key: str | bytes = TOPIC_ID.bytes if version >= 13 else "orders"
    return [TopicData(key, [
        PartitionData(0, 0, 10, 9, 2, [(5, 3)] if aborted else None, -1, first_records),
        PartitionData(3, 1, -1, -1, -1, None, -1, b""),
        PartitionData(4, 0, 1, 1, 0, [] if aborted else None, -1, RECORDS_B),
    ])]


@pytest.mark.parametrize("aborted", [False, True])
@pytest.mark.parametrize("version", range(MIN_VERSION, MAX_VERSION + 1))
def test_matches_kio_with_bytes(version: int, aborted: bool) -> None:
    response = encode_fetch_response(version, 77, _topics(version, aborted, RECORDS_A))
    assert _flatten(response.parts) == _expected(version, aborted)


@pytest.mark.parametrize("version", [4, 11, 12, 13, 18])
def test_matches_kio_with_a_file_slice(version: int) -> None:
    with tempfile.TemporaryFile() as f:
        f.write(b"junk" + RECORDS_A + b"tail")
        f.flush()
        piece = FileSlice(os.dup(f.fileno()), 4, len(RECORDS_A))
        response = encode_fetch_response(version, 77, _topics(version, False, piece))
        assert any(isinstance(p, FileSlice) for p in response.parts)
        assert response.size == len(_expected(version, False))
        assert _flatten(response.parts) == _expected(version, False)
        response.close()
        assert piece.fd == -1


def test_top_level_error_without_topics() -> None:
    body = build_response(ApiKey.FETCH, 12, {"error_code": 70, "session_id": 0, "responses": []})
    assert _flatten(encode_fetch_response(12, 5, [], error_code=70).parts) == encode_response(ApiKey.FETCH, 12, 5, body)
