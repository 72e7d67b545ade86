"""Reading one offset range of one segment (a local ``.log`` file or a remote object) as Arrow
record batches with the columns of Spark's Kafka source.

The bytes are read in windows of about :data:`WINDOW_BYTES` that start on a batch boundary; each
window becomes one Arrow batch. Per window, Python does only what has to be a call per batch — the
CRC check and decompression, both in C — and the numba kernels of :mod:`tierlog.pipeline._decode`
do the rest, writing the Arrow buffers directly.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import numpy as np
import pyarrow as pa

from tierlog._util.crc import crc32c
from tierlog.errors import CorruptRecordError
from tierlog.pipeline import _decode as K
from tierlog.records.compression import decompress
from tierlog.tiered.api import (
    READ_ONLY_PROPERTY,
    IndexType,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageManager,
    load_remote_storage_manager,
)

if TYPE_CHECKING:
    from tierlog.pipeline.broker_tail import BrokerSpec

#: Bytes of log read per Arrow batch: large enough that the per-window Python work is noise, small
#: enough that a batch stays far below Arrow's 2 GiB binary-offset limit after decompression.
WINDOW_BYTES = 16 << 20

_CONTROL = 0x20
_TRANSACTIONAL = 0x10
_LOG_APPEND_TIME = 0x08
_CODEC = 0x07
_HEADER = 61
_CRC_START = 21

_HEADER_FIELD = pa.field("element", pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
HEADERS_TYPE = pa.list_(_HEADER_FIELD)
_BASE_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
]
#: Spark's Kafka source schema as Arrow types (what Spark's to_arrow_schema makes of it).
ARROW_SCHEMA = pa.schema(_BASE_FIELDS)
ARROW_SCHEMA_WITH_HEADERS = pa.schema([*_BASE_FIELDS, pa.field("headers", HEADERS_TYPE)])


@dataclass(frozen=True)
class RemoteSpec:
    """How a worker reaches the remote tier: the plugin class and its properties (prefix removed)."""

    class_name: str
    #: Credentials may be among them: never in a repr (errors and logs print specs).
    props: tuple[tuple[str, str], ...] = field(repr=False)
    metadata_dir: str
    #: No option and no config named the plugin: the local-directory default beside the log dir was
    #: assumed, which is wrong when another plugin wrote the tier (the catalog checks).
    defaulted: bool = False


@dataclass(frozen=True)
class ScanRange:
    """Offsets [start_offset, end_offset) of one segment. Exactly one of ``log_path`` (a local
    segment), ``remote`` (a remote segment's metadata) and ``broker`` (offsets read through the
    broker: ``tail=broker``) is set. Picklable: it is a Spark input partition."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int
    log_path: str | None = None
    remote: RemoteLogSegmentMetadata | None = None
    #: read_committed: (producer id, first offset, last offset) of the aborted transactions that
    #: overlap the range, whose batches are skipped. None reads uncommitted (Kafka's default).
    aborted: tuple[tuple[int, int, int], ...] | None = None
    broker: BrokerSpec | None = None

    @property
    def is_remote(self) -> bool:
        return self.remote is not None


# -- the remote storage plugin, once per worker process ----------------------------------------------

_RSM_LOCK = threading.Lock()
_RSMS: dict[tuple[str, tuple[tuple[str, str], ...]], RemoteStorageManager] = {}


def remote_storage(spec: RemoteSpec) -> RemoteStorageManager:
    """The plugin for ``spec``, configured once per process: Python workers are reused across tasks,
    and an S3 client is expensive to build."""
    key = (spec.class_name, spec.props)
    with _RSM_LOCK:
        rsm = _RSMS.get(key)
        if rsm is None:
            # Readers only read: a plugin that creates its root when configured must not here.
            rsm = _RSMS[key] = load_remote_storage_manager(spec.class_name, {**dict(spec.props), READ_ONLY_PROPERTY: "true"})
        return rsm


# -- indexes -------------------------------------------------------------------------------------------


def offset_index_entries(data: bytes, base_offset: int) -> tuple[np.ndarray, np.ndarray]:
    """(absolute offsets, positions) of an offset index's valid entries: the strictly increasing
    prefix, so the zero-filled tail of a preallocated active index is ignored."""
    entries = np.frombuffer(data, dtype=">i4", count=len(data) // 8 * 2).reshape(-1, 2)
    rel = entries[:, 0].astype(np.int64)
    pos = entries[:, 1].astype(np.int64)
    if len(rel) > 1:
        bad = np.flatnonzero((np.diff(rel) <= 0) | (np.diff(pos) < 0))
        if len(bad):
            rel, pos = rel[: bad[0] + 1], pos[: bad[0] + 1]
    return rel + base_offset, pos


def time_index_entries(data: bytes, base_offset: int) -> tuple[np.ndarray, np.ndarray]:
    """(timestamps, absolute offsets) of a time index's valid entries (increasing timestamps)."""
    n = len(data) // 12
    table = np.frombuffer(data, dtype=np.dtype([("ts", ">i8"), ("rel", ">i4")]), count=n)
    ts = table["ts"].astype(np.int64)
    rel = table["rel"].astype(np.int64)
    if len(ts) > 1:
        bad = np.flatnonzero(np.diff(ts) <= 0)
        if len(bad):
            ts, rel = ts[: bad[0] + 1], rel[: bad[0] + 1]
    return ts, rel + base_offset


def position_bounds(index: tuple[np.ndarray, np.ndarray], start_offset: int,
                    end_offset: int) -> tuple[int, int | None]:
    """Where to start reading for ``start_offset`` and where reading can stop for ``end_offset``.

    An entry (o, p) says the batch at byte p ends at offset o. The start is the last entry with
    o <= start_offset (every earlier batch ends before it). For the end: the first entry with
    o >= end_offset - 1 holds the last needed offset at the latest, and every batch from the entry
    after it on starts beyond end_offset, so that entry's position bounds the read."""
    offsets, positions = index
    i = int(np.searchsorted(offsets, start_offset, side="right")) - 1
    start = int(positions[i]) if i >= 0 else 0
    j = int(np.searchsorted(offsets, end_offset - 1, side="left"))
    limit = int(positions[j + 1]) if j + 1 < len(offsets) else None
    return start, limit


def read_index(rng: ScanRange, index_type: IndexType, spec: RemoteSpec | None) -> bytes:
    """The raw bytes of the segment's offset, time or transaction index (empty when missing: reads
    then start at the beginning of the segment, which is slower but still right; a segment without
    aborted transactions has no transaction index). Any other failure of the remote tier (access
    denied, unreachable) is raised: an empty index would silently change what is read."""
    if rng.remote is not None:
        if spec is None:
            return b""
        try:
            with remote_storage(spec).fetch_index(rng.remote, index_type) as stream:
                return stream.read()
        except RemoteResourceNotFoundError:
            return b""
    assert rng.log_path is not None
    suffix = {IndexType.OFFSET: ".index", IndexType.TIMESTAMP: ".timeindex", IndexType.TRANSACTION: ".txnindex"}[index_type]
    try:
        return Path(rng.log_path).with_suffix(suffix).read_bytes()
    except OSError:
        return b""


def segment_base_offset(rng: ScanRange) -> int:
    if rng.remote is not None:
        return rng.remote.start_offset
    assert rng.log_path is not None
    return int(Path(rng.log_path).name.split(".", 1)[0])


# -- decoding a window ----------------------------------------------------------------------------------

_EMPTY = np.frombuffer(b"", dtype=np.uint8)


@dataclass
class _Window:
    batch: pa.RecordBatch | None
    consumed: int  # bytes of whole batches from the window start
    need: int  # more bytes the next batch needs beyond the window (0: window ended on a boundary)
    done: bool  # a batch at or past end_offset was seen, or the data ends (zero-filled tail)


def _readonly(buf: bytes | bytearray | memoryview) -> np.ndarray:
    # numba compiles one version per array type, and read-only is part of it: every buffer handed
    # to the kernels is read-only so they compile once.
    arr = np.frombuffer(buf, dtype=np.uint8)
    if arr.flags.writeable:
        arr = arr.view()
        arr.flags.writeable = False
    return arr


def _binary(kind: pa.DataType, n: int, offsets: np.ndarray, valid: np.ndarray, data: np.ndarray,
            used: int) -> pa.Array:
    nulls = n - int(np.count_nonzero(valid[:n]))
    bitmap = None if nulls == 0 else pa.py_buffer(np.packbits(valid[:n], bitorder="little"))
    return pa.Array.from_buffers(kind, n, [bitmap, pa.py_buffer(offsets[: n + 1]), pa.py_buffer(data[:used])],
                                 null_count=nulls)


class _BufferPool:
    """Read and output buffers reused from window to window, and from range to range in the same
    thread (a reused Spark Python worker reads many ranges), once no Arrow batch refers to them.

    A fresh buffer costs a page fault per 4 KiB on first write, as much as decoding into it; reuse
    avoids that. A buffer is handed out again only when the pool holds the last reference to it:
    every Arrow array built on it keeps a numpy view, and every view keeps its base alive, so a
    batch still being serialised (or kept by the caller), or a read buffer still in use by another
    range's generator, pins its buffers."""

    _PER_NAME = 4

    def __init__(self) -> None:
        self._arrays: dict[str, list[np.ndarray]] = {}

    def get(self, name: str, size: int, dtype: type[np.generic]) -> np.ndarray:
        arrays = self._arrays.setdefault(name, [])
        for i in range(len(arrays)):
            # References: the list, and getrefcount's own argument.
            if sys.getrefcount(arrays[i]) == 2 and arrays[i].size >= size:
                return arrays[i]
        fresh = np.empty(size, dtype)
        if len(arrays) < self._PER_NAME:
            arrays.append(fresh)
        else:
            for i in range(len(arrays)):
                if sys.getrefcount(arrays[i]) == 2:
                    arrays[i] = fresh  # the free one was too small: replace it
                    break
        return fresh


_POOLS = threading.local()


def _thread_pool() -> _BufferPool:
    """This thread's pool: the refcount test above is only sound without another thread."""
    pool: _BufferPool | None = getattr(_POOLS, "pool", None)
    if pool is None:
        pool = _POOLS.pool = _BufferPool()
    return pool


class WindowDecoder:
    """Turns windows of one partition's log into Arrow batches of rows in [start, end)."""

    def __init__(self, topic: str, partition: int, start_offset: int, end_offset: int, *,
                 include_headers: bool, check_crcs: bool = True,
                 aborted: tuple[tuple[int, int, int], ...] | None = None) -> None:
        self.topic = topic
        self.topic_bytes = topic.encode("utf-8")
        self.partition = partition
        self.start_offset = start_offset
        self.end_offset = end_offset
        self.include_headers = include_headers
        self.check_crcs = check_crcs
        self.aborted = aborted or ()
        self.schema = ARROW_SCHEMA_WITH_HEADERS if include_headers else ARROW_SCHEMA
        self._pool = _thread_pool()

    def decode(self, buf: np.ndarray, origin: int) -> _Window:
        """Decode the whole batches of ``buf``; ``origin`` is its position in the segment (errors
        name it)."""
        n, stop, status, need = K.count_batches(buf, 0, len(buf))
        done = False
        if status == K.SHORT_BATCH and int.from_bytes(bytes(buf[stop + 8 : stop + 12]), "big") == 0:
            # A zero length: the preallocated, never-written tail of a segment, where the log ends.
            done, need = True, 0
        elif status != K.OK:
            what = "a length below the minimum" if status == K.SHORT_BATCH else "an unsupported magic"
            raise CorruptRecordError(
                f"{self.topic}-{self.partition}: record batch at position {origin + stop} has {what}")
        if n == 0:
            return _Window(None, stop, need, done)
        table = K.scan_batches(buf, 0, n)
        base = table[:, K.F_BASE_OFFSET]
        last = base + table[:, K.F_LAST_OFFSET_DELTA]
        attrs = table[:, K.F_ATTRIBUTES]
        if np.any(base >= self.end_offset):
            done = True
        short = table[:, K.F_RECORDS_COUNT] < 0
        if np.any(short):
            at = int(table[np.argmax(short), K.F_POSITION]) + origin
            raise CorruptRecordError(f"{self.topic}-{self.partition}: record batch at position {at} is "
                                     f"shorter than the {_HEADER}-byte header")
        wanted = ((attrs & _CONTROL) == 0) & (last >= self.start_offset) & (base < self.end_offset)
        if self.aborted:
            # read_committed: a transactional batch inside an aborted transaction of its producer
            # (from its first offset to the abort marker) is not returned, as the consumer drops it.
            transactional = (attrs & _TRANSACTIONAL) != 0
            pids = table[:, K.F_PRODUCER_ID]
            for pid, first, last_offset in self.aborted:
                wanted &= ~(transactional & (pids == pid) & (base >= first) & (base <= last_offset))
        chosen = np.flatnonzero(wanted)
        if len(chosen) == 0:
            return _Window(None, stop, need, done)
        rows = table[chosen]
        positions = rows[:, K.F_POSITION]
        sizes = rows[:, K.F_SIZE]
        view = memoryview(buf)  # type: ignore[arg-type]  # numpy arrays export the buffer protocol
        if self.check_crcs:
            # One C call per batch, like the consumer's check.crcs.
            for p, s, crc in zip(positions.tolist(), sizes.tolist(), rows[:, K.F_CRC].tolist(), strict=True):
                if crc32c(view[p + _CRC_START : p + s]) != crc:
                    raise CorruptRecordError(
                        f"{self.topic}-{self.partition}: record batch at position {origin + p} is corrupt "
                        f"(CRC mismatch)")
        codecs = rows[:, K.F_ATTRIBUTES] & _CODEC
        starts = positions + _HEADER
        ends = positions + sizes
        inflated_flag = codecs != 0
        inflated = _EMPTY
        if inflated_flag.any():
            parts = []
            at = 0
            for i in np.flatnonzero(inflated_flag).tolist():
                data = decompress(int(codecs[i]), view[int(starts[i]) : int(ends[i])])
                parts.append(data)
                starts[i] = at
                at += len(data)
                ends[i] = at
            inflated = _readonly(b"".join(parts))
        del view
        counts = rows[:, K.F_RECORDS_COUNT]
        append_time = np.where((rows[:, K.F_ATTRIBUTES] & _LOG_APPEND_TIME) != 0, rows[:, K.F_MAX_TIMESTAMP], -2)
        region = int((ends - starts).sum())
        # Every record takes at least 7 bytes, which bounds the rows a lying count can claim.
        max_rows = min(int(counts.sum()), region // 7) + 1
        max_headers = (region // 2 + 1) if self.include_headers else 1
        get = self._pool.get
        o_offset = get("offset", max_rows, np.int64)
        o_ts = get("timestamp", max_rows, np.int64)
        o_tst = get("timestamp_type", max_rows, np.int32)
        k_off = get("key_offsets", max_rows + 1, np.int32)
        k_valid = get("key_valid", max_rows, np.uint8)
        v_off = get("value_offsets", max_rows + 1, np.int32)
        v_valid = get("value_valid", max_rows, np.uint8)
        h_off = get("header_offsets", max_rows + 1, np.int32)
        k_data = get("key_data", region, np.uint8)
        v_data = get("value_data", region, np.uint8)
        hdata = region if self.include_headers else 0
        hk_off = get("header_key_offsets", max_headers + 1, np.int32)
        hk_data = get("header_key_data", hdata, np.uint8)
        hv_off = get("header_value_offsets", max_headers + 1, np.int32)
        hv_valid = get("header_value_valid", max_headers, np.uint8)
        hv_data = get("header_value_data", hdata, np.uint8)
        status, bad, nrows, kb, vb, nh, hkb, hvb = K.decode_records(
            buf, inflated, inflated_flag, starts, ends, rows[:, K.F_BASE_OFFSET], rows[:, K.F_BASE_TIMESTAMP],
            append_time, counts, self.start_offset, self.end_offset, self.include_headers,
            o_offset, o_ts, o_tst, k_off, k_valid, k_data, v_off, v_valid, v_data,
            h_off, hk_off, hk_data, hv_off, hv_valid, hv_data)
        if status != K.OK:
            what = "a malformed record" if status == K.BAD_RECORD else "a record count that does not match its bytes"
            raise CorruptRecordError(
                f"{self.topic}-{self.partition}: record batch at offset {int(rows[bad, K.F_BASE_OFFSET])} "
                f"(position {origin + int(positions[bad])}) has {what}")
        if nrows == 0:
            return _Window(None, stop, need, done)
        return _Window(self._arrow(nrows, o_offset, o_ts, o_tst, k_off, k_valid, k_data, kb, v_off, v_valid,
                                   v_data, vb, h_off, hk_off, hk_data, hkb, hv_off, hv_valid, hv_data, hvb, nh),
                       stop, need, done)

    def _arrow(self, n: int, o_offset: np.ndarray, o_ts: np.ndarray, o_tst: np.ndarray,
               k_off: np.ndarray, k_valid: np.ndarray, k_data: np.ndarray, kb: int,
               v_off: np.ndarray, v_valid: np.ndarray, v_data: np.ndarray, vb: int,
               h_off: np.ndarray, hk_off: np.ndarray, hk_data: np.ndarray, hkb: int,
               hv_off: np.ndarray, hv_valid: np.ndarray, hv_data: np.ndarray, hvb: int, nh: int) -> pa.RecordBatch:
        width = len(self.topic_bytes)
        topic = pa.Array.from_buffers(
            pa.string(), n,
            [None, pa.py_buffer(np.arange(0, (n + 1) * width, width, dtype=np.int32)),
             pa.py_buffer(self.topic_bytes * n)])
        columns = [
            _binary(pa.binary(), n, k_off, k_valid, k_data, kb),
            _binary(pa.binary(), n, v_off, v_valid, v_data, vb),
            topic,
            pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(np.full(n, self.partition, np.int32))]),
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(o_offset[:n])]),
            pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), n, [None, pa.py_buffer(o_ts[:n])]),
            pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(o_tst[:n])]),
        ]
        if self.include_headers:
            hkeys = pa.Array.from_buffers(pa.string(), nh, [None, pa.py_buffer(hk_off[: nh + 1]),
                                                            pa.py_buffer(hk_data[:hkb])])
            hvalues = _binary(pa.binary(), nh, hv_off, hv_valid, hv_data, hvb)
            structs = pa.StructArray.from_arrays([hkeys, hvalues], fields=list(_HEADER_FIELD.type))
            # A record without headers has null headers, not an empty array, as in Spark's Kafka
            # source (KafkaRecordToRowConverter).
            has = np.diff(h_off[: n + 1]) > 0
            nulls = n - int(np.count_nonzero(has))
            bitmap = None if nulls == 0 else pa.py_buffer(np.packbits(has, bitorder="little"))
            columns.append(pa.Array.from_buffers(HEADERS_TYPE, n, [bitmap, pa.py_buffer(h_off[: n + 1])],
                                                 null_count=nulls, children=[structs]))
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


# -- byte sources ---------------------------------------------------------------------------------------


def _fill(stream: BinaryIO, view: memoryview) -> int:
    """Read into ``view`` until it is full or the stream ends."""
    got = 0
    readinto = getattr(stream, "readinto", None)
    while got < len(view):
        if readinto is not None:
            n = readinto(view[got:])
        else:
            chunk = stream.read(len(view) - got)
            n = len(chunk)
            view[got : got + n] = chunk
        if not n:
            break
        got += n
    return got


def open_segment(rng: ScanRange, spec: RemoteSpec | None, position: int) -> BinaryIO:
    if rng.remote is not None:
        if spec is None:
            raise CorruptRecordError(f"{rng.topic}-{rng.partition}: segment {rng.remote.start_offset} is in the "
                                     "remote tier but no remote storage is configured")
        return remote_storage(spec).fetch_log_segment(rng.remote, position)
    assert rng.log_path is not None
    f = open(rng.log_path, "rb", buffering=0)  # noqa: SIM115 - the caller closes it
    f.seek(position)
    return f


def read_range(rng: ScanRange, *, include_headers: bool, check_crcs: bool = True,
               spec: RemoteSpec | None = None, window_bytes: int = WINDOW_BYTES) -> Iterator[pa.RecordBatch]:
    """The rows of ``rng`` as Arrow record batches, one per window of the segment."""
    if rng.start_offset >= rng.end_offset:
        return
    if rng.broker is not None:
        from tierlog.pipeline.broker_tail import read_broker_range

        yield from read_broker_range(rng.broker, rng.topic, rng.partition, rng.start_offset, rng.end_offset,
                                     include_headers=include_headers, check_crcs=check_crcs)
        return
    index = offset_index_entries(read_index(rng, IndexType.OFFSET, spec), segment_base_offset(rng))
    position, limit = position_bounds(index, rng.start_offset, rng.end_offset)
    decoder = WindowDecoder(rng.topic, rng.partition, rng.start_offset, rng.end_offset,
                            include_headers=include_headers, check_crcs=check_crcs, aborted=rng.aborted)
    with open_segment(rng, spec, position) as stream:
        carry = b""
        need = 0
        eof = False
        pool = _thread_pool()
        buffer: np.ndarray | None = None
        while True:
            want = max(window_bytes, len(carry) + need)
            if limit is not None:
                want = max(min(want, limit - position), len(carry) + need)
            if buffer is None or len(buffer) < want:
                # Reused (decoded rows never point into it), also by the ranges this thread reads next.
                buffer = None
                buffer = pool.get("read", want, np.uint8)
            buffer.data[: len(carry)] = carry
            got = len(carry)
            if not eof:
                n = _fill(stream, buffer.data[got:want])
                got += n
                eof = n < want - len(carry)
            if limit is not None and position + got >= limit:
                eof = True
            window = decoder.decode(_readonly(buffer.data[:got]), position)
            if window.batch is not None:
                yield window.batch
            carry = bytes(buffer[window.consumed : got])
            position += window.consumed
            need = window.need
            if window.done or eof or got == 0:
                return


def props_tuple(props: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(props.items()))
