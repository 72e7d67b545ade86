"""The clean-shutdown listing manifest that lets a clean start skip listing partition directories."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.helpers.storage import batch
from tierlog.config import LogConfig
from tierlog.storage import loader
from tierlog.storage.listing_manifest import MANIFEST_FILE, read_manifest
from tierlog.storage.log_manager import LogManager

CFG = LogConfig(segment_bytes=800, retention_ms=-1)


def make(tmp_path: Path, partitions: int = 3) -> dict[tuple[str, int], int]:
    mgr = LogManager([tmp_path], lambda t: CFG)
    mgr.startup_logs()
    ends = {}
    for p in range(partitions):
        log = mgr.get_or_create_log("t", p)
        for _ in range(12):
            # Timestamps near now: producers older than producer.id.expiration.ms are dropped at load.
            log.append_as_leader(batch(2, value_size=40, producer_id=p, producer_epoch=0,
                                       base_sequence=log.log_end_offset, ts=int(time.time() * 1000)))
        ends[("t", p)] = log.log_end_offset
    mgr.shutdown()
    return ends


def count_listings(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    listed: list[Path] = []
    real = loader._clean_leftovers

    def spy(directory: Path, names: list[str], stats: loader.LoadStats) -> list[str]:
        listed.append(directory)
        return real(directory, names, stats)

    monkeypatch.setattr(loader, "_clean_leftovers", spy)
    return listed


def test_clean_start_uses_the_manifest_and_keeps_everything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ends = make(tmp_path)
    assert len(read_manifest(tmp_path)) == 3
    listed = count_listings(monkeypatch)
    mgr = LogManager([tmp_path], lambda t: CFG)
    mgr.startup_logs()
    assert listed == []
    assert not (tmp_path / MANIFEST_FILE).exists()  # used once
    for tp, end in ends.items():
        log = mgr.get_log(*tp)
        assert log is not None and log.log_end_offset == end
        # producer state came back from the snapshot the manifest listed
        retry = log.append_as_leader(batch(2, value_size=40, producer_id=tp[1], producer_epoch=0,
                                           base_sequence=end - 2, ts=int(time.time() * 1000)))
        assert retry.duplicate


def test_a_changed_directory_is_listed_as_usual(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make(tmp_path)
    orphan = tmp_path / "t-1" / "00000000000000099999.index"
    orphan.write_bytes(b"x" * 8)
    listed = count_listings(monkeypatch)
    mgr = LogManager([tmp_path], lambda t: CFG)
    mgr.startup_logs()
    assert listed == [tmp_path / "t-1"]
    assert not orphan.exists()


def test_a_damaged_manifest_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ends = make(tmp_path)
    raw = bytearray((tmp_path / MANIFEST_FILE).read_bytes())
    raw[-1] ^= 0xFF
    (tmp_path / MANIFEST_FILE).write_bytes(bytes(raw))
    listed = count_listings(monkeypatch)
    mgr = LogManager([tmp_path], lambda t: CFG)
    mgr.startup_logs()
    assert len(listed) == 3
    assert {tp: mgr.get_log(*tp).log_end_offset for tp in ends} == ends  # type: ignore[union-attr]


def test_not_used_after_an_unclean_shutdown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make(tmp_path)
    (tmp_path / ".kafka_cleanshutdown").unlink()
    listed = count_listings(monkeypatch)
    LogManager([tmp_path], lambda t: CFG).startup_logs()
    assert len(listed) == 3
