package tierlog.spark;

import java.util.Map;

import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The JVM reader of tierlog's Spark pipeline: reads scan ranges planned by the Python planner
 * (tierlog.pipeline.jvm.read, option {@code ranges}: JSON) from local segment files (the data
 * dir's {@code .log} files and the local-directory remote tier's segment objects) and returns
 * columnar batches with the schema of {@code format("tierlog")} (Spark's Kafka source schema).
 *
 * <p>Not meant to be used with hand-written options: the planner decides which offsets each range
 * covers, where reading starts and stops in the file, and which aborted transactions to skip.
 */
public final class RangeSource implements TableProvider {
    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return Schemas.kafka(options.getBoolean("includeHeaders", false));
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new RangeTable(schema, new CaseInsensitiveStringMap(properties));
    }
}
