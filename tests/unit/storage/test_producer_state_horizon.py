"""The producer state horizon file (seed 001): written by a load that lost every snapshot, read
cautiously, dropped once the log start passes it."""

from __future__ import annotations

from pathlib import Path

from tierlog.storage.producer_state_horizon import (
    HORIZON_FILE,
    clear_horizon,
    read_horizon,
    snapshot_known_complete,
    write_horizon,
)


def test_round_trip_and_clear(tmp_path: Path) -> None:
    assert read_horizon(tmp_path, 500) is None
    write_horizon(tmp_path, 123)
    assert read_horizon(tmp_path, 500) == 123
    clear_horizon(tmp_path)
    assert read_horizon(tmp_path, 500) is None


def test_a_damaged_file_distrusts_everything_below_the_log_end(tmp_path: Path) -> None:
    write_horizon(tmp_path, 123)
    data = bytearray((tmp_path / HORIZON_FILE).read_bytes())
    data[-1] ^= 0x01
    (tmp_path / HORIZON_FILE).write_bytes(bytes(data))
    assert read_horizon(tmp_path, 500) == 500
    (tmp_path / HORIZON_FILE).write_bytes(b"TL")
    assert read_horizon(tmp_path, 700) == 700


def test_known_complete_only_when_the_window_starts_at_or_above_the_horizon() -> None:
    assert snapshot_known_complete(None, 0)
    assert snapshot_known_complete(100, 100)
    assert snapshot_known_complete(100, 150)
    assert not snapshot_known_complete(100, 99)
