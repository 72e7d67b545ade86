"""A Kafka data dir with a record format tierlog does not read (a message set of magic 0 or 1, the
format before Kafka 0.11, or a batch newer than v2) is refused for that partition, with the file and
the format named -- never truncated as a torn tail nor served up to a mark of damage -- while the
other partitions load and a torn tail is still truncated as before."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.helpers.records import legacy_message
from tierlog.config.log_config import LogConfig
from tierlog.errors import KafkaStorageError, UnsupportedRecordFormatError
from tierlog.records import SimpleRecord, build_batch
from tierlog.storage.checkpoints import CLEAN_SHUTDOWN, RECOVERY_POINT_CHECKPOINT
from tierlog.storage.log_manager import LogManager

CFG = LogConfig()
SEGMENT = "00000000000000000000.log"


def newer_batch(offset: int) -> bytes:
    """A v2 batch with its magic raised to 3 (and its CRC-32C still right: only the magic, outside
    the checksum, says it is another format)."""
    raw = bytearray(build_batch([SimpleRecord(None, b"x", timestamp=1_700_000_000_000)], base_offset=offset))
    raw[16] = 3
    return bytes(raw)


def data_dir(tmp_path: Path, old_bytes: bytes, *, clean: bool) -> Path:
    """A log dir with a healthy partition good-0 and a partition old-0 whose segment is ``old_bytes``."""
    manager = LogManager([tmp_path], lambda t: CFG)
    manager.get_or_create_log("good", 0).append_as_leader(
        build_batch([SimpleRecord(None, b"fine", timestamp=1_700_000_000_000)]))
    manager.get_or_create_log("old", 0)
    manager.shutdown()
    (tmp_path / "old-0" / SEGMENT).write_bytes(old_bytes)
    if not clean:
        (tmp_path / CLEAN_SHUTDOWN).unlink()
    return tmp_path / "old-0" / SEGMENT


@pytest.mark.parametrize("clean", [False, True], ids=["after-a-crash", "after-a-clean-shutdown"])
@pytest.mark.parametrize(("old_bytes", "feature"), [
    (legacy_message(0, b"a") + legacy_message(1, b"b"), "message set of magic 1"),
    (legacy_message(0, b"a", magic=0), "message set of magic 0"),
    (build_batch([SimpleRecord(None, b"v2", timestamp=1_700_000_000_000)]) + legacy_message(1, b"b"),
     "message set of magic 1"),
    (newer_batch(0), "record batch of magic 3"),
    (build_batch([SimpleRecord(None, b"v2", timestamp=1_700_000_000_000)]) + newer_batch(1) + newer_batch(2),
     "record batch of magic 3"),
], ids=["magic-1", "magic-0", "v2-then-magic-1", "magic-3", "v2-then-magic-3"])
def test_partition_with_an_unsupported_format_is_refused_and_left_as_it_is(
        tmp_path: Path, old_bytes: bytes, feature: str, clean: bool) -> None:
    segment = data_dir(tmp_path, old_bytes, clean=clean)
    manager = LogManager([tmp_path], lambda t: CFG)
    report = manager.startup_logs()
    try:
        reason = manager.refused_reason("old", 0)
        assert reason is not None and str(segment) in reason and feature in reason, reason
        assert any(feature in e for e in report.errors)
        assert manager.get_log("old", 0) is None
        with pytest.raises(UnsupportedRecordFormatError, match=feature):
            manager.get_or_create_log("old", 0)  # never a fresh log over it
        assert segment.read_bytes() == old_bytes  # nothing truncated
        good = manager.get_log("good", 0)
        assert good is not None and good.log_end_offset == 1
    finally:
        manager.shutdown()
    assert segment.read_bytes() == old_bytes


def test_garbage_where_the_magic_goes_is_still_a_torn_tail(tmp_path: Path) -> None:
    """A tail whose magic byte is wrong but whose checksum does not hold is damage as before: after
    a crash it is truncated, and the partition loads."""
    good = build_batch([SimpleRecord(None, b"v2", timestamp=1_700_000_000_000)])
    bad = bytearray(legacy_message(1, b"b"))
    bad[-1] ^= 0xFF  # the CRC-32 no longer holds
    segment = data_dir(tmp_path, good + bytes(bad), clean=False)
    manager = LogManager([tmp_path], lambda t: CFG)
    manager.startup_logs()
    try:
        assert manager.refused_reason("old", 0) is None
        old = manager.get_log("old", 0)
        assert old is not None and old.log_end_offset == 1
        assert segment.stat().st_size == len(good)
    finally:
        manager.shutdown()


@pytest.mark.parametrize("magic", [3, 77])
def test_a_newer_magic_followed_by_a_v2_batch_is_a_damaged_byte_not_a_format(tmp_path: Path, magic: int) -> None:
    """The magic byte lies outside the CRC, so a flipped one leaves a batch whose checksum holds. A
    newer broker never writes a v2 batch after its own format in one segment: a v2 batch after it
    says the byte is damaged, so after a crash the segment is truncated there (as Kafka truncates at
    damage) and the partition loads with the batches before it, instead of being refused."""
    batches = [build_batch([SimpleRecord(None, b"v%d" % i, timestamp=1_700_000_000_000)], base_offset=i)
               for i in range(4)]
    flipped = bytearray(batches[2])
    flipped[16] = magic
    segment = data_dir(tmp_path, batches[0] + batches[1] + bytes(flipped) + batches[3], clean=False)
    manager = LogManager([tmp_path], lambda t: CFG)
    manager.startup_logs()
    try:
        assert manager.refused_reason("old", 0) is None
        old = manager.get_log("old", 0)
        assert old is not None and old.log_end_offset == 2
        assert segment.stat().st_size == len(batches[0]) + len(batches[1])
    finally:
        manager.shutdown()


def test_a_newer_last_batch_found_by_a_read_after_a_clean_shutdown_refuses_the_partition(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """After a clean shutdown no recovery walks the segment, so an intact batch of a newer format
    at its end is found only when a read reaches it. From then on the partition is refused as if
    startup had found it: an ERROR naming the file and the format, reads and appends answered
    KAFKA_STORAGE_ERROR (never a v2 batch written after it, which would make it read as damage),
    and its files left as they are; its dir gets no clean-shutdown marker, so the next start walks it
    and refuses it at startup. Before, only reads failed, with a WARNING at shutdown."""
    manager = LogManager([tmp_path], lambda t: CFG)
    ulog = manager.get_or_create_log("old", 0)
    batches = [build_batch([SimpleRecord(None, b"v%d" % i, timestamp=1_700_000_000_000)]) for i in range(3)]
    for batch in batches:
        ulog.append_as_leader(batch)
    ulog.roll()  # an inactive segment: a clean startup does not read its batches
    ulog.append_as_leader(build_batch([SimpleRecord(None, b"next", timestamp=1_700_000_000_000)]))
    manager.shutdown()
    segment = tmp_path / "old-0" / SEGMENT
    raw = bytearray(segment.read_bytes())
    last = len(raw) - len(batches[2])
    raw[last + 16] = 3  # the magic, outside the CRC-32C: an intact batch of magic 3, the segment's last
    segment.write_bytes(bytes(raw))
    files_before = {p.name: p.read_bytes() for p in (tmp_path / "old-0").iterdir()}

    manager = LogManager([tmp_path], lambda t: CFG)
    manager.startup_logs()
    try:
        old = manager.get_log("old", 0)
        assert old is not None and manager.refused_reason("old", 0) is None  # clean: not walked at startup
        with caplog.at_level("WARNING"), pytest.raises(UnsupportedRecordFormatError, match="record batch of magic 3"):
            old.read(0, 1 << 20, max_offset=old.log_end_offset)
        reason = manager.refused_reason("old", 0)
        assert reason is not None and str(segment) in reason and "record batch of magic 3" in reason, reason
        refusals = [r for r in caplog.records if "partition refused topic=old partition=0" in r.getMessage()]
        assert [r.levelname for r in refusals] == ["ERROR"] and str(segment) in refusals[0].getMessage()
        with pytest.raises(KafkaStorageError):
            old.append_as_leader(build_batch([SimpleRecord(None, b"after", timestamp=1_700_000_000_000)]))
        with pytest.raises(UnsupportedRecordFormatError):
            manager.get_or_create_log("old", 0)  # every later request gets the reason
    finally:
        manager.shutdown()
    assert {p.name: p.read_bytes() for p in (tmp_path / "old-0").iterdir()} == files_before
    # No clean-shutdown marker for its dir: the next start walks it and refuses it at once.
    assert not (tmp_path / CLEAN_SHUTDOWN).exists()
    manager = LogManager([tmp_path], lambda t: CFG)
    manager.startup_logs()
    try:
        assert manager.get_log("old", 0) is None and manager.refused_reason("old", 0) == reason
    finally:
        manager.shutdown()
    assert {p.name: p.read_bytes() for p in (tmp_path / "old-0").iterdir()} == files_before


def _digest(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir()) if p.is_file()}


@pytest.mark.parametrize(("clean", "where"), [(False, "first"), (False, "active"), (True, "active")],
                         ids=["crash-first-segment", "crash-active-segment", "clean-active-segment"])
@pytest.mark.parametrize("kind", ["magic-3", "magic-1"])
def test_a_partition_refused_at_startup_keeps_every_file_byte_for_byte(
        tmp_path: Path, clean: bool, where: str, kind: str) -> None:
    """Startup refuses the partition before it modifies any of its files: no index rebuilt (the
    earlier segments' indexes were written with another index.interval.bytes, so a rebuild would
    change them), none preallocated for appends, no bytes cut, no snapshot or checkpoint of its own
    rewritten -- during the broker's life and after its shutdown. Before, recovery rebuilt the
    indexes of every segment it walked before the one it refused, and loading preallocated the
    active segment's indexes to segment.index.bytes and left them so."""
    dense = LogConfig(index_interval_bytes=1)
    manager = LogManager([tmp_path], lambda t: dense)
    ulog = manager.get_or_create_log("old", 0)
    batches = [build_batch([SimpleRecord(None, b"v%d" % i * 50, timestamp=1_700_000_000_000 + i)])
               for i in range(20)]
    for i, batch in enumerate(batches):
        ulog.append_as_leader(batch)
        if i == 9:
            ulog.roll()
    manager.shutdown()
    part = tmp_path / "old-0"
    segment = part / (SEGMENT if where == "first" else "00000000000000000010.log")
    raw = bytearray(segment.read_bytes())
    if kind == "magic-3":
        raw[len(raw) - len(batches[9 if where == "first" else 19]) + 16] = 3
    else:
        raw += legacy_message(10 if where == "first" else 20, b"old")
    segment.write_bytes(bytes(raw))
    if not clean:
        (tmp_path / CLEAN_SHUTDOWN).unlink()
        (tmp_path / RECOVERY_POINT_CHECKPOINT).unlink()  # every segment is walked again
    before = _digest(part)

    manager = LogManager([tmp_path], lambda t: CFG)
    manager.startup_logs()
    try:
        reason = manager.refused_reason("old", 0)
        assert reason is not None and str(segment) in reason, reason
        assert _digest(part) == before
    finally:
        manager.shutdown()
    assert _digest(part) == before
