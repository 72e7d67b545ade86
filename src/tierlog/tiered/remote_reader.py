"""Reads from the remote tier: the bytes a fetch below the local log start offset gets (a mirror of
the local segment read over the remote copy, positioned with the cached offset index), the aborted
transactions for read_committed, the remote log start offset, and ListOffsets by timestamp (Kafka's
RemoteLogManager#read and #findOffsetByTimestamp)."""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass
from typing import BinaryIO

from tierlog.records.header import BATCH_HEADER_SIZE
from tierlog.records.reader import records_max_timestamp
from tierlog.storage.txn_index import AbortedTxn
from tierlog.tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tierlog.tiered.context import TieringContext

log = logging.getLogger(__name__)
S = RemoteLogSegmentState
# Bytes of a batch header a remote read needs to decide whether to skip the batch: base offset,
# length, and (at byte 23) the last offset delta.
_SKIP_HEADER = struct.Struct(">qi11xi")
_READ_AHEAD = 23 + 4


@dataclass(frozen=True)
class RemoteFetchInfo:
    records: bytes
    #: The remote segment the bytes come from (None when no batch at or after the offset exists).
    segment: RemoteLogSegmentMetadata | None
    aborted_transactions: list[AbortedTxn] | None = None
    #: For read_committed: the offset no returned batch reaches, and whether the remote transaction
    #: indexes already held every aborted transaction that can matter (else the local log's follow).
    upper_bound_offset: int = -1
    aborted_complete: bool = False


class RemoteReader:
    def __init__(self, ctx: TieringContext) -> None:
        self.ctx = ctx
        #: Largest record timestamps of segments an older tierlog uploaded (see _segment_max_timestamp).
        self._records_max_ts: dict[RemoteLogSegmentId, int] = {}

    def remote_log_start_offset(self, topic: str, partition: int) -> int | None:
        """The first offset readable from the remote tier, or None when it holds nothing."""
        rlmm = self.ctx.rlmm
        tip = self.ctx.tip_for(topic, partition)
        if tip is None:
            return None
        floor = rlmm.log_start_offset(tip) or 0
        # Segments wholly below the log start offset (DeleteRecords, before the expiry pass deletes
        # them) hold nothing readable.
        first = next((m for m in rlmm.list_remote_log_segments(tip)
                      if m.state is S.COPY_SEGMENT_FINISHED and m.end_offset >= floor), None)
        if first is None:
            return None
        return max(first.start_offset, floor)

    def earliest_offset(self, topic: str, partition: int) -> int | None:
        """ListOffsets EARLIEST across both tiers."""
        remote = self.remote_log_start_offset(topic, partition)
        ulog = self.ctx.logs.get_log(topic, partition)
        local = None if ulog is None else ulog.log_start_offset
        if remote is None:
            return local
        return remote if local is None else min(remote, local)

    def max_timestamp(self, topic: str, partition: int) -> int:
        """The largest record timestamp the remote tier holds above its log start (-1: none), for
        ListOffsets MAX_TIMESTAMP."""
        tip = self.ctx.tip_for(topic, partition)
        start = None if tip is None else self.remote_log_start_offset(topic, partition)
        if tip is None or start is None:
            return -1
        return max((self._segment_max_timestamp(m)[0] for m in list(self.ctx.rlmm.list_remote_log_segments(tip))
                    if m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED and m.end_offset >= start), default=-1)

    def segment_max_timestamp(self, md: RemoteLogSegmentMetadata) -> int:
        """The remote segment's largest record timestamp, from its records when an older tierlog's
        metadata took it from the batch headers (see :meth:`_segment_max_timestamp`)."""
        return self._segment_max_timestamp(md)[0]

    def _segment_max_timestamp(self, md: RemoteLogSegmentMetadata) -> tuple[int, bytes | None]:
        """The segment's largest record timestamp, with its bytes when they had to be fetched for it:
        an older tierlog's upload took ``max_timestamp_ms`` from the batch headers, which may lie
        (seed 004), so its records decide -- once per segment, remembered while the process runs."""
        if md.max_timestamp_from_records:
            return md.max_timestamp_ms, None
        known = self._records_max_ts.get(md.segment_id)
        if known is not None:
            return known, None
        from tierlog.records import iter_headers  # decoding is needed only here

        data = self._segment_bytes(md)
        known = max((records_max_timestamp(h) for h in iter_headers(data)), default=-1)
        if known != md.max_timestamp_ms:
            log.info("remote segment %s [%d, %d] (uploaded by an older tierlog) says max timestamp %d; its records "
                     "say %d, which ListOffsets and retention use", md.segment_id.id_str, md.start_offset, md.end_offset,
                     md.max_timestamp_ms, known)
        self._records_max_ts[md.segment_id] = known
        return known, data

    def _segment_bytes(self, md: RemoteLogSegmentMetadata) -> bytes:
        with self.ctx.rsm.fetch_log_segment(md, 0) as stream:
            return stream.read()

    def find_offset_by_timestamp(self, topic: str, partition: int, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``timestamp`` in the remote tier, for
        ListOffsets by time (Kafka's RemoteLogManager#findOffsetByTimestamp): the first finished
        segment whose largest timestamp reaches it is read and its records decoded. Timestamps are
        the records' (seed 004): a batch header stored by an older tierlog may say -1 or less than
        its records hold, and so may the metadata of a segment it uploaded."""
        from tierlog.records import decode_batch, iter_headers  # decoding is needed only here

        tip = self.ctx.tip_for(topic, partition)
        if tip is None:
            return None
        start = self.remote_log_start_offset(topic, partition)
        if start is None:
            return None
        for md in list(self.ctx.rlmm.list_remote_log_segments(tip)):
            if md.state is not S.COPY_SEGMENT_FINISHED or md.end_offset < start:
                continue
            largest, data = self._segment_max_timestamp(md)
            if largest < timestamp:
                continue
            if data is None:
                data = self._segment_bytes(md)
            for header in iter_headers(data):
                if header.is_control or header.last_offset < start:
                    continue
                # The header is trusted only where it says the batch reaches the timestamp.
                if header.max_timestamp < timestamp and records_max_timestamp(header) < timestamp:
                    continue
                for record in decode_batch(header):
                    if record.timestamp >= timestamp and record.offset >= start:
                        return record.offset, record.timestamp
        return None

    def fetch(self, topic: str, partition: int, fetch_offset: int, max_bytes: int, *,
              min_one_message: bool = True, read_committed: bool = False) -> RemoteFetchInfo | None:
        """The bytes the local log would have returned for this read, from the remote tier (with the
        aborted transactions they overlap when ``read_committed``); None when the offset is not
        there (the caller answers OFFSET_OUT_OF_RANGE)."""
        rlmm = self.ctx.rlmm
        tip = self.ctx.tip_for(topic, partition)
        if tip is None or fetch_offset < (rlmm.log_start_offset(tip) or 0):
            return None
        md = rlmm.remote_log_segment_metadata(tip, fetch_offset)
        if md is None:
            return None
        while md is not None:
            records = self.read_segment(md, fetch_offset, max_bytes, min_one_message)
            if records is not None:
                if not read_committed:
                    return RemoteFetchInfo(records, md)
                upper = _next_offset_after(records, md.end_offset + 1)
                aborted, complete = self._collect_aborted_txns(tip, md, fetch_offset, upper)
                return RemoteFetchInfo(records, md, aborted, upper, complete)
            # No batch at or after the offset in this segment (compaction): the next one.
            md = rlmm.remote_log_segment_metadata(tip, md.end_offset + 1)
        return RemoteFetchInfo(b"", None, [] if read_committed else None)

    def _collect_aborted_txns(self, tip: TopicIdPartition, md: RemoteLogSegmentMetadata, fetch_offset: int,
                              upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Aborted transactions overlapping the read from the remote transaction indexes, from the
        read's segment on (RemoteLogManager.collectAbortedTransactions): a later segment can hold the
        ABORT of a transaction the read began in. The flag says the search is complete; if not, the
        caller goes on with the local segments."""
        found: list[AbortedTxn] = []
        current: RemoteLogSegmentMetadata | None = md
        while current is not None:
            result = self.ctx.index_cache.collect_aborted_txns(current, fetch_offset, upper_bound_offset)
            found += result.aborted_transactions
            if result.is_complete:
                return found, True
            current = self.ctx.rlmm.remote_log_segment_metadata(tip, current.end_offset + 1)
        return found, False

    def read_segment(self, md: RemoteLogSegmentMetadata, offset: int, max_bytes: int,
                     min_one_message: bool) -> bytes | None:
        """Mirror of LogSegment.read over the remote copy: start at the index position, skip batches
        ending before ``offset``, return up to ``max_bytes`` (the whole first batch if
        ``min_one_message``), possibly ending in a partial batch exactly as the local read does."""
        position = self.ctx.index_cache.lookup_offset(md, offset).position
        with self.ctx.rsm.fetch_log_segment(md, position) as stream:
            while True:
                head = _read_exact(stream, _READ_AHEAD)
                if len(head) < _READ_AHEAD:
                    return None
                base, length, delta = _SKIP_HEADER.unpack_from(head)
                size = 12 + length
                if length < BATCH_HEADER_SIZE - 12:
                    return None  # a torn or zeroed tail ends the data, as the local iterator does
                if base + delta >= offset:
                    break
                _skip(stream, size - _READ_AHEAD)
                position += size
            adjusted = max(max_bytes, size) if min_one_message else max_bytes
            if adjusted == 0:
                return b""
            fetch_size = min(md.segment_size_in_bytes - position, adjusted)
            if fetch_size <= 0:
                return b""
            if fetch_size <= _READ_AHEAD:
                return head[:fetch_size]
            return head + _read_exact(stream, fetch_size - _READ_AHEAD)


def _read_exact(stream: BinaryIO, n: int) -> bytes:
    chunks = []
    while n > 0:
        chunk = stream.read(n)
        if not chunk:
            break
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _skip(stream: BinaryIO, n: int) -> None:
    if n <= 0:
        return
    if stream.seekable():
        stream.seek(n, os.SEEK_CUR)
    else:
        while n > 0:
            chunk = stream.read(min(n, 1 << 20))
            if not chunk:
                return
            n -= len(chunk)


def _next_offset_after(records: bytes, default: int) -> int:
    """The offset after the last whole batch in ``records`` (the upper bound for aborted txns)."""
    pos = 0
    last = None
    while pos + _READ_AHEAD <= len(records):
        base, length, delta = _SKIP_HEADER.unpack_from(records, pos)
        if pos + 12 + length > len(records):
            break
        last = base + delta + 1
        pos += 12 + length
    return default if last is None else last
