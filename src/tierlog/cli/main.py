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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tierlog",
        description="A Kafka-compatible log broker with tiered storage and a Spark data pipeline.",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default INFO)")
    parser.add_argument("--log-format", choices=FORMATS, default="text",
                        help="text lines (default) or json: one object per line, event fields split out")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in _SUBCOMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    rc = args.func(args)
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
