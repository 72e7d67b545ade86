"""Run by tests/jvm/test_spark_kafka_source.py in a process of its own: a streaming query reading a
topic with ``format(SOURCE)`` into a Parquet sink under one checkpoint, until what is there now is read
(Trigger.AvailableNow) -- once per source named on the command line, in that order, each a new query
on the same checkpoint (kafka: through the broker; tierlog: at rest). Between two of them it says
``ready SOURCE`` on stdout and waits for a line on stdin (the test produces more meanwhile). One
process for all of them: a Spark session takes 10-30 s to start on a loaded 2-core machine."""

from __future__ import annotations

import sys
from pathlib import Path


def main() -> None:
    sources, bootstrap, data_dir, topic, jars_dir, checkpoint, out = sys.argv[1:8]
    from tierlog.pipeline import spark_session

    jars = ",".join(str(p) for p in sorted(Path(jars_dir).glob("*.jar")))
    spark = spark_session("local[2]", app_name="switch", conf={
        "spark.jars": jars, "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    for i, source in enumerate(sources.split(",")):
        if i:
            print(f"ready {source}", flush=True)
            if not sys.stdin.readline():
                raise SystemExit("stdin closed before the next phase")
        reader = spark.readStream.format(source).option("subscribe", topic).option("startingOffsets", "earliest")
        reader = (reader.option("kafka.bootstrap.servers", bootstrap) if source == "kafka"
                  else reader.option("path", data_dir))
        stream = reader.load().selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS value")
        query = (stream.writeStream.format("parquet").option("checkpointLocation", checkpoint).option("path", out)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
