"""Group configs (Kafka's GroupConfig, KIP-848): keys set per group on the GROUP config resource
(type 32) with IncrementalAlterConfigs / AlterConfigs, their broker synonyms, and Kafka's rules.

Names, types, defaults and per-key ranges are Apache Kafka 4.3.1's GroupConfig. A value must also lie
within the broker's bounds (``group.consumer.min.session.timeout.ms`` ...), checked on the whole
resulting set of the group's configs as Kafka's controller does (GroupConfig.validate), with Kafka's
messages. tierlog acts on the consumer-group keys its KIP-848 coordinator has
(``consumer.session.timeout.ms``, ``consumer.heartbeat.interval.ms``); the others are accepted,
stored and described, and say so in their documentation.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tierlog.config.definition import (
    ConfigDef,
    ConfigKey,
    Importance,
    Scope,
    Type,
    Validator,
    Value,
    at_least,
    one_of,
    parse_value,
)
from tierlog.errors import ConfigError

_NOT_ACTED_ON = " Accepted, stored and described; tierlog has no {what} and does not act on it."
_SHARE = _NOT_ACTED_ON.format(what="share groups (KIP-932)")
_STREAMS = _NOT_ACTED_ON.format(what="streams groups (KIP-1071)")

# Java's Duration.parse format (PnDTnHnMn.nS), as Kafka's by_duration strategy reads it.
_ISO_DURATION = re.compile(r"^([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?"
                           r"(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?$", re.IGNORECASE)


def duration_ms(text: str) -> int | None:
    """An ISO-8601 duration (PnDTnHnMn.nS) in milliseconds; None when it does not parse."""
    m = _ISO_DURATION.match(text)
    if m is None or text.upper().endswith("T") or not any(m.group(i) for i in range(2, 6)):
        return None
    days, hours, minutes, seconds = (int(m.group(i) or 0) for i in range(2, 6))
    fraction = int((m.group(6) or "0").ljust(3, "0")[:3])
    total = ((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000 + (-fraction if seconds < 0 else fraction)
    return -total if m.group(1) == "-" else total


@dataclass(frozen=True)
class AutoOffsetReset:
    """Kafka's ShareGroupAutoOffsetResetStrategy: earliest, latest or by_duration:<non-negative duration>."""

    def __call__(self, key: str, value: Value) -> None:
        if not isinstance(value, str):
            return
        if value in ("earliest", "latest"):
            return
        if value.startswith("by_duration:"):
            ms = duration_ms(value[len("by_duration:"):])
            if ms is not None and ms >= 0:
                return
        raise ConfigError(key, f"Invalid value `{value}` for configuration {key}. The value must be either "
                               "'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.")

    def describe(self) -> str:
        return "[latest, earliest, by_duration:PnDTnHnMn.nS]"


def _group(name: str, type_: Type, default: Value, doc: str, *, validator: Validator | None = None,
           synonym: str | None = None) -> ConfigKey:
    return ConfigKey(name=name, type=type_, default=default, doc=doc, importance=Importance.MEDIUM,
                     scope=Scope.GROUP, validator=validator,
                     broker_synonyms=((synonym, 1),) if synonym else (), group="group")


GROUP_KEYS: list[ConfigKey] = [
    _group("consumer.session.timeout.ms", Type.INT, 45000,
           "This consumer group's (KIP-848, group.protocol=consumer) session timeout: a member that sends no "
           "heartbeat for this long is removed and its partitions reassigned.",
           validator=at_least(1), synonym="group.consumer.session.timeout.ms"),
    _group("consumer.heartbeat.interval.ms", Type.INT, 5000,
           "How often the members of this consumer group (KIP-848) are told to heartbeat.",
           validator=at_least(1), synonym="group.consumer.heartbeat.interval.ms"),
    _group("consumer.assignment.interval.ms", Type.INT, 1000,
           "Kafka's interval between assignment updates of a consumer group. Accepted, stored and described; "
           "tierlog computes a consumer group's assignment at once and does not act on it.",
           validator=at_least(0), synonym="group.consumer.assignment.interval.ms"),
    _group("share.session.timeout.ms", Type.INT, 45000,
           "The timeout to detect client failures when using the share group protocol." + _SHARE,
           validator=at_least(1), synonym="group.share.session.timeout.ms"),
    _group("share.heartbeat.interval.ms", Type.INT, 5000,
           "The heartbeat interval given to the members of a share group." + _SHARE,
           validator=at_least(1), synonym="group.share.heartbeat.interval.ms"),
    _group("share.record.lock.duration.ms", Type.INT, 30000,
           "The record acquisition lock duration of a share group." + _SHARE,
           validator=at_least(1000), synonym="group.share.record.lock.duration.ms"),
    _group("share.delivery.count.limit", Type.INT, 5,
           "The maximum number of delivery attempts for a record delivered to a share group." + _SHARE,
           validator=at_least(2), synonym="group.share.delivery.count.limit"),
    _group("share.partition.max.record.locks", Type.INT, 2000,
           "Share-group record lock limit per share-partition." + _SHARE,
           validator=at_least(100), synonym="group.share.partition.max.record.locks"),
    _group("share.auto.offset.reset", Type.STRING, "latest",
           "Where a share group starts reading a partition: earliest, latest, or by_duration:<ISO-8601 "
           "duration> before now." + _SHARE, validator=AutoOffsetReset()),
    _group("share.isolation.level", Type.STRING, "read_uncommitted",
           "Whether a share group delivers only committed transactional records (read_committed) or all of "
           "them (read_uncommitted)." + _SHARE, validator=one_of("read_committed", "read_uncommitted")),
    _group("share.renew.acknowledge.enable", Type.BOOLEAN, True,
           "Whether the renew acknowledge type is enabled for the share group." + _SHARE),
    _group("share.assignment.interval.ms", Type.INT, 1000,
           "The interval between assignment updates for a share group." + _SHARE,
           validator=at_least(0), synonym="group.share.assignment.interval.ms"),
    _group("streams.session.timeout.ms", Type.INT, 45000,
           "The timeout to detect client failures when using the streams group protocol." + _STREAMS,
           validator=at_least(1), synonym="group.streams.session.timeout.ms"),
    _group("streams.heartbeat.interval.ms", Type.INT, 5000,
           "The heartbeat interval given to the members of a streams group." + _STREAMS,
           validator=at_least(1), synonym="group.streams.heartbeat.interval.ms"),
    _group("streams.num.standby.replicas", Type.INT, 0,
           "The number of standby replicas for each task of a streams group." + _STREAMS,
           validator=at_least(0), synonym="group.streams.num.standby.replicas"),
    _group("streams.initial.rebalance.delay.ms", Type.INT, 3000,
           "How long a new streams group waits for more clients before its first rebalance." + _STREAMS,
           validator=at_least(0), synonym="group.streams.initial.rebalance.delay.ms"),
    _group("streams.assignment.interval.ms", Type.INT, 1000,
           "The interval between assignment updates for a streams group." + _STREAMS,
           validator=at_least(0), synonym="group.streams.assignment.interval.ms"),
]

GROUP_DEF = ConfigDef(GROUP_KEYS)

#: Each group key's bounds on the broker, in the order Kafka checks them: (key, broker minimum key or
#: None, broker maximum key).
GROUP_BOUNDS: tuple[tuple[str, str | None, str], ...] = (
    ("consumer.heartbeat.interval.ms", "group.consumer.min.heartbeat.interval.ms",
     "group.consumer.max.heartbeat.interval.ms"),
    ("consumer.session.timeout.ms", "group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms"),
    ("consumer.assignment.interval.ms", "group.consumer.min.assignment.interval.ms",
     "group.consumer.max.assignment.interval.ms"),
    ("share.heartbeat.interval.ms", "group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms"),
    ("share.session.timeout.ms", "group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms"),
    ("share.record.lock.duration.ms", "group.share.min.record.lock.duration.ms",
     "group.share.max.record.lock.duration.ms"),
    ("share.delivery.count.limit", "group.share.min.delivery.count.limit", "group.share.max.delivery.count.limit"),
    ("share.partition.max.record.locks", "group.share.min.partition.max.record.locks",
     "group.share.max.partition.max.record.locks"),
    ("share.assignment.interval.ms", "group.share.min.assignment.interval.ms",
     "group.share.max.assignment.interval.ms"),
    ("streams.heartbeat.interval.ms", "group.streams.min.heartbeat.interval.ms",
     "group.streams.max.heartbeat.interval.ms"),
    ("streams.session.timeout.ms", "group.streams.min.session.timeout.ms", "group.streams.max.session.timeout.ms"),
    ("streams.num.standby.replicas", None, "group.streams.max.standby.replicas"),
    ("streams.assignment.interval.ms", "group.streams.min.assignment.interval.ms",
     "group.streams.max.assignment.interval.ms"),
)

#: The broker keys GROUP_BOUNDS names.
GROUP_BOUND_BROKER_KEYS: tuple[str, ...] = tuple(k for _, lo, hi in GROUP_BOUNDS for k in (lo, hi) if k)

_SESSION_OVER_HEARTBEAT = (("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
                           ("share.session.timeout.ms", "share.heartbeat.interval.ms"),
                           ("streams.session.timeout.ms", "streams.heartbeat.interval.ms"))


class GroupConfigError(ConfigError):
    """A rule between a group key and the broker's bounds broken; Kafka's message as is."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(key, message)
        self.args = (message,)

    def __str__(self) -> str:
        return str(self.args[0])


def check_group_configs(configs: Mapping[str, str], broker_bound: Callable[[str], int]) -> None:
    """Kafka's GroupConfig.validate of a group's whole set of configs (canonical names, values already
    parsed once): every key, given or defaulted from Kafka's GroupConfig defaults, within the broker's
    bounds (``broker_bound(key)``), and each session timeout greater than its heartbeat interval."""
    values: dict[str, Value] = {k.name: k.default for k in GROUP_KEYS}
    for name, raw in configs.items():
        values[name] = parse_value(GROUP_DEF.require(name, "group config"), raw)
    for name, low, high in GROUP_BOUNDS:
        value = values[name]
        assert isinstance(value, int)
        if low is not None and value < broker_bound(low):
            raise GroupConfigError(name, f"{name} must be greater than or equal to {low}")
        if value > broker_bound(high):
            raise GroupConfigError(name, f"{name} must be less than or equal to {high}")
    for session, heartbeat in _SESSION_OVER_HEARTBEAT:
        if values[session] <= values[heartbeat]:  # type: ignore[operator]
            raise GroupConfigError(session, f"{session} must be greater than {heartbeat}")
