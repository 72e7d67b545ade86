"""How a part's typed settings come from broker keys, and the remote tier's settings.

A settings dataclass names each key once, on its field: ``threads: int = setting("log.cleaner.threads")``
makes the key's default the field's default and records the key in the field's metadata;
:func:`build_settings` walks the fields and reads each one's key from a BrokerConfig. The broker's
composition root (``tierlog.server.settings``) builds every part's settings that way, so no key is
named a second time in a builder.

``broker_default`` and friends serve the defaults of parts that are not built from the config
themselves (they get their values from a part that is).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tierlog.config.broker_config import BrokerConfig
from tierlog.config.definition import Type, Value, parse_value
from tierlog.config.keys import BROKER_DEF
from tierlog.errors import ConfigError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    S = TypeVar("S", bound=DataclassInstance)

#: Field metadata: the broker key a field is read from, and the conversion of the key's value.
SETTING_KEY = "tierlog.setting.key"
SETTING_CONVERT = "tierlog.setting.convert"


def _typed(name: str, value: Value) -> Value:
    """A key's value as its field holds it: DOUBLE keys as float (an int given counts), an unset list
    as the empty tuple."""
    key = BROKER_DEF.keys[name]
    if key.type is Type.DOUBLE and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if key.type is Type.LIST and value is None:
        return ()
    return value


def setting(name: str, convert: Callable[[Any], Any] | None = None) -> Any:
    """A settings field read from broker key ``name`` (its canonical name; an unknown one fails at
    import). Its default is the key's default; ``convert`` maps the key's value to the field's
    (``offsets.retention.minutes`` to milliseconds), the default included."""
    key = BROKER_DEF.require(name)
    if key.name != name:
        raise ValueError(f"setting({name!r}): use the key's own name, {key.name}")
    default = _typed(name, key.default)
    return field(default=default if convert is None else convert(default),
                 metadata={SETTING_KEY: name, SETTING_CONVERT: convert})


def setting_keys(cls: type[DataclassInstance]) -> dict[str, str]:
    """Field name → broker key of each field of ``cls`` declared with :func:`setting`."""
    return {f.name: f.metadata[SETTING_KEY] for f in fields(cls) if SETTING_KEY in f.metadata}


def build_settings(cls: type[S], config: BrokerConfig, **given: Any) -> S:
    """``cls`` with every :func:`setting` field read from ``config``; ``given`` sets the others (those
    not from one key: the node id, nested settings) and wins over a key."""
    values: dict[str, Any] = {}
    for f in fields(cls):
        name = f.metadata.get(SETTING_KEY)
        if name is None or f.name in given:
            continue
        value = _typed(name, config.get(name))
        convert = f.metadata[SETTING_CONVERT]
        values[f.name] = value if convert is None else convert(value)
    return cls(**values, **given)


def with_overrides(settings: S, raw_value: Callable[[str], str | None], *, keys: Collection[str] | None = None,
                   on_invalid: Callable[[ConfigError], None] | None = None) -> S:
    """``settings`` with each :func:`setting` field (of ``keys`` only, if given) whose key
    ``raw_value`` has a value for (a dynamic broker config) set to that value, parsed and converted
    as at startup. A value its key refuses raises the ConfigError, or goes to ``on_invalid`` and the
    field keeps its value."""
    changes: dict[str, Any] = {}
    for f in fields(settings):
        name = f.metadata.get(SETTING_KEY)
        if name is None or (keys is not None and name not in keys):
            continue
        raw = raw_value(name)
        if raw is None:
            continue
        try:
            value = _typed(name, parse_value(BROKER_DEF.keys[name], raw))
        except ConfigError as e:
            if on_invalid is None:
                raise
            on_invalid(e)
            continue
        convert = f.metadata[SETTING_CONVERT]
        changes[f.name] = value if convert is None else convert(value)
    return replace(settings, **changes)


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

    system_enable: bool = setting("remote.log.storage.system.enable")
    task_interval_ms: int = setting("remote.log.manager.task.interval.ms")
    custom_metadata_max_bytes: int = setting("remote.log.metadata.custom.metadata.max.bytes")
    index_cache_bytes: int = setting("remote.log.index.file.cache.total.size.bytes")
    producer_id_expiration_ms: int = setting("producer.id.expiration.ms")
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
    delete_retry_max_attempts: int = setting("remote.log.manager.delete.retry.max.attempts")
    delete_retry_backoff_max_ms: int = setting("remote.log.manager.delete.retry.backoff.max.ms")
    #: Remote compaction of compacted topics (issue 18) runs with the log cleaner: its switch, the
    #: key → offset map's memory bound and the read size are the cleaner's.
    compaction_enable: bool = setting("log.cleaner.enable")
    #: The broker's own remote compaction; off, ``tierlog spark compact`` does it (issue 18).
    remote_compaction_enable: bool = setting("remote.log.compaction.enable")
    compaction_map_bytes: int = setting("log.cleaner.dedupe.buffer.size")
    compaction_io_buffer_bytes: int = setting("log.cleaner.io.buffer.size")
    #: How long a compaction job's intent may go untouched before the broker expires it (issue 18).
    compaction_job_lease_ms: int = setting("remote.log.compaction.job.lease.ms")


@dataclass(frozen=True)
class RemoteStorageSettings:
    """Which remote storage plugin the broker loads and what it is configured with."""

    class_name: str
    #: The properties given to the broker (the plugin gets those under ``prefix``).
    properties: Mapping[str, str]
    prefix: str
    broker_id: int
    first_log_dir: Path
