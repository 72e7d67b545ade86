"""A Spark driver for tests/pipeline/test_cluster.py, in a process of its own (``python -m
tests.pipeline.cluster_driver MASTER`` from the repository root): one session on MASTER for the whole
module, running what the test asks, one JSON line on stdin at a time:

* ``{"cli": [...]}``: ``tierlog spark ...`` through the CLI's own entry point, in this process (the CLI
  uses the session that exists and leaves it running, as in a notebook);
* ``{"read": {...}, "out": PATH}``: the cluster reads of the test (a batch, a stream, a read that must
  fail on the executor), pickled to PATH.

Each answer is one line on stdout starting with :data:`ANSWER`. Starting a driver JVM (and, on the
cluster, an executor JVM) takes 10-30 s on a loaded 2-core machine; a process per job paid it eleven
times a run, this pays it twice.
"""

from __future__ import annotations

import contextlib
import io
import json
import pickle
import sys
import traceback
from typing import Any

ANSWER = "@@cluster-driver@@ "

#: The session's settings: the web UI off (nothing looks at it), one core of the worker (the test's
#: worker has one), and a fixed time zone for the rows' timestamps.
CONF = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false", "spark.cores.max": "1",
        "spark.executor.memory": "512m", "spark.sql.session.timeZone": "UTC"}


def _read(spark: Any, options: dict[str, dict[str, str]]) -> dict[str, Any]:
    from tests.helpers.pipeline import rows

    result: dict[str, Any] = {}
    result["rows"] = rows(spark.read.format("tierlog").options(**options["broker"]).load())
    # The same as a stream: history from S3 on the executor, the rest through the broker.
    query = (spark.readStream.format("tierlog").options(**options["broker"]).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "1000").load()
             .writeStream.format("memory").queryName("streamed").trigger(availableNow=True).start())
    query.awaitTermination(600)
    result["stream_batches"] = len(query.recentProgress)
    result["stream"] = rows(spark.table("streamed"))
    try:
        spark.read.format("tierlog").options(**options["local"]).load().count()
        result["local"] = "no error"
    except Exception as e:
        result["local"] = str(e)
    return result


def _cli(argv: list[str]) -> dict[str, Any]:
    from tierlog.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse
            rc = e.code if isinstance(e.code, int) else 2
    return {"rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue()}


def main() -> None:
    from pyspark import SparkContext

    from tierlog.pipeline import spark_session

    master = sys.argv[1]
    spark = spark_session(master, app_name="tierlog-cluster-test", conf=CONF)
    spark.sparkContext.setLogLevel("ERROR")
    answer = sys.stdout
    try:
        for line in sys.stdin:
            request = json.loads(line)
            try:
                if "cli" in request:
                    reply = _cli(request["cli"])
                else:
                    with open(request["out"], "wb") as f:
                        pickle.dump(_read(spark, request["read"]), f)
                    reply = {"rc": 0}
                # A job must not stop the shared session (the CLI stops only a session it started).
                assert SparkContext._active_spark_context is not None, "the session was stopped"
            except Exception:
                reply = {"rc": 1, "stdout": "", "stderr": traceback.format_exc()}
            answer.write(ANSWER + json.dumps(reply) + "\n")
            answer.flush()
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
