"""Reading pipeline output for comparison: Spark's Kafka-source schema, rows of a DataFrame, and a scan done the way the data source plans and reads it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from tests.pipeline.data import Row
from tierlog.pipeline.options import parse_options, plan_ranges, resolve
from tierlog.pipeline.reader import ARROW_SCHEMA_WITH_HEADERS, read_range
from tierlog.pipeline.source import FILTER_PUSHDOWN_CONF, PRUNE_BY_FILTERS_CONF, register

# Spark's Kafka source schema, spelled out as KafkaRecordToRowConverter defines it.
KAFKA_SCHEMA = StructType([
    StructField("key", BinaryType()), StructField("value", BinaryType()), StructField("topic", StringType()),
    StructField("partition", IntegerType()), StructField("offset", LongType()),
    StructField("timestamp", TimestampType()), StructField("timestampType", IntegerType()),
])


def rows(df: Any, headers: bool = True) -> list[Row]:
    cols = ["key", "value", "topic", "partition", "offset", F.unix_millis("timestamp").alias("ts"), "timestampType"]
    out = []
    for r in df.select(*cols, *(["headers"] if headers else [])).collect():
        # Spark's Kafka source gives null, not an empty array, for a record without headers.
        assert not headers or r["headers"] is None or len(r["headers"]) > 0
        hs = tuple((h["key"], h["value"]) for h in r["headers"] or ()) if headers else ()
        out.append((r["key"], r["value"], r["topic"], r["partition"], r["offset"], r["ts"], r["timestampType"], hs))
    return sorted(out, key=lambda x: (x[2], x[3], x[4]))


def scan_options(options: dict[str, str], *, window_bytes: int = 16 << 20) -> list[Row]:
    """Plan and read like the data source does, in this process, as rows sorted by partition/offset."""
    opts = parse_options(options)
    parts = opts.partitions(opts.discover())
    ranges = plan_ranges(parts, resolve(opts.starting, "starting", parts, opts),
                         resolve(opts.ending, "ending", parts, opts), opts)
    out: list[Row] = []
    for r in ranges:
        for b in read_range(r, include_headers=True, spec=opts.remote, window_bytes=window_bytes):
            assert b.schema == ARROW_SCHEMA_WITH_HEADERS
            for d in b.to_pylist():
                out.append((d["key"], d["value"], d["topic"], d["partition"], d["offset"],
                            int(d["timestamp"].timestamp() * 1000 + 0.5), d["timestampType"],
                            tuple((h["key"], h["value"]) for h in d["headers"] or ())))
    return sorted(out, key=lambda x: (x[2], x[3], x[4]))


@contextmanager
def filter_pushdown(spark: Any) -> Iterator[None]:
    """``format("tierlog")`` pruning by Spark's pushed filters within this block (tierlog's sessions
    leave it off: see ReadOptions.prune_by_filters)."""
    for key in (FILTER_PUSHDOWN_CONF, PRUNE_BY_FILTERS_CONF):
        spark.conf.set(key, "true")
    register(spark)  # the source takes its option defaults from the conf when registered
    try:
        yield
    finally:
        for key in (FILTER_PUSHDOWN_CONF, PRUNE_BY_FILTERS_CONF):
            spark.conf.unset(key)
        register(spark)
