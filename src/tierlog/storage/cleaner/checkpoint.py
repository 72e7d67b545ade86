"""``cleaner-offset-checkpoint``: per log directory, the offset up to which each compacted partition
was cleaned, in Kafka's offset checkpoint format (version 0, ``topic partition offset`` lines)."""

from __future__ import annotations

import logging
from pathlib import Path

from tierlog.ids import TopicPartition
from tierlog.storage.checkpoints import (
    CLEANER_OFFSET_CHECKPOINT,
    CorruptCheckpointError,
    OffsetCheckpointFile,
)

log = logging.getLogger(__name__)


class CleanerCheckpoint:
    def __init__(self, log_dir: Path) -> None:
        self._file = OffsetCheckpointFile(log_dir / CLEANER_OFFSET_CHECKPOINT)

    @property
    def path(self) -> Path:
        return self._file.path

    def read(self) -> dict[TopicPartition, int]:
        """The checkpointed offsets; a damaged file is logged and read as empty, so the partitions are
        cleaned again from their start (Kafka's behaviour: cleaning is idempotent)."""
        try:
            return self._file.read()
        except FileNotFoundError:
            return {}
        except (CorruptCheckpointError, OSError) as e:
            log.warning("ignoring unreadable %s (the logs are cleaned again from their start): %s", self.path, e)
            return {}

    def write(self, offsets: dict[TopicPartition, int]) -> None:
        self._file.write(offsets)
