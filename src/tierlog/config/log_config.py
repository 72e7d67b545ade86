"""Per-topic log configuration, resolved from topic overrides and the broker's defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any

from tierlog.config.definition import INT64_MAX, Value
from tierlog.config.keys import TOPIC_DEF, UNMODELLED_GROUP
from tierlog.errors import ConfigError


def _key(name: str) -> Any:
    """A LogConfig field for the topic key ``name``: its default is the key's (keys.py), written
    once; the field's metadata names the key, from which the key-to-attribute mapping is built."""
    return field(default=TOPIC_DEF.require(name).default, metadata={"key": name})


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = _key("segment.bytes")
    segment_ms: int = _key("segment.ms")
    segment_jitter_ms: int = _key("segment.jitter.ms")
    segment_index_bytes: int = _key("segment.index.bytes")
    index_interval_bytes: int = _key("index.interval.bytes")
    retention_ms: int = _key("retention.ms")
    retention_bytes: int = _key("retention.bytes")
    retention_min_timestamp_ms: int = _key("log.retention.min.timestamp")
    file_delete_delay_ms: int = _key("file.delete.delay.ms")
    preallocate: bool = _key("preallocate")
    cleanup_policy: tuple[str, ...] = _key("cleanup.policy")
    max_message_bytes: int = _key("max.message.bytes")
    message_timestamp_type: str = _key("message.timestamp.type")
    flush_messages: int = _key("flush.messages")
    flush_ms: int = _key("flush.ms")
    compression_type: str = _key("compression.type")
    min_insync_replicas: int = _key("min.insync.replicas")
    remote_storage_enable: bool = _key("remote.storage.enable")
    local_retention_ms: int = _key("local.retention.ms")
    local_retention_bytes: int = _key("local.retention.bytes")
    message_timestamp_before_max_ms: int = _key("message.timestamp.before.max.ms")
    message_timestamp_after_max_ms: int = _key("message.timestamp.after.max.ms")
    min_cleanable_dirty_ratio: float = _key("min.cleanable.dirty.ratio")
    delete_retention_ms: int = _key("delete.retention.ms")
    min_compaction_lag_ms: int = _key("min.compaction.lag.ms")
    max_compaction_lag_ms: int = _key("max.compaction.lag.ms")

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

    # The derived values the append path reads per batch are computed once per config (a frozen
    # dataclass keeps an instance __dict__, where cached_property stores them).
    @cached_property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @cached_property
    def checks_create_times(self) -> bool:
        """Whether produced records' CreateTime timestamps are checked against
        message.timestamp.before/after.max.ms: not on a LogAppendTime topic, nor when both are
        Long.MAX_VALUE, which accepts any timestamp (Kafka's long arithmetic never exceeds it)."""
        return not self.log_append_time and (
            self.message_timestamp_before_max_ms != INT64_MAX or self.message_timestamp_after_max_ms != INT64_MAX)

    @property
    def delete_enabled(self) -> bool:
        return "delete" in self.cleanup_policy

    @cached_property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @cached_property
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


# Python attribute name for each topic key, from the fields above; every topic key tierlog acts on has
# one (Kafka's other keys, keys.py's group "kafka", are stored and described but never read here).
_ATTRS: dict[str, str] = {f.metadata["key"]: f.name for f in fields(LogConfig)}
_missing = {k for k, key in TOPIC_DEF.keys.items() if key.group != UNMODELLED_GROUP} - set(_ATTRS)
if _missing:
    raise AssertionError(f"topic keys without a LogConfig field: {sorted(_missing)}")


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
