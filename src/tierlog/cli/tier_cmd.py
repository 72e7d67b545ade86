"""``tierlog tier status``: per partition, the highest tiered offset, local and remote bytes, copy
lag and the last error of its copy task, and the remote deletes the broker gave up on. Reads the
data directory only, so it runs beside a broker.

``tierlog tier retry-delete ID`` / ``forget-delete ID`` settle a remote delete the broker gave up on;
they change the remote log metadata, so they run with the broker stopped (refused while it holds the
data directory's ``.lock``)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from tierlog.cli import tier_restore
from tierlog.cli._options import add_data_dir_options
from tierlog.cli.serve import load_broker_config
from tierlog.clock import SYSTEM_CLOCK
from tierlog.errors import TierlogError
from tierlog.tiered.api import load_class
from tierlog.tiered.leftover_deletes import settle_delete
from tierlog.tiered.segment_deleter import FailedRemoteDelete
from tierlog.tiered.status import given_up_deletes, offline_status


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("tier", help="tiered storage: status of the remote tier, leftover remote deletes",
                       description="Tiered storage tools.")
    tsub = p.add_subparsers(dest="tier_command", metavar="ACTION")
    tsub.required = True
    status = tsub.add_parser("status", help="per-partition tiering status",
                             description="Per partition: highest tiered offset, local and remote bytes "
                                         "(the plugin's uploaded size where its custom metadata says), copy "
                                         "lag (closed segments not yet tiered) and the copy task's last error.")
    add_data_dir_options(status, config_help="server.properties (for log.dirs and the plugin class)")
    status.set_defaults(func=run_status)
    tier_restore.register(tsub)
    for name, help_text, description in (
        ("retry-delete", "try a given-up remote delete once more (broker stopped)",
         "Call the plugin's delete once more for a remote segment whose delete the broker gave up on "
         "(tierlog tier status lists them), handing it the custom metadata the plugin returned (seed 002), "
         "and mark the segment deleted when it succeeds. Needs the broker stopped."),
        ("forget-delete", "drop a given-up remote delete from the metadata (broker stopped)",
         "Mark a remote segment whose delete the broker gave up on as deleted without calling the plugin: "
         "for when its objects were removed by hand, or are to be left. Prints the custom metadata the "
         "plugin returned (hex), which may say where the objects are. Needs the broker stopped."),
    ):
        cmd = tsub.add_parser(name, help=help_text, description=description)
        cmd.add_argument("segment_id", metavar="SEGMENT_ID",
                         help="the segment id as tier status prints it (put -- before one starting with -)")
        cmd.add_argument("--config", type=Path, help="server.properties (for log.dirs and the plugin)")
        cmd.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                         help="set one config key (repeatable)")
        cmd.add_argument("--data-dir", type=Path, help="the first log directory; default: the config's first log.dirs")
        cmd.set_defaults(func=run_settle_delete, retry=name == "retry-delete")


def run_settle_delete(args: argparse.Namespace) -> int:
    # Imported when it runs: tierlog.server brings in the protocol codec (kio), which every other
    # tierlog command would then load too.
    from tierlog.server.remote_tier import remote_storage_manager_from_config

    try:
        config = load_broker_config(args.config, args.override)
        data_dir = args.data_dir or config.log_dirs[0]
        rsm = remote_storage_manager_from_config(config) if args.retry else None
        try:
            md = settle_delete(data_dir, args.segment_id, broker_id=config.node_id, now_ms=SYSTEM_CLOCK.wall_ms(),
                               rsm=rsm)
        finally:
            if rsm is not None:
                rsm.close()
    except (TierlogError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    tip = md.topic_id_partition
    kept = md.rejected_custom_metadata if md.rejected_custom_metadata is not None else md.custom_metadata
    what = "deleted" if args.retry else "forgotten (its remote objects, if any, are left as they are)"
    print(f"remote segment {args.segment_id} of {tip.topic}-{tip.partition} [{md.start_offset}, {md.end_offset}] "
          f"{what}; custom metadata: {'-' if kept is None else kept.hex()}")
    return 0


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
    for r in rows:
        if r.compaction_runs or r.compaction_errors:
            last = "-" if r.compaction_last_run_ms is None else _ms_time(r.compaction_last_run_ms)
            retry = "" if r.compaction_retry_at_ms is None else f", next attempt at {_ms_time(r.compaction_retry_at_ms)}"
            print(f"remote compaction {r.topic}-{r.partition}: {r.compaction_runs} runs, last at {last}, "
                  f"{r.compaction_bytes_read} bytes read, {r.compaction_bytes_written} written, "
                  f"{r.compaction_errors} failed{retry}")
    pending = sum(r.deletes_pending for r in rows)
    if pending:
        print(f"remote deletes: {pending} segments whose delete failed are retried with backoff")
    _print_given_up(given_up_deletes(dirs))
    return 0


def _ms_time(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def _print_given_up(deletes: list[FailedRemoteDelete]) -> None:
    if not deletes:
        return
    print(f"remote deletes given up: {len(deletes)} segments left in the remote tier "
          "(tierlog tier retry-delete / forget-delete SEGMENT-ID, broker stopped)")
    header = ("SEGMENT-ID", "PARTITION", "OFFSETS", "ATTEMPTS", "LAST-ERROR")
    table = [header] + [(d.segment_id, f"{d.topic}-{d.partition}", f"{d.start_offset}-{d.end_offset}",
                         str(d.attempts), d.last_error) for d in deletes]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[-1])
