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
``tierlog.metadata`` can decode) plug in through :func:`register_dumper`.

This is text output for people, so it lives in the cli layer; storage keeps only what reading the
files takes (the index, transaction index and producer snapshot readers, batch headers).

What a dump finds falls in two classes, kept apart because only the first makes the command fail
by default: a *problem* means a file could not be dumped at all (missing, unknown type, unreadable);
a *finding* means the file was read and holds invalid data (a CRC failure, torn bytes, an index
that disagrees with its log). Kafka's tool reports findings without failing; ``--strict`` makes
them fail too.
"""

from __future__ import annotations

from tierlog.cli.dump.core import (
    MARKER_SUFFIXES,
    Dumper,
    DumpOptions,
    DumpReport,
    dump_file,
    file_type_suffix,
    register_dumper,
    registered_suffixes,
    render_text,
)
from tierlog.cli.dump.index_files import (
    TimeIndexErrors,
    dump_offset_index,
    dump_producer_snapshot,
    dump_time_index,
    dump_txn_index,
    format_aborted_txn,
    format_producer,
    offset_index_mismatches,
    time_index_errors,
)
from tierlog.cli.dump.log_files import (
    RecordRenderer,
    codec_name,
    dump_log_segment,
    dump_record_batches,
    format_batch,
    format_record,
    render_key_value,
    timestamp_type_name,
)
from tierlog.storage import files

register_dumper(files.LOG_SUFFIX, dump_log_segment)
register_dumper(files.INDEX_SUFFIX, dump_offset_index)
register_dumper(files.TIME_INDEX_SUFFIX, dump_time_index)
register_dumper(files.TXN_INDEX_SUFFIX, dump_txn_index)
register_dumper(files.SNAPSHOT_SUFFIX, dump_producer_snapshot)

__all__ = [
    "MARKER_SUFFIXES",
    "DumpOptions",
    "DumpReport",
    "Dumper",
    "RecordRenderer",
    "TimeIndexErrors",
    "codec_name",
    "dump_file",
    "dump_log_segment",
    "dump_offset_index",
    "dump_producer_snapshot",
    "dump_record_batches",
    "dump_time_index",
    "dump_txn_index",
    "file_type_suffix",
    "format_aborted_txn",
    "format_batch",
    "format_producer",
    "format_record",
    "offset_index_mismatches",
    "register_dumper",
    "registered_suffixes",
    "render_key_value",
    "render_text",
    "time_index_errors",
    "timestamp_type_name",
]
