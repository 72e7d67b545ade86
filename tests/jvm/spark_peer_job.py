"""Run by tests/jvm/test_spark_kafka_source.py in a process of its own (its own JVM, with Spark's
Kafka source on the classpath): reads one topic with ``format("kafka")`` through the broker and with
``format("tierlog")`` at rest, and prints what each returned as JSON on the last line."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    bootstrap, data_dir, topic, jars_dir, end = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4]), int(sys.argv[5])
    from tierlog.pipeline import spark_session

    jars = ",".join(str(p) for p in sorted(jars_dir.glob("*.jar")))
    spark = spark_session("local[2]", app_name="spark-kafka-peer", conf={
        "spark.jars": jars, "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC"})
    spark.sparkContext.setLogLevel("ERROR")
    ending = json.dumps({topic: {"0": end}})
    columns = ["topic", "partition", "offset", "key", "value", "timestamp", "timestampType"]
    kafka = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
             .option("startingOffsets", "earliest").option("endingOffsets", ending).load().select(*columns))
    tierlog = (spark.read.format("tierlog").option("path", data_dir).option("subscribe", topic)
               .option("startingOffsets", "earliest").option("endingOffsets", ending).load().select(*columns))
    only_kafka = kafka.exceptAll(tierlog).count()
    only_tierlog = tierlog.exceptAll(kafka).count()
    both = kafka.count(), tierlog.count()
    schema_kafka = [(f.name, f.dataType.simpleString()) for f in kafka.schema.fields]
    schema_tierlog = [(f.name, f.dataType.simpleString()) for f in tierlog.schema.fields]
    first = [r.asDict() for r in kafka.orderBy("offset").limit(1).collect()]
    spark.stop()
    print(json.dumps({"kafka_rows": both[0], "tierlog_rows": both[1], "only_kafka": only_kafka,
                      "only_tierlog": only_tierlog, "schema_kafka": schema_kafka, "schema_tierlog": schema_tierlog,
                      "first": first}, default=str))


if __name__ == "__main__":
    main()
