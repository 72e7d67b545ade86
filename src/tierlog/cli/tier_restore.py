"""``tierlog tier restore TOPIC-PARTITION``: have a tiered partition rebuilt from the remote tier at the
broker's next start -- to move it to a new disk from the remote tier alone, or to settle a partition
that went offline because its local log and the remote tier disagree (docs/operations.md, "Losing a
disk"). Runs with the broker stopped: it takes every log dir's lock first.

The local copy, if any, is not deleted: it is renamed to Kafka's stray-log name
(``<topic>-<partition>.<id>-stray``), which the broker never loads or serves and names at every start
until the operator removes it. An empty directory takes its place (in ``--log-dir`` if given), and the
broker, finding a tiered partition whose local log holds nothing, starts it at the remote tier's end
offset + 1 with the producer state and leader epochs the remote tier holds."""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack
from pathlib import Path

from tierlog.cli._options import add_data_dir_options
from tierlog.cli.serve import load_broker_config
from tierlog.errors import TierlogError
from tierlog.storage import files
from tierlog.storage.dir_lock import DirLock


def register(tsub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = tsub.add_parser("restore", help="rebuild a tiered partition from the remote tier at the next start",
                        description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("partition", metavar="TOPIC-PARTITION", help="e.g. orders-0")
    add_data_dir_options(p, json_output=False)
    p.add_argument("--log-dir", type=Path, help="the log dir to rebuild the partition in (default: where it is, "
                                                "or the broker's choice at its next start)")
    p.set_defaults(func=run_restore)


def run_restore(args: argparse.Namespace) -> int:
    try:
        topic, partition = files.parse_topic_partition_name(args.partition)
        config = load_broker_config(args.config, args.override)
        dirs = [Path(d) for d in (args.data_dir or config.log_dirs)]
        if args.log_dir is not None and args.log_dir.resolve() not in {d.resolve() for d in dirs}:
            print(f"error: --log-dir {args.log_dir} is not one of the log dirs {', '.join(map(str, dirs))}",
                  file=sys.stderr)
            return 2
        with ExitStack() as locks:
            for d in dirs:
                if d.is_dir():
                    locks.enter_context(DirLock(d))
            name = files.topic_partition_dir_name(topic, partition)
            current = [d / name for d in dirs if (d / name).is_dir()]
            for old in current:
                aside = old.parent / files.stray_dir_name(topic, partition)
                old.rename(aside)
                print(f"the local copy {old} is kept as {aside} (never loaded; remove it when done)")
            target = args.log_dir or (current[0].parent if current else None)
            if target is not None:
                (target / name).mkdir(parents=True)
                print(f"{target / name} is empty")
    except (TierlogError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{topic}-{partition} is restored from the remote tier when the broker starts: it resumes at the remote "
          "tier's end offset + 1 (the broker's log says so at WARNING)")
    return 0
