"""The ``tierlog`` command: one entry point, a subcommand per job."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from tierlog.cli.log_format import FORMATS, configure_logging

# Each subcommand lives in its own module with ``register(subparsers)``; the module sets
# ``func`` on its parser. Listed here so the order of ``--help`` is stable.
_SUBCOMMAND_MODULES = (
    "tierlog.cli.serve",
    "tierlog.cli.dump_log",
    "tierlog.cli.metadata_cmd",
    "tierlog.cli.config_cmd",
    "tierlog.cli.tier_cmd",
    "tierlog.cli.cleaner_cmd",
    "tierlog.cli.spark_cmd",
    "tierlog.cli.topics_cmd",
    "tierlog.cli.clients_cmd",
    "tierlog.cli.groups_cmd",
    "tierlog.cli.features_cmd",
    "tierlog.cli.transactions_cmd",
    "tierlog.cli.acls_cmd",
    "tierlog.cli.quotas_cmd",
    "tierlog.cli.users_cmd",
)

#: The module that registers each command. A run imports only its command's module: several others
#: import the storage layer and numba, ~0.5 s of CPU that ``tierlog topics create`` has no use for.
#: tests/unit/cli/test_main.py checks this against what each module registers.
_COMMAND_MODULES = {
    "serve": "tierlog.cli.serve",
    "dump-log": "tierlog.cli.dump_log",
    "metadata": "tierlog.cli.metadata_cmd",
    "config": "tierlog.cli.config_cmd",
    "tier": "tierlog.cli.tier_cmd",
    "cleaner": "tierlog.cli.cleaner_cmd",
    "spark": "tierlog.cli.spark_cmd",
    "topics": "tierlog.cli.topics_cmd",
    "produce": "tierlog.cli.clients_cmd",
    "consume": "tierlog.cli.clients_cmd",
    "groups": "tierlog.cli.groups_cmd",
    "features": "tierlog.cli.features_cmd",
    "transactions": "tierlog.cli.transactions_cmd",
    "acls": "tierlog.cli.acls_cmd",
    "quotas": "tierlog.cli.quotas_cmd",
    "users": "tierlog.cli.users_cmd",
}

_GLOBAL_OPTIONS_WITH_VALUE = ("--log-level", "--log-format")


def command_of(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names (its first word that is neither an option nor a global option's
    value), or None: no command, or ``--help`` before it."""
    words = iter(argv)
    for word in words:
        if word in ("-h", "--help"):
            return None
        if word in _GLOBAL_OPTIONS_WITH_VALUE:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or, for a known ``command``, of that command alone (what it
    parses is the same; only ``tierlog --help`` and a mistyped command need them all)."""
    parser = argparse.ArgumentParser(
        prog="tierlog",
        description="A Kafka-compatible log broker with tiered storage and a Spark data pipeline.",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default INFO)")
    parser.add_argument("--log-format", choices=FORMATS, default="text",
                        help="text lines (default) or json: one object per line, event fields split out")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    only = _COMMAND_MODULES.get(command or "")
    for name in _SUBCOMMAND_MODULES:
        if only is None or name == only:
            importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(command_of(words))
    args = parser.parse_args(words)
    configure_logging(args.log_level, args.log_format)
    rc = args.func(args)
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
