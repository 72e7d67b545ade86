"""The per-partition ``leader-epoch-checkpoint`` (KAFKA-FACTS §2.7)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tierlog.storage.checkpoints.base import (
    INT32_BOUNDS,
    INT64_BOUNDS,
    LEADER_EPOCH_CHECKPOINT_VERSION,
    CheckpointFile,
    java_int,
    java_split_ws,
)
from tierlog.storage.leader_epoch import EpochEntry

# -- leader-epoch checkpoint -------------------------------------------------------------------------


def _epoch_to_line(entry: EpochEntry) -> str:
    return f"{entry.epoch} {entry.start_offset}"


def _epoch_from_line(line: str) -> EpochEntry | None:
    parts = java_split_ws(line)
    if len(parts) != 2:
        return None
    epoch, start = java_int(parts[0], INT32_BOUNDS), java_int(parts[1], INT64_BOUNDS)
    if epoch is None or start is None:
        return None
    return EpochEntry(epoch, start)


class LeaderEpochCheckpointFile:
    """``epoch startOffset`` lines, version 0: a partition's ``leader-epoch-checkpoint``."""

    def __init__(self, path: Path) -> None:
        self._file: CheckpointFile[EpochEntry] = CheckpointFile(
            path, LEADER_EPOCH_CHECKPOINT_VERSION, _epoch_to_line, _epoch_from_line
        )

    @property
    def path(self) -> Path:
        return self._file.path

    def write(self, entries: Iterable[EpochEntry], sync: bool = True) -> None:
        self._file.write(entries, sync)

    def write_if_dir_exists(self, entries: Iterable[EpochEntry]) -> bool:
        return self._file.write_if_dir_exists(entries)

    def read(self) -> list[EpochEntry]:
        return self._file.read()

    @staticmethod
    def encode(entries: Iterable[EpochEntry]) -> bytes:
        """The file's bytes for ``entries``: also the leader-epoch index uploaded with a remote segment."""
        return LeaderEpochCheckpointFile(Path("leader-epoch-checkpoint"))._file.encode(entries)

    @staticmethod
    def decode(data: bytes, location: str = "leader-epoch-checkpoint") -> list[EpochEntry]:
        return LeaderEpochCheckpointFile(Path(location))._file.decode(data)
