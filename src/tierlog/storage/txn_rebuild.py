"""Refill the ``.txnindex`` of segments that recovery emptied.

Kafka's recovery replays each recovered segment through a producer state and appends an entry for
every transaction an ABORT marker completes there (LogSegment#recover → updateTxnIndex). Here the
segment scan and the producer state rebuild are separate passes, so this one does only what the
index needs: it finds the transactions open where the first emptied segment starts (from the newest
readable producer snapshot at or below it, then the batch headers up to it) and walks the batches
from there, writing ``(producer id, first offset, marker offset, last stable offset)`` for each
abort that lands in an emptied segment. The last stable offset is the one Kafka writes: the first
offset of the oldest other open transaction, else the offset after the marker.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from tierlog.errors import CorruptRecordError, CorruptSnapshotError, InvalidRecordError
from tierlog.storage.producer_rebuild import iter_segment_headers
from tierlog.storage.producer_snapshot import list_snapshot_files, read_snapshot_entries
from tierlog.storage.producer_state import CONTROL_TYPE_ABORT, read_end_txn_marker
from tierlog.storage.segment import LogSegment
from tierlog.storage.segments import LogSegments
from tierlog.storage.txn_index import AbortedTxn

log = logging.getLogger(__name__)


def _open_txns_at(directory: Path, offset: int, log_start_offset: int) -> tuple[dict[int, int], int]:
    """(producer id → first offset of its open transaction, the offset they hold at): from the
    newest readable snapshot at or below ``offset``, else nothing open at the log start."""
    for snap_offset, path in sorted(list_snapshot_files(directory).items(), reverse=True):
        if snap_offset > offset or snap_offset < log_start_offset:
            continue
        try:
            entries = read_snapshot_entries(path)
        except CorruptSnapshotError as e:
            log.warning("skipping unreadable producer snapshot %s: %s", path, e)
            continue
        return {e.producer_id: e.current_txn_first_offset for e in entries if e.current_txn_first_offset >= 0}, \
            snap_offset
    return {}, log_start_offset


def rebuild_transaction_indexes(directory: Path, segments: LogSegments, emptied: Sequence[LogSegment],
                                log_start_offset: int, end_offset: int) -> int:
    """Refill the transaction indexes of ``emptied`` (segments of ``segments``); returns how many
    entries were written."""
    if not emptied:
        return 0
    first = min(s.base_offset for s in emptied)
    targets = {s.base_offset: s for s in emptied}
    open_txns, start = _open_txns_at(directory, first, log_start_offset)
    written = 0
    ordered = segments.from_offset(start)
    for i, segment in enumerate(ordered):
        next_base = ordered[i + 1].base_offset if i + 1 < len(ordered) else None
        if next_base is not None and next_base <= start:
            continue
        target = targets.get(segment.base_offset)
        try:
            for header in iter_segment_headers(segment, max(start, segment.base_offset), end_offset):
                pid = header.producer_id
                if pid < 0 or not header.is_transactional:
                    continue
                if not header.is_control:
                    open_txns.setdefault(pid, header.base_offset)
                    continue
                marker = read_end_txn_marker(header)
                first_offset = open_txns.pop(pid, None)
                if marker is None or first_offset is None or marker.control_type != CONTROL_TYPE_ABORT:
                    continue
                if target is not None and header.base_offset >= first:
                    others = [o for p, o in open_txns.items() if p != pid]
                    lso = min(others) if others else header.base_offset + 1
                    target.txn_index.append(AbortedTxn(pid, first_offset, header.base_offset, lso))
                    written += 1
        except (CorruptRecordError, InvalidRecordError) as e:
            log.error("transaction index rebuild stopped at damaged data in %s: %s", segment.log.path, e)
            break
    for segment in emptied:
        segment.txn_index_reset = False
    if written:
        log.info("rebuilt %d aborted-transaction entries in %d recovered segments of %s", written, len(emptied),
                 directory.name)
    return written
