"""Topic ``compression.type``: producer batches rewritten with the topic's codec, everything else kept."""

from __future__ import annotations

import pytest

from tests.helpers.storage import OpenLog
from tierlog.config import LogConfig
from tierlog.errors import UnsupportedCompressionTypeError
from tierlog.records import SimpleRecord, build_batch, decode_batch, iter_headers
from tierlog.records.compression import CompressionType
from tierlog.records.control import ControlRecordType, EndTransactionMarker, build_end_txn_marker_batch
from tierlog.storage.recompress import maybe_recompress, target_codec

T0 = 1_700_000_000_000


def _records() -> list[SimpleRecord]:
    return [SimpleRecord(None if i % 3 == 0 else f"k{i}".encode(), None if i == 4 else b"v" * (i * 7),
                         (("h", b"x"), ("n", None)) if i % 2 else (), T0 + i * 10) for i in range(9)]


def _stored(log_bytes: bytes) -> list[tuple[int, int, list[tuple[int, int, bytes | None, bytes | None]]]]:
    return [(h.compression, h.base_offset, [(r.offset, r.timestamp, r.key, r.value) for r in decode_batch(h)])
            for h in iter_headers(log_bytes)]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd", "uncompressed"])
def test_batches_are_stored_in_the_topic_codec(open_log: OpenLog, codec: str) -> None:
    log = open_log(LogConfig.from_props({"compression.type": codec}))
    source = CompressionType.GZIP if codec != "gzip" else CompressionType.ZSTD
    info = log.append_as_leader(build_batch(_records(), compression=source, producer_id=7, producer_epoch=1,
                                            base_sequence=0))
    assert (info.first_offset, info.last_offset) == (0, 8)
    data = log.read(0, 1 << 20).read_bytes()
    stored = _stored(data)
    assert [c for c, _, _ in stored] == [target_codec(codec)]
    expected = [(i, T0 + i * 10, r.key, r.value) for i, r in enumerate(_records())]
    assert stored[0][2] == expected
    h = next(iter_headers(data))
    h.ensure_valid()
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 1, 0)
    assert [r.headers for r in decode_batch(h)] == [r.headers for r in _records()]
    # The producer's retry of the same (differently compressed) batch is still a duplicate.
    again = log.append_as_leader(build_batch(_records(), compression=source, producer_id=7, producer_epoch=1,
                                             base_sequence=0))
    assert again.duplicate and again.first_offset == 0
    assert log.log_end_offset == 9


def test_producer_keeps_bytes_and_same_codec_is_not_rewritten(open_log: OpenLog) -> None:
    raw = build_batch(_records(), compression=CompressionType.LZ4)
    for props in ({}, {"compression.type": "lz4"}):
        log = open_log(LogConfig.from_props(props), name=f"p{len(props)}-0")
        log.append_as_leader(raw)
        stored = log.read(0, 1 << 20).read_bytes()
        # Only the fields the broker assigns differ: base offset (0 already) and leader epoch.
        assert stored[61:] == raw[61:]


def test_control_batches_and_log_append_time_survive(open_log: OpenLog) -> None:
    marker = bytearray(build_end_txn_marker_batch(EndTransactionMarker(ControlRecordType.COMMIT, 0), producer_id=3,
                                                  producer_epoch=0, timestamp_ms=T0))
    buf = bytearray(build_batch(_records(), compression=CompressionType.SNAPPY))
    headers = list(iter_headers(buf + marker))
    out, new_headers = maybe_recompress(buf + marker, headers, "zstd")
    assert [h.compression for h in new_headers] == [CompressionType.ZSTD, CompressionType.NONE]
    assert bytes(out[new_headers[1].position:]) == bytes(marker)

    log = open_log(LogConfig.from_props({"compression.type": "gzip", "message.timestamp.type": "LogAppendTime"}))
    log.append_as_leader(build_batch(_records(), compression=CompressionType.NONE))
    h = next(iter_headers(log.read(0, 1 << 20).read_bytes()))
    assert h.compression == CompressionType.GZIP and h.timestamp_type == 1 and h.max_timestamp == log.clock.wall_ms()


def test_unknown_codec_is_refused() -> None:
    with pytest.raises(UnsupportedCompressionTypeError):
        target_codec("brotli")
    assert target_codec("producer") is None
