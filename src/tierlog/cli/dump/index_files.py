"""Dumps of ``.index``, ``.timeindex``, ``.txnindex`` and producer ``.snapshot`` files, each index checked
against the log next to it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tierlog.cli.dump.core import (
    DumpOptions,
    DumpReport,
    all_match,
    base_offset,
    companion,
    mapped,
    optional_text,
    walk_headers,
)
from tierlog.errors import CorruptIndexError, CorruptSnapshotError
from tierlog.records import (
    records_max_timestamp,
)
from tierlog.records.header import (
    NO_SEQUENCE,
    Buffer,
    decrement_sequence,
)
from tierlog.storage import files
from tierlog.storage.index import OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset
from tierlog.storage.producer_snapshot import SnapshotEntry, read_snapshot_entries
from tierlog.storage.txn_index import ABORTED_TXN_SIZE, AbortedTxn, TransactionIndex

# ---------------------------------------------------------------------------------------------- indexes


def _require_base(path: Path, report: DumpReport) -> int | None:
    base = base_offset(path)
    if base is None:
        # Index entries hold offsets relative to the base offset, so without it they mean nothing.
        report.problem(f"{path}: the file name does not start with the segment's base offset")
    return base


def _sanity(index: OffsetIndex | TimeIndex | TransactionIndex, path: Path, report: DumpReport) -> None:
    try:
        index.sanity_check()
    except CorruptIndexError as e:
        report.finding(f"{path} failed sanity check: {e}")
    else:
        report.line(f"{path} passed sanity check.")


def _untrimmed_tail(entries: Sequence[OffsetPosition | TimestampOffset], base: int) -> int:
    """How many entries to show: Kafka stops at the first entry after the first whose offset is the
    base offset, the start of the zero-filled tail of an index that was preallocated and never trimmed."""
    for i in range(1, len(entries)):
        if entries[i].offset == base:
            return i
    return len(entries)


def _untrimmed_message(shown: int, total: int) -> str:
    return (f"entry {shown} repeats the base offset: it and the {total - shown - 1} entries after it look like "
            "the zero-filled tail of an index that was preallocated and never trimmed; they are not shown or checked")


def _companion_log(path: Path, options: DumpOptions, report: DumpReport) -> Path | None:
    log_path = companion(path, files.LOG_SUFFIX)
    if log_path.is_file():
        return log_path
    message = f"{path}: cannot check the entries against the log: {log_path} does not exist"
    if options.verify_index_only:
        report.problem(message)  # the check was what was asked for
    else:
        report.line(message)
    return None


def offset_index_mismatches(entries: Sequence[OffsetPosition], log: Buffer) -> list[str]:
    """DumpLogSegments' check: each entry's position must be the start of a batch whose last offset
    is the entry's offset. One line per entry that is not, in index order."""
    # One pass over the log in position order (a damaged index may be in any order), so memory is
    # bounded by the index, not by the number of batches.
    order = sorted(range(len(entries)), key=lambda i: entries[i].position)
    found: dict[int, int | None] = {}
    j = 0
    for h in walk_headers(log):
        while j < len(order) and entries[order[j]].position <= h.position:
            found[order[j]] = h.last_offset if entries[order[j]].position == h.position else None
            j += 1
        if j == len(order):
            break
    out: list[str] = []
    for i, entry in enumerate(entries):
        last = found.get(i)
        if last is None:
            out.append(f"Index offset: {entry.offset}, log offset: none (no batch starts at position {entry.position})")
        elif last != entry.offset:
            out.append(f"Index offset: {entry.offset}, log offset: {last}")
    return out


def _dump_index(path: Path, options: DumpOptions, report: DumpReport, index: OffsetIndex | TimeIndex,
                base: int, format_entry: Callable[[Any], str],
                check: Callable[[list[Any], Path, Buffer], bool]) -> None:
    """What the offset and time index dumps share: entries (unless ``--verify-index-only``), an
    untrimmed tail, ``check`` of the shown entries against the companion log (it reports what it
    finds and says whether all matched), and the sanity check. Closes ``index``."""
    try:
        if options.index_sanity_only:
            _sanity(index, path, report)
            return
        entries = [index.entry(i) for i in range(index.entries)]
        shown = _untrimmed_tail(entries, base)
        if not entries:
            report.line(f"{path} is empty.")
        if not options.verify_index_only:
            for entry in entries[:shown]:
                report.line(format_entry(entry))
        if shown < len(entries):
            report.finding(_untrimmed_message(shown, len(entries)))
        log_path = _companion_log(path, options, report) if shown else None
        if log_path is not None:
            with mapped(log_path) as log:
                matched = check(entries[:shown], log_path, log)
            if matched:
                report.line(all_match(shown, log_path.name))
        _sanity(index, path, report)
    finally:
        index.close()


def dump_offset_index(path: Path, options: DumpOptions, report: DumpReport) -> None:
    base = _require_base(path, report)
    if base is None:
        return

    def check(entries: list[OffsetPosition], log_path: Path, log: Buffer) -> bool:
        mismatches = offset_index_mismatches(entries, log)
        if mismatches:
            report.finding(f"Mismatches in {path} against {log_path.name}:")
            for text in mismatches:
                report.line("  " + text)
        return not mismatches

    _dump_index(path, options, report, OffsetIndex(path, base, writable=False), base,
                lambda e: f"offset: {e.offset} position: {e.position}", check)


@dataclass
class TimeIndexErrors:
    """DumpLogSegments' three kinds of time index error, as lines."""

    mismatches: list[str]
    out_of_order: list[str]
    not_found: list[str]

    def __bool__(self) -> bool:
        return bool(self.mismatches or self.out_of_order or self.not_found)


def time_index_errors(entries: Sequence[TimestampOffset], log: Buffer) -> TimeIndexErrors:
    """Each entry (t, o) must name a batch whose last offset is o, and t must be the largest batch
    max timestamp up to and including that batch (what the segment indexed: the records' own, which
    a header stored by an older tierlog may not say); timestamps must increase from entry to entry."""
    errors = TimeIndexErrors([], [], [])
    previous: int | None = None
    for entry in entries:
        if previous is not None and entry.timestamp <= previous:
            errors.out_of_order.append(f"Index timestamp: {entry.timestamp}, Previously indexed timestamp: {previous}")
        previous = entry.timestamp
    order = sorted(range(len(entries)), key=lambda i: entries[i].offset)
    # entry index -> (last offset of the first batch reaching the entry's offset, running max timestamp)
    found: dict[int, tuple[int, int]] = {}
    running_max = -1
    j = 0
    for h in walk_headers(log):
        running_max = max(running_max, records_max_timestamp(h))
        while j < len(order) and entries[order[j]].offset <= h.last_offset:
            found[order[j]] = (h.last_offset, running_max)
            j += 1
        if j == len(order):
            break
    for i, entry in enumerate(entries):
        last_offset, log_timestamp = found.get(i, (-1, -1))
        if last_offset != entry.offset:
            errors.not_found.append(f"Indexed offset: {entry.offset}, found log offset: {last_offset}")
        elif log_timestamp != entry.timestamp:
            errors.mismatches.append(f"Index timestamp: {entry.timestamp}, log timestamp: {log_timestamp}")
    return errors


def dump_time_index(path: Path, options: DumpOptions, report: DumpReport) -> None:
    base = _require_base(path, report)
    if base is None:
        return

    def check(entries: list[TimestampOffset], log_path: Path, log: Buffer) -> bool:
        errors = time_index_errors(entries, log)
        for title, lines in (
            (f"Found timestamp mismatch in {path}:", errors.mismatches),
            (f"Found out of order timestamp in {path}:", errors.out_of_order),
            (f"The following indexed offsets are not found in {log_path.name}:", errors.not_found),
        ):
            if lines:
                report.finding(title)
                for text in lines:
                    report.line("  " + text)
        return not errors

    _dump_index(path, options, report, TimeIndex(path, base, writable=False), base,
                lambda e: f"timestamp: {e.timestamp} offset: {e.offset}", check)


def format_aborted_txn(version: int, txn: AbortedTxn) -> str:
    return (f"version: {version} producerId: {txn.producer_id} firstOffset: {txn.first_offset} "
            f"lastOffset: {txn.last_offset} lastStableOffset: {txn.last_stable_offset}")


def dump_txn_index(path: Path, options: DumpOptions, report: DumpReport) -> None:
    base = _require_base(path, report)
    if base is None:
        return
    if not options.index_sanity_only:
        data = path.read_bytes()
        whole = len(data) - len(data) % ABORTED_TXN_SIZE
        previous_last: int | None = None
        # Entries are parsed one by one (rather than through TransactionIndex, which gives up at
        # the first bad entry) so every readable entry of a damaged file is still shown.
        for pos in range(0, whole, ABORTED_TXN_SIZE):
            try:
                txn = AbortedTxn.from_bytes(data, pos)
            except ValueError as e:
                report.finding(f"entry at byte {pos}: {e}")
                continue
            if not options.verify_index_only:
                # Kafka reads the version as the entry's first byte, so that is what is shown.
                report.line(format_aborted_txn(data[pos], txn))
            if previous_last is not None and txn.last_offset <= previous_last:
                report.finding(f"entry at byte {pos}: lastOffset {txn.last_offset} does not increase "
                               f"(previous {previous_last})")
            previous_last = txn.last_offset
        if whole != len(data):
            report.finding(f"Found {len(data) - whole} invalid bytes at the end of {path.name}")
    _sanity(TransactionIndex(path, base), path, report)


# ---------------------------------------------------------------------------------------------- snapshots


def format_producer(entry: SnapshotEntry) -> str:
    """One producer of a producer state snapshot (DumpLogSegments' ``dumpProducerIdSnapshot``)."""
    line = (f"producerId: {entry.producer_id} producerEpoch: {entry.producer_epoch} "
            f"coordinatorEpoch: {entry.coordinator_epoch} "
            f"currentTxnFirstOffset: {optional_text(entry.current_txn_first_offset)} "
            f"lastTimestamp: {entry.timestamp}")
    if entry.last_offset < 0:
        # A producer known only from a transaction marker or a compacted-away batch.
        return line + " no batch metadata"
    first_sequence = (NO_SEQUENCE if entry.last_sequence < 0
                      else decrement_sequence(entry.last_sequence, entry.offset_delta))
    return line + (f" firstSequence: {first_sequence} lastSequence: {entry.last_sequence} "
                   f"lastOffset: {entry.last_offset} offsetDelta: {entry.offset_delta}")


def dump_producer_snapshot(path: Path, options: DumpOptions, report: DumpReport) -> None:
    del options  # nothing to choose: a snapshot is dumped whole or reported corrupt
    try:
        entries = read_snapshot_entries(path)
    except CorruptSnapshotError as e:
        # The file was read but is not a valid snapshot: data, not invocation, is at fault.
        report.finding(f"{path} is not a valid producer snapshot: {e}")
        return
    end = base_offset(path)
    report.line(f"Producer snapshot end offset: {end if end is not None else 'unknown'} producers: {len(entries)}")
    for entry in entries:
        report.line(format_producer(entry))
