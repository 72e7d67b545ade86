"""Storage test helpers: record batches to append (``batch``; ``build_batch`` with producer fields for
producer-state tests), the log opener's type, and reading a whole log back as offsets."""

from __future__ import annotations

import struct
from collections.abc import Callable

from tierlog._util.crc import crc32c
from tierlog._util.varint import write_varint
from tierlog.records import SimpleRecord, decode_batch, iter_headers
from tierlog.records import build_batch as build_record_batch
from tierlog.storage.log import UnifiedLog

OpenLog = Callable[..., UnifiedLog]


def batch(n: int = 1, *, value_size: int = 10, ts: int = 1_700_000_000_000, key: bytes | None = b"k",
          compression: int = 0, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    records = [SimpleRecord(key, bytes([65 + i % 26]) * value_size, timestamp=ts + i) for i in range(n)]
    return build_record_batch(records, compression=compression, producer_id=producer_id,
                       producer_epoch=producer_epoch, base_sequence=base_sequence)


def offsets_in(data: bytes) -> list[int]:
    out: list[int] = []
    for h in iter_headers(data):
        out.extend(r.offset for r in decode_batch(h))
    return out


def read_all(log: object) -> list[int]:
    assert isinstance(log, UnifiedLog)
    got: list[int] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).read_bytes()
        for h in iter_headers(data):
            h.ensure_valid()
        offs = [o for o in offsets_in(data) if o >= offset]
        got.extend(offs)
        offset = offs[-1] + 1
    return got


T0 = 1_700_000_000_000


def build_batch(
    *,
    base_offset: int = 0,
    producer_id: int = -1,
    epoch: int = -1,
    base_seq: int = -1,
    count: int = 1,
    timestamp: int = T0,
    transactional: bool = False,
    control: int | None = None,
    coordinator_epoch: int = 0,
    value: bytes = b"v",
) -> bytes:
    """A valid v2 batch (CRC included) with real records; ``control`` makes it an end-txn marker batch.
    Kept free of test imports so the crash test can ship its source to a child process."""
    if control is not None:
        records = [(0, struct.pack(">hh", 0, control), struct.pack(">hi", 0, coordinator_epoch))]
        count = 1
    else:
        records = [(i, None, value) for i in range(count)]
    body = bytearray()
    for delta, key, val in records:
        rec = bytearray([0])  # attributes
        write_varint(rec, 0)  # timestamp delta
        write_varint(rec, delta)
        if key is None:
            write_varint(rec, -1)
        else:
            write_varint(rec, len(key))
            rec += key
        write_varint(rec, len(val))
        rec += val
        write_varint(rec, 0)  # headers
        write_varint(body, len(rec))
        body += rec
    attributes = (0x10 if transactional or control is not None else 0) | (0x20 if control is not None else 0)
    buf = bytearray(
        struct.pack(
            ">qiibIhiqqqhii", base_offset, 49 + len(body), 0, 2, 0, attributes, count - 1, timestamp, timestamp,
            producer_id, epoch, base_seq, count,
        )
    )
    buf += body
    struct.pack_into(">I", buf, 17, crc32c(memoryview(buf)[21:]))
    return bytes(buf)
