"""Pruning remote segments by timestamp (issue 26: "upper timestamp bounds prune like lower ones").

Each upload records its segment's smallest record timestamp (``min_timestamp_ms``) in the journal
and the manifest; a read whose pushed filters bound ``timestamp`` from above plans no range for a
remote segment whose smallest timestamp is above the bound, and one bounded from below none for a
segment whose largest is below it, so the executor never opens those objects. Timestamps here do
not grow with offsets (CreateTime, one late segment of old records): pruning must stay per segment
and the rows exact."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pyspark.sql.datasource import Filter, GreaterThanOrEqual, LessThan, LessThanOrEqual

from tests.helpers.pipeline import filter_pushdown
from tierlog.config import LogConfig
from tierlog.pipeline.options import parse_options
from tierlog.pipeline.reader import read_range
from tierlog.pipeline.source import TierlogFilteringBatchReader
from tierlog.records import SimpleRecord, build_batch
from tierlog.storage.loader import LoadOptions, load_log
from tierlog.tiered.api import IndexType, RemoteLogSegmentMetadata
from tierlog.tiered.backends.local import LocalDirectoryRemoteStorageManager
from tierlog.tiered.layout import METADATA_DIR_NAME
from tierlog.tiered.manifest import ManifestPublisher, read_manifests
from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager
from tierlog.tiered.remote_log_manager import RemoteLogManager, RemoteLogManagerConfig

T0 = 1_700_000_000_000
HOUR_MS = 3_600_000
TOPIC = "clicks"
#: Per segment, the timestamps (ms after T0) of its records. Segment 4 holds records older than
#: segments 2 and 3 (a producer replaying old events): pruning must not drop it for a bound that
#: its records meet. In segment 1 the smallest record is not the batch's first.
SEGMENTS = [
    [0, 1000, 2000],
    [HOUR_MS + 500, HOUR_MS, HOUR_MS + 900],
    [2 * HOUR_MS, 2 * HOUR_MS + 1],
    [3 * HOUR_MS, 3 * HOUR_MS + 7],
    [30_000, 31_000],
    [5 * HOUR_MS],  # stays local: the active segment
]


class CountingRSM(LocalDirectoryRemoteStorageManager):
    """The local-directory tier, remembering which segments' objects were opened (in this process:
    the planner, and the reads the test runs itself)."""

    opened: ClassVar[list[tuple[bytes, str]]] = []

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> Any:
        CountingRSM.opened.append((metadata.segment_id.id, "log"))
        return super().fetch_log_segment(metadata, start_position, end_position)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> Any:
        CountingRSM.opened.append((metadata.segment_id.id, index_type.name))
        return super().fetch_index(metadata, index_type)


class _Logs:
    def __init__(self, logs: Mapping[tuple[str, int], Any]) -> None:
        self.logs = dict(logs)

    def all_logs(self) -> dict[tuple[str, int], Any]:
        return dict(self.logs)

    def get_log(self, topic: str, partition: int) -> Any:
        return self.logs.get((topic, partition))


@pytest.fixture(scope="module")
def tier(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A partition whose closed segments a RemoteLogManager tiered through the broker's manifest
    publisher (so the tier holds manifests), then deleted locally."""
    root = tmp_path_factory.mktemp("pruning")
    data, remote = root / "data", root / "remote"
    ulog = load_log(data / f"{TOPIC}-0", LogConfig.from_props({
        "retention.ms": -1, "remote.storage.enable": True, "local.retention.bytes": 1}), LoadOptions())
    ulog.write_partition_metadata(b"\x05" * 16)
    expected: list[tuple[int, int]] = []
    for i, stamps in enumerate(SEGMENTS):
        if i:
            ulog.roll()
        records = [SimpleRecord(b"k", b"v%d" % n, (), T0 + ts) for n, ts in enumerate(stamps)]
        base = ulog.log_end_offset
        ulog.append_as_leader(build_batch(records, compression=2 if i == 1 else 0))
        expected += [(base + n, T0 + ts) for n, ts in enumerate(stamps)]
    rsm = LocalDirectoryRemoteStorageManager()
    rsm.configure({"dir": str(remote), "fsync": "false"})
    rlmm = ManifestPublisher(FileRemoteLogMetadataManager(data / METADATA_DIR_NAME, sync=False), rsm, broker_id=1)
    rlm = RemoteLogManager(RemoteLogManagerConfig(system_enable=True), _Logs({(TOPIC, 0): ulog}), rsm, rlmm,
                           index_cache_dir=data / "remote-log-index-cache")
    assert rlm.copy_all() == len(SEGMENTS) - 1
    ulog.delete_old_segments()
    assert ulog.num_segments == 1
    rlm.close()
    ulog.close()
    return {"data": data, "remote": remote, "expected": expected}


def _options(tier: dict[str, Any]) -> dict[str, str]:
    return {"path": str(tier["data"]), "subscribe": TOPIC, "tail": "local",
            "remote.log.storage.manager.class.name": f"{__name__}.CountingRSM",
            "rsm.config.dir": str(tier["remote"])}


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _plan_and_read(tier: dict[str, Any], *filters: Filter) -> tuple[list[Any], list[tuple[int, int]]]:
    opts = parse_options(_options(tier))
    reader = TierlogFilteringBatchReader(opts)
    assert len(list(reader.pushFilters(list(filters)))) == len(filters)  # all still evaluated by Spark
    ranges = reader.plan()
    got = []
    for rng in ranges:
        for batch in read_range(rng, include_headers=False, spec=opts.remote):
            got += zip(batch.column("offset").to_pylist(), batch.column("timestamp").to_pylist(), strict=True)
    return ranges, [(o, int(ts.replace(tzinfo=UTC).timestamp() * 1000)) for o, ts in got]


def test_the_manifest_records_each_segments_smallest_record_timestamp(tier: dict[str, Any]) -> None:
    rsm = LocalDirectoryRemoteStorageManager()
    rsm.configure({"dir": str(tier["remote"]), "tierlog.read.only": "true"})
    manifests = read_manifests(rsm) or []
    assert len(manifests) == 1
    assert [m.min_timestamp_ms for m in manifests[0].finished()] == [T0 + min(s) for s in SEGMENTS[:-1]]
    # In the documents themselves (the checkpoint and the deltas, each carrying the segments it changed).
    docs = [json.loads(p.read_bytes()) for p in sorted(Path(tier["remote"]).rglob("_manifest/*.json"))]
    smallest = {(s["start_offset"], s["min_timestamp_ms"]) for d in docs for s in d["segments"]
                if s["state"] == "COPY_SEGMENT_FINISHED"}
    assert [t for _, t in sorted(smallest)] == [T0 + min(s) for s in SEGMENTS[:-1]]


@pytest.mark.parametrize(("bound", "strict", "kept"), [
    # Up to just before the second hour: segments 0 and 4 (the late segment of old records), and
    # the local segment, which has no recorded smallest timestamp and is always read.
    (T0 + HOUR_MS - 1, False, [0, 4]),
    (T0 + HOUR_MS, True, [0, 4]),  # timestamp < HOUR: segment 1's smallest is HOUR itself
    (T0 + HOUR_MS, False, [0, 1, 4]),  # <= HOUR: segment 1's second record (not its first) passes
    (T0 - 1, False, []),
])
def test_an_upper_timestamp_bound_plans_no_range_for_newer_segments(tier: dict[str, Any], bound: int, strict: bool,
                                                                   kept: list[int]) -> None:
    CountingRSM.opened.clear()
    f = (LessThan if strict else LessThanOrEqual)(("timestamp",), _at(bound))
    ranges, rows = _plan_and_read(tier, f)
    remote = [r.remote for r in ranges if r.remote is not None]
    starts = sorted({md.start_offset for md in remote})
    bases = [sum(len(s) for s in SEGMENTS[:i]) for i in range(len(SEGMENTS))]
    assert starts == [bases[i] for i in kept]
    assert sum(1 for r in ranges if r.log_path is not None) == 1  # the local tail is read
    # No object of a pruned segment was opened, by the planner or by the reads.
    opened = {sid for sid, _ in CountingRSM.opened}
    assert opened == {md.segment_id.id for md in remote}
    # The rows the planned ranges hold include every row the filter passes (Spark applies it exactly).
    passing = [(o, ts) for o, ts in tier["expected"] if (ts < bound if strict else ts <= bound)]
    assert set(passing) <= set(rows)
    assert not [(o, ts) for o, ts in rows if o < bases[-1] and not any(bases[i] <= o < bases[i] + len(SEGMENTS[i])
                                                                         for i in kept)]


def test_a_lower_timestamp_bound_skips_older_segments_after_the_start(tier: dict[str, Any]) -> None:
    """timestamp >= 2h starts at the first such offset (segment 2, found through the time index of
    segment 2 only: older segments' largest timestamps are in the manifest) and skips segment 4,
    whose records are all older though it comes later."""
    CountingRSM.opened.clear()
    ranges, rows = _plan_and_read(tier, GreaterThanOrEqual(("timestamp",), _at(T0 + 2 * HOUR_MS)))
    remote = [r.remote for r in ranges if r.remote is not None]
    bases = [sum(len(s) for s in SEGMENTS[:i]) for i in range(len(SEGMENTS))]
    assert [md.start_offset for md in remote] == [bases[2], bases[3]]
    assert {sid for sid, _ in CountingRSM.opened} == {md.segment_id.id for md in remote}
    assert {(o, ts) for o, ts in tier["expected"] if ts >= T0 + 2 * HOUR_MS} <= set(rows)


def _load(spark: Any, tier: dict[str, Any]) -> Any:
    # A DataFrame per query: Spark 4.3 keeps the partitions planned with one query's pushed filters
    # on the relation and reuses them for a later query on the same DataFrame without filters
    # (docs/operations.md, "Pruning").
    reader = spark.read.format("tierlog")
    for k, v in _options(tier).items():
        reader = reader.option(k, v)
    return reader.load()


def test_an_upper_bound_read_through_spark_is_exact(spark: Any, tier: dict[str, Any]) -> None:
    bound = T0 + HOUR_MS
    with filter_pushdown(spark):
        got = sorted((r[0], r[1]) for r in _load(spark, tier).where(f"timestamp <= timestamp_millis({bound})")
                     .selectExpr("offset", "unix_millis(timestamp)").collect())
        assert got == [(o, ts) for o, ts in tier["expected"] if ts <= bound]
        pruned = _load(spark, tier).where(f"timestamp <= timestamp_millis({bound})").rdd.getNumPartitions()
        assert pruned == 4 < _load(spark, tier).rdd.getNumPartitions() == len(SEGMENTS)  # segments 0, 1, 4, local
