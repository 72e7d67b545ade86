"""Test data for the pipeline tests: topics written through UnifiedLog (every codec, headers, null
keys and values, idempotent and transactional batches with their markers, LogAppendTime, several
segments), one of them tiered to a local-directory remote tier with its local segments deleted.

The expected rows come from the files themselves through ``tierlog.records.decode_batch``, an
independent decoder from the compiled one the data source uses."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from tierlog.config import LogConfig
from tierlog.records import SimpleRecord, build_batch, iter_batches
from tierlog.records.control import EndTransactionMarker, build_end_txn_marker_batch
from tierlog.storage.loader import LoadOptions, load_log
from tierlog.storage.log import UnifiedLog
from tierlog.storage.producer_state import CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT, AppendOrigin
from tierlog.tiered.backends.local import LocalDirectoryRemoteStorageManager
from tierlog.tiered.layout import METADATA_DIR_NAME, default_local_remote_dir
from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager
from tierlog.tiered.remote_log_manager import RemoteLogManager, RemoteLogManagerConfig

T0 = 1_700_000_000_000
#: (key, value, topic, partition, offset, timestamp ms, timestampType, headers)
Row = tuple[bytes | None, bytes | None, str, int, int, int, int, tuple[tuple[str, bytes | None], ...]]


def expected_rows(part_dir: Path) -> list[Row]:
    """Every non-control record of every segment in ``part_dir``, decoded by tierlog.records."""
    topic, _, partition = part_dir.name.rpartition("-")
    rows: list[Row] = []
    for log_file in sorted(part_dir.glob("*.log")):
        for header, records in iter_batches(log_file.read_bytes(), verify_crc=True):
            if header.is_control:
                continue
            for r in records:
                rows.append((r.key, r.value, topic, int(partition), r.offset, r.timestamp, header.timestamp_type,
                             tuple(r.headers)))
    return rows


@dataclass
class Dataset:
    root: Path
    data: Path
    expected: dict[tuple[str, int], list[Row]] = field(default_factory=dict)
    #: (topic, partition) -> {timestamp: fetch_offset_by_timestamp offset or None}
    by_timestamp: dict[tuple[str, int], dict[int, int | None]] = field(default_factory=dict)
    log_end: dict[tuple[str, int], int] = field(default_factory=dict)
    log_start: dict[tuple[str, int], int] = field(default_factory=dict)
    remote_files: list[Path] = field(default_factory=list)


class _Logs:
    def __init__(self, logs: dict[tuple[str, int], UnifiedLog]) -> None:
        self.logs = logs

    def all_logs(self) -> dict[tuple[str, int], UnifiedLog]:
        return dict(self.logs)

    def get_log(self, topic: str, partition: int) -> UnifiedLog | None:
        return self.logs.get((topic, partition))


def _fill_mixed(ulog: UnifiedLog, seed: int) -> None:
    """Batches in every codec with headers, null keys and values; an idempotent batch; a committed
    and an aborted transaction (read_uncommitted returns both, never the markers)."""
    ts = T0 + seed * 100_000
    for i in range(30):
        records = []
        for j in range(1 + (i + seed) % 4):
            n = i * 10 + j
            key = None if n % 5 == 0 else b"key-%d-%d" % (seed, n)
            value = None if n % 11 == 3 else (b"value-%d-" % n) * (1 + n % 7)
            headers = [(f"h{k}", None if (n + k) % 4 == 0 else b"hv%d" % k) for k in range(n % 3)]
            records.append(SimpleRecord(key, value, headers, ts + i * 1000 + j))
        ulog.append_as_leader(build_batch(records, compression=i % 5))
        if i == 10:
            ulog.append_as_leader(build_batch(
                [SimpleRecord(b"idem", b"p%d" % k, (), ts + i * 1000 + 500) for k in range(3)],
                producer_id=1000 + seed, producer_epoch=0, base_sequence=0, compression=2))
        if i in (15, 20):
            pid = 2000 + seed * 10 + i
            ulog.append_as_leader(build_batch(
                [SimpleRecord(b"txn", b"t%d" % k, (("tx", b"1"),), ts + i * 1000 + 600) for k in range(2)],
                producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True, compression=4))
            marker = EndTransactionMarker(CONTROL_TYPE_COMMIT if i == 15 else CONTROL_TYPE_ABORT, 0)
            ulog.append_as_leader(build_end_txn_marker_batch(marker, producer_id=pid, producer_epoch=0,
                                                             timestamp_ms=ts + i * 1000 + 700),
                                  origin=AppendOrigin.COORDINATOR)


def build_dataset(root: Path) -> Dataset:
    data = root / "data"
    ds = Dataset(root, data)
    base = {"segment.bytes": 1500, "index.interval.bytes": 200, "retention.ms": -1}
    logs: dict[tuple[str, int], UnifiedLog] = {}

    def open_log(name: str, **extra: object) -> UnifiedLog:
        ulog = load_log(data / name, LogConfig.from_props({**base, **extra}), LoadOptions())
        ulog.write_partition_metadata(bytes([len(logs) + 1]) * 16)
        logs[(ulog.topic, ulog.partition)] = ulog
        return ulog

    for p in range(2):
        _fill_mixed(open_log(f"orders-{p}"), p)
    lat = open_log("lat-0", **{"message.timestamp.type": "LogAppendTime"})
    for i in range(6):
        lat.append_as_leader(build_batch([SimpleRecord(b"a", b"b" * 40, (), T0 + i)] * 3, compression=i % 5))
        # LogAppendTime stamps each batch with the broker's clock: a fast append path put all six in
        # one millisecond, and the timestamp probes below need several distinct times. Wait for the
        # clock to move on (a condition, at most a millisecond).
        appended_ms = time.time_ns() // 1_000_000
        while time.time_ns() // 1_000_000 == appended_ms:
            pass
    events = open_log("events-0")
    for i in range(8):
        events.append_as_leader(build_batch([SimpleRecord(None, b"e%d" % i, (), T0 + i * 10)]))
    # A transaction left open at the end: read_committed stops at its first offset.
    opentxn = open_log("opentxn-0")
    opentxn.append_as_leader(build_batch([SimpleRecord(b"a", b"before", (), T0)] * 3))
    opentxn.append_as_leader(build_batch([SimpleRecord(b"t", b"open", (), T0 + 1)] * 2, producer_id=4242,
                                         producer_epoch=0, base_sequence=0, is_transactional=True))
    opentxn.append_as_leader(build_batch([SimpleRecord(b"a", b"after", (), T0 + 2)] * 4))
    trimmed = open_log("trimmed-0")
    for i in range(40):
        trimmed.append_as_leader(build_batch([SimpleRecord(b"k", b"x" * 60, (), T0 + i * 10)] * 2))
    tiered = open_log("tiered-0", **{"remote.storage.enable": True, "local.retention.bytes": 1})
    _fill_mixed(tiered, 7)

    for tp, ulog in logs.items():
        ds.expected[tp] = expected_rows(ulog.dir)
        ds.log_end[tp] = ulog.log_end_offset
        stamps = sorted({r[5] for r in ds.expected[tp]})
        probes = [stamps[0] - 1, stamps[len(stamps) // 3], stamps[len(stamps) // 2] + 1, stamps[-1], stamps[-1] + 1]
        ds.by_timestamp[tp] = {}
        for t in probes:
            found = ulog.fetch_offset_by_timestamp(t)
            ds.by_timestamp[tp][t] = None if found is None else found[0]

    # Trim the head of one log at a segment boundary: offsets below it are gone (failOnDataLoss).
    second = trimmed.segments.base_offsets[2]
    trimmed.maybe_increment_log_start_offset(second, "test")
    trimmed.delete_old_segments()
    ds.expected[("trimmed", 0)] = [r for r in ds.expected[("trimmed", 0)] if r[4] >= second]

    # Tier every closed segment of tiered-0 to the broker's default local remote directory and let
    # local retention delete them: only the active segment stays local.
    rsm = LocalDirectoryRemoteStorageManager()
    rsm.configure({"dir": str(default_local_remote_dir(data.resolve())), "fsync": "false"})
    rlmm = FileRemoteLogMetadataManager(data / METADATA_DIR_NAME, sync=False)
    rlm = RemoteLogManager(RemoteLogManagerConfig(system_enable=True), _Logs({("tiered", 0): tiered}), rsm, rlmm,
                           index_cache_dir=data / "remote-log-index-cache")
    assert rlm.copy_all() > 2
    tiered.delete_old_segments()
    assert tiered.num_segments == 1, "all closed segments should have gone to the remote tier"
    ds.remote_files = rsm.list_files()
    rlm.close()
    for tp, ulog in logs.items():
        ds.log_start[tp] = ulog.log_start_offset
        ulog.close()
    assert os.listdir(data / "tiered-0")
    return ds
