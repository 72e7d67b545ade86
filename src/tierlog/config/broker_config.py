"""The broker's configuration: parsed once from ``server.properties`` syntax and overrides."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tierlog.config.definition import Value
from tierlog.config.keys import BROKER_DEF, TOPIC_DEF, is_rsm_property
from tierlog.errors import ConfigError


def parse_properties(text: str, source: str = "config") -> dict[str, str]:
    """Java-properties syntax as Kafka's config files use it: ``key=value`` or ``key: value``,
    ``#``/``!`` comments, trailing-backslash continuation lines."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not line or line[0] in "#!":
            continue
        while line.endswith("\\") and i < len(lines):
            line = line[:-1] + lines[i].strip()
            i += 1
        sep = min((p for p in (line.find("="), line.find(":")) if p >= 0), default=-1)
        if sep < 0:
            raise ConfigError(line, f"{source}: expected key=value")
        out[line[:sep].strip()] = line[sep + 1 :].strip()
    return out


class BrokerConfig:
    """Validated broker configuration; unknown keys are an error with a did-you-mean."""

    def __init__(self, props: Mapping[str, object] | None = None) -> None:
        props = dict(props or {})
        self.plugin_props = {k: str(v) for k, v in props.items() if is_rsm_property(k)}
        self._explicit = BROKER_DEF.parse({k: v for k, v in props.items() if not is_rsm_property(k)})
        self._values: dict[str, Value] = {name: key.default for name, key in BROKER_DEF.keys.items()}
        self._values.update(self._explicit)

    @classmethod
    def from_file(cls, path: Path, overrides: Mapping[str, str] | None = None) -> BrokerConfig:
        props: dict[str, object] = dict(parse_properties(path.read_text(encoding="utf-8"), str(path)))
        props.update(overrides or {})
        return cls(props)

    def is_set(self, name: str) -> bool:
        return name in self._explicit

    def get(self, name: str) -> Value:
        key = BROKER_DEF.require(name)
        return self._values[key.name]

    def get_int(self, name: str) -> int:
        v = self.get(name)
        assert isinstance(v, int) and not isinstance(v, bool), name
        return v

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
        out: dict[str, Value] = {}
        for name, key in TOPIC_DEF.keys.items():
            value: Value = key.default
            for syn, multiplier in key.broker_synonyms:
                if self.is_set(syn) or (syn == key.broker_synonyms[-1][0] and self.get(syn) is not None):
                    raw = self.get(syn)
                    if isinstance(raw, int) and not isinstance(raw, bool) and multiplier != 1 and raw >= 0:
                        raw = raw * multiplier
                    value = raw
                    if self.is_set(syn):
                        break
            out[name] = value
        return out
