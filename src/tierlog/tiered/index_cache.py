"""A bounded cache of remote segments' offset and transaction indexes (Kafka's RemoteIndexCache).

A remote read needs the segment's offset index to start fetching near the requested offset instead
of at byte 0. Fetching the index on every read would double the requests, so fetched indexes are
kept as files in ``<log dir>/remote-log-index-cache/`` (``<start offset>_<segment id>.index`` /
``.txnindex``, Kafka's names) and opened read-only with the local index classes, least recently used
evicted once their total size passes ``remote.log.index.file.cache.total.size.bytes``. The cache
starts empty: leftovers of a previous run are removed, as their segments may have been deleted since.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from tierlog.storage.index import OffsetIndex, OffsetPosition
from tierlog.storage.io_errors import disk_errors
from tierlog.storage.txn_index import TransactionIndex, TxnIndexSearchResult
from tierlog.tiered.api import (
    IndexType,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageManager,
)

log = logging.getLogger(__name__)

CACHE_DIR_NAME = "remote-log-index-cache"
_SUFFIX = {IndexType.OFFSET: ".index", IndexType.TRANSACTION: ".txnindex"}


@dataclass
class _Entry:
    path: Path
    size: int
    offset_index: OffsetIndex | None = None
    txn_index: TransactionIndex | None = None
    #: A segment without a transaction index is remembered, so it is not asked for again.
    missing: bool = False

    def close(self) -> None:
        if self.offset_index is not None:
            self.offset_index.close()
        if self.txn_index is not None:
            self.txn_index.close()
        self.path.unlink(missing_ok=True)


class RemoteIndexCache:
    def __init__(self, directory: Path, max_bytes: int, rsm: RemoteStorageManager) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.rsm = rsm
        self._entries: OrderedDict[tuple[RemoteLogSegmentId, IndexType], _Entry] = OrderedDict()
        self._total = 0
        self._lock = threading.RLock()
        self.hits = 0
        self.misses = 0
        self.directory.mkdir(parents=True, exist_ok=True)
        for name in os.listdir(self.directory):
            if name.endswith((".index", ".txnindex", ".tmp")):
                (self.directory / name).unlink(missing_ok=True)

    @property
    def total_bytes(self) -> int:
        return self._total

    def __len__(self) -> int:
        return len(self._entries)

    @disk_errors  # the cache's files are local disk: a failure is a storage error (56), as for a log
    def _get(self, md: RemoteLogSegmentMetadata, kind: IndexType) -> _Entry:
        key = (md.segment_id, kind)
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            self.hits += 1
            return entry
        self.misses += 1
        path = self.directory / f"{md.start_offset}_{md.segment_id.id_str}{_SUFFIX[kind]}"
        try:
            with self.rsm.fetch_index(md, kind) as stream:
                data = stream.read()
        except RemoteResourceNotFoundError:
            if kind is not IndexType.TRANSACTION:
                raise
            entry = _Entry(path, 0, missing=True)
        else:
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
            entry = _Entry(path, len(data))
            if kind is IndexType.OFFSET:
                entry.offset_index = OffsetIndex(path, md.start_offset, max(len(data), 8), writable=False)
            else:
                entry.txn_index = TransactionIndex(path, md.start_offset)
        self._entries[key] = entry
        self._total += entry.size
        self._evict()
        return entry

    def _evict(self) -> None:
        # The newest entry stays even if it alone is over the bound: the read in progress needs it.
        while self._total > self.max_bytes and len(self._entries) > 1:
            _, old = self._entries.popitem(last=False)
            self._total -= old.size
            old.close()

    def lookup_offset(self, md: RemoteLogSegmentMetadata, offset: int) -> OffsetPosition:
        """The offset-index entry at or below ``offset`` in the remote segment."""
        with self._lock:
            index = self._get(md, IndexType.OFFSET).offset_index
            assert index is not None
            return index.lookup(offset)

    def collect_aborted_txns(self, md: RemoteLogSegmentMetadata, fetch_offset: int,
                             upper_bound_offset: int) -> TxnIndexSearchResult:
        with self._lock:
            entry = self._get(md, IndexType.TRANSACTION)
            if entry.txn_index is None:
                return TxnIndexSearchResult([], False)
            return entry.txn_index.collect_aborted_txns(fetch_offset, upper_bound_offset)

    def remove(self, segment_id: RemoteLogSegmentId) -> None:
        """Forget a deleted segment's indexes."""
        with self._lock:
            for kind in _SUFFIX:
                entry = self._entries.pop((segment_id, kind), None)
                if entry is not None:
                    self._total -= entry.size
                    entry.close()

    def close(self) -> None:
        with self._lock:
            for entry in self._entries.values():
                entry.close()
            self._entries.clear()
            self._total = 0
