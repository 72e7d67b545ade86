"""The configuration reference, generated from the key definitions (``tierlog config docs``).

``docs/configuration.md`` is :func:`render_markdown`'s output, checked in; a test fails when it is
stale. The output depends only on the definitions, so it is the same on every machine.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Sequence

from tierlog.config.broker_config import CROSS_KEY_RULES
from tierlog.config.definition import (
    INT32_MAX,
    INT64_MAX,
    ConfigDef,
    ConfigKey,
    Importance,
    Scope,
    Value,
    format_value,
)
from tierlog.config.group_keys import GROUP_DEF
from tierlog.config.keys import BROKER_DEF, TOPIC_DEF

REGENERATE_COMMAND = "tierlog config docs > docs/configuration.md"

#: Section titles of the groups, in the order they appear; a group not listed comes after these,
#: under its own name.
GROUP_TITLES: dict[str, str] = {
    "broker": "General",
    "log": "Log and retention",
    "producer": "Producer state",
    "metadata": "Metadata log and snapshots",
    "cleaner": "Log compaction (the log cleaner)",
    "tiered": "Tiered storage",
    "network": "Network",
    "groups": "Consumer groups",
    "transactions": "Transactions",
    "operations": "Operations",
    "security": "Security",
    "quotas": "Client quotas",
    "compatibility": "Kafka compatibility (accepted and ignored)",
    "group": "Group configs",
    "kafka": "Apache Kafka's other keys (accepted, stored and described; tierlog does not act on them)",
}

_IMPORTANCE_ORDER = {Importance.HIGH: 0, Importance.MEDIUM: 1, Importance.LOW: 2}

_DURATIONS = ((86_400_000, "day"), (3_600_000, "hour"), (60_000, "minute"), (1_000, "second"))
_SIZES = ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))


def _readable(key: ConfigKey, value: Value) -> str:
    """A reading aid for big numbers in ms or bytes: ``(7 days)``, ``(1 GiB)``."""
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        return ""
    if value == INT64_MAX:
        return "max long"
    if value == INT32_MAX:
        return "max int"
    if key.name.endswith(".ms"):
        for unit, word in _DURATIONS:
            if value >= unit and value % unit == 0:
                n = value // unit
                return f"{n} {word}{'s' if n != 1 else ''}"
    if "bytes" in key.name:
        for unit, word in _SIZES:
            if value >= unit and value % unit == 0:
                return f"{value // unit} {word}"
    return ""


def default_text(key: ConfigKey, *, markdown: bool = False) -> str:
    """The default for a reader: the raw value, and what a big one means."""
    if key.default is None:
        return "*unset*" if markdown else "unset"
    if key.default == ():
        return "*empty*" if markdown else "empty"
    text = format_value(key.default)
    if markdown:
        text = f"`{text}`"
    readable = _readable(key, key.default)
    return f"{text} ({readable})" if readable else text


def documented_keys(definition: ConfigDef) -> list[ConfigKey]:
    """The keys a reference lists: all but internal ones."""
    return [k for k in definition.keys.values() if not k.internal]


def _by_group(keys: Iterable[ConfigKey]) -> list[tuple[str, list[ConfigKey]]]:
    groups: dict[str, list[ConfigKey]] = {}
    for key in keys:
        groups.setdefault(key.group, []).append(key)
    order = list(GROUP_TITLES)
    names = sorted(groups, key=lambda g: (order.index(g) if g in order else len(order), g))
    return [(g, sorted(groups[g], key=lambda k: (_IMPORTANCE_ORDER[k.importance], k.name))) for g in names]


def _title(group: str) -> str:
    return GROUP_TITLES.get(group, group.capitalize())


def _topic_of_synonym(topic: ConfigDef) -> dict[str, ConfigKey]:
    """Broker key -> the topic key whose default it sets."""
    out: dict[str, ConfigKey] = {}
    for topic_key in topic.keys.values():
        for syn, _ in topic_key.broker_synonyms:
            out.setdefault(syn, topic_key)
    return out


def _multiplier_note(multiplier: int) -> str:
    return {1: "", 60_000: "in minutes", 3_600_000: "in hours"}.get(multiplier, f"x{multiplier}")


#: One kind of related name ("broker default", "alias", ...) with the names, each with a note.
Related = tuple[str, list[tuple[str, str]]]


def related_names(key: ConfigKey, synonym_of: dict[str, ConfigKey]) -> list[Related]:
    """The synonyms and aliases of a key."""
    out: list[Related] = []
    if key.broker_synonyms:
        out.append(("broker default", [(syn, _multiplier_note(m)) for syn, m in key.broker_synonyms]))
    if key.aliases:
        out.append(("alias", [(a, "") for a in key.aliases]))
    if key.deprecated_aliases:
        out.append(("deprecated alias", [(a, "") for a in key.deprecated_aliases]))
    topic_key = synonym_of.get(key.name) if key.scope is Scope.BROKER else None
    if topic_key is not None:
        out.append(("default of topic key", [(topic_key.name, "")]))
    return out


def _related_text(related: Related, code: bool) -> str:
    label, names = related
    items = []
    for name, note in names:
        shown = f"`{name}`" if code else name
        items.append(f"{shown} ({note})" if note else shown)
    return f"{label}: {', '.join(items)}" if label != "default of topic key" else f"{label} {items[0]}"


# -- Markdown ------------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


_MD_HEADER = (
    "| Name | Type | Default | Valid values | Importance | Dynamic | Synonyms and aliases | Description |\n"
    "|---|---|---|---|---|---|---|---|\n"
)


def _md_row(key: ConfigKey, synonym_of: dict[str, ConfigKey]) -> str:
    cells = [
        f"`{key.name}`",
        key.type.value,
        default_text(key, markdown=True),
        key.valid_values,
        key.importance.value,
        "yes" if key.dynamic else "no",
        "; ".join(_related_text(r, code=True) for r in related_names(key, synonym_of)),
        key.doc,
    ]
    return "| " + " | ".join(_cell(c) for c in cells) + " |\n"


def _md_scope(scope: str, intro: str, keys: Sequence[ConfigKey], synonym_of: dict[str, ConfigKey]) -> str:
    parts = [f"## {scope} keys\n\n{intro}\n"]
    for group, group_keys in _by_group(keys):
        parts.append(f"\n### {scope}: {_title(group)}\n\n")
        parts.append(_MD_HEADER)
        parts.extend(_md_row(k, synonym_of) for k in group_keys)
    return "".join(parts)


GROUP_INTRO = (
    "Set per group (Kafka's GroupConfig, KIP-848) on the GROUP config resource: "
    "`kafka-configs --entity-type groups --entity-name G --alter --add-config KEY=VALUE`, or an AdminClient's "
    "IncrementalAlterConfigs on `ConfigResource(GROUP, G)`; a group need not exist to have configs. The broker key "
    "named in *Synonyms and aliases* sets the default, and each value must lie within the broker's bounds "
    "(e.g. `consumer.session.timeout.ms` within `group.consumer.min.session.timeout.ms` and "
    "`group.consumer.max.session.timeout.ms`, and greater than the group's `consumer.heartbeat.interval.ms`), "
    "else INVALID_CONFIG with Kafka's message. tierlog's consumer groups act on the consumer session timeout and "
    "heartbeat interval; the keys of share and streams groups, which tierlog does not have, are only stored.")


def render_markdown(broker: ConfigDef = BROKER_DEF, topic: ConfigDef = TOPIC_DEF) -> str:
    """The whole reference as Markdown (the content of ``docs/configuration.md``)."""
    synonym_of = _topic_of_synonym(topic)
    rules = "".join(f"- {rule}\n" for rule in CROSS_KEY_RULES)
    head = (
        "# Configuration reference\n\n"
        f"<!-- Generated from src/tierlog/config/keys.py; do not edit. Regenerate with: {REGENERATE_COMMAND} -->\n\n"
        "tierlog reads Kafka's `server.properties` syntax and Kafka's key names: "
        "`tierlog serve --config FILE --override KEY=VALUE` (an override wins over the file). "
        "`tierlog config validate --config FILE` checks a configuration without starting anything. "
        "A configuration with an unknown key, a value of the wrong type or out of range, or keys that "
        "contradict each other is refused with one line naming the key and what it accepts, and exit code 2.\n\n"
        "Broker keys configure this broker. Topic keys are set per topic (when it is created or altered); "
        "their defaults for every topic come from the broker keys listed as their *broker default*. "
        "*Dynamic* keys can be changed on a running broker with Kafka's AlterConfigs and "
        "IncrementalAlterConfigs requests. Durations are in milliseconds unless the name says otherwise.\n\n"
        f"## Rules between keys\n\n{rules}\n"
    )
    broker_intro = "Set in `server.properties` or with `--override`."
    topic_intro = "Set per topic; the broker keys named in *Synonyms and aliases* set their defaults."
    return (head + _md_scope("Broker", broker_intro, documented_keys(broker), synonym_of)
            + "\n" + _md_scope("Topic", topic_intro, documented_keys(topic), synonym_of)
            + "\n" + _md_scope("Group", GROUP_INTRO, documented_keys(GROUP_DEF), synonym_of))


# -- plain text ----------------------------------------------------------------------------------


def _wrap(text: str, width: int, indent: str) -> list[str]:
    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False)


def _text_key(key: ConfigKey, synonym_of: dict[str, ConfigKey]) -> list[str]:
    indent = "    "
    lines = [key.name]
    lines += _wrap(key.doc, 100, indent)
    lines.append(f"{indent}type: {key.type.value}    importance: {key.importance.value}    "
                 f"dynamic: {'yes' if key.dynamic else 'no'}")
    lines += _wrap(f"default: {default_text(key)}", 100, indent)
    lines += _wrap(f"valid values: {key.valid_values}", 100, indent)
    for related in related_names(key, synonym_of):
        lines += _wrap(_related_text(related, code=False), 100, indent)
    return lines


def _underline(title: str, char: str) -> list[str]:
    return [title, char * len(title)]


def render_text(broker: ConfigDef = BROKER_DEF, topic: ConfigDef = TOPIC_DEF) -> str:
    """The whole reference as plain text, for a terminal."""
    synonym_of = _topic_of_synonym(topic)
    lines = _underline("tierlog configuration reference", "=")
    lines += ["", f"Generated from the key definitions; {REGENERATE_COMMAND} writes the Markdown form.", ""]
    lines += _underline("Rules between keys", "-")
    for rule in CROSS_KEY_RULES:
        wrapped = _wrap(rule.replace("`", ""), 100, "  ")
        lines += ["- " + wrapped[0].lstrip(), *wrapped[1:]]
    for scope_title, definition in (("Broker keys", broker), ("Topic keys", topic), ("Group keys", GROUP_DEF)):
        for group, keys in _by_group(documented_keys(definition)):
            lines += ["", *_underline(f"{scope_title}: {_title(group)}", "-")]
            for key in keys:
                lines += ["", *_text_key(key, synonym_of)]
    return "\n".join(lines) + "\n"


def render(format_: str = "markdown") -> str:
    if format_ == "markdown":
        return render_markdown()
    if format_ == "text":
        return render_text()
    raise ValueError(f"unknown docs format {format_!r}: markdown or text")
