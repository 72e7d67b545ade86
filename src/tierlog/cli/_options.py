"""Options shared by the commands that read a data directory offline (beside a running broker or a
stopped one): where the config and the log dirs are, and JSON output."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_data_dir_options(parser: argparse.ArgumentParser, *, config_help: str = "server.properties (for log.dirs)",
                         json_output: bool = True) -> None:
    parser.add_argument("--config", type=Path, help=config_help)
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="set one config key (repeatable)")
    parser.add_argument("--data-dir", type=Path, action="append",
                        help="a log directory (repeatable); default: the config's log.dirs")
    if json_output:
        parser.add_argument("--json", action="store_true", help="one JSON object per partition")
