package tierlog.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;

import org.apache.kafka.common.errors.CorruptRecordException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.record.MemoryRecords;
import org.apache.kafka.common.record.MutableRecordBatch;
import org.apache.kafka.common.record.Record;
import org.apache.kafka.common.utils.BufferSupplier;
import org.apache.kafka.common.utils.CloseableIterator;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Reads the ranges of one input partition, one after the other, into columnar batches of up to
 * {@code batchRows} rows (a batch never spans two ranges: topic and partition are constant columns).
 *
 * <p>The segment is read in windows of {@link #WINDOW_BYTES} (option windowBytes) into one reused
 * heap buffer, grown for a batch larger than that; the
 * batch framing is walked here (so a zero-filled preallocated tail ends the log, as recovery would
 * cut it, rather than raising) and each whole record batch is decoded by Apache Kafka's own
 * record-batch code (CRC, every codec, LogAppendTime, headers). What is returned matches the Python
 * reader (tierlog/pipeline/reader.py): control batches are skipped, only offsets in [start, end),
 * and read_committed drops transactional batches of aborted transactions.
 */
final class SegmentReader implements PartitionReader<ColumnarBatch> {
    static final int WINDOW_BYTES = 16 << 20;
    private static final int LOG_OVERHEAD = 12;
    private static final int HEADER_UP_TO_MAGIC = 17;
    private static final int MIN_BATCH_LENGTH = 14;
    private static final int BATCH_HEADER = 61;

    private final TierlogRange[] ranges;
    private final boolean checkCrcs;
    private final int batchRows;
    private final int windowBytes;
    private final boolean includeHeaders;

    private final WritableColumnVector key;
    private final WritableColumnVector value;
    private final ConstantColumnVector topic;
    private final ConstantColumnVector partition;
    private final WritableColumnVector offset;
    private final WritableColumnVector timestamp;
    private final WritableColumnVector timestampType;
    private final WritableColumnVector headers;
    private final ColumnarBatch batch;
    private final BufferSupplier buffers = BufferSupplier.create();

    private int next;  // the next range to open
    private TierlogRange range;
    private FileChannel channel;
    private long fileEnd;
    /** Segment position of buf[0]; buf holds [bufStart, bufStart + buf.limit()). */
    private long bufStart;
    private ByteBuffer buf = ByteBuffer.allocate(0);
    private int at;  // the next batch's position in buf
    private boolean eof;
    private boolean rangeDone;
    private CloseableIterator<Record> records;
    private int recordsType;

    SegmentReader(RangeTable.Range[] planned, StructType schema, boolean checkCrcs, int batchRows, int windowBytes) {
        this.ranges = new TierlogRange[planned.length];
        for (int i = 0; i < planned.length; i++) {
            ranges[i] = new TierlogRange(planned[i]);
        }
        this.checkCrcs = checkCrcs;
        this.batchRows = batchRows;
        this.windowBytes = windowBytes;
        this.includeHeaders = schema.fields().length > 7;
        key = new OnHeapColumnVector(batchRows, DataTypes.BinaryType);
        value = new OnHeapColumnVector(batchRows, DataTypes.BinaryType);
        topic = new ConstantColumnVector(batchRows, DataTypes.StringType);
        partition = new ConstantColumnVector(batchRows, DataTypes.IntegerType);
        offset = new OnHeapColumnVector(batchRows, DataTypes.LongType);
        timestamp = new OnHeapColumnVector(batchRows, DataTypes.TimestampType);
        timestampType = new OnHeapColumnVector(batchRows, DataTypes.IntegerType);
        headers = includeHeaders ? new OnHeapColumnVector(batchRows, schema.fields()[7].dataType()) : null;
        ColumnVector[] columns = includeHeaders
            ? new ColumnVector[] {key, value, topic, partition, offset, timestamp, timestampType, headers}
            : new ColumnVector[] {key, value, topic, partition, offset, timestamp, timestampType};
        batch = new ColumnarBatch(columns);
    }

    /** A planned range with its topic's bytes made once. */
    private static final class TierlogRange {
        final RangeTable.Range r;
        final UTF8String topic;

        TierlogRange(RangeTable.Range r) {
            this.r = r;
            this.topic = UTF8String.fromBytes(r.topic.getBytes(StandardCharsets.UTF_8));
        }
    }

    @Override
    public boolean next() throws IOException {
        while (true) {
            if (range == null && !openNext()) {
                return false;
            }
            int rows = fill();
            if (rows > 0) {
                topic.setUtf8String(range.topic);
                partition.setInt(range.r.partition);
                batch.setNumRows(rows);
                return true;
            }
            closeRange();
        }
    }

    @Override
    public ColumnarBatch get() {
        return batch;
    }

    private boolean openNext() throws IOException {
        while (next < ranges.length) {
            TierlogRange candidate = ranges[next++];
            if (candidate.r.start >= candidate.r.end) {
                continue;
            }
            range = candidate;
            channel = FileChannel.open(Paths.get(candidate.r.path), StandardOpenOption.READ);
            long size = channel.size();
            fileEnd = candidate.r.limit >= 0 ? Math.min(size, candidate.r.limit) : size;
            bufStart = candidate.r.position;
            buf.clear().limit(0);
            at = 0;
            eof = false;
            rangeDone = false;
            return true;
        }
        return false;
    }

    private void closeRange() throws IOException {
        if (records != null) {
            records.close();
            records = null;
        }
        if (channel != null) {
            channel.close();
            channel = null;
        }
        range = null;
    }

    /** Rows of the current range into the vectors, up to batchRows; 0 when the range is done. */
    private int fill() throws IOException {
        key.reset();
        value.reset();
        offset.reset();
        timestamp.reset();
        timestampType.reset();
        if (headers != null) {
            headers.reset();
        }
        int rows = 0;
        RangeTable.Range r = range.r;
        while (rows < batchRows) {
            if (records != null && records.hasNext()) {
                Record record = records.next();
                long o = record.offset();
                if (o < r.start || o >= r.end) {
                    continue;
                }
                append(key, record.key());
                append(value, record.value());
                offset.appendLong(o);
                timestamp.appendLong(Math.multiplyExact(record.timestamp(), 1000L));
                timestampType.appendInt(recordsType);
                if (headers != null) {
                    appendHeaders(record.headers());
                }
                rows++;
                continue;
            }
            if (records != null) {
                records.close();
                records = null;
            }
            if (rangeDone || !nextBatch()) {
                rangeDone = true;
                break;
            }
        }
        return rows;
    }

    private static void append(WritableColumnVector column, ByteBuffer bytes) {
        if (bytes == null) {
            column.appendNull();
        } else if (bytes.hasArray()) {
            column.appendByteArray(bytes.array(), bytes.arrayOffset() + bytes.position(), bytes.remaining());
        } else {
            byte[] copy = new byte[bytes.remaining()];
            bytes.duplicate().get(copy);
            column.appendByteArray(copy, 0, copy.length);
        }
    }

    private void appendHeaders(Header[] hs) {
        if (hs.length == 0) {
            headers.appendNull();  // null, not an empty array, as Spark's Kafka source
            return;
        }
        headers.appendArray(hs.length);
        WritableColumnVector structs = headers.arrayData();
        WritableColumnVector keys = structs.getChild(0);
        WritableColumnVector values = structs.getChild(1);
        for (Header h : hs) {
            structs.appendStruct(false);
            byte[] k = h.key().getBytes(StandardCharsets.UTF_8);
            keys.appendByteArray(k, 0, k.length);
            byte[] v = h.value();
            if (v == null) {
                values.appendNull();
            } else {
                values.appendByteArray(v, 0, v.length);
            }
        }
    }

    /** Positions {@link #records} on the next wanted batch of the range; false at its end. */
    private boolean nextBatch() throws IOException {
        RangeTable.Range r = range.r;
        while (true) {
            int avail = buf.limit() - at;
            if (avail < HEADER_UP_TO_MAGIC) {
                if (eof) {
                    return false;
                }
                refill(HEADER_UP_TO_MAGIC);
                continue;
            }
            int length = buf.getInt(at + 8);
            long where = bufStart + at;
            if (length < MIN_BATCH_LENGTH) {
                if (length == 0) {
                    return false;  // the zero-filled, never-written tail of a segment: the log ends here
                }
                throw corrupt("record batch at position " + where + " has a length below the minimum");
            }
            int size = LOG_OVERHEAD + length;
            if (avail < size) {
                if (eof) {
                    return false;  // a partial batch at the end: as recovery would cut it
                }
                refill(size);
                continue;
            }
            if (buf.get(at + 16) != 2) {
                throw corrupt("record batch at position " + where + " has an unsupported magic");
            }
            if (size < BATCH_HEADER) {
                throw corrupt("record batch at position " + where + " is shorter than the 61-byte header");
            }
            ByteBuffer slice = buf.duplicate();
            slice.position(at).limit(at + size);
            at += size;
            MutableRecordBatch b = MemoryRecords.readableRecords(slice.slice()).batches().iterator().next();
            long base = b.baseOffset();
            if (base >= r.end) {
                return false;
            }
            if (b.isControlBatch() || b.lastOffset() < r.start || aborted(r, b)) {
                continue;
            }
            if (checkCrcs && !b.isValid()) {
                throw corrupt("record batch at position " + where + " is corrupt (CRC mismatch)");
            }
            recordsType = b.timestampType() == TimestampType.LOG_APPEND_TIME ? 1 : 0;
            records = b.streamingIterator(buffers);
            return true;
        }
    }

    private static boolean aborted(RangeTable.Range r, MutableRecordBatch b) {
        if (r.aborted == null || !b.isTransactional()) {
            return false;
        }
        long pid = b.producerId();
        long base = b.baseOffset();
        for (long[] txn : r.aborted) {
            if (txn[0] == pid && base >= txn[1] && base <= txn[2]) {
                return true;
            }
        }
        return false;
    }

    /** Moves the unread bytes to the front and reads more, growing the buffer to hold {@code need}. */
    private void refill(int need) throws IOException {
        int keep = buf.limit() - at;
        int capacity = Math.max(Math.max(windowBytes, need), buf.capacity());
        if (buf.capacity() < capacity) {
            ByteBuffer bigger = ByteBuffer.allocate(capacity);
            bigger.put(buf.duplicate().position(at).limit(buf.limit()));
            buf = bigger;
        } else {
            buf.limit(buf.limit()).position(at);
            buf.compact();
        }
        bufStart += at;
        at = 0;
        // buf is in write mode at position keep
        long from = bufStart + keep;
        int want = (int) Math.min(buf.capacity() - keep, Math.max(0L, fileEnd - from));
        buf.limit(keep + want);
        while (buf.hasRemaining()) {
            int n = channel.read(buf, bufStart + buf.position());
            if (n < 0) {
                break;
            }
        }
        if (bufStart + buf.position() >= fileEnd || buf.hasRemaining()) {
            eof = true;
        }
        buf.flip();
    }

    private IOException corrupt(String what) {
        RangeTable.Range r = range.r;
        return new IOException(new CorruptRecordException(r.topic + "-" + r.partition + ": " + what));
    }

    @Override
    public void close() throws IOException {
        closeRange();
        batch.close();
        buffers.close();
    }
}
