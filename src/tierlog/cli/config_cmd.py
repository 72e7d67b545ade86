"""``tierlog config``: the configuration reference, and checking a configuration without starting.

``tierlog config docs`` prints the reference generated from the key definitions (the checked-in
``docs/configuration.md`` is its Markdown output); ``tierlog config validate`` applies exactly the
checks ``tierlog serve`` applies before it starts anything, and reports the same one-line errors.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from tierlog.config import BrokerConfig, LogConfig
from tierlog.config.definition import format_value
from tierlog.config.docs import render
from tierlog.errors import ConfigError

INVALID_CONFIG_EXIT = 2


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("config", help="configuration reference and validation", description=(
        "Print the reference of every configuration key, or check a configuration without starting."))
    actions = p.add_subparsers(dest="config_action", metavar="ACTION")
    actions.required = True

    docs = actions.add_parser("docs", help="print the configuration reference", description=(
        "Print every broker and topic key: type, default, valid values, importance, whether it is dynamic, "
        "synonyms and a description. docs/configuration.md is this command's Markdown output."))
    docs.add_argument("--format", choices=("markdown", "text"), default="markdown",
                      help="markdown (default; tables per group) or text (for a terminal)")
    docs.set_defaults(func=run_docs)

    validate = actions.add_parser("validate", help="check a configuration without starting anything",
                                  description=(
        "Check a server.properties file and overrides as tierlog serve would: unknown keys, values of the "
        "wrong type or out of range, and keys that contradict each other. Exit code 0 when valid, 2 with "
        "one line naming the key when not."))
    validate.add_argument("--config", type=Path, help="a server.properties file (Kafka's syntax and key names)")
    validate.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                          help="set one config key (repeatable); wins over the file")
    validate.set_defaults(func=run_validate)


def _write(text: str) -> None:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # `tierlog config docs | head`: the reader is gone, which is not an error; keep Python from
        # complaining again when it flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def run_docs(args: argparse.Namespace) -> int:
    _write(render(args.format))
    return 0


def run_validate(args: argparse.Namespace) -> int:
    try:
        config = BrokerConfig.from_sources(args.config, args.override)
        sources = config.topic_default_sources()
        LogConfig.from_props({}, {name: value for name, (value, _, _) in sources.items()})
    except ConfigError as e:
        print(f"tierlog: invalid configuration: {e}", file=sys.stderr)
        return INVALID_CONFIG_EXIT
    except OSError as e:
        print(f"tierlog: cannot read {args.config}: {e.strerror}", file=sys.stderr)
        return INVALID_CONFIG_EXIT
    what = str(args.config) if args.config is not None else "the defaults"
    if args.override:
        what += f" with {len(args.override)} override{'s' if len(args.override) != 1 else ''}"
    lines = [f"configuration is valid: {what}"]
    explicit = config.explicit
    if explicit:
        lines.append("keys set:")
        lines += [f"  {name} = {format_value(value)}" for name, value in sorted(explicit.items())]
    derived = sorted((name, value, source) for name, (value, source, _) in sources.items()
                     if source is not None and config.is_set(source))
    if derived:
        lines.append("topic defaults they set:")
        lines += [f"  {name} = {format_value(value)} (from {source})" for name, value, source in derived]
    if config.plugin_props:
        lines.append(f"plugin properties passed through unchecked: {', '.join(sorted(config.plugin_props))}")
    _write("\n".join(lines) + "\n")
    return 0
