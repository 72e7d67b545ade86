"""Remote storage fakes for tests: an in-memory RemoteStorageManager, a wrapper that fails on
command (a store that is down, errors mid-upload, or returns oversized custom metadata), and a
fault-injecting plugin that a real broker loads by dotted path (errors, timeouts, partial writes at
random, switched by a control file)."""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO

from tierlog.tiered.api import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
    load_remote_storage_manager,
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


# -- a fault-injecting plugin for real brokers ---------------------------------------------------------

FAULT_KINDS = ("error", "timeout", "partial", "slow")
FAULT_OPS = ("copy", "fetch", "delete")


@dataclass(frozen=True)
class FaultRates:
    """Per operation, the probability of each fault kind (the rest of the calls go through)."""

    error: float = 0.0
    timeout: float = 0.0
    partial: float = 0.0
    slow: float = 0.0

    def pick(self, draw: float) -> str | None:
        edge = 0.0
        for kind in FAULT_KINDS:
            edge += getattr(self, kind)
            if draw < edge:
                return kind
        return None


@dataclass(frozen=True)
class FaultControl:
    """What :class:`FaultInjectingRemoteStorageManager` does now; the scenario rewrites the control
    file (JSON of these fields) to change it while the broker runs."""

    enabled: bool = False
    rates: dict[str, FaultRates] = field(default_factory=dict)
    #: How long a "timeout" hangs before it fails (the client-side deadline of a real store).
    deadline_ms: int = 200
    #: How long a "slow" call takes (below the deadline: slowness that succeeds).
    slow_ms: int = 50
    #: Copies of this topic ("*": of every topic) write half the segment and then hang until this
    #: changes (and complete then): a copy in flight for as long as the scenario needs, e.g. to
    #: kill the broker or delete the topic in the middle of it.
    hang_copies: str = ""

    def hangs(self, topic: str) -> bool:
        return self.hang_copies in ("*", topic)

    def to_json(self) -> str:
        return json.dumps({"enabled": self.enabled, "deadline_ms": self.deadline_ms, "slow_ms": self.slow_ms,
                           "hang_copies": self.hang_copies,
                           "rates": {op: asdict(r) for op, r in self.rates.items()}})

    @classmethod
    def from_json(cls, text: str) -> FaultControl:
        raw = json.loads(text)
        rates = {op: FaultRates(**{k: float(v) for k, v in r.items()}) for op, r in raw.get("rates", {}).items()}
        return cls(bool(raw.get("enabled", False)), rates, int(raw.get("deadline_ms", 200)),
                   int(raw.get("slow_ms", 50)), str(raw.get("hang_copies", "")))


def write_fault_control(path: Path, control: FaultControl) -> None:
    """Replace the control file atomically (the plugin never reads a half-written one)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(control.to_json())
    os.replace(tmp, path)


class _BreakingStream(io.RawIOBase):
    """A stream that fails after ``limit`` bytes, as a GET whose connection breaks mid-body."""

    def __init__(self, inner: BinaryIO, limit: int) -> None:
        self._inner = inner
        self._left = limit

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if self._left <= 0:
            raise RemoteStorageError("injected fault: connection reset mid-body")
        data = self._inner.read(min(len(b), self._left))
        if not data:
            return 0
        n = len(data)
        b[:n] = data
        self._left -= n
        return n

    def close(self) -> None:
        self._inner.close()
        super().close()


def _hold_files(segment_data: LogSegmentData, scratch: Path) -> LogSegmentData:
    """A copy of the segment's files in ``scratch``: what an upload in flight holds open."""
    def held(path: Path) -> Path:
        target = scratch / path.name
        shutil.copyfile(path, target)
        return target

    txn = segment_data.transaction_index
    return replace(segment_data, log_segment=held(segment_data.log_segment),
                   offset_index=held(segment_data.offset_index), time_index=held(segment_data.time_index),
                   producer_snapshot_index=held(segment_data.producer_snapshot_index),
                   transaction_index=held(txn) if txn is not None and txn.exists() else None)


class FaultInjectingRemoteStorageManager:
    """A plugin a real ``tierlog serve`` loads by dotted path: it wraps another plugin and injects
    faults into copy, fetch and delete while the control file says so.

    Properties (``rsm.config.`` removed): ``faults.delegate.class`` (default the local-directory
    plugin), ``faults.control.file`` (JSON of :class:`FaultControl`, re-read when it changes; absent
    means no faults), ``faults.log.file`` (one line per call: ``op outcome``, for the figures),
    ``faults.seed``. Everything else goes to the delegate.

    Fault kinds: ``error`` fails before touching the store; ``timeout`` hangs until the deadline and
    fails, half the time after the store did the work (the acknowledgement was lost); ``partial``
    leaves the work half done and fails (a copy writes the segment short, a fetch breaks mid-body, a
    delete removes the data but reports failure); ``slow`` succeeds late. ``hang_copies`` holds every
    copy of a topic half done until it is switched off.
    """

    #: Longest a copy hangs for ``hang_copies`` (a scenario that forgot to switch it off).
    MAX_HANG_S = 60.0

    def __init__(self) -> None:
        self.delegate: RemoteStorageManager | None = None
        self.control_path: Path | None = None
        self.log_path: Path | None = None
        self._control = FaultControl()
        self._control_stamp: tuple[int, int] | None = None
        self._rng = random.Random()
        self._lock = threading.Lock()

    def configure(self, props: Mapping[str, str]) -> None:
        delegate_class = props.get("faults.delegate.class",
                                   "tierlog.tiered.backends.local.LocalDirectoryRemoteStorageManager")
        rest = {k: v for k, v in props.items() if not k.startswith("faults.")}
        self.delegate = load_remote_storage_manager(delegate_class, rest)
        control = props.get("faults.control.file")
        self.control_path = Path(control) if control else None
        log_file = props.get("faults.log.file")
        self.log_path = Path(log_file) if log_file else None
        if "faults.seed" in props:
            self._rng.seed(int(props["faults.seed"]))

    @property
    def inner(self) -> RemoteStorageManager:
        if self.delegate is None:
            raise RemoteStorageError("the fault-injecting plugin is not configured")
        return self.delegate

    def _current(self) -> FaultControl:
        if self.control_path is None:
            return self._control
        try:
            st = self.control_path.stat()
        except FileNotFoundError:
            self._control, self._control_stamp = FaultControl(), None
            return self._control
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp != self._control_stamp:
            try:
                self._control = FaultControl.from_json(self.control_path.read_text())
                self._control_stamp = stamp
            except (OSError, ValueError, TypeError):
                pass  # mid-replace: keep the previous control
        return self._control

    def _decide(self, op: str) -> tuple[str | None, FaultControl, bool]:
        """(fault kind or None, the control in force, a coin for the variants)."""
        with self._lock:
            control = self._current()
            draw, coin = self._rng.random(), self._rng.random() < 0.5
        rates = control.rates.get(op)
        if not control.enabled or rates is None:
            return None, control, coin
        return rates.pick(draw), control, coin

    def _note(self, op: str, outcome: str) -> None:
        if self.log_path is None:
            return
        fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, f"{op} {outcome}\n".encode())
        finally:
            os.close(fd)

    def _fail(self, op: str, outcome: str, what: str) -> RemoteStorageError:
        self._note(op, outcome)
        return RemoteStorageError(f"injected fault: {op} {what}")

    # -- the SPI --------------------------------------------------------------------------------

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData) -> bytes | None:
        kind, control, coin = self._decide("copy")
        topic = metadata.topic_id_partition.topic
        if control.hangs(topic):
            return self._copy_hanging(metadata, segment_data, topic)
        if kind == "error":
            raise self._fail("copy", "error", "refused")
        if kind == "timeout":
            if coin:
                self.inner.copy_log_segment_data(metadata, segment_data)
            time.sleep(control.deadline_ms / 1000)
            raise self._fail("copy", "timeout", f"no answer within {control.deadline_ms} ms")
        if kind == "partial":
            self._copy_partially(metadata, segment_data, coin)
            raise self._fail("copy", "partial", "connection reset mid-upload")
        if kind == "slow":
            time.sleep(control.slow_ms / 1000)
        result = self.inner.copy_log_segment_data(metadata, segment_data)
        self._note("copy", kind or "ok")
        return result

    def _copy_hanging(self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData,
                      topic: str) -> bytes | None:
        """Half the segment is written, then the call hangs until released and then completes --
        from the bytes it held all along, as an upload streaming from open files does even if the
        local segment is deleted meanwhile."""
        with tempfile.TemporaryDirectory(prefix="tierlog-upload-") as scratch:
            held = _hold_files(segment_data, Path(scratch))
            self._copy_partially(metadata, held, True)
            self._note("copy", "hang")
            deadline = time.monotonic() + self.MAX_HANG_S
            while time.monotonic() < deadline:
                time.sleep(0.02)
                with self._lock:
                    if not self._current().hangs(topic):
                        break
            return self.inner.copy_log_segment_data(metadata, held)

    def _copy_partially(self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData, coin: bool) -> None:
        """Either the segment object is written short (half its bytes) with everything else, or the
        upload stops after the first files (a later file cannot be read)."""
        with tempfile.TemporaryDirectory(prefix="tierlog-partial-") as scratch:
            if coin:
                short = Path(scratch) / segment_data.log_segment.name
                with open(segment_data.log_segment, "rb") as src, open(short, "wb") as dst:
                    dst.write(src.read(max(1, segment_data.log_segment.stat().st_size // 2)))
                data = replace(segment_data, log_segment=short)
            else:
                data = replace(segment_data, time_index=Path(scratch) / "vanished.timeindex")
            try:
                self.inner.copy_log_segment_data(metadata, data)
            except RemoteStorageError:
                pass  # the delegate noticed; the caller still sees the injected failure

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> BinaryIO:
        kind, control, _coin = self._decide("fetch")
        self._fetch_fault(kind, control)
        stream = self.inner.fetch_log_segment(metadata, start_position, end_position)
        if kind == "partial":
            self._note("fetch", "partial")
            size = max(0, metadata.segment_size_in_bytes - start_position)
            return io.BufferedReader(_BreakingStream(stream, size // 2))
        self._note("fetch", kind or "ok")
        return stream

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        kind, control, _coin = self._decide("fetch")
        self._fetch_fault(kind, control)
        stream = self.inner.fetch_index(metadata, index_type)
        if kind == "partial":
            self._note("fetch", "partial")
            data = stream.read()
            stream.close()
            return io.BufferedReader(_BreakingStream(io.BytesIO(data), len(data) // 2))
        self._note("fetch", kind or "ok")
        return stream

    def _fetch_fault(self, kind: str | None, control: FaultControl) -> None:
        if kind == "error":
            raise self._fail("fetch", "error", "refused")
        if kind == "timeout":
            time.sleep(control.deadline_ms / 1000)
            raise self._fail("fetch", "timeout", f"no answer within {control.deadline_ms} ms")
        if kind == "slow":
            time.sleep(control.slow_ms / 1000)

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        kind, control, coin = self._decide("delete")
        if kind == "error":
            raise self._fail("delete", "error", "refused")
        if kind == "timeout":
            if coin:
                self.inner.delete_log_segment_data(metadata)
            time.sleep(control.deadline_ms / 1000)
            raise self._fail("delete", "timeout", f"no answer within {control.deadline_ms} ms")
        if kind == "partial":
            self.inner.delete_log_segment_data(metadata)
            raise self._fail("delete", "partial", "connection reset before the answer")
        if kind == "slow":
            time.sleep(control.slow_ms / 1000)
        self.inner.delete_log_segment_data(metadata)
        self._note("delete", kind or "ok")

    def close(self) -> None:
        if self.delegate is not None:
            self.delegate.close()


# -- seed 002's bucket example ------------------------------------------------------------------------


class BucketedRemoteStorageManager:
    """Seed 002's own example of custom metadata, as a plugin a test (or ``tierlog serve``) loads:
    each upload goes to one of several "buckets" picked at random (each a directory served by the
    real local-directory plugin), and the custom metadata the copy returns says which one, padded to
    a configurable size. Fetch and delete find the objects only through it: without the custom
    metadata they fail. Deletes can be made to fail, to exercise the broker's retries.

    Properties (``rsm.config.`` removed): ``dir`` (required; buckets are ``bucket-<i>`` under it),
    ``buckets.count`` (3), ``buckets.custom.metadata.bytes`` (200: the padded size),
    ``buckets.pad.topics`` (comma-separated topics whose custom metadata is padded; unset: all, the
    others get the bare ``bucket=<i>;``), ``buckets.delete.failures`` (deletes of each segment that
    fail before one succeeds; -1: none ever does), ``buckets.control.file`` (optional JSON
    ``{"delete_failures": N}``, re-read at each delete, overriding the property), ``buckets.log.file``
    (one line per delete call: ``<segment id> <custom metadata hex or -> ok|fail <monotonic ms>``).
    """

    def __init__(self) -> None:
        self.buckets: list[RemoteStorageManager] = []
        self.custom_metadata_bytes = 200
        self.pad_topics: set[str] | None = None
        self.delete_failures = 0
        self.control_path: Path | None = None
        self.log_path: Path | None = None
        #: Per segment: the custom metadata the copy returned, and (custom metadata, succeeded) of
        #: each delete call, for tests in the same process.
        self.returned: dict[RemoteLogSegmentId, bytes] = {}
        self.delete_calls: list[tuple[RemoteLogSegmentId, bytes | None, bool]] = []
        self._failed: dict[RemoteLogSegmentId, int] = {}
        self._rng = random.Random()
        self._lock = threading.Lock()

    def configure(self, props: Mapping[str, str]) -> None:
        base = props.get("dir")
        if not base:
            raise RemoteStorageError("the bucketed test plugin needs rsm.config.dir")
        count = int(props.get("buckets.count", "3"))
        rest = {k: v for k, v in props.items() if not k.startswith("buckets.") and k != "dir"}
        rest.setdefault("fsync", "false")
        self.buckets = [load_remote_storage_manager("tierlog.tiered.backends.local.LocalDirectoryRemoteStorageManager",
                                                    {**rest, "dir": str(Path(base) / f"bucket-{i}")})
                        for i in range(count)]
        self.custom_metadata_bytes = int(props.get("buckets.custom.metadata.bytes", "200"))
        topics = props.get("buckets.pad.topics")
        self.pad_topics = None if topics is None else {t.strip() for t in topics.split(",") if t.strip()}
        self.delete_failures = int(props.get("buckets.delete.failures", "0"))
        control, log_file = props.get("buckets.control.file"), props.get("buckets.log.file")
        self.control_path = Path(control) if control else None
        self.log_path = Path(log_file) if log_file else None

    def _custom(self, metadata: RemoteLogSegmentMetadata, bucket: int) -> bytes:
        bare = b"bucket=%d;" % bucket
        if self.pad_topics is not None and metadata.topic_id_partition.topic not in self.pad_topics:
            return bare
        return bare.ljust(self.custom_metadata_bytes, b".")

    def _bucket(self, metadata: RemoteLogSegmentMetadata) -> RemoteStorageManager:
        custom = metadata.custom_metadata
        if custom is None or not custom.startswith(b"bucket="):
            raise RemoteStorageError(f"no custom metadata for {metadata.segment_id}: cannot tell which bucket "
                                     "holds it")
        return self.buckets[int(custom[len(b"bucket="):custom.index(b";")])]

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData) -> bytes | None:
        with self._lock:
            bucket = self._rng.randrange(len(self.buckets))
        self.buckets[bucket].copy_log_segment_data(metadata, segment_data)
        custom = self._custom(metadata, bucket)
        with self._lock:
            self.returned[metadata.segment_id] = custom
        return custom

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> BinaryIO:
        return self._bucket(metadata).fetch_log_segment(metadata, start_position, end_position)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        return self._bucket(metadata).fetch_index(metadata, index_type)

    def _failures_wanted(self) -> int:
        if self.control_path is not None:
            try:
                return int(json.loads(self.control_path.read_text()).get("delete_failures", self.delete_failures))
            except (OSError, ValueError):
                pass  # absent or mid-replace: the property
        return self.delete_failures

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        sid = metadata.segment_id
        wanted = self._failures_wanted()
        with self._lock:
            failed = self._failed.get(sid, 0)
            fail = wanted < 0 or failed < wanted
            if fail:
                self._failed[sid] = failed + 1
        ok = False
        try:
            bucket = self._bucket(metadata)
            if fail:
                raise RemoteStorageError(f"injected delete failure {failed + 1} of {sid}")
            bucket.delete_log_segment_data(metadata)
            ok = True
        finally:
            with self._lock:
                self.delete_calls.append((sid, metadata.custom_metadata, ok))
            if self.log_path is not None:
                custom = "-" if metadata.custom_metadata is None else metadata.custom_metadata.hex()
                fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                try:
                    os.write(fd, f"{sid.id_str} {custom} {'ok' if ok else 'fail'} {time.monotonic_ns() // 1_000_000}\n"
                             .encode())
                finally:
                    os.close(fd)

    def close(self) -> None:
        for bucket in self.buckets:
            bucket.close()
