"""Data of a record format tierlog does not read (here an intact batch of magic 3, its CRC-32C right,
the last of its segment) refuses the partition whichever operation finds it -- not only startup
recovery and a fetch (test_unsupported_format.py), but a segment roll, a ListOffsets by timestamp, a
retention pass, the background checker of seed 003 and the cleaner. Each gets what startup gives: one
ERROR naming the file and the format, KAFKA_STORAGE_ERROR for every later request (appends too, so
no v2 batch is ever written after the unreadable one), its files left as they are, and no
clean-shutdown marker for its dir, so the next start refuses it at once. Before, each of these
failed only that operation (the cleaner called it damage) and the partition went on taking appends."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from tierlog.config.log_config import LogConfig
from tierlog.errors import KafkaStorageError, UnsupportedRecordFormatError
from tierlog.records import SimpleRecord, build_batch
from tierlog.storage.checkpoints import CLEAN_SHUTDOWN
from tierlog.storage.cleaner.manager import CleanerSettings, LogCleaner
from tierlog.storage.log import UnifiedLog
from tierlog.storage.log_manager import LogManager, LogManagerSettings

TS = 1_700_000_000_000
FIRST = "00000000000000000000"
ACTIVE = "00000000000000000006"


def _batch(i: int, value: bytes) -> bytes:
    return build_batch([SimpleRecord(b"k%d" % (i % 2), value, timestamp=TS + i)])


def _set_last_magic(path: Path, last_batch_bytes: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[len(raw) - last_batch_bytes + 16] = 3  # the magic lies outside the CRC-32C: still intact
    path.write_bytes(bytes(raw))


def _dir_digest(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir()) if p.is_file()}


def _roll(manager: LogManager, ulog: UnifiedLog) -> object:
    return ulog.roll()


def _list_offsets_by_timestamp(manager: LogManager, ulog: UnifiedLog) -> object:
    return ulog.fetch_offset_by_timestamp(TS + 1)


def _retention(manager: LogManager, ulog: UnifiedLog) -> object:
    return manager.cleanup_logs()


def _lazy_checker(manager: LogManager, ulog: UnifiedLog) -> object:
    return manager.check_unchecked_segments()


def _cleaner(manager: LogManager, ulog: UnifiedLog) -> object:
    cleaner = LogCleaner(manager, CleanerSettings(dedupe_buffer_size=1 << 20))
    return cleaner.clean_one(cleaner.new_cleaner())


Op = Callable[[LogManager, UnifiedLog], object]


@pytest.mark.parametrize(("op", "config", "where", "raises"), [
    # The active segment's last batch changes under the running broker (nothing walked it since
    # startup checked its tail); the roll's final time index entry needs its timestamps.
    (_roll, LogConfig(), "active", True),
    (_list_offsets_by_timestamp, LogConfig(), "first", True),
    (_retention, LogConfig(retention_ms=1000), "first", False),
    # The first segment's time index is lost: the checker rebuilds it from the batches.
    (_lazy_checker, LogConfig(), "first-unchecked", False),
    (_cleaner, LogConfig(cleanup_policy=("compact",)), "first", False),
], ids=["segment-roll", "list-offsets-by-timestamp", "retention", "lazy-checker", "cleaner"])
def test_every_path_refuses_the_partition_as_startup_does(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, op: Op, config: LogConfig, where: str,
        raises: bool) -> None:
    manager = LogManager([tmp_path], lambda t: config)
    ulog = manager.get_or_create_log("old", 0)
    first = [_batch(i, b"v%d" % i) for i in range(3)]
    for batch in first:
        ulog.append_as_leader(batch)
    ulog.roll()
    for i in range(3):
        ulog.append_as_leader(_batch(5 + i, b"middle%d" % i))
    ulog.roll()  # the first segment is not the newest inactive one, which startup looks at
    active = [_batch(10 + i, b"next%d" % i) for i in range(3)]
    for batch in active:
        ulog.append_as_leader(batch)
    manager.shutdown()
    part = tmp_path / "old-0"
    if where != "active":
        _set_last_magic(part / f"{FIRST}.log", len(first[-1]))
    if where == "first-unchecked":
        (part / f"{FIRST}.timeindex").unlink()

    before = _dir_digest(part)
    lazy = LogManagerSettings(sanity_check_all_logs=False)  # seed 003: inactive segments checked later
    manager = LogManager([tmp_path], lambda t: config, lazy)
    manager.startup_logs()
    try:
        ulog = manager.get_log("old", 0)  # type: ignore[assignment]
        assert ulog is not None and manager.refused_reason("old", 0) is None  # clean: not walked at startup
        segment = part / f"{ACTIVE if where == 'active' else FIRST}.log"
        if where == "active":
            _set_last_magic(segment, len(active[-1]))
            before[segment.name] = _dir_digest(part)[segment.name]
        # (Loading preallocated the active segment's indexes; closing trims them back.)
        data_before = {n: d for n, d in _dir_digest(part).items() if not n.endswith("index")}
        caplog.clear()
        with caplog.at_level(logging.INFO):
            if raises:
                with pytest.raises(UnsupportedRecordFormatError, match="record batch of magic 3"):
                    op(manager, ulog)
            else:
                op(manager, ulog)
        reason = manager.refused_reason("old", 0)
        assert reason is not None and str(segment) in reason and "record batch of magic 3" in reason, reason
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and "partition refused topic=old partition=0" in errors[0], errors
        assert str(segment) in errors[0]
        assert manager.get_log("old", 0) is None
        with pytest.raises(KafkaStorageError):
            ulog.append_as_leader(_batch(20, b"after"))  # never a v2 batch after the unreadable one
        with pytest.raises(UnsupportedRecordFormatError):
            manager.get_or_create_log("old", 0)
        assert {n: d for n, d in _dir_digest(part).items() if not n.endswith("index")} == data_before
    finally:
        manager.shutdown()
    assert _dir_digest(part) == before  # every file as it was before that start
    assert not (tmp_path / CLEAN_SHUTDOWN).exists()
    manager = LogManager([tmp_path], lambda t: config)
    manager.startup_logs()
    try:
        assert manager.get_log("old", 0) is None and manager.refused_reason("old", 0) == reason
    finally:
        manager.shutdown()
    assert _dir_digest(part) == before
