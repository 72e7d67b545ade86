"""Per-topic log configuration, resolved from topic overrides and the broker's defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from tierlog.config.definition import INT64_MAX, Value
from tierlog.config.keys import TOPIC_DEF
from tierlog.errors import ConfigError

# Python attribute name for each topic key.
_ATTRS: dict[str, str] = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "segment.jitter.ms": "segment_jitter_ms",
    "segment.index.bytes": "segment_index_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "log.retention.min.timestamp": "retention_min_timestamp_ms",
    "file.delete.delay.ms": "file_delete_delay_ms",
    "preallocate": "preallocate",
    "cleanup.policy": "cleanup_policy",
    "max.message.bytes": "max_message_bytes",
    "message.timestamp.type": "message_timestamp_type",
    "flush.messages": "flush_messages",
    "flush.ms": "flush_ms",
    "compression.type": "compression_type",
    "min.insync.replicas": "min_insync_replicas",
    "remote.storage.enable": "remote_storage_enable",
    "local.retention.ms": "local_retention_ms",
    "local.retention.bytes": "local_retention_bytes",
    "message.timestamp.before.max.ms": "message_timestamp_before_max_ms",
    "message.timestamp.after.max.ms": "message_timestamp_after_max_ms",
    "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
    "delete.retention.ms": "delete_retention_ms",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "max.compaction.lag.ms": "max_compaction_lag_ms",
}


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1
    retention_min_timestamp_ms: int = 0
    file_delete_delay_ms: int = 60000
    preallocate: bool = False
    cleanup_policy: tuple[str, ...] = ("delete",)
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    flush_messages: int = INT64_MAX
    flush_ms: int = INT64_MAX
    compression_type: str = "producer"
    min_insync_replicas: int = 1
    remote_storage_enable: bool = False
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    message_timestamp_before_max_ms: int = INT64_MAX
    message_timestamp_after_max_ms: int = INT64_MAX
    min_cleanable_dirty_ratio: float = 0.5
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = INT64_MAX

    def __post_init__(self) -> None:
        _validate_local_retention("local.retention.ms", self.local_retention_ms, self.retention_ms)
        _validate_local_retention("local.retention.bytes", self.local_retention_bytes, self.retention_bytes)

    @classmethod
    def from_props(cls, overrides: Mapping[str, object] | None = None,
                   defaults: Mapping[str, Value] | None = None) -> LogConfig:
        """Build from topic overrides (any accepted spelling) over broker-derived defaults."""
        values: dict[str, Value] = dict(defaults or {})
        values.update(TOPIC_DEF.parse(overrides or {}, "topic config"))
        kwargs: dict[str, Any] = {_ATTRS[k]: v for k, v in values.items() if k in _ATTRS and v is not None}
        return cls(**kwargs)

    def to_props(self) -> dict[str, str]:
        """Every topic key with its value, as strings (for DescribeConfigs)."""
        out: dict[str, str] = {}
        by_attr = {v: k for k, v in _ATTRS.items()}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool):
                s = str(v).lower()
            elif isinstance(v, tuple):
                s = ",".join(v)
            else:
                s = str(v)
            out[by_attr[f.name]] = s
        return out

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def delete_enabled(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def max_segment_ms(self) -> int:
        """segment.ms, or max.compaction.lag.ms when smaller on a compacted topic, so the active
        segment (never cleaned) rolls in time for the lag to hold (LogConfig#maxSegmentMs)."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    @property
    def effective_local_retention_ms(self) -> int:
        return self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms

    @property
    def effective_local_retention_bytes(self) -> int:
        return self.retention_bytes if self.local_retention_bytes == -2 else self.local_retention_bytes


def local_retention_problem(local: int, total: int, total_origin: str) -> str | None:
    """Why a local retention (ms or bytes) cannot go with the total retention ``total`` (which
    ``total_origin`` names), or None.

    -2 means "the same as the total"; a negative total is unbounded, so any local value fits it.
    """
    if local == -2 or total < 0 or 0 <= local <= total:
        return None
    allowed = f"allowed: -2 (same as the total retention) or [0,...,{total}]"
    if local < 0:
        return (f"value {local} (unbounded) is not allowed while the total retention is {total} "
                f"({total_origin}); {allowed}")
    return f"value {local} is larger than the total retention {total} ({total_origin}); {allowed}"


def _validate_local_retention(key: str, local: int, total: int) -> None:
    problem = local_retention_problem(local, total, key.removeprefix("local."))
    if problem is not None:
        raise ConfigError(key, problem)
