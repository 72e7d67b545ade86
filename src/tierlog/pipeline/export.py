"""``tierlog spark export``: topics to Parquet partitioned by date, as an archive each run appends the
offsets not yet exported to (a manifest in the output records them; a run killed before it commits is
settled by whether its rows exist), or as a mirror of the log (``mode="mirror"``, rewritten each run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tierlog.errors import TierlogError
from tierlog.pipeline.reader import RemoteSpec

#: The export's manifest, beside the Parquet files: Spark's file sources skip names starting with
#: ``_``, so reading the output as Parquet never sees it.
EXPORT_MANIFEST = "_tierlog_export"
EXPORT_MODES = ("archive", "mirror")
_MANIFEST_SCHEMA = "run STRING, state STRING, topic STRING, partition INT, start_offset LONG, end_offset LONG"


#: Hadoop glob pattern characters (GlobPattern); Spark's file readers expand a path holding any of them.
_GLOB_CHARS = frozenset("\\{}[]*?")


def hadoop_literal(path: str) -> str:
    """``path`` for Spark's file readers, which take a path holding ``{}[]*?\\`` as a glob pattern
    (an output named ``exports[2024]`` would match ``exports2`` and the like, or nothing): each such
    character escaped with a backslash, which Hadoop's glob reads as the character itself. Writers
    take paths literally and need no escape."""
    return "".join(f"\\{c}" if c in _GLOB_CHARS else c for c in path)


def _source_options(paths: Sequence[str], spec: RemoteSpec | None, options: Mapping[str, str] | None) -> dict[str, str]:
    out = {"path": ",".join(paths)}
    if spec is not None and not spec.defaulted:
        out["remote.log.storage.manager.class.name"] = spec.class_name
        out.update((f"rsm.config.{key}", value) for key, value in spec.props)
    out.update(options or {})
    return out


def _read(spark: Any, paths: Sequence[str], spec: RemoteSpec | None, options: Mapping[str, str] | None,
          **more: str) -> Any:
    """What format("tierlog") returns for these options, read by the JVM reader where it can be
    (tierlog.pipeline.read: it falls back to format("tierlog") itself, saying why)."""
    from tierlog.pipeline.jvm import load

    return load(spark, {"includeHeaders": "true", **_source_options(paths, spec, options), **more})


def _with_date(df: Any) -> Any:
    from pyspark.sql import functions as F

    # The UTC date by arithmetic on epoch milliseconds: to_date would use the session's time zone,
    # and the same data must land in the same directories whoever runs the export.
    return df.withColumn("date", F.expr("date_from_unix_date(CAST(floor(unix_millis(timestamp) / 86400000) AS INT))"))


def _exists(spark: Any, path: str) -> bool:
    """Whether ``path`` exists, through Hadoop's file systems (local, s3a, hdfs: wherever the output is)."""
    jvm = spark.sparkContext._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    return bool(hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).exists(hpath))


def _has_rows(spark: Any, output: str) -> bool:
    """Whether the output holds any data yet (a first run killed before its rows were committed
    leaves only the manifest, and Parquet cannot read an empty directory)."""
    jvm = spark.sparkContext._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(output)
    fs = hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    return fs.exists(hpath) and any(not str(st.getPath().getName()).startswith(("_", "."))
                                    for st in fs.listStatus(hpath))


def _manifest_rows(spark: Any, output: str) -> list[Any]:
    manifest = f"{output.rstrip('/')}/{EXPORT_MANIFEST}"
    if not _exists(spark, manifest):
        return []
    return list(spark.read.schema(_MANIFEST_SCHEMA).json(hadoop_literal(manifest)).collect())


def exported_offsets(spark: Any, output: str, topics: Sequence[str] | None = None) -> dict[tuple[str, int], int]:
    """Per partition, the offset the next archive run starts at: the end of the last committed run.

    A run is recorded ``started`` before its rows are appended and ``committed`` after. A run found
    started but not committed (the export was killed between) is checked against the output: Spark
    commits an append job's files together, so its rows are either all there or none are."""
    rows = _manifest_rows(spark, output)
    committed = {r.run for r in rows if r.state == "committed"}
    ends: dict[tuple[str, int], int] = {}
    unsure = [r for r in rows if r.state == "started" and r.run not in committed]
    if unsure and _has_rows(spark, output):
        from pyspark.sql import functions as F

        data = spark.read.parquet(hadoop_literal(output))
        for r in unsure:
            found = data.where((F.col("topic") == r.topic) & (F.col("partition") == r.partition)
                               & (F.col("offset") >= r.start_offset) & (F.col("offset") < r.end_offset)).limit(1).count()
            if found:
                committed.add(r.run)
    for r in rows:
        if r.state == "started" and r.run in committed and (topics is None or r.topic in topics):
            tp = (r.topic, int(r.partition))
            ends[tp] = max(ends.get(tp, 0), int(r.end_offset))
    return ends


def export(spark: Any, paths: Sequence[str], spec: RemoteSpec | None, topics: Sequence[str], output: str,
           *, options: Mapping[str, str] | None = None, mode: str = "archive") -> int:
    """Write ``topics`` to Parquet under ``output``, partitioned by topic and record date (UTC), and
    return the rows this run wrote.

    ``archive`` (the default) appends only the offsets no earlier run exported, recorded per
    partition in a manifest in ``output``, and never deletes a row: what retention removed from
    the log stays in the archive. Offsets that retention deleted before any run exported them are
    data loss, an error unless ``failOnDataLoss`` is false in ``options``.

    ``mirror`` makes the output equal to what the log holds now: dynamic partition overwrite replaces
    exactly the dates the run writes (rows retention deleted from those dates go)."""
    if mode not in EXPORT_MODES:
        raise TierlogError(f"export mode must be one of {', '.join(EXPORT_MODES)}, got {mode!r}")
    if mode == "mirror":
        df = _with_date(_read(spark, paths, spec, options, subscribe=",".join(topics)))
        previous = spark.conf.get("spark.sql.sources.partitionOverwriteMode")
        spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
        try:
            df.write.mode("overwrite").partitionBy("topic", "date").parquet(output)
        finally:
            spark.conf.set("spark.sql.sources.partitionOverwriteMode", previous)
        from pyspark.sql import functions as F

        return int(spark.read.parquet(hadoop_literal(output)).where(F.col("topic").isin(list(topics))).count())

    import json
    import uuid

    from pyspark.sql import functions as F

    from tierlog.pipeline.options import conf_options, parse_options, with_defaults
    from tierlog.pipeline.source import session_conf

    # Where each partition ends now, fixed on the driver: the manifest records exactly what is read.
    # Parsed as format("tierlog") parses them (the session's conf under the options, the master
    # deciding the default tail): on a cluster the offsets not tiered come from the broker.
    conf = session_conf(spark)
    opts = parse_options(with_defaults(conf_options(conf), {**_source_options(paths, spec, options),
                                                            "subscribe": ",".join(topics)}),
                         master=conf.get("spark.master"))
    parts = opts.partitions(opts.discover())
    done = exported_offsets(spark, output, topics)
    todo = {}
    for plog in parts:
        tp = (plog.topic, plog.partition)
        start, end = done.get(tp, plog.earliest), opts.latest(plog)
        if start < end:
            todo[tp] = (start, end)
    if not todo:
        return 0
    run = uuid.uuid4().hex
    manifest = f"{output.rstrip('/')}/{EXPORT_MANIFEST}"
    started = [(run, "started", t, p, start, end) for (t, p), (start, end) in sorted(todo.items())]
    spark.createDataFrame(started, _MANIFEST_SCHEMA).coalesce(1).write.mode("append").json(manifest)
    chosen = sorted({t for t, _ in todo})
    starting = {t: {str(p): todo[(t, p)][0] for tt, p in todo if tt == t} for t in chosen}
    ending = {t: {str(p): todo[(t, p)][1] for tt, p in todo if tt == t} for t in chosen}
    rows = _read(spark, paths, spec, options, startingOffsets=json.dumps(starting), endingOffsets=json.dumps(ending),
                 assign=json.dumps({t: sorted(p for tt, p in todo if tt == t) for t in chosen}))
    _with_date(rows).write.mode("append").partitionBy("topic", "date").parquet(output)
    spark.createDataFrame([(run, "committed", None, None, None, None)], _MANIFEST_SCHEMA).coalesce(1).write.mode(
        "append").json(manifest)
    # The rows this run wrote, read back (the offset column only) rather than counted by a second scan
    # of the log.
    data = spark.read.parquet(hadoop_literal(output))
    ran = F.lit(False)
    for (t, p), (start, end) in todo.items():
        ran = ran | ((F.col("topic") == t) & (F.col("partition") == p) & (F.col("offset") >= start)
                     & (F.col("offset") < end))
    return int(data.where(ran).count())
