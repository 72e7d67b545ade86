"""``tierlog dump-log FILE...``: print the contents of segment, index, transaction index and producer
snapshot files, like Kafka's ``kafka-dump-log.sh`` (DumpLogSegments).

The dumping itself is :mod:`tierlog.cli.dump`; this module is the command line around it.

Exit status: 0 when every file could be dumped, 1 when a file is missing, of an unknown type or
unreadable. Invalid data found inside a readable file (a batch failing its CRC, torn bytes, an
index disagreeing with its log) is reported but, as in Kafka, does not fail the command unless
``--strict`` is given, so the tool can be pointed at a damaged directory to see what is there.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tierlog.cli.dump import Dumper, DumpOptions, DumpReport, dump_file, register_dumper

# Hook for file types tierlog.cli.dump does not know itself: a dumper for
# the KRaft metadata snapshot (``<offset>-<epoch>.checkpoint``: v2 batches whose
# records only tierlog.metadata can decode) is registered here, in the cli layer, e.g.
#     (".checkpoint", dump_metadata_snapshot)
# where dump_metadata_snapshot calls tierlog.cli.dump.dump_record_batches with its own
# preamble ("Snapshot end offset: N, epoch: E") and a record renderer for metadata records.
EXTRA_DUMPERS: tuple[tuple[str, Dumper], ...] = ()


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "dump-log", help="print the contents of log segment, index and snapshot files",
        description=(
            "Print .log, .index, .timeindex, .txnindex and producer .snapshot files one line per batch, "
            "record or entry, in the shape of Kafka's kafka-dump-log.sh. Index files are also checked "
            "against the .log beside them. Files with a .deleted, .cleaned or .swap marker are read "
            "by their underlying type."),
    )
    p.add_argument("files", nargs="*", type=Path, metavar="FILE", help="files to dump, in order")
    p.add_argument("--files", dest="files_csv", action="append", default=[], metavar="FILE,FILE",
                   help="comma-separated files (Kafka's spelling; may be combined with FILE arguments)")
    p.add_argument("--deep-iteration", action="store_true",
                   help="print every record's metadata, not only the batches")
    p.add_argument("--print-data-log", action="store_true",
                   help="print every record with its key, payload and headers (implies --deep-iteration)")
    p.add_argument("--verify-index-only", action="store_true",
                   help="for index files, check the entries against the log without printing them")
    p.add_argument("--index-sanity-check", action="store_true",
                   help="for index files, run only the broker's sanity check")
    p.add_argument("--max-bytes", type=_non_negative, metavar="N",
                   help="read at most N bytes of each .log file (default: all)")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when invalid data is found (a CRC failure, invalid bytes, an index mismatch)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    for suffix, dumper in EXTRA_DUMPERS:
        register_dumper(suffix, dumper)
    paths: list[Path] = list(args.files)
    for csv in args.files_csv:
        paths.extend(Path(name) for name in csv.split(",") if name.strip())
    if not paths:
        print("tierlog dump-log: give at least one file to dump", file=sys.stderr)
        return 2  # a usage error, as argparse reports its own
    options = DumpOptions(
        deep_iteration=args.deep_iteration,
        print_data=args.print_data_log,
        verify_index_only=args.verify_index_only,
        index_sanity_only=args.index_sanity_check,
        max_bytes=args.max_bytes,
    )
    report = DumpReport(sys.stdout, sys.stderr)
    for path in paths:
        dump_file(path, options, report)
    sys.stdout.flush()
    if report.problems:
        return 1
    if args.strict and report.findings:
        print(f"tierlog dump-log: {report.findings} problem(s) found in the data (--strict)", file=sys.stderr)
        return 1
    return 0
