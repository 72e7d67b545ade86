"""One definition per configuration key: name, type, default, validator, importance, doc, synonyms.

Validation, ``tierlog config docs`` and ``docs/configuration.md`` are all generated from these
definitions, so a key is described exactly once.
"""

from __future__ import annotations

import difflib
import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tierlog.errors import ConfigError

Value = int | float | bool | str | tuple[str, ...] | None

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


class Type(enum.Enum):
    INT = "int"
    LONG = "long"
    DOUBLE = "double"
    BOOLEAN = "boolean"
    STRING = "string"
    LIST = "list"
    PASSWORD = "password"


class Importance(enum.Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class Scope(enum.Enum):
    BROKER = "broker"
    TOPIC = "topic"
    GROUP = "group"


class Validator(Protocol):
    """Checks a parsed value, and describes in words what it accepts.

    The "valid values" text of a key (in errors and in the generated docs) is ``describe()`` of its
    validator, so the text and the check cannot drift apart.
    """

    def __call__(self, key: str, value: Value) -> None: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class AtLeast:
    minimum: int | float

    def __call__(self, key: str, value: Value) -> None:
        if isinstance(value, int | float) and not isinstance(value, bool) and value < self.minimum:
            raise ConfigError(key, f"value {value} is below the minimum {self.minimum}")

    def describe(self) -> str:
        return f"[{self.minimum},...]"


@dataclass(frozen=True)
class Between:
    minimum: int | float
    maximum: int | float

    def __call__(self, key: str, value: Value) -> None:
        if isinstance(value, int | float) and not isinstance(value, bool) and not self.minimum <= value <= self.maximum:
            raise ConfigError(key, f"value {value} is outside the range {self.describe()}")

    def describe(self) -> str:
        return f"[{self.minimum},...,{self.maximum}]"


@dataclass(frozen=True)
class OneOf:
    """A string that is one of ``choices``; for a list key, every item is."""

    choices: tuple[str, ...]
    case_insensitive: bool = False

    def _norm(self, s: str) -> str:
        return s.lower() if self.case_insensitive else s

    def __call__(self, key: str, value: Value) -> None:
        items: Sequence[str]
        if isinstance(value, tuple):
            items = value
        elif isinstance(value, str):
            items = (value,)
        else:
            return
        allowed = {self._norm(c) for c in self.choices}
        for item in items:
            if self._norm(item) not in allowed:
                raise ConfigError(key, f"value {item!r} is not one of {', '.join(self.choices)}")

    def describe(self) -> str:
        text = f"[{', '.join(self.choices)}]"
        return f"{text} (any case)" if self.case_insensitive else text


@dataclass(frozen=True)
class NonEmpty:
    """A string that is not blank."""

    what: str = "any text"

    def __call__(self, key: str, value: Value) -> None:
        if isinstance(value, str) and not value:
            raise ConfigError(key, f"must not be empty; valid values: {self.describe()}")

    def describe(self) -> str:
        return f"{self.what}, not empty"


_HOST_PORT = r"(\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]*):([0-9]+)"
_LISTENER = re.compile(rf"^([A-Za-z][A-Za-z0-9_]*)://{_HOST_PORT}$")
_ADDRESS = re.compile(rf"^{_HOST_PORT}$")


@dataclass(frozen=True)
class Listeners:
    """``NAME://HOST:PORT`` items (an empty HOST binds every interface), each name at most once."""

    #: At least one listener (``listeners``; ``advertised.listeners`` may be empty).
    required: bool = False

    def __call__(self, key: str, value: Value) -> None:
        if not isinstance(value, tuple):
            return
        if self.required and not value:
            raise ConfigError(key, f"at least one listener is needed; valid values: {self.describe()}")
        names: set[str] = set()
        for item in value:
            match = _LISTENER.match(item)
            if match is None:
                raise ConfigError(key, f"{item!r} is not of the form NAME://HOST:PORT")
            name, _, port = match.groups()
            if int(port) > 65535:
                raise ConfigError(key, f"{item!r}: port {port} is outside [0,...,65535]")
            if name.upper() in names:
                raise ConfigError(key, f"listener name {name.upper()} is used twice; each listener needs its own name")
            names.add(name.upper())

    def describe(self) -> str:
        text = "comma-separated NAME://HOST:PORT, each NAME once (empty HOST: all interfaces)"
        return f"{text}; at least one" if self.required else text

    @staticmethod
    def split(item: str) -> tuple[str, str, int]:
        """``(NAME, host, port)`` of a listener this validator accepted (IPv6 brackets removed)."""
        match = _LISTENER.match(item)
        if match is None:
            raise ValueError(f"not a listener: {item!r}")
        name, host, port = match.groups()
        return name.upper(), host.strip("[]"), int(port)


_HTTP_SCHEME = "http://"


@dataclass(frozen=True)
class HostPort:
    """``HOST:PORT``; an empty string means off. With ``http``, ``http://HOST:PORT`` is accepted
    too (an HTTP endpoint, written as Kafka writes listeners)."""

    http: bool = False

    def __call__(self, key: str, value: Value) -> None:
        if not isinstance(value, str) or not value:
            return
        address = value
        if self.http:
            scheme, sep, rest = value.partition("://")
            if sep:
                if scheme.lower() != "http":
                    raise ConfigError(key, f"{value!r}: only http:// is served (no TLS); valid values: "
                                           f"{self.describe()}")
                address = rest
        match = _ADDRESS.match(address)
        if match is None:
            form = "HOST:PORT or http://HOST:PORT" if self.http else "HOST:PORT"
            raise ConfigError(key, f"{value!r} is not of the form {form}")
        if int(match.group(2)) > 65535:
            raise ConfigError(key, f"{value!r}: port {match.group(2)} is outside [0,...,65535]")

    def describe(self) -> str:
        forms = "HOST:PORT or http://HOST:PORT" if self.http else "HOST:PORT"
        return f"{forms} (empty HOST: all interfaces); unset or empty: off"

    @staticmethod
    def split(value: str) -> tuple[str, int]:
        """``(host, port)`` of a value this validator accepted (IPv6 brackets and ``http://`` removed)."""
        if value[: len(_HTTP_SCHEME)].lower() == _HTTP_SCHEME:
            value = value[len(_HTTP_SCHEME):]
        match = _ADDRESS.match(value)
        if match is None:
            raise ValueError(f"not HOST:PORT: {value!r}")
        return match.group(1).strip("[]"), int(match.group(2))


_HOST_COUNT = re.compile(r"^\s*(\[[0-9A-Fa-f:.]+\]|[^\s,\[\]]+):([0-9]+)\s*$")


@dataclass(frozen=True)
class HostCounts:
    """Comma-separated ``HOST:COUNT`` pairs (``max.connections.per.ip.overrides``); empty: none."""

    def __call__(self, key: str, value: Value) -> None:
        if not isinstance(value, str):
            return
        for item in value.split(","):
            if item.strip() and _HOST_COUNT.match(item) is None:
                raise ConfigError(key, f"{item.strip()!r} is not of the form HOST:COUNT")

    def describe(self) -> str:
        return "comma-separated HOST:COUNT (an IPv6 address in brackets); empty: none"


_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")


@dataclass(frozen=True)
class DottedPath:
    """A class named by its dotted Python path, as plugins are loaded."""

    def __call__(self, key: str, value: Value) -> None:
        if isinstance(value, str) and _DOTTED.match(value) is None:
            raise ConfigError(key, f"{value!r} is not a dotted Python path such as package.module.Class")

    def describe(self) -> str:
        return "a dotted Python path: package.module.Class"


def at_least(minimum: int | float) -> Validator:
    return AtLeast(minimum)


def between(minimum: int | float, maximum: int | float) -> Validator:
    return Between(minimum, maximum)


def one_of(*choices: str, case_insensitive: bool = False) -> Validator:
    return OneOf(tuple(choices), case_insensitive)


#: What a key without a validator accepts, by type.
_TYPE_VALID_VALUES = {
    Type.INT: f"[{-INT32_MAX - 1},...,{INT32_MAX}]",
    Type.LONG: f"[{-INT64_MAX - 1},...,{INT64_MAX}]",
    Type.DOUBLE: "any number",
    Type.BOOLEAN: "[true, false]",
    Type.STRING: "any string",
    Type.LIST: "comma-separated list",
    Type.PASSWORD: "any string",
}


@dataclass(frozen=True)
class ConfigKey:
    name: str
    type: Type
    default: Value
    doc: str
    importance: Importance = Importance.MEDIUM
    scope: Scope = Scope.BROKER
    validator: Validator | None = None
    #: What the key accepts, in words. Left empty it is the validator's ``describe()`` (or what the
    #: type accepts); given explicitly next to a validator it must equal ``describe()``.
    valid_values: str = ""
    #: For a topic key: the broker keys that set its default, most specific first (each with a
    #: multiplier to milliseconds or bytes, for ``log.retention.hours`` and friends).
    broker_synonyms: tuple[tuple[str, int], ...] = ()
    #: Other names accepted for the same key (e.g. ``retention.min.timestamp``).
    aliases: tuple[str, ...] = ()
    #: Former names still accepted for a while: each one given logs a WARNING naming this key, and
    #: one given together with this key is an error (which of the two was meant cannot be known).
    deprecated_aliases: tuple[str, ...] = ()
    internal: bool = False
    dynamic: bool = True
    group: str = field(default="general")

    def __post_init__(self) -> None:
        described = self.validator.describe() if self.validator is not None else ""
        if self.valid_values and described and self.valid_values != described:
            raise ValueError(f"config key {self.name}: valid_values {self.valid_values!r} differs from its "
                             f"validator's {described!r}; leave valid_values empty to use the validator's")
        if not self.valid_values:
            object.__setattr__(self, "valid_values", described or _TYPE_VALID_VALUES[self.type])


_TRUE = {"true"}
_FALSE = {"false"}


def format_value(value: Value) -> str:
    """A value as it is written in ``server.properties`` (unset is the empty string)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


def _type_error(key: ConfigKey, expected: str, raw: object) -> ConfigError:
    allowed = f"; valid values: {key.valid_values}" if key.validator is not None else ""
    return ConfigError(key.name, f"expected {expected}, got {raw!r}{allowed}")


def parse_value(key: ConfigKey, raw: object) -> Value:
    """Parse a raw value (a string from a properties file, or a Python value) as the key's type, then
    check it; a ConfigError names the key and says what it accepts."""
    if raw is None:
        return None
    t = key.type
    if t in (Type.INT, Type.LONG):
        expected = "an integer"
        if isinstance(raw, bool | float):
            raise _type_error(key, expected, raw)
        if isinstance(raw, int):
            value: Value = raw
        else:
            try:
                value = int(str(raw).strip())
            except ValueError:
                raise _type_error(key, expected, raw) from None
        assert isinstance(value, int)
        limit = INT32_MAX if t is Type.INT else INT64_MAX
        if not -limit - 1 <= value <= limit:
            article = "an" if t is Type.INT else "a"
            raise ConfigError(key.name, f"value {value} does not fit {article} {t.value} "
                                        f"([{-limit - 1},...,{limit}]); valid values: {key.valid_values}")
    elif t is Type.DOUBLE:
        if isinstance(raw, bool):
            raise _type_error(key, "a number", raw)
        try:
            value = float(str(raw).strip())
        except ValueError:
            raise _type_error(key, "a number", raw) from None
    elif t is Type.BOOLEAN:
        if isinstance(raw, bool):
            value = raw
        else:
            s = str(raw).strip().lower()
            if s in _TRUE:
                value = True
            elif s in _FALSE:
                value = False
            else:
                raise ConfigError(key.name, f"expected true or false, got {raw!r}")
    elif t is Type.LIST:
        if isinstance(raw, list | tuple):
            value = tuple(str(x).strip() for x in raw)
        else:
            value = tuple(p.strip() for p in str(raw).split(",") if p.strip())
    else:
        value = str(raw).strip()
    if key.validator is not None:
        key.validator(key.name, value)
    return value


class ConfigDef:
    """A set of key definitions with lookup by name or alias."""

    def __init__(self, keys: Sequence[ConfigKey]) -> None:
        self.keys: dict[str, ConfigKey] = {}
        self._aliases: dict[str, str] = {}
        for k in keys:
            if k.name in self.keys:
                raise ValueError(f"duplicate config key {k.name}")
            self.keys[k.name] = k
            for a in (*k.aliases, *k.deprecated_aliases):
                self._aliases[a] = k.name

    def find(self, name: str) -> ConfigKey | None:
        key = self.keys.get(name)
        if key is None and name in self._aliases:
            key = self.keys[self._aliases[name]]
        return key

    def deprecated(self, name: str) -> ConfigKey | None:
        """The key ``name`` is a deprecated alias of, or None when it is not one."""
        key = self.find(name)
        return key if key is not None and name in key.deprecated_aliases else None

    def require(self, name: str, what: str = "config") -> ConfigKey:
        key = self.find(name)
        if key is None:
            hint = difflib.get_close_matches(name, [*self.keys, *self._aliases], n=1, cutoff=0.6)
            suggestion = f"; did you mean {hint[0]}?" if hint else ""
            raise ConfigError(name, f"unknown {what} key{suggestion}")
        return key

    def parse(self, props: Mapping[str, object], what: str = "config") -> dict[str, Value]:
        """Validate and parse ``props``; keys are normalised to their canonical names."""
        out: dict[str, Value] = {}
        spelled: dict[str, str] = {}
        for raw_name, raw in props.items():
            key = self.require(raw_name, what)
            if key.name in spelled:
                names = sorted((spelled[key.name], raw_name), key=lambda n: n in key.deprecated_aliases)
                if names[-1] in key.deprecated_aliases:
                    raise ConfigError(key.name, f"given twice, as {names[0]} and {names[1]} (its deprecated "
                                                f"name); set only {key.name}")
                raise ConfigError(key.name, f"given twice, as {spelled[key.name]} and {raw_name}; set only one")
            spelled[key.name] = raw_name
            out[key.name] = parse_value(key, raw)
        return out
