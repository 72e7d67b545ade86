"""``cleaner-status``: each log directory's compacted partitions as the broker's cleaner last saw
them (dirty ratio, bytes, last clean time, bytes cleaned, why a partition is not cleaned), for
``tierlog cleaner status`` beside a running broker. A framed file (magic, version, CRC-32C) written
atomically; the cleaner checkpoint itself stays in Kafka's ``cleaner-offset-checkpoint``."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from tierlog._util.framed import read_framed, write_framed
from tierlog.ids import TopicPartition

STATUS_FILE = "cleaner-status"
_MAGIC = b"TLCS"
_VERSION = 1


@dataclass
class PartitionCleanerState:
    """What ``tierlog cleaner status`` and the metrics show of one compacted partition."""

    checkpoint: int | None = None
    dirty_ratio: float = 0.0
    dirty_bytes: int = 0
    clean_bytes: int = 0
    last_clean_ms: int | None = None
    bytes_cleaned: int = 0
    bytes_written: int = 0
    cleanings: int = 0
    uncleanable_reason: str | None = None
    next_delete_horizon_ms: int | None = None


def write_status(log_dir: Path, states: dict[TopicPartition, PartitionCleanerState], now_ms: int) -> None:
    rows = {f"{t}\t{p}": asdict(s) for (t, p), s in sorted(states.items())}
    payload = json.dumps({"written_ms": now_ms, "partitions": rows}, sort_keys=True).encode()
    write_framed(log_dir / STATUS_FILE, _MAGIC, _VERSION, payload, sync=False)


def read_status(log_dir: Path) -> tuple[int, dict[TopicPartition, dict[str, object]]] | None:
    """(written at, per-partition figures), or None when the broker never wrote the file. A damaged
    file raises FramedFileError naming it."""
    found = read_framed(log_dir / STATUS_FILE, _MAGIC, {_VERSION})
    if found is None:
        return None
    doc = json.loads(found[1])
    out: dict[TopicPartition, dict[str, object]] = {}
    for key, row in doc["partitions"].items():
        topic, _, partition = key.rpartition("\t")
        out[(topic, int(partition))] = row
    return int(doc["written_ms"]), out


__all__ = ["STATUS_FILE", "PartitionCleanerState", "read_status", "write_status"]
