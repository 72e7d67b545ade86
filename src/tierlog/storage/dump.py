"""Readable dumps of the files in a partition directory: the engine behind ``tierlog dump-log``
(Kafka's DumpLogSegments / ``kafka-dump-log.sh``).

One line per batch, record or index entry, in DumpLogSegments' ``name: value`` shape, so output
from Kafka and from tierlog can be compared side by side. The file type comes from the suffix:

* ``.log``: batches (``--deep-iteration``: records; ``--print-data-log``: keys and payloads too),
  a batch whose CRC fails is shown ``isvalid: false`` and its records are not decoded; bytes after
  the last whole batch are reported as invalid.
* ``.index`` / ``.timeindex``: entries, checked against the ``.log`` next to them, and the index's
  own sanity check (the one the broker runs before trusting the file).
* ``.txnindex``: aborted transactions. ``.snapshot``: producer state.

Other file types (the KRaft metadata snapshot ``.checkpoint``, whose records only
``tierlog.metadata`` can decode) plug in through :func:`register_dumper`; storage may not import
the layers above it, so the registration is done by whoever owns the format (the cli layer).

What a dump finds falls in two classes, kept apart because only the first makes the command fail
by default: a *problem* means a file could not be dumped at all (missing, unknown type, unreadable);
a *finding* means the file was read and holds invalid data (a CRC failure, torn bytes, an index
that disagrees with its log). Kafka's tool reports findings without failing; ``--strict`` makes
them fail too.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from tierlog.errors import CorruptIndexError, CorruptRecordError, CorruptSnapshotError, TierlogError
from tierlog.records import (
    ControlRecordType,
    EndTransactionMarker,
    Record,
    decode_batch,
    parse_control_record_type,
    records_max_timestamp,
)
from tierlog.records.compression import CompressionType
from tierlog.records.header import (
    BATCH_HEADER_SIZE,
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    NO_SEQUENCE,
    BatchHeader,
    Buffer,
    decrement_sequence,
    increment_sequence,
    iter_headers,
)
from tierlog.storage import files
from tierlog.storage.index import OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset
from tierlog.storage.producer_snapshot import SnapshotEntry, read_snapshot_entries
from tierlog.storage.txn_index import ABORTED_TXN_SIZE, AbortedTxn, TransactionIndex

#: Marker suffixes Kafka appends to a file on its way out or in (KAFKA-FACTS §2.1). A marked file
#: has the same format as the unmarked one, so it is dumped by the unmarked suffix.
MARKER_SUFFIXES = (files.DELETED_SUFFIX, files.CLEANED_SUFFIX, files.SWAP_SUFFIX)

_I32 = struct.Struct(">i")
# Zero-filled tails are scanned in slices this big so a 1 GiB preallocated segment is never copied whole.
_SCAN_CHUNK = 1 << 20


@dataclass(frozen=True)
class DumpOptions:
    #: Print every record's metadata, not only the batches.
    deep_iteration: bool = False
    #: Print keys and payloads; implies ``deep_iteration`` (as in Kafka).
    print_data: bool = False
    #: Index files: check the entries against the log without printing them.
    verify_index_only: bool = False
    #: Index files: run only the sanity check (Kafka's ``--index-sanity-check``).
    index_sanity_only: bool = False
    #: Read at most this many bytes of each ``.log`` (None: the whole file).
    max_bytes: int | None = None

    @property
    def records(self) -> bool:
        return self.deep_iteration or self.print_data


class DumpReport:
    """Where a dump writes, and a count of what went wrong (see the module docstring for the two kinds).

    Dump lines and findings go to ``out`` in file order, so a finding appears next to the data it is
    about; problems go to ``err``, because they are about the invocation rather than the data.
    """

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self._out = out
        self._err = err
        self.findings = 0
        self.problems = 0

    def line(self, text: str) -> None:
        self._out.write(text + "\n")

    def finding(self, text: str) -> None:
        """A line about invalid data in a file that could be read."""
        self.findings += 1
        self.line(text)

    def count_finding(self) -> None:
        """Count a finding already visible in a dump line (``isvalid: false``)."""
        self.findings += 1

    def problem(self, text: str) -> None:
        """A file that could not be dumped at all."""
        self.problems += 1
        self._err.write(text + "\n")


#: Dumps one file of a given type; reports everything through the DumpReport.
Dumper = Callable[[Path, DumpOptions, DumpReport], None]

_DUMPERS: dict[str, Dumper] = {}


def register_dumper(suffix: str, dumper: Dumper) -> None:
    """Dump files ending in ``suffix`` (e.g. ``".checkpoint"``) with ``dumper``; replaces an earlier one.

    This is the hook for formats defined above the storage layer. A dumper for files made of
    record batches can call :func:`dump_record_batches` with its own preamble and record renderer.
    """
    if not suffix.startswith(".") or suffix.count(".") != 1:
        raise ValueError(f"a dumper suffix is one '.'-prefixed extension such as '.log', not {suffix!r}")
    _DUMPERS[suffix] = dumper


def registered_suffixes() -> tuple[str, ...]:
    return tuple(sorted(_DUMPERS))


def file_type_suffix(path: Path) -> str:
    """The suffix that decides how ``path`` is dumped: its extension once a marker is removed
    (``0042.log.deleted`` → ``.log``)."""
    name = path.name
    for marker in MARKER_SUFFIXES:
        if name.endswith(marker) and len(name) > len(marker):
            name = name[: -len(marker)]
            break
    return Path(name).suffix


def dump_file(path: Path, options: DumpOptions, report: DumpReport) -> None:
    """Dump one file by its type; every outcome is recorded in ``report`` (nothing is raised for a
    bad file, so a command dumping many files goes on to the next one)."""
    suffix = file_type_suffix(path)
    dumper = _DUMPERS.get(suffix)
    if not path.exists():
        report.problem(f"{path}: no such file")
        return
    if path.is_dir():
        report.problem(f"{path}: is a directory; give the files in it")
        return
    if dumper is None:
        known = ", ".join(registered_suffixes())
        kind = f"'{suffix}'" if suffix else "(no extension)"
        report.problem(f"{path}: unknown file type {kind}; dump-log reads {known} files")
        return
    report.line(f"Dumping {path}")
    try:
        dumper(path, options, report)
    except OSError as e:
        report.problem(f"{path}: cannot read: {e.strerror or e}")


# ---------------------------------------------------------------------------------------------- helpers


@contextmanager
def _mapped(path: Path) -> Iterator[Buffer]:
    """The file's bytes, memory-mapped read-only, so a 1 GiB segment is walked without being read
    into memory; an empty file (which mmap refuses) is ``b""``.

    The map's length is fixed when it is made, so a broker appending meanwhile is harmless; a broker
    truncating the same file meanwhile (log truncation) would make reads past the new end fail with
    SIGBUS, which is why this tool is meant for inactive segments or a stopped broker, like Kafka's.
    """
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            yield b""
            return
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            yield mm
        finally:
            try:
                mm.close()
            except BufferError:
                # A view still referenced from a traceback being handled: the read-only map is
                # released when that view is collected; failing the dump over it would hide the
                # real error.
                pass


def _walk_headers(buf: Buffer) -> Iterator[BatchHeader]:
    """The batches of a companion log up to its first invalid byte (index verification only needs
    the batches the broker itself would see)."""
    try:
        yield from iter_headers(buf)
    except CorruptRecordError:
        return


def _base_offset(path: Path) -> int | None:
    try:
        return files.offset_from_file_name(path.name)
    except ValueError:
        return None


def _companion(path: Path, suffix: str) -> Path:
    """The file of the same segment with another extension, keeping a marker suffix if there is one
    (``0042.index.deleted`` → ``0042.log.deleted``)."""
    name = path.name
    marker = next((m for m in MARKER_SUFFIXES if name.endswith(m) and len(name) > len(m)), "")
    stem = name[: len(name) - len(marker)] if marker else name
    return path.with_name(Path(stem).stem + suffix + marker)


def _all_zero(buf: Buffer, start: int, end: int) -> bool:
    for i in range(start, end, _SCAN_CHUNK):
        chunk = bytes(buf[i : min(end, i + _SCAN_CHUNK)])
        if chunk.count(0) != len(chunk):
            return False
    return True


# Control characters (and Unicode line breaks) are escaped so a payload can never split its record
# over several lines; the rendering is for reading, not for recovering the exact bytes.
_ESCAPES: dict[int, str] = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F)}
_ESCAPES.update({0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r", 0x85: "\\x85", 0x2028: "\\u2028", 0x2029: "\\u2029"})


def render_text(data: bytes) -> str:
    """Bytes as UTF-8 (invalid sequences become U+FFFD, as Java's String decoding does), on one line."""
    return data.decode("utf-8", "replace").translate(_ESCAPES)


def _one_line(text: str) -> str:
    return text.translate(_ESCAPES)


def _all_match(n: int, log_name: str) -> str:
    return f"The only entry matches {log_name}" if n == 1 else f"All {n} entries match {log_name}"


def _optional(value: int) -> str:
    """Kafka prints these fields as OptionalLong; -1 is "absent" on disk."""
    return "none" if value < 0 else str(value)


# ---------------------------------------------------------------------------------------------- .log


def codec_name(codec: int) -> str:
    try:
        return CompressionType(codec).name.lower()
    except ValueError:
        return f"unknown({codec})"


def timestamp_type_name(header: BatchHeader) -> str:
    return "LogAppendTime" if header.timestamp_type == LOG_APPEND_TIME else "CreateTime"


def format_batch(header: BatchHeader, valid: bool) -> str:
    """One batch as DumpLogSegments prints it (``printBatchLevel``); ``valid`` is the CRC verdict."""
    h = header
    delete_horizon = str(h.base_timestamp) if h.has_delete_horizon else "none"
    return (
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
        f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} "
        f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
        f"partitionLeaderEpoch: {h.partition_leader_epoch} isTransactional: {str(h.is_transactional).lower()} "
        f"isControl: {str(h.is_control).lower()} deleteHorizonMs: {delete_horizon} "
        f"position: {h.position} {timestamp_type_name(h)}: {h.max_timestamp} size: {h.size_bytes} "
        f"magic: {h.magic} compresscodec: {codec_name(h.compression)} crc: {h.crc} "
        f"isvalid: {str(valid).lower()}"
    )


#: Renders what ``--print-data-log`` shows of a data (non-control) record, starting with a space.
RecordRenderer = Callable[[BatchHeader, Record], str]


def render_key_value(header: BatchHeader, record: Record) -> str:
    """Key and payload as text; an absent (null) key or value is left out, as Kafka's default
    decoder does (``keySize: -1`` / ``valueSize: -1`` already say so). Headers follow with values."""
    del header  # a renderer for another format may need the batch; plain text does not
    parts: list[str] = []
    if record.key is not None:
        parts.append(f" key: {render_text(record.key)}")
    if record.value is not None:
        parts.append(f" payload: {render_text(record.value)}")
    if record.headers:
        rendered = ",".join(
            f"{_one_line(k)}={'null' if v is None else render_text(v)}" for k, v in record.headers
        )
        parts.append(f" headers: [{rendered}]")
    return "".join(parts)


def _render_control(record: Record) -> str:
    try:
        control_type = parse_control_record_type(record.key)
        if control_type in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            marker = EndTransactionMarker.from_record(record)
            return f" endTxnMarker: {marker.control_type.name} coordinatorEpoch: {marker.coordinator_epoch}"
    except TierlogError as e:
        return f" controlType: invalid ({e})"
    type_id = struct.unpack_from(">h", record.key or b"", 2)[0]
    return f" controlType: {control_type.name}({type_id})"


def format_record(header: BatchHeader, record: Record, options: DumpOptions,
                  render_data: RecordRenderer = render_key_value) -> str:
    """One record as DumpLogSegments prints it under ``--deep-iteration``/``--print-data-log``."""
    delta = record.offset - header.base_offset
    sequence = NO_SEQUENCE if header.base_sequence < 0 else increment_sequence(header.base_sequence, delta)
    key_size = -1 if record.key is None else len(record.key)
    value_size = -1 if record.value is None else len(record.value)
    header_keys = ",".join(_one_line(k) for k, _ in record.headers)
    line = (
        f"| offset: {record.offset} {timestamp_type_name(header)}: {record.timestamp} "
        f"keySize: {key_size} valueSize: {value_size} sequence: {sequence} headerKeys: [{header_keys}]"
    )
    if header.is_control:
        # A control record's key and value are the marker itself, shown decoded instead.
        return line + _render_control(record)
    if options.print_data:
        line += render_data(header, record)
    return line


def _dump_records(header: BatchHeader, valid: bool, options: DumpOptions, report: DumpReport,
                  render_data: RecordRenderer) -> None:
    if not valid:
        # Decoding bytes that fail their CRC would print garbage as if it were data.
        report.line("| records not decoded: the batch fails its CRC check")
        return
    # Decode from a private copy: no view of the mapping may outlive the dump, and a bytes buffer
    # lets the decoder slice keys and values without another copy.
    with header.raw() as view:
        own = BatchHeader(bytes(view), 0)
    try:
        records = decode_batch(own)
    except TierlogError as e:
        report.finding(f"| records not decoded: {e}")
        return
    # The copy sits at position 0; the records are about the batch at its real position.
    for record in records:
        report.line(format_record(header, record, options, render_data))


def _why_no_batch(buf: Buffer, pos: int, size: int) -> str | None:
    """Why the bytes at ``pos`` are not a batch, or None if a whole batch is there (which happens only
    when ``--max-bytes`` stopped the walk before it)."""
    remaining = size - pos
    zero_tail = _all_zero(buf, pos, size)
    tail_note = " (the rest of the file is zero bytes: preallocated space that was never trimmed)" if zero_tail else ""
    if remaining < HEADER_SIZE_UP_TO_MAGIC:
        return f"{remaining} bytes are too few for a batch header{tail_note}"
    (length,) = _I32.unpack_from(buf, pos + LOG_OVERHEAD - 4)
    if length < MIN_BATCH_LENGTH:
        return f"batch length {length} is below the minimum of {MIN_BATCH_LENGTH}{tail_note}"
    # The magic is checked before the length against the file end, so garbage (whose "length" is
    # usually huge) is not mistaken for a torn write; a torn v2 batch still has its magic.
    if buf[pos + MAGIC] != MAGIC_V2:
        return f"unsupported batch magic {buf[pos + MAGIC]} (not a v2 record batch)"
    if LOG_OVERHEAD + length > remaining:
        return (f"a batch declares {LOG_OVERHEAD + length} bytes but only {remaining} remain "
                f"(a torn write){tail_note}")
    if LOG_OVERHEAD + length < BATCH_HEADER_SIZE:
        return f"a batch of {LOG_OVERHEAD + length} bytes is shorter than the {BATCH_HEADER_SIZE}-byte header"
    return None


def dump_record_batches(path: Path, options: DumpOptions, report: DumpReport, *, preamble: str,
                        render_data: RecordRenderer = render_key_value) -> None:
    """Dump a file that is a concatenation of v2 batches (a ``.log``, or a KRaft ``.checkpoint``
    through a registered dumper, which passes its own ``preamble`` and ``render_data``)."""
    report.line(preamble)
    with _mapped(path) as buf:
        size = len(buf)
        limit = size if options.max_bytes is None else min(size, options.max_bytes)
        pos = 0
        previous_last: int | None = None
        try:
            # iter_headers applies the broker's own reading rules (KAFKA-FACTS §1.6), so the batches
            # shown are exactly those the broker would serve; where it stops is examined below.
            for h in iter_headers(buf, 0, limit):
                valid = h.is_valid()
                report.line(format_batch(h, valid))
                if not valid:
                    report.count_finding()
                if previous_last is not None and h.base_offset <= previous_last:
                    # Gaps are normal (compaction), but offsets going back mean overlapping batches.
                    report.finding(f"baseOffset {h.base_offset} at position {h.position} does not follow "
                                   f"the previous batch's lastOffset {previous_last}")
                previous_last = h.last_offset
                if options.records:
                    _dump_records(h, valid, options, report, render_data)
                pos = h.position + h.size_bytes
        except CorruptRecordError:
            pass  # iteration stops at pos; _why_no_batch says why in the same words for every case
        if pos >= size:
            return
        if pos == limit:
            report.line(f"Stopped at --max-bytes {options.max_bytes}: {size - pos} bytes from position {pos} not read")
            return
        reason = _why_no_batch(buf, pos, size)
        if reason is None:
            report.line(f"Stopped at --max-bytes {options.max_bytes}: the batch at position {pos} ends past it; "
                        f"{size - pos} bytes not read")
            return
        report.finding(f"Found {size - pos} invalid bytes at the end of {path.name}")
        report.line(f"  at position {pos}: {reason}")


def dump_log_segment(path: Path, options: DumpOptions, report: DumpReport) -> None:
    base = _base_offset(path)
    start = str(base) if base is not None else "unknown (the file name is not an offset)"
    dump_record_batches(path, options, report, preamble=f"Log starting offset: {start}")


# ---------------------------------------------------------------------------------------------- indexes


def _require_base(path: Path, report: DumpReport) -> int | None:
    base = _base_offset(path)
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
    log_path = _companion(path, files.LOG_SUFFIX)
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
    for h in _walk_headers(log):
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


def dump_offset_index(path: Path, options: DumpOptions, report: DumpReport) -> None:
    base = _require_base(path, report)
    if base is None:
        return
    index = OffsetIndex(path, base, writable=False)
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
                report.line(f"offset: {entry.offset} position: {entry.position}")
        if shown < len(entries):
            report.finding(_untrimmed_message(shown, len(entries)))
        log_path = _companion_log(path, options, report) if shown else None
        if log_path is not None:
            with _mapped(log_path) as log:
                mismatches = offset_index_mismatches(entries[:shown], log)
            if mismatches:
                report.finding(f"Mismatches in {path} against {log_path.name}:")
                for text in mismatches:
                    report.line("  " + text)
            else:
                report.line(_all_match(shown, log_path.name))
        _sanity(index, path, report)
    finally:
        index.close()


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
    for h in _walk_headers(log):
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
    index = TimeIndex(path, base, writable=False)
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
                report.line(f"timestamp: {entry.timestamp} offset: {entry.offset}")
        if shown < len(entries):
            report.finding(_untrimmed_message(shown, len(entries)))
        log_path = _companion_log(path, options, report) if shown else None
        if log_path is not None:
            with _mapped(log_path) as log:
                errors = time_index_errors(entries[:shown], log)
            for title, lines in (
                (f"Found timestamp mismatch in {path}:", errors.mismatches),
                (f"Found out of order timestamp in {path}:", errors.out_of_order),
                (f"The following indexed offsets are not found in {log_path.name}:", errors.not_found),
            ):
                if lines:
                    report.finding(title)
                    for text in lines:
                        report.line("  " + text)
            if not errors:
                report.line(_all_match(shown, log_path.name))
        _sanity(index, path, report)
    finally:
        index.close()


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
            f"currentTxnFirstOffset: {_optional(entry.current_txn_first_offset)} "
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
    end = _base_offset(path)
    report.line(f"Producer snapshot end offset: {end if end is not None else 'unknown'} producers: {len(entries)}")
    for entry in entries:
        report.line(format_producer(entry))


register_dumper(files.LOG_SUFFIX, dump_log_segment)
register_dumper(files.INDEX_SUFFIX, dump_offset_index)
register_dumper(files.TIME_INDEX_SUFFIX, dump_time_index)
register_dumper(files.TXN_INDEX_SUFFIX, dump_txn_index)
register_dumper(files.SNAPSHOT_SUFFIX, dump_producer_snapshot)
