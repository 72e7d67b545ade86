"""Offset checkpoints (``recovery-point-offset-checkpoint`` and friends, KAFKA-FACTS §2.7)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tierlog.ids import TopicPartition
from tierlog.storage.checkpoints.base import (
    INT32_BOUNDS,
    INT64_BOUNDS,
    JAVA_WS,
    OFFSET_CHECKPOINT_VERSION,
    CheckpointFile,
    java_int,
    java_split_ws,
)

# -- offset checkpoints ------------------------------------------------------------------------------


def _offset_to_line(entry: tuple[TopicPartition, int]) -> str:
    (topic, partition), offset = entry
    if not topic or JAVA_WS.search(topic):
        raise ValueError(f"topic {topic!r} cannot be written to a checkpoint")
    return f"{topic} {partition} {offset}"


def _offset_from_line(line: str) -> tuple[TopicPartition, int] | None:
    parts = java_split_ws(line)
    if len(parts) != 3:
        return None
    partition, offset = java_int(parts[1], INT32_BOUNDS), java_int(parts[2], INT64_BOUNDS)
    if partition is None or offset is None:
        return None
    return (parts[0], partition), offset


class OffsetCheckpointFile:
    """``topic partition offset`` lines, version 0: the recovery point, log start offset,
    replication (high watermark) and cleaner checkpoints of a log directory."""

    def __init__(self, path: Path) -> None:
        self._file: CheckpointFile[tuple[TopicPartition, int]] = CheckpointFile(
            path, OFFSET_CHECKPOINT_VERSION, _offset_to_line, _offset_from_line
        )

    @property
    def path(self) -> Path:
        return self._file.path

    def write(self, offsets: Mapping[TopicPartition, int], sync: bool = True) -> None:
        self._file.write(offsets.items(), sync)

    def write_if_dir_exists(self, offsets: Mapping[TopicPartition, int]) -> bool:
        return self._file.write_if_dir_exists(offsets.items())

    def read(self) -> dict[TopicPartition, int]:
        """The checkpointed offsets; a partition listed twice keeps its last line, as in Kafka."""
        return dict(self._file.read())
