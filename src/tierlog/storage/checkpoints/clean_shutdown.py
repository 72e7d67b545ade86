"""``.kafka_cleanshutdown`` (KAFKA-FACTS §2.9)."""

from __future__ import annotations

import json
from pathlib import Path

from tierlog._util.files import write_atomic
from tierlog.storage.checkpoints.base import (
    CLEAN_SHUTDOWN,
    CLEAN_SHUTDOWN_VERSION,
    SingleFile,
)

# -- .kafka_cleanshutdown --------------------------------------------------------------------------------


class CleanShutdownFile(SingleFile):
    """The clean-shutdown marker of a log directory. Only its existence decides whether recovery
    runs; the content (``{"version":0,"brokerEpoch":N}``) is informational (KIP-966)."""

    def __init__(self, log_dir: Path) -> None:
        log_dir = Path(log_dir)
        # Accept the marker's own path too: both spellings occur at call sites.
        self.path = log_dir if log_dir.name == CLEAN_SHUTDOWN else log_dir / CLEAN_SHUTDOWN

    def write(self, broker_epoch: int = -1, sync: bool = True) -> None:
        content = json.dumps({"version": CLEAN_SHUTDOWN_VERSION, "brokerEpoch": broker_epoch}, separators=(",", ":"))
        write_atomic(self.path, content.encode("utf-8"), sync=sync)

    def read(self) -> int | None:
        """The broker epoch recorded, or None if the file is missing or unreadable (as Kafka, which
        logs and returns -1). Unknown fields are ignored."""
        try:
            content = json.loads(self.path.read_bytes())
        except (OSError, ValueError):
            return None
        epoch = content.get("brokerEpoch") if isinstance(content, dict) else None
        return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None
