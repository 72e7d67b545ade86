"""``spark.read.format("tierlog")`` and ``spark.readStream.format("tierlog")``: a Python data source
with the schema and options of Spark's Kafka source, reading a broker's data directory and its remote
tier instead of a running broker.

Planning (on the driver) lists the partitions and segments and resolves the offset bounds through
the indexes; each Spark input partition is one segment range, read by a worker straight from the
segment file or the remote object and returned as Arrow record batches.
"""

from __future__ import annotations

import gc
import math
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from tierlog.ids import TopicPartition
from tierlog.pipeline.catalog import PartitionLog, offset_for_timestamp
from tierlog.pipeline.options import (
    ReadOptions,
    TierlogOptionError,
    check_range,
    conf_options,
    parse_options,
    plan_ranges,
    resolve,
    with_defaults,
)
from tierlog.pipeline.packing import pack_ranges
from tierlog.pipeline.reader import ScanRange, read_range

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def kafka_schema(include_headers: bool = False) -> StructType:
    """Spark's Kafka source schema (KafkaRecordToRowConverter), field for field."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


class SegmentPartition(InputPartition):
    """A Spark input partition: offset ranges of segments (consecutive ones packed together, see
    :func:`tierlog.pipeline.packing.pack_ranges`), read one after the other."""

    def __init__(self, scans: tuple[ScanRange, ...]) -> None:
        super().__init__(scans)
        self.scans = scans


_settled = False


def _settle_worker() -> None:
    """Once per Python worker process: hide what the imports made from the garbage collector.

    A reused PySpark worker runs a full ``gc.collect()`` after every task (pyspark/daemon.py). With
    numba, pyarrow and tierlog loaded that walks ~140,000 long-lived objects, ~60 ms a task on an
    idle machine: more than decoding a 64 MiB segment. ``gc.freeze()`` moves them to the permanent
    generation, which collections skip; objects made later are collected as before. No collection
    first: with ``spark.python.worker.reuse=false`` that would cost each task what it saves (the
    little garbage frozen with them is kept for the worker's life)."""
    global _settled
    if not _settled:
        _settled = True
        gc.freeze()


def _read(opts: ReadOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    _settle_worker()
    scans = partition.scans if isinstance(partition, SegmentPartition) else partition.value
    if not isinstance(scans, tuple):
        return  # Spark plans one empty partition when the reader returned none
    for scan in scans:
        yield from read_range(scan, include_headers=opts.include_headers, check_crcs=opts.check_crcs,
                              spec=opts.remote)


# -- batch ---------------------------------------------------------------------------------------------


class _Pruning:
    """What pushed-down filters allow to skip: partitions, topics and offset bounds. Spark still
    evaluates every filter on the rows (they are all returned as not fully handled), so pruning only
    has to be conservative, never exact."""

    def __init__(self) -> None:
        self.partitions: set[int] | None = None
        self.topics: set[str] | None = None
        self.min_offset: int | None = None
        self.max_offset: int | None = None  # exclusive
        self.min_timestamp_ms: int | None = None
        #: Inclusive: no row with a larger timestamp (in ms) passes the filters.
        self.max_timestamp_ms: int | None = None

    def take(self, f: Filter) -> None:
        column = getattr(f, "attribute", None)
        if column not in (("partition",), ("topic",), ("offset",), ("timestamp",)):
            return
        name = column[0]
        value = getattr(f, "value", None)
        if isinstance(f, EqualTo):
            values: tuple[Any, ...] | None = (value,)
        elif isinstance(f, In):
            values = tuple(value) if isinstance(value, tuple | list) else None
        else:
            values = None
        if values is not None and name in ("partition", "topic"):
            wanted = set(values)
            if name == "partition":
                self.partitions = wanted if self.partitions is None else self.partitions & wanted
            else:
                self.topics = wanted if self.topics is None else self.topics & wanted
            return
        if name == "offset" and isinstance(value, int):
            lo = {GreaterThan: value + 1, GreaterThanOrEqual: value, EqualTo: value}.get(type(f))
            hi = {LessThan: value, LessThanOrEqual: value + 1, EqualTo: value + 1}.get(type(f))
            if lo is not None:
                self.min_offset = lo if self.min_offset is None else max(self.min_offset, lo)
            if hi is not None:
                self.max_offset = hi if self.max_offset is None else min(self.max_offset, hi)
        elif name == "timestamp" and isinstance(value, datetime):
            # Rows carry milliseconds; the literal may have microseconds: the bounds are the
            # millisecond values a row may have and still pass.
            micros = math.floor(value.timestamp()) * 1_000_000 + value.microsecond
            if isinstance(f, GreaterThan | GreaterThanOrEqual | EqualTo):
                ms = math.floor(micros / 1000)  # the existing start lookup keeps its inclusive floor
                self.min_timestamp_ms = ms if self.min_timestamp_ms is None else max(self.min_timestamp_ms, ms)
            if isinstance(f, LessThan | LessThanOrEqual | EqualTo):
                ms = micros // 1000 if not isinstance(f, LessThan) else -(-micros // 1000) - 1
                self.max_timestamp_ms = ms if self.max_timestamp_ms is None else min(self.max_timestamp_ms, ms)

    def keep(self, plog: PartitionLog) -> bool:
        return ((self.partitions is None or plog.partition in self.partitions)
                and (self.topics is None or plog.topic in self.topics))


class TierlogBatchReader(DataSourceReader):
    """A batch read planned from the options alone (Spark takes no filters from it)."""

    def __init__(self, options: ReadOptions, parallelism: int | None = None) -> None:
        self.options = options
        self.parallelism = parallelism
        self.pruning = _Pruning()

    def plan(self) -> list[ScanRange]:
        opts = self.options
        parts = opts.partitions(opts.discover())
        starts = resolve(opts.starting, "starting", parts, opts)
        ends = resolve(opts.ending, "ending", parts, opts)
        pruning = self.pruning
        kept = []
        for plog in parts:
            if not pruning.keep(plog):
                continue
            tp = (plog.topic, plog.partition)
            start, end = check_range(plog, starts[tp], ends[tp], opts)
            if pruning.min_offset is not None:
                start = max(start, min(pruning.min_offset, end))
            if pruning.max_offset is not None:
                end = max(start, min(end, pruning.max_offset))
            if pruning.min_timestamp_ms is not None and start < end:
                # The first record at or after the timestamp, as ListOffsets finds it: nothing
                # before it can pass the filter unless timestamps go backwards, and Spark's own
                # filter on the rows stays exact for what is read.
                found = offset_for_timestamp(plog, pruning.min_timestamp_ms, opts.remote)
                start = end if found is None else max(start, min(found, end))
            starts[tp], ends[tp] = start, end
            kept.append(plog)
        return plan_ranges(kept, starts, ends, opts, timestamps_ms=(pruning.min_timestamp_ms, pruning.max_timestamp_ms))

    def partitions(self) -> Sequence[InputPartition]:
        return [SegmentPartition(p) for p in pack_ranges(self.plan(), self.options, self.parallelism)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)


class TierlogFilteringBatchReader(TierlogBatchReader):
    """``pruneByFilters=true``: also planned from the filters Spark pushes (it still applies each
    one to the rows, so pruning only decides what is not read). Spark asks a reader for filters only
    when its class defines pushFilters, and then refuses it unless FILTER_PUSHDOWN_CONF is on."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        for f in filters:
            self.pruning.take(f)
            yield f


# -- streaming -------------------------------------------------------------------------------------------

Offsets = dict[str, dict[str, int]]


def _to_json(offsets: Mapping[TopicPartition, int]) -> Offsets:
    """Spark's Kafka offset format: ``{"topic": {"0": 23}}``."""
    out: Offsets = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def _from_json(offsets: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    return {(topic, int(p)): int(o) for topic, parts in offsets.items() for p, o in parts.items()}


class TierlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of what was appended since the last batch, per partition offsets in Spark's
    Kafka format, so a checkpoint written for one restarts the other's query position."""

    def __init__(self, options: ReadOptions, parallelism: int | None = None) -> None:
        self.options = options
        self.parallelism = parallelism
        self._target: dict[TopicPartition, int] | None = None

    def _logs(self) -> list[PartitionLog]:
        return self.options.partitions(self.options.discover())

    def initialOffset(self) -> Offsets:
        parts = self._logs()
        return _to_json(resolve(self.options.starting, "starting", parts, self.options))

    def _available(self) -> dict[TopicPartition, int]:
        latest = {(p.topic, p.partition): self.options.latest(p) for p in self._logs()}
        if self._target is not None:
            # Trigger.AvailableNow: nothing appended after the query started is read.
            latest = {tp: min(o, self._target.get(tp, o)) for tp, o in latest.items() if tp in self._target}
        return latest

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {(p.topic, p.partition): self.options.latest(p) for p in self._logs()}

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        begin = _from_json(start)
        logs = {(p.topic, p.partition): p for p in self._logs()}
        latest = self._available()
        # A partition that appeared after the query started is read from its beginning, as Spark does.
        begin.update({tp: logs[tp].earliest for tp in latest if tp not in begin and tp in logs})
        end = dict(begin)
        end.update({tp: max(o, begin[tp]) for tp, o in latest.items()})
        if isinstance(limit, ReadMaxRows):
            end = _rate_limit(begin, end, limit.max_rows)
        return _to_json(end)

    def reportLatestOffset(self) -> Offsets | None:
        return _to_json(self._available())

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        begin = _from_json(start)
        until = _from_json(end)
        logs = {(p.topic, p.partition): p for p in self._logs()}
        parts = [logs[tp] for tp in sorted(until) if tp in logs]
        starts = {tp: begin.get(tp, logs[tp].earliest) for tp in until if tp in logs}
        ranges = plan_ranges(parts, starts, until, self.options)
        return [SegmentPartition(p) for p in pack_ranges(ranges, self.options, self.parallelism)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)

    def commit(self, end: Offsets) -> None:
        pass  # the log is read in place: there is nothing to release


def _rate_limit(begin: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
                max_rows: int) -> dict[TopicPartition, int]:
    """Share ``max_rows`` between partitions in proportion to what each has waiting (Spark's
    KafkaMicroBatchStream.rateLimit)."""
    sizes = {tp: end[tp] - begin.get(tp, end[tp]) for tp in end}
    total = sum(s for s in sizes.values() if s > 0)
    if total <= max_rows:
        return dict(end)
    out = {}
    for tp, until in end.items():
        size = sizes[tp]
        if size <= 0:
            out[tp] = until
            continue
        share = max_rows * size / total
        step = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(until, begin[tp] + step)
    return out


# -- the data source -------------------------------------------------------------------------------------


class TierlogDataSource(DataSource):
    """``format("tierlog")``: Spark's Kafka source over a tierlog (or Kafka) data directory."""

    #: Option defaults from the Spark conf, taken when the source is registered (:func:`register`):
    #: the planner runs in a Python worker, which cannot read the session's conf itself.
    conf_defaults: Mapping[str, str] = {}
    #: Spark's master URL then: ``tail`` defaults to local only with a local master.
    master: str | None = None
    #: Spark's default parallelism then (its cores): the default size of packed input partitions.
    parallelism: int | None = None

    @classmethod
    def name(cls) -> str:
        return "tierlog"

    def _options(self, *, streaming: bool) -> ReadOptions:
        # The options, credentials among them, travel to the executors inside the reader Spark
        # pickles for each task: nothing needs spark.executorEnv.
        return parse_options(with_defaults(self.conf_defaults, dict(self.options)), streaming=streaming,
                             master=self.master)

    def schema(self) -> StructType:
        include = str(self.options.get("includeheaders", self.options.get("includeHeaders", "false")))
        if include.strip().lower() not in ("true", "false"):
            raise TierlogOptionError(f"option 'includeHeaders' must be true or false, got {include!r}")
        return kafka_schema(include.strip().lower() == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        options = self._options(streaming=False)
        return (TierlogFilteringBatchReader if options.prune_by_filters else TierlogBatchReader)(
            options, self.parallelism)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return TierlogStreamReader(self._options(streaming=True), self.parallelism)


#: Spark's switch for pushing filters into Python data sources (off in Spark by default).
FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
#: The session-wide default of the source's ``pruneByFilters`` option (``spark.tierlog.*``).
PRUNE_BY_FILTERS_CONF = "spark.tierlog.pruneByFilters"


def spark_session(master: str | None = None, *, app_name: str = "tierlog",
                  conf: Mapping[str, str] | None = None, prune_by_filters: bool = False) -> SparkSession:
    """A Spark session (``local[*]`` unless told) with ``format("tierlog")`` registered, and the
    JVM reader of :func:`tierlog.pipeline.read` on its classpath when it is built.

    Python workers run this interpreter, which has tierlog and its compiled decoder.
    ``prune_by_filters`` switches on Spark's FILTER_PUSHDOWN_CONF and the source's ``pruneByFilters``
    default together (see ReadOptions.prune_by_filters for why both are off unless asked for); the
    reader's options (offsets, timestamps, partitions) prune without that hazard.
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master or "local[*]").appName(app_name)
    settings = {FILTER_PUSHDOWN_CONF: "true", PRUNE_BY_FILTERS_CONF: "true"} if prune_by_filters else {}
    settings.update(conf or {})
    # The JVM reader of tierlog.pipeline.read, when it is built: a jar cannot join a running driver.
    from tierlog.pipeline.jvm import session_jars

    jars = session_jars(settings)
    if jars is not None:
        settings["spark.jars"] = jars
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


def session_conf(spark: SparkSession) -> dict[str, str]:
    """The session's conf: what it started with and what was set since."""
    conf = dict(spark.sparkContext.getConf().getAll())
    conf.update(spark.conf.getAll)
    return conf


def register(spark: SparkSession) -> None:
    """Register ``format("tierlog")`` with the option defaults of the session's conf now
    (``spark.tierlog.*``, ``spark.hadoop.fs.s3a.*``). Call it again after changing them."""
    conf = session_conf(spark)
    source = type("TierlogDataSourceWithConf", (TierlogDataSource,),
                  {"conf_defaults": conf_options(conf), "master": conf.get("spark.master"),
                   "parallelism": spark.sparkContext.defaultParallelism, "__module__": __name__})
    spark.dataSource.register(source)
