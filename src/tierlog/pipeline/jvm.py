"""The JVM fast path of the batch scan: ``tierlog.pipeline.read(spark, path, **options)`` returns the
DataFrame ``spark.read.format("tierlog").options(**options).load(path)`` returns, read by a Java
DataSource V2 reader (jvm/spark-reader) where it can be.

Why a second entry point: ``format("tierlog")`` is a Python data source, and Spark hands every
batch a Python worker makes to the JVM through Arrow and a row-based reader whose CPU alone is as
much as Parquet's whole scan (docs/benchmarks.md, "Where the scan's time goes"). A JVM reader skips
that. Planning stays here: this process plans exactly as ``format("tierlog")`` does (the same
ReadOptions, planner and packing), resolves each range to a file and its byte bounds, and hands the
ranges to the JVM reader as JSON in an option. The name ``tierlog`` cannot serve both: Spark 4.3
refuses to register a Python data source under a name a JVM source already has
(DATA_SOURCE_ALREADY_EXISTS), the Python one is what streaming, S3 and ``tail=broker`` need, and a
JVM provider cannot run the Python planner.

Falls back to the Python reader, logging one line saying why: at WARNING when the jar is not built
(``scripts/build-spark-reader``, run by ``scripts/_env.sh``: it needs a JDK and mvn) or the session
was started without it (``spark_session`` adds it to ``spark.jars`` when it exists); at INFO when a
range is not a local file (a remote tier other than the local-directory one, such as S3, or
``tail=broker``), which only the Python reader reads.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tierlog.errors import TierlogError
from tierlog.pipeline.options import ReadOptions, conf_options, parse_options, with_defaults
from tierlog.pipeline.packing import pack_ranges
from tierlog.pipeline.reader import (
    RemoteSpec,
    ScanRange,
    offset_index_entries,
    position_bounds,
    read_index,
    remote_storage,
    segment_base_offset,
)
from tierlog.tiered.api import IndexType
from tierlog.tiered.backends.local import LOG_SUFFIX, LocalDirectoryRemoteStorageManager

log = logging.getLogger(__name__)

#: The Java provider (jvm/spark-reader/src/main/java/tierlog/spark/RangeSource.java).
READER_CLASS = "tierlog.spark.RangeSource"
#: Where scripts/build-spark-reader puts the jar and its kafka-clients (``TIERLOG_SPARK_READER_DIR``
#: overrides: an installed tierlog has no build/ beside it).
READER_DIR_ENV = "TIERLOG_SPARK_READER_DIR"
READER_JAR = "tierlog-spark-reader.jar"
#: Rows per columnar batch (Spark's own default, spark.sql.parquet.columnarReaderBatchSize).
BATCH_ROWS = 4096
#: Bytes of segment read at a time by the JVM reader (as the Python reader's WINDOW_BYTES).
WINDOW_BYTES = 16 << 20


class FallBack(TierlogError):
    """Why the JVM reader cannot read this scan (the Python reader then does). ``by_design``: the scan
    needs what only the Python reader does (S3, the broker), logged at INFO; otherwise the setup
    lacks the jar, logged at WARNING."""

    def __init__(self, message: str, *, by_design: bool = False) -> None:
        super().__init__(message)
        self.by_design = by_design


def reader_dir() -> Path:
    configured = os.environ.get(READER_DIR_ENV)
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[3] / "build" / "spark-reader"


def reader_jars() -> list[Path]:
    """The jar and the kafka-clients it reads record batches with; FallBack naming what is missing."""
    where = reader_dir()
    jar = where / READER_JAR
    if not jar.is_file():
        why = where / ".not-built"
        cause = why.read_text().strip() if why.is_file() else "scripts/build-spark-reader has not run"
        raise FallBack(f"the JVM reader's jar {jar} is missing: {cause} (scripts/build-spark-reader builds it with "
                       "javac, jar and mvn)")
    deps = sorted((where / "deps").glob("kafka-clients-*.jar"))
    if not deps:
        raise FallBack(f"the JVM reader's kafka-clients jar is missing from {where / 'deps'} "
                       "(fetched by scripts/build-spark-reader with mvn)")
    return [jar, deps[-1]]


def session_jars(conf: dict[str, str]) -> str | None:
    """``spark.jars`` for a new session: the given one plus the JVM reader's jars when they are built
    (None: nothing to add). A session that already brings a kafka-clients (Spark's Kafka source does)
    keeps it: two on one classpath would break both."""
    try:
        jars = reader_jars()
    except FallBack:
        return None
    given = [j for j in conf.get("spark.jars", "").split(",") if j]
    if any(Path(j).name.startswith("kafka-clients-") for j in given):
        jars = jars[:1]
    return ",".join([*given, *(str(j) for j in jars if str(j) not in given)])


def _loadable(spark: Any) -> None:
    jvm = spark.sparkContext._jvm
    try:
        loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        jvm.java.lang.Class.forName(READER_CLASS, False, loader)
    except Exception as e:  # py4j's error for a class not found
        raise FallBack(f"the session was started without the JVM reader's jars ({', '.join(map(str, reader_jars()))}) "
                       "on spark.jars: start it with tierlog.pipeline.spark_session, or add them") from e


def _segment_file(rng: ScanRange, spec: RemoteSpec | None) -> str:
    if rng.log_path is not None:
        return rng.log_path
    where = f"{rng.topic}-{rng.partition} offsets [{rng.start_offset}, {rng.end_offset})"
    if rng.broker is not None:
        raise FallBack(f"{where} are read through the broker (tail=broker)", by_design=True)
    assert rng.remote is not None
    rsm = remote_storage(spec) if spec is not None else None
    if not isinstance(rsm, LocalDirectoryRemoteStorageManager):
        plugin = spec.class_name.rsplit(".", 1)[-1] if spec is not None else "no plugin"
        raise FallBack(f"{where} are in a remote tier the JVM reader does not read ({plugin})", by_design=True)
    return str(rsm.segment_path(rng.remote, LOG_SUFFIX))


def range_json(rng: ScanRange, spec: RemoteSpec | None) -> dict[str, Any]:
    """One range as the JVM reader takes it: the file, and the byte bounds the offset index gives (as
    the Python reader finds them)."""
    path = _segment_file(rng, spec)
    index = offset_index_entries(read_index(rng, IndexType.OFFSET, spec), segment_base_offset(rng))
    position, limit = position_bounds(index, rng.start_offset, rng.end_offset)
    return {"topic": rng.topic, "partition": rng.partition, "start": rng.start_offset, "end": rng.end_offset,
            "path": path, "position": position, "limit": limit,
            "aborted": None if rng.aborted is None else [list(a) for a in rng.aborted]}


def plan_json(packs: Sequence[tuple[ScanRange, ...]], spec: RemoteSpec | None) -> str:
    return json.dumps([[range_json(r, spec) for r in pack if r.start_offset < r.end_offset] for pack in packs])


def read_options(spark: Any, options: dict[str, str]) -> ReadOptions:
    """The options as ``format("tierlog")`` parses them: the session's conf under them (register)."""
    from tierlog.pipeline.source import session_conf

    conf = session_conf(spark)
    return parse_options(with_defaults(conf_options(conf), options), streaming=False, master=conf.get("spark.master"))


def read(spark: Any, path: str | None = None, *, jvm: bool | None = None, **options: str) -> Any:
    """``spark.read.format("tierlog").options(**options).load(path)``, read by the JVM reader where it
    can (see the module docstring). ``jvm=True`` raises FallBack instead of falling back; ``jvm=False``
    always reads with the Python reader."""
    opts = {k: str(v) for k, v in options.items()}
    if path is not None:
        opts["path"] = path
    return load(spark, opts, jvm=jvm)


def load(spark: Any, opts: Mapping[str, str], *, jvm: bool | None = None) -> Any:
    """:func:`read` with the options (``path`` among them) as one mapping."""
    opts = dict(opts)
    if jvm is not False:
        try:
            return _read_jvm(spark, opts)
        except FallBack as e:
            if jvm:
                raise
            log.log(logging.INFO if e.by_design else logging.WARNING, "tierlog: reading with the Python reader: %s", e)
    return spark.read.format("tierlog").options(**opts).load()


def _read_jvm(spark: Any, opts: dict[str, str]) -> Any:
    from tierlog.pipeline.source import TierlogBatchReader

    reader_jars()
    _loadable(spark)
    parsed = read_options(spark, opts)
    if parsed.tail == "broker":  # known before planning: what is not tiered comes through the broker
        raise FallBack("tail=broker reads offsets through the broker", by_design=True)
    batch = TierlogBatchReader(parsed, spark.sparkContext.defaultParallelism)
    packs = pack_ranges(batch.plan(), parsed, batch.parallelism)
    ranges = plan_json(packs, parsed.remote)
    return (spark.read.format(READER_CLASS).option("ranges", ranges).option("includeHeaders", str(parsed.include_headers).lower())
            .option("checkCrcs", str(parsed.check_crcs).lower()).option("batchRows", str(BATCH_ROWS))
            .option("windowBytes", str(WINDOW_BYTES)).load())
