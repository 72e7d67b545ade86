"""Where the remote tier's state lives on the broker's disk: the durable remote log metadata, the
broker's status file beside it, the index cache (all in the first log dir; the log manager skips
these directories), and the embedded local-directory backend's default root."""

from __future__ import annotations

from pathlib import Path

from tierlog.tiered.index_cache import CACHE_DIR_NAME

METADATA_DIR_NAME = "remote-log-metadata"
STATUS_FILE_NAME = "tier-status"

__all__ = ["CACHE_DIR_NAME", "METADATA_DIR_NAME", "STATUS_FILE_NAME", "default_local_remote_dir"]


def default_local_remote_dir(log_dir: Path) -> Path:
    """Where the embedded default keeps the remote tier: beside the first log dir, never inside it
    (the log manager would take its directories for partitions)."""
    return log_dir.parent / f"{log_dir.name}-remote"
