"""Remote storage fakes for tests: an in-memory RemoteStorageManager, and a wrapper that fails on
command (a store that is down, errors mid-upload, or returns oversized custom metadata)."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import BinaryIO

from tierlog.tiered.api import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
)

_LOG = "log"


class InMemoryRemoteStorageManager:
    """Objects in a dict keyed by (segment id, kind). ``custom_metadata`` decides what the copy
    returns (None by default), e.g. ``lambda md: b"x" * 256`` to exceed the seed 002 limit."""

    def __init__(self, custom_metadata: Callable[[RemoteLogSegmentMetadata], bytes | None] | None = None) -> None:
        self.objects: dict[tuple[RemoteLogSegmentId, str], bytes] = {}
        self.custom_metadata = custom_metadata
        self.props: dict[str, str] = {}
        self.calls: list[tuple[str, RemoteLogSegmentId]] = []
        self._lock = threading.Lock()

    def configure(self, props: Mapping[str, str]) -> None:
        self.props = dict(props)

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData) -> bytes | None:
        sid = metadata.segment_id
        parts: dict[str, bytes] = {
            _LOG: segment_data.log_segment.read_bytes(),
            IndexType.OFFSET.name: segment_data.offset_index.read_bytes(),
            IndexType.TIMESTAMP.name: segment_data.time_index.read_bytes(),
            IndexType.PRODUCER_SNAPSHOT.name: segment_data.producer_snapshot_index.read_bytes(),
            IndexType.LEADER_EPOCH.name: segment_data.leader_epoch_index,
        }
        txn = segment_data.transaction_index
        if txn is not None and txn.exists():
            parts[IndexType.TRANSACTION.name] = txn.read_bytes()
        with self._lock:
            self.calls.append(("copy", sid))
            for kind, data in parts.items():
                self.objects[(sid, kind)] = data
        return self.custom_metadata(metadata) if self.custom_metadata is not None else None

    def _get(self, metadata: RemoteLogSegmentMetadata, kind: str) -> bytes:
        with self._lock:
            data = self.objects.get((metadata.segment_id, kind))
        if data is None:
            raise RemoteResourceNotFoundError(f"{kind} of {metadata.segment_id} is not stored")
        return data

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> BinaryIO:
        if start_position < 0 or (end_position is not None and end_position < start_position):
            raise ValueError(f"invalid positions {start_position}..{end_position}")
        data = self._get(metadata, _LOG)
        end = len(data) if end_position is None else end_position + 1
        self.calls.append(("fetch", metadata.segment_id))
        return io.BytesIO(data[start_position:end])

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        return io.BytesIO(self._get(metadata, index_type.name))

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        with self._lock:
            self.calls.append(("delete", metadata.segment_id))
            for key in [k for k in self.objects if k[0] == metadata.segment_id]:
                del self.objects[key]

    def close(self) -> None:
        pass

    def segment_ids(self) -> set[RemoteLogSegmentId]:
        with self._lock:
            return {sid for sid, _ in self.objects}

    def total_bytes(self) -> int:
        with self._lock:
            return sum(len(v) for v in self.objects.values())


@dataclass
class FailurePlan:
    """What the wrapper does: ``down`` fails every call; ``fail_copies`` fails the next N copies
    after the delegate wrote (a partial upload: the error comes mid-upload, the data is there);
    ``fail_deletes`` fails the next N deletes."""

    down: bool = False
    fail_copies: int = 0
    fail_copies_before_write: int = 0
    fail_deletes: int = 0
    fail_fetches: int = 0
    failures: list[str] = field(default_factory=list)


class FlakyRemoteStorageManager:
    """Wraps any RemoteStorageManager and injects failures according to ``plan``. A copy failing
    "mid-upload" leaves the delegate's objects behind, as a real store whose connection broke
    would: whoever called the copy must clean up."""

    def __init__(self, delegate: RemoteStorageManager, plan: FailurePlan | None = None) -> None:
        self.delegate = delegate
        self.plan = plan or FailurePlan()

    def _fail(self, op: str) -> RemoteStorageError:
        self.plan.failures.append(op)
        return RemoteStorageError(f"injected failure: {op}")

    def configure(self, props: Mapping[str, str]) -> None:
        self.delegate.configure(props)

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData) -> bytes | None:
        if self.plan.down:
            raise self._fail("copy (down)")
        if self.plan.fail_copies_before_write > 0:
            self.plan.fail_copies_before_write -= 1
            raise self._fail("copy (before write)")
        result = self.delegate.copy_log_segment_data(metadata, segment_data)
        if self.plan.fail_copies > 0:
            self.plan.fail_copies -= 1
            raise self._fail("copy (mid-upload)")
        return result

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> BinaryIO:
        if self.plan.down or self.plan.fail_fetches > 0:
            self.plan.fail_fetches = max(0, self.plan.fail_fetches - 1)
            raise self._fail("fetch")
        return self.delegate.fetch_log_segment(metadata, start_position, end_position)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        if self.plan.down:
            raise self._fail("fetch index")
        return self.delegate.fetch_index(metadata, index_type)

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        if self.plan.down:
            raise self._fail("delete (down)")
        if self.plan.fail_deletes > 0:
            self.plan.fail_deletes -= 1
            raise self._fail("delete")
        self.delegate.delete_log_segment_data(metadata)

    def close(self) -> None:
        self.delegate.close()
