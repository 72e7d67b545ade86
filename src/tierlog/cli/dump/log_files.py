"""Dumps of ``.log`` segments: batches, records, and the bytes after the last whole batch."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

from tierlog.cli.dump.core import (
    DumpOptions,
    DumpReport,
    all_zero,
    base_offset,
    mapped,
    one_line,
    render_text,
)
from tierlog.errors import CorruptRecordError, TierlogError
from tierlog.records import (
    ControlRecordType,
    EndTransactionMarker,
    Record,
    decode_batch,
    parse_control_record_type,
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
    increment_sequence,
    iter_headers,
)

_I32 = struct.Struct(">i")


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
            f"{one_line(k)}={'null' if v is None else render_text(v)}" for k, v in record.headers
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
    header_keys = ",".join(one_line(k) for k, _ in record.headers)
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
    zero_tail = all_zero(buf, pos, size)
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
    with mapped(path) as buf:
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
    base = base_offset(path)
    start = str(base) if base is not None else "unknown (the file name is not an offset)"
    dump_record_batches(path, options, report, preamble=f"Log starting offset: {start}")
