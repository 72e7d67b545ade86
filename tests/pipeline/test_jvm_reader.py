"""tierlog.pipeline.read's JVM reader (jvm/spark-reader) against format("tierlog") and the files: the
same rows for every codec, null keys and values, headers, LogAppendTime, control batches and
transactions (read_committed), offset and timestamp bounds, several partitions, the local-directory
remote tier with a local tail; and the fall back to the Python reader when the jar is missing.

Each comparison is against the rows decoded from the files by tierlog.records (the data set's
expected rows) as well as the Python reader's, so a JVM reader returning what the Python one returns
wrongly still fails."""

from __future__ import annotations

import json
import logging
import shutil
from typing import Any

import pytest

from tests.helpers.pipeline import rows
from tests.pipeline.data import Dataset
from tierlog.pipeline import jvm as jvm_module
from tierlog.pipeline.jvm import FallBack, read, reader_jars


def _need_jar() -> None:
    try:
        reader_jars()
    except FallBack as e:
        pytest.skip(str(e))


def both(spark: Any, ds: Dataset, **options: object) -> tuple[Any, Any]:
    """(JVM reader's DataFrame, format("tierlog")'s) for the same options; jvm=True: no fall back."""
    opts = {k: v if isinstance(v, str) else json.dumps(v) for k, v in options.items()}
    jvm_df = read(spark, str(ds.data), jvm=True, **opts)
    plan = jvm_df._jdf.queryExecution().executedPlan().toString()
    assert "tierlog JVM reader" in plan, plan
    return jvm_df, read(spark, str(ds.data), jvm=False, **opts)


def test_jvm_reader_returns_the_rows_of_the_python_reader(spark: Any, dataset: Dataset,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _need_jar()
    ds = dataset
    # Every topic: each codec (orders, lat), null keys and values, headers with null values,
    # LogAppendTime (lat), control batches and an aborted transaction read uncommitted (orders), two
    # partitions, remote segments plus a local tail (tiered), a trimmed log start (trimmed).
    jvm_df, py_df = both(spark, ds, subscribePattern=".*", includeHeaders="true")
    assert jvm_df.schema == py_df.schema
    got = rows(jvm_df)
    want = sorted((r for tp in ds.expected for r in ds.expected[tp]), key=lambda x: (x[2], x[3], x[4]))
    assert len(got) == len(want) > 300
    assert got == want
    assert got == rows(py_df)
    assert any(r[6] == 1 for r in got) and any(r[0] is None for r in got) and any(r[1] is None for r in got)
    assert any(h[1] is None for r in got for h in r[7])
    assert ds.log_start[("tiered", 0)] > 0 and any(r[2] == "tiered" for r in got)

    # Without headers: the schema has no headers column, the rest is the same.
    jvm_df, py_df = both(spark, ds, subscribe="orders,lat")
    assert jvm_df.schema == py_df.schema and "headers" not in jvm_df.columns
    assert rows(jvm_df, headers=False) == rows(py_df, headers=False) == [
        (*r[:7], ()) for r in want if r[2] in ("orders", "lat")]

    # read_committed: aborted transactions skipped, reading stops at an open transaction (LSO).
    committed = {"kafka.isolation.level": "read_committed"}
    jvm_df, py_df = both(spark, ds, subscribe="orders,opentxn,tiered", includeHeaders="true", **committed)
    got = rows(jvm_df)
    assert got == rows(py_df)
    assert len(got) < len([r for r in want if r[2] in ("orders", "opentxn", "tiered")])
    # Each orders partition has a committed and an aborted transaction of two records each.
    assert sum(r[0] == b"txn" for r in want if r[2] == "orders") == 8
    assert sum(r[0] == b"txn" for r in got if r[2] == "orders") == 4
    assert [r[1] for r in got if r[2] == "opentxn"] == [b"before"] * 3

    # Offset bounds per partition, inside segments (the index's byte bounds are used).
    starting = {"orders": {"0": 7, "1": 20}, "tiered": {"0": 5}}
    ending = {"orders": {"0": 60, "1": -1}, "tiered": {"0": -1}}
    jvm_df, py_df = both(spark, ds, assign={"orders": [0, 1], "tiered": [0]}, startingOffsets=starting,
                         endingOffsets=ending, includeHeaders="true")
    got = rows(jvm_df)
    assert got == rows(py_df)
    assert [r[4] for r in got if r[2] == "orders" and r[3] == 0] == \
        [r[4] for r in ds.expected[("orders", 0)] if 7 <= r[4] < 60]
    assert [r[4] for r in got if r[2] == "tiered"] == [r[4] for r in ds.expected[("tiered", 0)] if r[4] >= 5]

    # Timestamp bounds (ListOffsets on the driver), over the remote tier too.
    for tp in [("tiered", 0), ("orders", 1)]:
        stamps = sorted(ds.by_timestamp[tp])
        jvm_df, py_df = both(spark, ds, assign={tp[0]: [tp[1]]}, startingTimestamp=str(stamps[1]),
                             endingTimestamp=str(stamps[2]))
        got = rows(jvm_df, headers=False)
        start, end = ds.by_timestamp[tp][stamps[1]], ds.by_timestamp[tp][stamps[2]]
        assert start is not None and end is not None
        assert [r[4] for r in got] == [r[4] for r in ds.expected[tp] if start <= r[4] < end] != []
        assert got == rows(py_df, headers=False)

    # Columnar batches of 3 rows (a record batch's rows carried across Spark batches) and windows of
    # 100 bytes (every batch carried across windows, most larger than one: the buffer grows).
    monkeypatch.setattr(jvm_module, "BATCH_ROWS", 3)
    monkeypatch.setattr(jvm_module, "WINDOW_BYTES", 100)
    small, _ = both(spark, ds, subscribePattern=".*", includeHeaders="true")
    assert rows(small) == want


def test_jvm_reader_falls_back_naming_what_is_missing(spark: Any, dataset: Dataset, tmp_path: Any,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("TIERLOG_SPARK_READER_DIR", str(tmp_path))
    with pytest.raises(FallBack, match=r"tierlog-spark-reader\.jar is missing"):
        read(spark, str(dataset.data), jvm=True, subscribe="events")
    with caplog.at_level(logging.WARNING, logger="tierlog.pipeline.jvm"):
        df = read(spark, str(dataset.data), subscribe="events")
    assert "reading with the Python reader: the JVM reader's jar" in caplog.text
    assert "tierlog JVM reader" not in df._jdf.queryExecution().executedPlan().toString()
    assert rows(df, headers=False) == dataset.expected[("events", 0)]


def test_session_jars_add_the_reader_and_keep_a_kafka_clients_already_given(tmp_path: Any,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """No Spark: which jars spark_session puts on spark.jars (one kafka-clients on a classpath)."""
    from tierlog.pipeline.jvm import session_jars

    monkeypatch.setenv("TIERLOG_SPARK_READER_DIR", str(tmp_path))
    assert session_jars({}) is None  # nothing built: the session is started as before
    (tmp_path / "tierlog-spark-reader.jar").write_bytes(b"")
    assert session_jars({}) is None  # no kafka-clients beside it
    (tmp_path / "deps").mkdir()
    (tmp_path / "deps" / "kafka-clients-3.9.2.jar").write_bytes(b"")
    reader, clients = str(tmp_path / "tierlog-spark-reader.jar"), str(tmp_path / "deps" / "kafka-clients-3.9.2.jar")
    assert session_jars({}) == f"{reader},{clients}"
    assert session_jars({"spark.jars": "/x/other.jar"}) == f"/x/other.jar,{reader},{clients}"
    assert session_jars({"spark.jars": "/k/kafka-clients-3.9.2.jar,/k/spark-sql-kafka.jar"}) == \
        f"/k/kafka-clients-3.9.2.jar,/k/spark-sql-kafka.jar,{reader}"


def test_jvm_reader_on_damaged_segments_does_what_the_python_reader_does(spark: Any, dataset: Dataset,
                                                                         tmp_path: Any) -> None:
    """A bad CRC is an error naming the batch's position (none with kafka.check.crcs=false); a torn last
    batch and a zero-filled tail end the log, as recovery would cut it."""
    _need_jar()
    want = dataset.expected[("events", 0)]

    def damaged(name: str, change: Any) -> Any:
        target = tmp_path / name
        shutil.copytree(dataset.data / "events-0", target / "events-0")
        log_file = target / "events-0" / "00000000000000000000.log"
        log_file.write_bytes(change(log_file.read_bytes()))
        return target

    def flip(raw: bytes) -> bytes:
        out = bytearray(raw)
        out[-3] ^= 0xFF  # inside the last batch's value
        return bytes(out)

    bad_crc = damaged("crc", flip)
    with pytest.raises(Exception, match=r"events-0: record batch at position \d+ is corrupt \(CRC mismatch\)"):
        read(spark, str(bad_crc), jvm=True, subscribe="events").collect()
    got = rows(read(spark, str(bad_crc), jvm=True, subscribe="events", **{"kafka.check.crcs": "false"}),
               headers=False)
    assert [r[4] for r in got] == [r[4] for r in want] and got[-1][1] != want[-1][1]

    for name, change in [("torn", lambda raw: raw[:-10]), ("zeros", lambda raw: raw + bytes(4096))]:
        data = damaged(name, change)
        expected = rows(read(spark, str(data), jvm=False, subscribe="events", failOnDataLoss="false"),
                        headers=False)
        assert rows(read(spark, str(data), jvm=True, subscribe="events", failOnDataLoss="false"),
                    headers=False) == expected, name
        assert expected == (want[:-1] if name == "torn" else want), name
