"""``tierlog metadata``: snapshot, inspect and restore the cluster metadata of a data directory.

* ``snapshot --data-dir DIR``: write a snapshot now into a stopped broker's metadata log;
  ``--output-dir BACKUPS`` writes it elsewhere instead, which also works while the broker runs (a
  backup: the log is only read).
* ``show [--snapshot FILE | --data-dir DIR] [--topic NAME ...]``: print the image as tables. Reading a
  data directory changes nothing in it.
* ``restore SNAPSHOT --data-dir DIR``: rebuild a stopped broker's metadata from a snapshot file.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from tierlog.clock import SYSTEM_CLOCK
from tierlog.config import BrokerConfig
from tierlog.errors import TierlogError
from tierlog.metadata.controller import Controller, ControllerSettings
from tierlog.metadata.metadata_log import load_readonly, resolve_metadata_dir, restore_snapshot
from tierlog.metadata.render import render_image
from tierlog.metadata.snapshot import load_snapshot, write_snapshot
from tierlog.storage.dir_lock import is_locked

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("metadata", help="snapshot, show or restore the cluster metadata",
                       description="Snapshot, inspect and restore the cluster metadata log (__cluster_metadata-0).")
    msub = p.add_subparsers(dest="metadata_command", metavar="ACTION")
    msub.required = True

    snap = msub.add_parser("snapshot", help="write a metadata snapshot now",
                           description="Write a snapshot of the metadata image now: into the metadata log of a "
                                       "stopped broker, or with --output-dir into another directory (a backup; "
                                       "works while the broker runs).")
    snap.add_argument("--data-dir", type=Path, required=True,
                      help="the broker's log directory (or its __cluster_metadata-0 directory)")
    snap.add_argument("--config", type=Path,
                      help="server.properties, for the snapshot retention settings (default: Kafka's defaults)")
    snap.add_argument("--output-dir", type=Path,
                      help="write the snapshot file here instead (the data directory is only read)")
    snap.set_defaults(func=run_snapshot)

    show = msub.add_parser("show", help="print the metadata image",
                           description="Print topics, partitions, configs and features. Reads only.")
    source = show.add_mutually_exclusive_group(required=True)
    source.add_argument("--snapshot", type=Path, help="a snapshot file (<offset>-<epoch>.checkpoint)")
    source.add_argument("--data-dir", type=Path,
                        help="a broker's log directory: newest valid snapshot plus the metadata log after it")
    show.add_argument("--topic", action="append", help="only this topic (repeatable)")
    show.set_defaults(func=run_show)

    restore = msub.add_parser("restore", help="rebuild a stopped broker's metadata from a snapshot",
                              description="Reset the metadata log to start at the snapshot's offset with the "
                                          "snapshot as its base. The broker must be stopped.")
    restore.add_argument("snapshot", type=Path, help="the snapshot file to restore")
    restore.add_argument("--data-dir", type=Path, required=True,
                         help="the broker's log directory (or its __cluster_metadata-0 directory)")
    restore.set_defaults(func=run_restore)


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 1


def _broker_running(directory: Path) -> bool:
    """Whether a live broker holds the lock of the metadata log's log directory."""
    return is_locked(directory.parent)


def run_snapshot(args: argparse.Namespace) -> int:
    directory = resolve_metadata_dir(args.data_dir)
    if not directory.is_dir():
        return _fail(f"no metadata log in {args.data_dir} (expected {directory})")
    if args.output_dir is not None:
        return _snapshot_to(directory, args.output_dir)
    if _broker_running(directory):
        return _fail(f"a broker is running on {directory.parent}; stop it, or write a backup with --output-dir DIR")
    from tierlog.server.settings import controller_settings  # the server brings in kio: only here

    try:
        settings = controller_settings(BrokerConfig.from_file(args.config)) \
            if args.config is not None else ControllerSettings()
        controller = Controller.open(directory, settings, bootstrap=False)
    except TierlogError as e:
        return _fail(str(e))
    try:
        snap = controller.snapshot_now()
        if snap is None and any(controller.metrics.snapshots_generated.values()):
            # A trigger was already due when the log was opened, and that snapshot holds everything.
            snap = controller.metadata_log.latest_snapshot()
        if snap is None:
            latest = controller.metadata_log.latest_snapshot()
            where = latest.path if latest is not None else directory
            print(f"nothing new to snapshot: {where} already holds every record")
            return 0
        print(f"wrote {snap.path} ({snap.size_bytes} bytes, offsets < {snap.snapshot_id.end_offset}, "
              f"epoch {snap.snapshot_id.epoch})")
        return 0
    except TierlogError as e:
        return _fail(str(e))
    finally:
        controller.close()


def _snapshot_to(directory: Path, output_dir: Path) -> int:
    """A snapshot of everything committed so far, written outside the data directory."""
    try:
        result = load_readonly(directory)
        for warning in result.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        if result.image.provenance.end_offset == 0:
            return _fail(f"the metadata log in {directory} holds no records yet")
        output_dir.mkdir(parents=True, exist_ok=True)
        snap = write_snapshot(output_dir, result.image, SYSTEM_CLOCK.wall_ms())
    except (TierlogError, OSError) as e:
        return _fail(str(e))
    print(f"wrote {snap.path} ({snap.size_bytes} bytes, offsets < {snap.snapshot_id.end_offset}, "
          f"epoch {snap.snapshot_id.epoch})")
    return 0


def run_show(args: argparse.Namespace) -> int:
    try:
        if args.snapshot is not None:
            image = load_snapshot(args.snapshot).image
            print(f"# snapshot {args.snapshot}")
        else:
            directory = resolve_metadata_dir(args.data_dir)
            if not directory.is_dir():
                return _fail(f"no metadata log in {args.data_dir} (expected {directory})")
            result = load_readonly(directory)
            for warning in result.warnings:
                print(f"warning: {warning}", file=sys.stderr)
            base = result.snapshot.path.name if result.snapshot is not None else "no snapshot"
            print(f"# {directory}: {base} + {result.tail_records} records from the log")
            image = result.image
    except (TierlogError, OSError) as e:
        return _fail(str(e))
    sys.stdout.write(render_image(image, topics=args.topic))
    return 0


def run_restore(args: argparse.Namespace) -> int:
    if _broker_running(resolve_metadata_dir(args.data_dir)):
        return _fail(f"a broker is running on {args.data_dir}; stop it before restoring its metadata")
    try:
        loaded = restore_snapshot(resolve_metadata_dir(args.data_dir), args.snapshot)
    except (TierlogError, OSError) as e:
        return _fail(str(e))
    sid = loaded.snapshot_id
    print(f"restored {args.snapshot}: the metadata log now starts at offset {sid.end_offset} (epoch {sid.epoch}); "
          f"{len(loaded.image.topics_by_id)} topics, {loaded.image.num_partitions} partitions")
    return 0
