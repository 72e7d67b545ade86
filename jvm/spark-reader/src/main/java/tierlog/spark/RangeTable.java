package tierlog.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Set;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** A batch read of the planned ranges: one Spark input partition per pack of ranges. */
final class RangeTable implements SupportsRead {
    private final StructType schema;
    private final CaseInsensitiveStringMap options;

    RangeTable(StructType schema, CaseInsensitiveStringMap options) {
        this.schema = schema;
        this.options = options;
    }

    @Override
    public String name() {
        return "tierlog";
    }

    // Deprecated in Spark 4 for columns(), whose default derives the columns from it; columns() would
    // need Spark's internal CatalogV2Util to build them from a StructType.
    @SuppressWarnings("deprecation")
    @Override
    public StructType schema() {
        return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
        return EnumSet.of(TableCapability.BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap ignored) {
        return () -> new RangeScan(schema, options);
    }

    /** One range: offsets [start, end) of one segment file, read from byte position to limit. */
    static final class Range implements Serializable {
        private static final long serialVersionUID = 1L;
        final String topic;
        final int partition;
        final long start;
        final long end;
        final String path;
        final long position;
        /** Bytes up to which batches can hold wanted offsets; -1: the end of the file. */
        final long limit;
        /** (producer id, first offset, last offset) of aborted transactions; null: read uncommitted. */
        final long[][] aborted;

        Range(JsonNode n) {
            topic = n.get("topic").asText();
            partition = n.get("partition").asInt();
            start = n.get("start").asLong();
            end = n.get("end").asLong();
            path = n.get("path").asText();
            position = n.get("position").asLong();
            limit = n.get("limit").isNull() ? -1 : n.get("limit").asLong();
            JsonNode a = n.get("aborted");
            if (a == null || a.isNull()) {
                aborted = null;
            } else {
                aborted = new long[a.size()][];
                for (int i = 0; i < a.size(); i++) {
                    aborted[i] = new long[] {a.get(i).get(0).asLong(), a.get(i).get(1).asLong(), a.get(i).get(2).asLong()};
                }
            }
        }
    }

    static final class RangePartition implements InputPartition {
        private static final long serialVersionUID = 1L;
        final Range[] ranges;

        RangePartition(Range[] ranges) {
            this.ranges = ranges;
        }
    }

    static final class RangeScan implements Scan, Batch {
        private final StructType schema;
        private final CaseInsensitiveStringMap options;

        RangeScan(StructType schema, CaseInsensitiveStringMap options) {
            this.schema = schema;
            this.options = options;
        }

        @Override
        public StructType readSchema() {
            return schema;
        }

        @Override
        public String description() {
            return "tierlog JVM reader";
        }

        @Override
        public Batch toBatch() {
            return this;
        }

        @Override
        public InputPartition[] planInputPartitions() {
            String json = options.get("ranges");
            if (json == null) {
                throw new IllegalArgumentException("the tierlog JVM reader needs option 'ranges' (use tierlog.pipeline.read)");
            }
            try {
                JsonNode packs = new ObjectMapper().readTree(json);
                List<InputPartition> out = new ArrayList<>();
                for (JsonNode pack : packs) {
                    Range[] ranges = new Range[pack.size()];
                    for (int i = 0; i < pack.size(); i++) {
                        ranges[i] = new Range(pack.get(i));
                    }
                    out.add(new RangePartition(ranges));
                }
                return out.toArray(new InputPartition[0]);
            } catch (java.io.IOException e) {
                throw new IllegalArgumentException("option 'ranges' is not the planner's JSON: " + e.getMessage(), e);
            }
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            return new Factory(schema, options.getBoolean("checkCrcs", true), options.getInt("batchRows", 4096),
                options.getInt("windowBytes", SegmentReader.WINDOW_BYTES));
        }
    }

    static final class Factory implements PartitionReaderFactory {
        private static final long serialVersionUID = 1L;
        private final StructType schema;
        private final boolean checkCrcs;
        private final int batchRows;
        private final int windowBytes;

        Factory(StructType schema, boolean checkCrcs, int batchRows, int windowBytes) {
            this.schema = schema;
            this.checkCrcs = checkCrcs;
            this.batchRows = batchRows;
            this.windowBytes = windowBytes;
        }

        @Override
        public boolean supportColumnarReads(InputPartition partition) {
            return true;
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            throw new UnsupportedOperationException("the tierlog JVM reader is columnar");
        }

        @Override
        public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
            return new SegmentReader(((RangePartition) partition).ranges, schema, checkCrcs, batchRows, windowBytes);
        }
    }
}
