"""Typed settings of the remote tier, with the defaults of their keys.

These are the settings of the parts that have no settings class of their own below; the broker's
composition root (``tierlog.server.settings``) builds them, and every other part's, from the
broker config. Each field's default is the key's default from ``keys.py`` (read through
:func:`broker_default`), so a key and its default are written once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tierlog.config.keys import BROKER_DEF


def broker_default(name: str) -> int:
    """The integer default of a broker key as ``keys.py`` defines it (for a settings field's default,
    so the key's default is written once)."""
    value = BROKER_DEF.require(name).default
    assert isinstance(value, int) and not isinstance(value, bool), name
    return value


def broker_default_flag(name: str) -> bool:
    """The boolean default of a broker key as ``keys.py`` defines it."""
    value = BROKER_DEF.require(name).default
    assert isinstance(value, bool), name
    return value


def broker_default_float(name: str) -> float:
    """The numeric default of a broker key of type DOUBLE as ``keys.py`` defines it."""
    value = BROKER_DEF.require(name).default
    assert isinstance(value, int | float) and not isinstance(value, bool), name
    return float(value)


def broker_default_str(name: str) -> str:
    """The string default of a broker key as ``keys.py`` defines it."""
    value = BROKER_DEF.require(name).default
    assert isinstance(value, str), name
    return value


@dataclass(frozen=True)
class RemoteLogManagerSettings:
    """The remote log manager's settings (Kafka's RemoteLogManagerConfig)."""

    system_enable: bool = False
    task_interval_ms: int = broker_default("remote.log.manager.task.interval.ms")
    custom_metadata_max_bytes: int = broker_default("remote.log.metadata.custom.metadata.max.bytes")
    index_cache_bytes: int = broker_default("remote.log.index.file.cache.total.size.bytes")
    producer_id_expiration_ms: int = broker_default("producer.id.expiration.ms")
    broker_id: int = 1
    #: Longest wait between two attempts of a failing copy task.
    retry_max_delay_ms: int = 300000
    #: Threads of the remote log manager's own pool (copy tasks and the expiration pass) when the
    #: broker runs real threads: a slow or hung remote store then ties up these, never the broker's
    #: shared scheduler (retention, flushes, checkpoints, the metadata log). Kafka's
    #: remote.log.manager.copier.thread.pool.size plays this part there.
    worker_threads: int = 4
    #: Attempts (the first included) at a failed remote delete before giving up, and the longest
    #: wait between two; the first wait is the task interval.
    delete_retry_max_attempts: int = broker_default("remote.log.manager.delete.retry.max.attempts")
    delete_retry_backoff_max_ms: int = broker_default("remote.log.manager.delete.retry.backoff.max.ms")
    #: Remote compaction of compacted topics (issue 18) runs with the log cleaner: its switch, the
    #: key → offset map's memory bound and the read size are the cleaner's.
    compaction_enable: bool = broker_default_flag("log.cleaner.enable")
    compaction_map_bytes: int = broker_default("log.cleaner.dedupe.buffer.size")
    compaction_io_buffer_bytes: int = broker_default("log.cleaner.io.buffer.size")


@dataclass(frozen=True)
class RemoteStorageSettings:
    """Which remote storage plugin the broker loads and what it is configured with."""

    class_name: str
    #: The properties given to the broker (the plugin gets those under ``prefix``).
    properties: Mapping[str, str]
    prefix: str
    broker_id: int
    first_log_dir: Path
