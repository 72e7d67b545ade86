"""spark.readStream.format("tierlog"): micro-batches of appended data, maxOffsetsPerTrigger,
Trigger.AvailableNow, and a restart from the checkpoint without duplicates (file sink)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tierlog.config import LogConfig
from tierlog.records import SimpleRecord, build_batch
from tierlog.storage.loader import LoadOptions, load_log


def append(data: Path, partition: int, start: int, count: int) -> None:
    ulog = load_log(data / f"s-{partition}", LogConfig.from_props({"segment.bytes": 1200}), LoadOptions())
    for i in range(start, start + count):
        ulog.append_as_leader(build_batch([SimpleRecord(b"k", b"%d" % i, (), 1_700_000_000_000 + i)]))
    ulog.close()


def run_available_now(spark: Any, data: Path, out: Path, checkpoint: Path, max_offsets: int | None = None) -> Any:
    reader = (spark.readStream.format("tierlog").option("path", str(data)).option("subscribe", "s")
              .option("startingOffsets", "earliest"))
    if max_offsets is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    query = (reader.load().selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
             .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None, query.exception()
    return query


def test_stream_picks_up_appends_and_resumes_without_duplicates(spark: Any, tmp_path: Path) -> None:
    data, out, checkpoint = tmp_path / "data", tmp_path / "out", tmp_path / "checkpoint"
    append(data, 0, 0, 30)
    append(data, 1, 0, 10)
    query = run_available_now(spark, data, out, checkpoint, max_offsets=15)
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert len(batches) >= 3, "maxOffsetsPerTrigger=15 should split 40 offsets over several batches"
    assert all(p["numInputRows"] <= 16 for p in batches)

    def values() -> list[tuple[int, int, str]]:
        return sorted((r[0], r[1], r[2]) for r in spark.read.parquet(str(out)).collect())

    assert values() == sorted([(0, i, str(i)) for i in range(30)] + [(1, i, str(i)) for i in range(10)])
    # Appended while no query runs; the restarted query reads only the new offsets.
    append(data, 0, 30, 12)
    append(data, 1, 10, 3)
    run_available_now(spark, data, out, checkpoint)
    assert values() == sorted([(0, i, str(i)) for i in range(42)] + [(1, i, str(i)) for i in range(13)])
    # Nothing new: a rerun adds nothing.
    run_available_now(spark, data, out, checkpoint)
    assert len(values()) == 55


def test_running_query_reads_what_is_appended_while_it_runs(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    append(data, 0, 0, 5)
    query = (spark.readStream.format("tierlog").option("path", str(data)).option("subscribe", "s")
             .option("startingOffsets", "earliest").load()
             .selectExpr("offset", "CAST(value AS STRING) AS value")
             .writeStream.format("memory").queryName("tierlog_live").start())
    try:
        query.processAllAvailable()
        assert spark.table("tierlog_live").count() == 5
        append(data, 0, 5, 7)
        query.processAllAvailable()
        got = sorted((r[0], r[1]) for r in spark.table("tierlog_live").collect())
        assert got == [(i, str(i)) for i in range(12)]
    finally:
        query.stop()
