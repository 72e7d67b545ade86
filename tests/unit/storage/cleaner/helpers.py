"""Shared helpers of the cleaner tests: a compacted log, keyed appends, reading the log back."""

from __future__ import annotations

from tierlog.config import LogConfig
from tierlog.records import SimpleRecord, build_batch
from tierlog.records.header import BatchHeader, iter_headers
from tierlog.records.reader import decode_batch
from tierlog.records.record import Record
from tierlog.storage.cleaner.cleaner import Cleaner, CleanResult
from tierlog.storage.cleaner.manager import clean_log
from tierlog.storage.cleaner.offset_map import OffsetMap
from tierlog.storage.log import UnifiedLog

TS = 1_700_000_000_000


def compact_config(**kw: object) -> LogConfig:
    base: dict[str, object] = {"cleanup_policy": ("compact",), "segment_bytes": 1024, "file_delete_delay_ms": 0}
    base.update(kw)
    return LogConfig(**base)  # type: ignore[arg-type]


def put(ulog: UnifiedLog, key: bytes, value: bytes | None, *, ts: int = TS, **kw: object) -> int:
    data = build_batch([SimpleRecord(key, value, timestamp=ts)], **kw)  # type: ignore[arg-type]
    return ulog.append_as_leader(data).first_offset


def batches(ulog: UnifiedLog) -> list[BatchHeader]:
    out: list[BatchHeader] = []
    for seg in ulog.segments:
        data = seg.log.read(0, seg.size_bytes)
        for h in iter_headers(data):
            h.ensure_valid()  # every CRC holds
            out.append(h)
    return out


def records(ulog: UnifiedLog) -> list[Record]:
    return [r for h in batches(ulog) if not h.is_control for r in decode_batch(h)]


def table(ulog: UnifiedLog) -> dict[bytes, bytes | None]:
    """Key → latest value as a consumer reading the whole log sees it (tombstones as None)."""
    out: dict[bytes, bytes | None] = {}
    for r in records(ulog):
        assert r.key is not None
        out[r.key] = r.value
    return out


def clean(ulog: UnifiedLog, now_ms: int, *, checkpoint: int | None = None, slots: int = 100_000,
          cleaner: Cleaner | None = None) -> CleanResult:
    cleaner = cleaner if cleaner is not None else Cleaner(OffsetMap(slots), io_buffer_bytes=4096)
    return clean_log(ulog, cleaner, checkpoint, now_ms)
