"""Run by tests/jvm/test_spark_kafka_source.py in a process of its own: one streaming query's phase,
reading a topic with ``format(SOURCE)`` (kafka: through the broker; tierlog: at rest) into a Parquet
sink under one checkpoint, until what is there now is read (Trigger.AvailableNow)."""

from __future__ import annotations

import sys
from pathlib import Path


def main() -> None:
    source, bootstrap, data_dir, topic, jars_dir, checkpoint, out = sys.argv[1:8]
    from tierlog.pipeline import spark_session

    jars = ",".join(str(p) for p in sorted(Path(jars_dir).glob("*.jar")))
    spark = spark_session("local[2]", app_name=f"switch-{source}", conf={
        "spark.jars": jars, "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
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
