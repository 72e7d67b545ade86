"""One definition per configuration key: name, type, default, validator, importance, doc, synonyms.

Validation, ``tierlog config docs`` and ``docs/configuration.md`` are all generated from these
definitions, so a key is described exactly once.
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

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


Validator = Callable[[str, Value], None]


@dataclass(frozen=True)
class ConfigKey:
    name: str
    type: Type
    default: Value
    doc: str
    importance: Importance = Importance.MEDIUM
    scope: Scope = Scope.BROKER
    validator: Validator | None = None
    valid_values: str = ""
    #: For a topic key: the broker keys that set its default, most specific first (each with a
    #: multiplier to milliseconds or bytes, for ``log.retention.hours`` and friends).
    broker_synonyms: tuple[tuple[str, int], ...] = ()
    #: Other names accepted for the same key (e.g. ``retention.min.timestamp``).
    aliases: tuple[str, ...] = ()
    internal: bool = False
    dynamic: bool = True
    group: str = field(default="general")


def at_least(minimum: int | float) -> Validator:
    def check(key: str, value: Value) -> None:
        if value is not None and isinstance(value, int | float) and value < minimum:
            raise ConfigError(key, f"value {value} is below the minimum {minimum}")

    return check


def between(minimum: int | float, maximum: int | float) -> Validator:
    def check(key: str, value: Value) -> None:
        if value is not None and isinstance(value, int | float) and not minimum <= value <= maximum:
            raise ConfigError(key, f"value {value} is outside [{minimum}, {maximum}]")

    return check


def one_of(*choices: str, case_insensitive: bool = False) -> Validator:
    def norm(s: str) -> str:
        return s.lower() if case_insensitive else s

    allowed = {norm(c) for c in choices}

    def check(key: str, value: Value) -> None:
        items: Sequence[str]
        if isinstance(value, tuple):
            items = value
        elif isinstance(value, str):
            items = (value,)
        else:
            return
        for item in items:
            if norm(item) not in allowed:
                raise ConfigError(key, f"value {item!r} is not one of {', '.join(choices)}")

    return check


_TRUE = {"true"}
_FALSE = {"false"}


def parse_value(key: ConfigKey, raw: object) -> Value:
    """Parse a raw value (a string from a properties file, or a Python value) as the key's type."""
    if raw is None:
        return None
    name = key.name
    t = key.type
    if t in (Type.INT, Type.LONG):
        if isinstance(raw, bool):
            raise ConfigError(name, f"expected an integer, got {raw!r}")
        if isinstance(raw, int):
            value: Value = raw
        else:
            try:
                value = int(str(raw).strip())
            except ValueError:
                raise ConfigError(name, f"expected an integer, got {raw!r}") from None
        assert isinstance(value, int)
        limit = INT32_MAX if t is Type.INT else INT64_MAX
        if not -limit - 1 <= value <= limit:
            raise ConfigError(name, f"value {value} does not fit a {t.value}")
    elif t is Type.DOUBLE:
        try:
            value = float(str(raw).strip())
        except ValueError:
            raise ConfigError(name, f"expected a number, got {raw!r}") from None
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
                raise ConfigError(name, f"expected true or false, got {raw!r}")
    elif t is Type.LIST:
        if isinstance(raw, list | tuple):
            value = tuple(str(x).strip() for x in raw)
        else:
            value = tuple(p.strip() for p in str(raw).split(",") if p.strip())
    else:
        value = str(raw).strip()
    if key.validator is not None:
        key.validator(name, value)
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
            for a in k.aliases:
                self._aliases[a] = k.name

    def find(self, name: str) -> ConfigKey | None:
        key = self.keys.get(name)
        if key is None and name in self._aliases:
            key = self.keys[self._aliases[name]]
        return key

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
        for raw_name, raw in props.items():
            key = self.require(raw_name, what)
            out[key.name] = parse_value(key, raw)
        return out
