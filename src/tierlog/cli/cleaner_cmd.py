"""``tierlog cleaner status``: per compacted partition, the cleaner checkpoint (Kafka's
``cleaner-offset-checkpoint``), the dirty ratio and bytes, the last clean time and the bytes cleaned,
as the broker's log cleaner last wrote them. Reads the data directory only, so it runs beside a
broker."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from tierlog._util.framed import FramedFileError
from tierlog.cli._options import add_data_dir_options
from tierlog.cli.serve import load_broker_config
from tierlog.errors import TierlogError
from tierlog.storage.cleaner.checkpoint import CleanerCheckpoint
from tierlog.storage.cleaner.status_file import read_status


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("cleaner", help="log compaction: the log cleaner's status per compacted partition",
                       description="The log cleaner (compaction) tools.")
    csub = p.add_subparsers(dest="cleaner_command", metavar="ACTION")
    csub.required = True
    status = csub.add_parser("status", help="per compacted partition: checkpoint, dirty ratio, last clean",
                             description="Per compacted partition: the cleaner checkpoint, the dirty ratio (dirty "
                                         "bytes over cleanable bytes), the last clean time and the bytes cleaned, "
                                         "as the running broker's cleaner last wrote them.")
    add_data_dir_options(status)
    status.set_defaults(func=run_status)


def _when(ms: object) -> str:
    if not isinstance(ms, int):
        return "never"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_status(args: argparse.Namespace) -> int:
    rows: list[dict[str, object]] = []
    try:
        dirs = args.data_dir or list(load_broker_config(args.config, args.override).log_dirs)
        for d in dirs:
            checkpoints = CleanerCheckpoint(Path(d)).read()
            found = read_status(Path(d))
            states = found[1] if found is not None else {}
            for tp in sorted(set(states) | set(checkpoints)):
                row: dict[str, object] = {"topic": tp[0], "partition": tp[1], "log_dir": str(d)}
                row.update(states.get(tp, {}))
                row["checkpoint"] = checkpoints.get(tp, row.get("checkpoint"))
                rows.append(row)
    except (TierlogError, OSError, FramedFileError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.json:
        for row in rows:
            print(json.dumps(row, sort_keys=True))
        return 0
    if not rows:
        print("no compacted partitions (or the broker's cleaner has not run yet)")
        return 0
    header = ("PARTITION", "CHECKPOINT", "DIRTY-RATIO", "DIRTY-BYTES", "LAST-CLEAN", "CLEANINGS", "BYTES-CLEANED",
              "STATE")
    table: list[tuple[str, ...]] = [header]
    for r in rows:
        ratio = r.get("dirty_ratio")
        table.append((
            f"{r['topic']}-{r['partition']}", "-" if r.get("checkpoint") is None else str(r["checkpoint"]),
            f"{ratio:.3f}" if isinstance(ratio, float) else "-", str(r.get("dirty_bytes", "-")),
            _when(r.get("last_clean_ms")), str(r.get("cleanings", 0)), str(r.get("bytes_cleaned", 0)),
            f"uncleanable: {r['uncleanable_reason']}" if r.get("uncleanable_reason") else "ok"))
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    for line in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=False)) + "  " + line[-1])
    return 0
