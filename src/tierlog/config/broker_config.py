"""The broker's configuration: parsed once from ``server.properties`` syntax and overrides.

Everything wrong with a configuration is found here, before anything starts: unknown keys (with a
did-you-mean), values of the wrong type or out of range, and keys that contradict each other. Each
problem is one ConfigError naming the key, what it accepts, and where the bad value came from.
"""

from __future__ import annotations

import logging
import os.path
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from tierlog._util.properties import PropertiesError, read_property_entries
from tierlog.config.definition import HostPort, Listeners, Value, format_value
from tierlog.config.keys import BROKER_DEF, LISTENER_NETWORK_KEYS, TOPIC_DEF, is_rsm_property
from tierlog.config.log_config import local_retention_problem
from tierlog.config.security_keys import (
    CALLBACK_HANDLER_SUFFIX,
    JAAS_SUFFIX,
    LISTENER_KEY_NAMES,
    LISTENER_PREFIX,
    SASL_MECHANISMS,
    SECURITY_PROTOCOLS,
)
from tierlog.errors import ConfigError

OVERRIDE_ORIGIN = "--override"

log = logging.getLogger(__name__)

#: The rules between keys that BrokerConfig enforces, in words (rendered into the reference docs).
CROSS_KEY_RULES: tuple[str, ...] = (
    "`broker.id` is the old name of `node.id`: set either, or both to the same value.",
    "`log.dirs` wins over `log.dir` when both are set; a directory may be listed only once.",
    "Of the broker keys that set one topic default, the most specific one that is set wins "
    "(`log.retention.ms` over `log.retention.minutes` over `log.retention.hours`; the same for "
    "`log.roll.*` and `log.roll.jitter.*`); one in hours or minutes is checked in its unit "
    "(`log.roll.hours` is at least 1 as `segment.ms` is).",
    "`log.local.retention.ms` and `log.local.retention.bytes` (and per topic `local.retention.ms` and "
    "`local.retention.bytes`) are -2 (same as the total retention) or at most the total retention; "
    "-1 (unbounded) only while the total retention is unbounded too.",
    "`group.min.session.timeout.ms` is at most `group.max.session.timeout.ms`.",
    "Every listener name in `advertised.listeners` is one of `listeners`.",
    "`metrics.listener` does not take the port of a listener on the same address; `console.listener` "
    "takes neither a listener's port nor the metrics endpoint's.",
    "A topic key (`retention.ms`) in a broker config is an error that names its broker-wide default "
    "(`log.retention.ms`); keys starting `rsm.config.` or `rlmm.config.` are passed to the plugins unchecked.",
)


def _property_lines(text: str, source: str) -> Iterator[tuple[str, str, int]]:
    """``(key, value, line number)`` of each entry of a ``server.properties`` (continuation lines
    report their first line). Any form Java's ``Properties.load`` reads is accepted; values are
    trimmed as Kafka's ConfigDef trims them. A line with no ``=``/``:`` whose first word is no config
    key is most likely not meant as ``key value``: it is reported as the line it is."""
    try:
        for entry in read_property_entries(text, source):
            where = f"{source}:{entry.line_no}"
            if not entry.key:
                raise ConfigError(where, f"expected KEY=VALUE, got {entry.line!r} (no key)")
            if entry.separator in (" ", "") and not _is_known_key(entry.key):
                raise ConfigError(where, f"expected KEY=VALUE, got {entry.line!r}")
            yield entry.key, entry.value.strip(), entry.line_no
    except PropertiesError as e:
        raise ConfigError(f"{e.source}:{e.line_no}", e.message) from None


def _is_known_key(key: str) -> bool:
    return BROKER_DEF.find(key) is not None or TOPIC_DEF.find(key) is not None or is_rsm_property(key)


def parse_properties(text: str, source: str = "config") -> dict[str, str]:
    """``server.properties`` syntax (see :func:`_property_lines`). A later entry wins over an earlier
    one, as in Java."""
    return {key: value for key, value, _ in _property_lines(text, source)}


def parse_overrides(items: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` command-line overrides."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(item, f"an override must be KEY=VALUE ({OVERRIDE_ORIGIN})")
        out[key.strip()] = value.strip()
    return out


class BrokerConfig:
    """Validated broker configuration; unknown keys are an error with a did-you-mean.

    ``origins`` maps a key as given to where it came from (``server.properties:12``); errors about
    that key say so.
    """

    def __init__(self, props: Mapping[str, object] | None = None, *,
                 origins: Mapping[str, str] | None = None) -> None:
        props = dict(props or {})
        try:
            self.plugin_props = {k: str(v) for k, v in props.items() if is_rsm_property(k)}
            broker_props = {k: v for k, v in props.items() if not is_rsm_property(k)}
            #: Per-listener overrides (listener name upper case → canonical key → value), and the JAAS
            #: configs by (listener, mechanism).
            self.listener_props: dict[str, dict[str, Value]] = {}
            self.jaas_configs: dict[tuple[str, str], str] = {}
            #: Server callback handler class names by (listener, mechanism).
            self.callback_handlers: dict[tuple[str, str], str] = {}
            broker_props = self._split_listener_props(broker_props)
            _reject_topic_keys(broker_props)
            self._explicit = BROKER_DEF.parse(broker_props)
            self._values: dict[str, Value] = {name: key.default for name, key in BROKER_DEF.keys.items()}
            self._values.update(self._explicit)
            self._check_consistency()
            self._warn_deprecated(broker_props, origins or {})
        except ConfigError as e:
            origin = (origins or {}).get(e.key)
            if origin is None:
                raise
            message = str(e).removeprefix(f"{e.key}: ")
            raise ConfigError(e.key, f"{message} (from {origin})") from None

    @staticmethod
    def _warn_deprecated(props: Mapping[str, object], origins: Mapping[str, str]) -> None:
        for name in props:
            key = BROKER_DEF.deprecated(name)
            if key is not None:
                origin = f" (from {origins[name]})" if name in origins else ""
                log.warning("config key %s%s is deprecated: it is %s, Kafka's name for it; rename it, as the old "
                            "name will stop working in a later release", name, origin, key.name)

    @classmethod
    def from_file(cls, path: Path, overrides: Mapping[str, str] | None = None) -> BrokerConfig:
        props: dict[str, object] = {}
        origins: dict[str, str] = {}
        for key, value, line_no in _property_lines(path.read_text(encoding="utf-8"), str(path)):
            props[key] = value
            origins[key] = f"{path}:{line_no}"
        for key, value in (overrides or {}).items():
            props[key] = value
            origins[key] = OVERRIDE_ORIGIN
        return cls(props, origins=origins)

    @classmethod
    def from_sources(cls, path: Path | None, overrides: Sequence[str] = ()) -> BrokerConfig:
        """A config file (optional) plus ``KEY=VALUE`` overrides, which win — as ``tierlog serve``
        takes them."""
        pairs = parse_overrides(overrides)
        if path is not None:
            return cls.from_file(path, pairs)
        return cls(pairs, origins=dict.fromkeys(pairs, OVERRIDE_ORIGIN))

    def _split_listener_props(self, props: Mapping[str, object]) -> dict[str, object]:
        """Take Kafka's ``listener.name.<listener>.<key>`` overrides out of ``props``."""
        rest: dict[str, object] = {}
        for name, raw in props.items():
            if not name.startswith(LISTENER_PREFIX):
                rest[name] = raw
                continue
            listener, dot, key = name[len(LISTENER_PREFIX):].partition(".")
            if not dot or not listener or not key:
                raise ConfigError(name, "expected listener.name.<listener>.<key>")
            listener = listener.upper()
            suffix = next((x for x in (JAAS_SUFFIX, CALLBACK_HANDLER_SUFFIX) if key.endswith(x) and key != x[1:]), None)
            if suffix is not None:
                mechanism = key[: -len(suffix)].upper()
                if mechanism not in SASL_MECHANISMS:
                    raise ConfigError(name, f"unknown SASL mechanism {mechanism}; valid: {', '.join(SASL_MECHANISMS)}")
                target = self.jaas_configs if suffix == JAAS_SUFFIX else self.callback_handlers
                target[(listener, mechanism)] = str(raw)
                continue
            if key not in LISTENER_KEY_NAMES and key not in LISTENER_NETWORK_KEYS:
                raise ConfigError(name, f"{key} cannot be set per listener; per-listener keys: "
                                        f"{', '.join(sorted(LISTENER_KEY_NAMES | LISTENER_NETWORK_KEYS))}, "
                                        f"<mechanism>{JAAS_SUFFIX}, "
                                        f"<mechanism>{CALLBACK_HANDLER_SUFFIX}")
            try:
                parsed = BROKER_DEF.parse({key: raw})
            except ConfigError as e:
                raise ConfigError(name, str(e).removeprefix(f"{e.key}: ")) from None
            self.listener_props.setdefault(listener, {}).update(parsed)
        return rest

    def inter_broker_listener(self) -> str:
        """Kafka's interBrokerListenerName: ``inter.broker.listener.name``, else the listener named for
        ``security.inter.broker.protocol``; upper case."""
        return (self.get_optional_str("inter.broker.listener.name")
                or self.get_str("security.inter.broker.protocol")).upper()

    def listener_override(self, listener: str, name: str) -> Value | None:
        """The static ``listener.name.<listener>.<name>`` value, or None when the listener has none."""
        key = BROKER_DEF.require(name)
        return self.listener_props.get(listener.upper(), {}).get(key.name)

    def listener_value(self, listener: str, name: str) -> Value:
        """The value of a per-listener key for ``listener``: its override, else the broker-wide value."""
        overrides = self.listener_props.get(listener.upper(), {})
        key = BROKER_DEF.require(name)
        return overrides[key.name] if key.name in overrides else self._values[key.name]

    def security_protocol_map(self) -> dict[str, str]:
        """Listener name → security protocol (``listener.security.protocol.map``)."""
        out: dict[str, str] = {}
        for item in self.get_list("listener.security.protocol.map"):
            name, colon, protocol = item.partition(":")
            name, protocol = name.strip().upper(), protocol.strip().upper()
            if not colon or not name or protocol not in SECURITY_PROTOCOLS:
                raise ConfigError("listener.security.protocol.map",
                                  f"{item!r} is not NAME:PROTOCOL with PROTOCOL one of {', '.join(SECURITY_PROTOCOLS)}")
            if name in out:
                raise ConfigError("listener.security.protocol.map", f"listener name {name} is mapped twice")
            out[name] = protocol
        return out

    def security_protocol(self, listener: str) -> str:
        return self.security_protocol_map()[listener.upper()]

    def is_set(self, name: str) -> bool:
        return name in self._explicit

    @property
    def explicit(self) -> dict[str, Value]:
        """The keys set in the file or overrides (canonical names), with their parsed values."""
        return dict(self._explicit)

    def get(self, name: str) -> Value:
        key = BROKER_DEF.require(name)
        return self._values[key.name]

    def get_int(self, name: str) -> int:
        v = self.get(name)
        assert isinstance(v, int) and not isinstance(v, bool), name
        return v

    def get_float(self, name: str) -> float:
        """A DOUBLE key's value (an int given for it counts too)."""
        v = self.get(name)
        assert isinstance(v, int | float) and not isinstance(v, bool), name
        return float(v)

    def get_bool(self, name: str) -> bool:
        v = self.get(name)
        assert isinstance(v, bool), name
        return v

    def get_str(self, name: str) -> str:
        v = self.get(name)
        assert isinstance(v, str), name
        return v

    def get_optional_str(self, name: str) -> str | None:
        v = self.get(name)
        assert v is None or isinstance(v, str), name
        return v

    def get_list(self, name: str) -> tuple[str, ...]:
        v = self.get(name)
        assert v is None or isinstance(v, tuple), name
        return v or ()

    @property
    def node_id(self) -> int:
        v = self.get("broker.id") if self.is_set("broker.id") and not self.is_set("node.id") else self.get("node.id")
        assert isinstance(v, int)
        return v

    @property
    def log_dirs(self) -> tuple[Path, ...]:
        dirs = self.get_list("log.dirs") or (self.get_str("log.dir"),)
        return tuple(Path(d) for d in dirs)

    def topic_defaults(self) -> dict[str, Value]:
        """Defaults of every topic key as this broker's synonyms set them."""
        return {name: value for name, (value, _, _) in self.topic_default_sources().items()}

    def topic_default_sources(self) -> dict[str, tuple[Value, str | None, int]]:
        """For each topic key: its default on this broker, the broker key that set it (None: the
        topic key's own default) and that key's multiplier to the topic key's unit.

        The most specific synonym that is set wins (``log.retention.ms`` over ``log.retention.hours``);
        with none set, the least specific one's default applies.
        """
        out: dict[str, tuple[Value, str | None, int]] = {}
        for name, key in TOPIC_DEF.keys.items():
            entry: tuple[Value, str | None, int] = (key.default, None, 1)
            for syn, multiplier in key.broker_synonyms:
                if self.is_set(syn) or (syn == key.broker_synonyms[-1][0] and self.get(syn) is not None):
                    raw = self.get(syn)
                    if isinstance(raw, int) and not isinstance(raw, bool) and multiplier != 1 and raw >= 0:
                        raw = raw * multiplier
                    entry = (raw, syn, multiplier)
                    if self.is_set(syn):
                        break
            out[name] = entry
        return out

    # -- rules that span keys -------------------------------------------------------------------

    def _check_consistency(self) -> None:
        self._check_node_id()
        self._check_log_dirs()
        sources = self.topic_default_sources()
        for local, total in (("local.retention.ms", "retention.ms"), ("local.retention.bytes", "retention.bytes")):
            self._check_local_retention(sources, local, total)
        self._check_session_timeouts()
        self._check_listeners()

    def _check_node_id(self) -> None:
        if self.is_set("broker.id") and self.is_set("node.id") and self.get("broker.id") != self.get("node.id"):
            raise ConfigError("broker.id", f"value {self.get('broker.id')} conflicts with node.id "
                                           f"{self.get('node.id')}; broker.id is the old name of node.id: "
                                           "set only node.id, or both to the same value")

    def _check_log_dirs(self) -> None:
        seen: set[str] = set()
        for d in self.get_list("log.dirs"):
            norm = os.path.normpath(d)
            if norm in seen:
                raise ConfigError("log.dirs", f"directory {d} is listed twice; list each log directory once")
            seen.add(norm)

    def _check_local_retention(self, sources: Mapping[str, tuple[Value, str | None, int]],
                               local_name: str, total_name: str) -> None:
        local, local_source, _ = sources[local_name]
        total, total_source, _ = sources[total_name]
        if not isinstance(local, int) or not isinstance(total, int):
            return
        origin = total_name
        if total_source is not None:
            its = "" if self.is_set(total_source) else "the default "
            origin += f", from {its}{total_source}={format_value(self.get(total_source))}"
        problem = local_retention_problem(local, total, origin)
        if problem is not None:
            raise ConfigError(local_source or local_name, problem)

    def _check_session_timeouts(self) -> None:
        low, high = self.get_int("group.min.session.timeout.ms"), self.get_int("group.max.session.timeout.ms")
        if low > high:
            if self.is_set("group.min.session.timeout.ms"):
                raise ConfigError("group.min.session.timeout.ms",
                                  f"value {low} is larger than group.max.session.timeout.ms {high}")
            raise ConfigError("group.max.session.timeout.ms",
                              f"value {high} is smaller than group.min.session.timeout.ms {low}")

    def listener_names(self) -> list[str]:
        """The names of ``listeners``, upper case, in their order."""
        return [Listeners.split(item)[0] for item in self.get_list("listeners")]

    def _check_listeners(self) -> None:
        listeners = [Listeners.split(item) for item in self.get_list("listeners")]
        names = [name for name, _, _ in listeners]
        protocols = self.security_protocol_map()
        for name in names:
            if name not in protocols:
                raise ConfigError("listener.security.protocol.map",
                                  f"no security protocol for listener {name}; add {name}:<protocol>")
        inter = self.get_optional_str("inter.broker.listener.name")
        if inter and inter.upper() not in names:
            raise ConfigError("inter.broker.listener.name", f"{inter} is not one of listeners ({', '.join(names)})")
        known = set(names) | {n.upper() for n in self.get_list("controller.listener.names")}
        for name in [*self.listener_props, *(listener for listener, _ in [*self.jaas_configs, *self.callback_handlers])]:
            if name not in known:
                raise ConfigError(f"{LISTENER_PREFIX}{name.lower()}",
                                  f"listener {name} is not one of listeners ({', '.join(names)})")
        for name in names:
            if protocols[name] in ("SSL", "SASL_SSL") and not (
                    self.listener_value(name, "ssl.keystore.location")
                    or self.listener_value(name, "ssl.keystore.certificate.chain")):
                raise ConfigError(f"{LISTENER_PREFIX}{name.lower()}.ssl.keystore.location",
                                  f"listener {name} uses {protocols[name]} and needs a certificate: set "
                                  "ssl.keystore.location (or ssl.keystore.certificate.chain and ssl.keystore.key)")
        for name, _, _ in (Listeners.split(item) for item in self.get_list("advertised.listeners")):
            if name not in names:
                raise ConfigError("advertised.listeners", f"listener name {name} is not one of listeners "
                                                          f"({', '.join(names) or 'none'})")
        wildcard = {"", "0.0.0.0", "::"}
        taken = [(f"listener {name}", host, port) for name, host, port in listeners]
        for key, what in (("metrics.listener", "metrics endpoint"), ("console.listener", "console")):
            address = self.get_optional_str(key)
            if not address:
                continue
            m_host, m_port = HostPort.split(address)
            for name, host, port in taken:
                if port == m_port != 0 and (host == m_host or host in wildcard or m_host in wildcard):
                    raise ConfigError(key, f"port {port} is already taken by {name}; give the {what} a port of "
                                           "its own")
            taken.append((key, m_host, m_port))


def _reject_topic_keys(props: Mapping[str, object]) -> None:
    """A topic key in a broker config is a common slip; point at its broker-wide synonym."""
    for name in props:
        if BROKER_DEF.find(name) is not None:
            continue
        topic_key = TOPIC_DEF.find(name)
        if topic_key is None:
            continue
        if topic_key.broker_synonyms:
            hint = f"set its broker-wide default {topic_key.broker_synonyms[0][0]} instead"
        else:
            hint = "it can only be set per topic"
        raise ConfigError(name, f"is a topic config, not a broker config; {hint}")
