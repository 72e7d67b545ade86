"""Run by tests/jvm/test_spark_kafka_source.py in a process of its own (its own JVM, with Spark's
Kafka source on the classpath): reads one topic with ``format("kafka")`` through the broker and with
``format("tierlog")`` at rest -- all of it by offsets, and a range given by timestamps (the broker's
ListOffsets against the time index at rest) -- headers included, and prints what each returned as JSON
on the last line."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    bootstrap, data_dir, topic, jars_dir, end = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4]), int(sys.argv[5])
    ts_from, ts_to = int(sys.argv[6]), int(sys.argv[7])
    from pyspark.sql import DataFrame, SparkSession

    from tierlog.pipeline import spark_session

    jars = ",".join(str(p) for p in sorted(jars_dir.glob("*.jar")))
    spark: SparkSession = spark_session("local[2]", app_name="spark-kafka-peer", conf={
        "spark.jars": jars, "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC"})
    spark.sparkContext.setLogLevel("ERROR")
    columns = ["topic", "partition", "offset", "key", "value", "timestamp", "timestampType", "headers"]

    def read(fmt: str, **options: str) -> DataFrame:
        reader = spark.read.format(fmt).option("subscribe", topic).option("includeHeaders", "true")
        reader = (reader.option("kafka.bootstrap.servers", bootstrap) if fmt == "kafka"
                  else reader.option("path", data_dir))
        for key, value in options.items():
            reader = reader.option(key, value)
        # Cached: each DataFrame is read once (through the broker, or from the files) and every count
        # and comparison below is made on those rows, instead of reading the topic again for each.
        return reader.load().select(*columns).persist()

    def compare(kafka: DataFrame, tierlog: DataFrame) -> dict[str, object]:
        offsets = kafka.agg({"offset": "min"}).first()[0], kafka.agg({"offset": "max"}).first()[0]
        return {"kafka_rows": kafka.count(), "tierlog_rows": tierlog.count(),
                "only_kafka": kafka.exceptAll(tierlog).count(), "only_tierlog": tierlog.exceptAll(kafka).count(),
                "first_offset": offsets[0], "last_offset": offsets[1]}

    by_offsets = {"startingOffsets": "earliest", "endingOffsets": json.dumps({topic: {"0": end}})}
    kafka, tierlog = read("kafka", **by_offsets), read("tierlog", **by_offsets)
    by_time = {"startingOffsetsByTimestamp": json.dumps({topic: {"0": ts_from}}),
               "endingOffsetsByTimestamp": json.dumps({topic: {"0": ts_to}})}
    result = {
        "schema_kafka": [(f.name, f.dataType.simpleString()) for f in kafka.schema.fields],
        "schema_tierlog": [(f.name, f.dataType.simpleString()) for f in tierlog.schema.fields],
        "first": [r.asDict() for r in kafka.orderBy("offset").limit(1).collect()],
        "with_headers": kafka.where("headers is not null and size(headers) > 0").count(),
        "null_header_values": kafka.selectExpr("explode(headers) as h").where("h.value is null").count(),
        "by_offsets": compare(kafka, tierlog),
        "by_timestamps": compare(read("kafka", **by_time), read("tierlog", **by_time)),
    }
    spark.stop()
    print(json.dumps(result, default=str))


if __name__ == "__main__":
    main()
