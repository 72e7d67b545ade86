package tierlog.spark;

import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/** Spark's Kafka source schema (KafkaRecordToRowConverter), as tierlog.pipeline.source.kafka_schema. */
final class Schemas {
    private Schemas() {}

    static final StructType HEADER = new StructType(new StructField[] {
        DataTypes.createStructField("key", DataTypes.StringType, true),
        DataTypes.createStructField("value", DataTypes.BinaryType, true),
    });

    static StructType kafka(boolean includeHeaders) {
        StructType schema = new StructType()
            .add("key", DataTypes.BinaryType, true)
            .add("value", DataTypes.BinaryType, true)
            .add("topic", DataTypes.StringType, true)
            .add("partition", DataTypes.IntegerType, true)
            .add("offset", DataTypes.LongType, true)
            .add("timestamp", DataTypes.TimestampType, true)
            .add("timestampType", DataTypes.IntegerType, true);
        if (includeHeaders) {
            schema = schema.add("headers", new ArrayType(HEADER, true), true);
        }
        return schema;
    }
}
