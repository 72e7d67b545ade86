"""Validating dynamic topic and broker configs before the controller records them.

Values are stored as Kafka stores them — strings under the canonical key name — after checking them
against the one definition of each key (TOPIC_DEF / BROKER_DEF) and, for topics, building the
resulting LogConfig so rules that span keys (local.retention.* against retention.*) hold too.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tierlog.config.definition import ConfigDef, ConfigKey, Type, Value, parse_value
from tierlog.config.group_keys import GROUP_DEF, check_group_configs
from tierlog.config.keys import BROKER_DEF, LISTENER_NETWORK_KEYS, TOPIC_DEF
from tierlog.config.log_config import LogConfig
from tierlog.config.security_keys import LISTENER_PREFIX, RECONFIGURABLE_TLS_KEYS
from tierlog.errors import ConfigError
from tierlog.metadata.errors import InvalidRequestError
from tierlog.metadata.records import ConfigRecord, ConfigResourceType

#: Broker keys the metadata layer applies as soon as they change, although the static definitions
#: mark them read-only: the snapshot and retention settings are only read by the controller itself.
LIVE_METADATA_KEYS = frozenset({
    "metadata.log.max.record.bytes.between.snapshots",
    "metadata.log.max.snapshot.interval.ms",
    "metadata.max.retention.bytes",
    "metadata.max.retention.ms",
})


class AlterConfigOpType(enum.IntEnum):
    """IncrementalAlterConfigs operation ids (Kafka's AlterConfigOp.OpType)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True)
class AlterConfigOp:
    name: str
    op: AlterConfigOpType = AlterConfigOpType.SET
    value: str | None = None


def kafka_string(value: object) -> str:
    """A config value as Kafka writes it in a ConfigRecord."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v).strip() for v in value)
    return str(value).strip()


def _definition(resource_type: ConfigResourceType) -> tuple[ConfigDef, str]:
    if resource_type == ConfigResourceType.TOPIC:
        return TOPIC_DEF, "topic config"
    if resource_type == ConfigResourceType.GROUP:
        return GROUP_DEF, "group config"
    return BROKER_DEF, "broker config"


def _key(resource_type: ConfigResourceType, name: str) -> ConfigKey:
    definition, what = _definition(resource_type)
    key = definition.require(name, what)
    if resource_type == ConfigResourceType.BROKER and not key.dynamic and key.name not in LIVE_METADATA_KEYS:
        raise ConfigError(key.name, "cannot be updated dynamically; set it in server.properties and restart")
    return key


def stored_key(resource_type: ConfigResourceType, name: str) -> tuple[str, ConfigKey]:
    """The name a config is recorded under, and its definition. A broker resource also takes Kafka's
    per-listener form of the TLS keys a broker reloads without a restart and of
    ``max.connection.creation.rate``, ``listener.name.<listener>.<key>`` (the listener in lower case,
    as Kafka writes it)."""
    if resource_type == ConfigResourceType.BROKER and name.startswith(LISTENER_PREFIX):
        listener, dot, inner = name[len(LISTENER_PREFIX):].partition(".")
        key = BROKER_DEF.find(inner) if dot and listener else None
        if key is None or (key.name not in RECONFIGURABLE_TLS_KEYS and key.name not in LISTENER_NETWORK_KEYS):
            raise ConfigError(name, "cannot be updated dynamically (per listener: "
                                    f"{', '.join(sorted(RECONFIGURABLE_TLS_KEYS | LISTENER_NETWORK_KEYS))})")
        return f"{LISTENER_PREFIX}{listener.lower()}.{key.name}", key
    key = _key(resource_type, name)
    return key.name, key


def validate_broker_resource_name(name: str) -> None:
    """"" is the cluster-wide default; anything else must be a broker id."""
    if name and not (name.isdigit() and int(name) <= 2**31 - 1):
        raise InvalidRequestError(f"Invalid broker name {name!r}: a broker id, or empty for the cluster default")


def canonical_configs(resource_type: ConfigResourceType, configs: Mapping[str, object]) -> dict[str, str]:
    """``configs`` under canonical key names, each value checked; a null value is an error here (use a
    DELETE operation to remove a key)."""
    out: dict[str, str] = {}
    for raw_name, raw_value in configs.items():
        name, key = stored_key(resource_type, raw_name)
        if raw_value is None:
            raise ConfigError(name, "null value not supported; delete the key instead")
        if name in out:
            raise ConfigError(name, f"given twice (also as {raw_name!r})")
        parse_value(key, raw_value)
        out[name] = kafka_string(raw_value)
    return out


def apply_ops(resource_type: ConfigResourceType, current: Mapping[str, str],
              ops: Sequence[AlterConfigOp]) -> dict[str, str]:
    """The configs after IncrementalAlterConfigs ``ops``, each value checked."""
    new = dict(current)
    seen: set[str] = set()
    for op in ops:
        name, key = stored_key(resource_type, op.name)
        if name in seen:
            raise InvalidRequestError(f"Error due to duplicate config keys: {name}")
        seen.add(name)
        if op.op == AlterConfigOpType.DELETE:
            new.pop(name, None)
            continue
        if op.value is None:
            raise ConfigError(name, f"{op.op.name} needs a value")
        if op.op == AlterConfigOpType.SET:
            parse_value(key, op.value)
            new[name] = kafka_string(op.value)
            continue
        if key.type is not Type.LIST:
            raise ConfigError(name, f"{op.op.name} is only allowed for list configs")
        base = new.get(name)
        items = _split(base) if base is not None else list(_default_items(key.default))
        changes = _split(op.value)
        if op.op == AlterConfigOpType.APPEND:
            items += [v for v in changes if v not in items]
        else:
            items = [v for v in items if v not in changes]
        parse_value(key, ",".join(items))
        new[name] = ",".join(items)
    return new


def _split(value: str) -> list[str]:
    return [p.strip() for p in value.split(",") if p.strip()]


def _default_items(default: Value) -> tuple[str, ...]:
    if isinstance(default, tuple):
        return default
    return () if default is None else (str(default),)


def validate_group_resource_name(name: str) -> None:
    """Kafka keeps no cluster-wide default group resource (ControllerConfigurationValidator)."""
    if not name:
        raise InvalidRequestError("Default group resources are not allowed.")


def check_group_resource(configs: Mapping[str, str], group_bounds: Mapping[str, int]) -> None:
    """The whole resulting set of a group's configs against the broker's bounds (Kafka's GroupConfig
    rules); a bound this broker does not know is not checked."""
    check_group_configs(configs, lambda key: group_bounds.get(key, 2**31 - 1 if ".max." in key else 0))


def check_topic_configs(configs: Mapping[str, str], topic_defaults: Mapping[str, Value]) -> None:
    """The whole resulting set must make a valid LogConfig (cross-key rules)."""
    try:
        LogConfig.from_props(configs, defaults=topic_defaults)
    except ConfigError:
        raise
    except (TypeError, ValueError) as e:
        raise ConfigError("topic config", str(e)) from e


def diff_records(resource_type: ConfigResourceType, resource_name: str, old: Mapping[str, str],
                 new: Mapping[str, str]) -> list[ConfigRecord]:
    """ConfigRecords turning ``old`` into ``new`` (None values delete), in a stable order."""
    records = [ConfigRecord(int(resource_type), resource_name, k, v) for k, v in sorted(new.items()) if old.get(k) != v]
    records += [ConfigRecord(int(resource_type), resource_name, k, None) for k in sorted(old) if k not in new]
    return records
