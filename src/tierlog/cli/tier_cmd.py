"""``tierlog tier status``: per partition, the highest tiered offset, local and remote bytes, copy
lag and the last error of its copy task. Reads the data directory only, so it runs beside a broker."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from tierlog.cli import tier_restore
from tierlog.cli.serve import load_broker_config
from tierlog.errors import TierlogError
from tierlog.tiered.api import load_class
from tierlog.tiered.status import offline_status


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("tier", help="tiered storage: status of the remote tier",
                       description="Tiered storage tools.")
    tsub = p.add_subparsers(dest="tier_command", metavar="ACTION")
    tsub.required = True
    status = tsub.add_parser("status", help="per-partition tiering status",
                             description="Per partition: highest tiered offset, local and remote bytes "
                                         "(the plugin's uploaded size where its custom metadata says), copy "
                                         "lag (closed segments not yet tiered) and the copy task's last error.")
    status.add_argument("--config", type=Path, help="server.properties (for log.dirs and the plugin class)")
    status.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="set one config key (repeatable)")
    status.add_argument("--data-dir", type=Path, action="append",
                        help="a log directory (repeatable); default: the config's log.dirs")
    status.add_argument("--json", action="store_true", help="one JSON object per partition")
    status.set_defaults(func=run_status)
    tier_restore.register(tsub)


def _uploaded_size_hook(class_name: str) -> Callable[[bytes], int | None] | None:
    try:
        hook = getattr(load_class(class_name), "uploaded_size_bytes", None)
    except TierlogError:
        return None
    return hook if callable(hook) else None


def run_status(args: argparse.Namespace) -> int:
    try:
        config = load_broker_config(args.config, args.override)
        dirs = args.data_dir or list(config.log_dirs)
        hook = _uploaded_size_hook(config.get_str("remote.log.storage.manager.class.name"))
        rows = offline_status(dirs, hook)
    except (TierlogError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.json:
        for status in rows:
            print(json.dumps(asdict(status), sort_keys=True))
        return 0
    if not rows:
        print("no tiered partitions")
        return 0
    header: tuple[str, ...] = ("PARTITION", "TASK", "TIERED-TO", "REMOTE-START", "LOCAL-BYTES", "REMOTE-BYTES", "SEGMENTS",
              "LAG-SEGMENTS", "LAG-BYTES", "LAST-ERROR")
    table: list[tuple[str, ...]] = [header] + [(
        f"{r.topic}-{r.partition}", r.copy_task, str(r.highest_tiered_offset),
        "-" if r.remote_log_start_offset is None else str(r.remote_log_start_offset), str(r.local_bytes),
        str(r.remote_bytes), str(r.remote_segments), str(r.copy_lag_segments), str(r.copy_lag_bytes),
        r.last_error or "-") for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[-1])
    waiting = [r for r in rows if r.copy_lag_segments]
    print(f"backlog: {sum(r.copy_lag_segments for r in waiting)} segments "
          f"({sum(r.copy_lag_bytes for r in waiting)} bytes) waiting to be copied, in {len(waiting)} of "
          f"{len(rows)} partitions")
    return 0
