// Kafka Streams word count against tierlog: java WordCount BOOTSTRAP APP_ID STATE_DIR GUARANTEE
// Reads APP_ID-in, counts words in a state store (changelog topic on tierlog), writes APP_ID-out.
// Produces the input itself, runs the topology until the counts are final, prints "count WORD N" lines.
import java.time.Duration;
import java.util.*;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.*;
import org.apache.kafka.streams.*;
import org.apache.kafka.streams.kstream.*;

public class WordCount {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], app = args[1], stateDir = args[2], guarantee = args[3];
        String in = app + "-in", out = app + "-out";
        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(common)) {
            admin.createTopics(List.of(new NewTopic(in, 2, (short) 1), new NewTopic(out, 2, (short) 1))).all().get(60, TimeUnit.SECONDS);
        }
        String[] lines = {"the quick brown fox", "jumps over the lazy dog", "the dog barks", "a fox and a dog"};
        try (KafkaProducer<String, String> p = new KafkaProducer<>(common, new StringSerializer(), new StringSerializer())) {
            for (int round = 0; round < 25; round++) for (String l : lines) p.send(new ProducerRecord<>(in, l));
            p.flush();
        }
        Properties s = new Properties();
        s.putAll(common);
        s.put(StreamsConfig.APPLICATION_ID_CONFIG, app);
        s.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        s.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        s.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "200");
        s.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, "0");
        s.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, "1");
        // Small segments for the internal topics, so the broker's log cleaner has closed changelog
        // segments to compact while the test runs.
        s.put(StreamsConfig.topicPrefix("segment.bytes"), "4096");
        s.put(StreamsConfig.producerPrefix("batch.size"), "1024");
        s.put(StreamsConfig.topicPrefix("min.cleanable.dirty.ratio"), "0.01");
        s.put("consumer.auto.offset.reset", "earliest");
        StreamsBuilder b = new StreamsBuilder();
        b.stream(in, Consumed.with(Serdes.String(), Serdes.String()))
            .flatMapValues(v -> Arrays.asList(v.split(" ")))
            .groupBy((k, w) -> w, Grouped.with(Serdes.String(), Serdes.String()))
            .count(Materialized.as("counts"))
            .toStream().to(out, Produced.with(Serdes.String(), Serdes.Long()));
        Map<String, Long> latest = new TreeMap<>();
        try (KafkaStreams streams = new KafkaStreams(b.build(), s)) {
            streams.setUncaughtExceptionHandler(e -> { e.printStackTrace(); System.exit(3); return null; });
            streams.start();
            Properties c = new Properties();
            c.putAll(common);
            c.put("group.id", app + "-reader");
            c.put("auto.offset.reset", "earliest");
            // Exactly once: the output is read as committed transactions only.
            if (guarantee.startsWith("exactly_once")) c.put("isolation.level", "read_committed");
            try (KafkaConsumer<String, Long> consumer = new KafkaConsumer<>(c, new StringDeserializer(), new LongDeserializer())) {
                consumer.subscribe(List.of(out));
                long deadline = System.currentTimeMillis() + 120_000;
                while (!Long.valueOf(75).equals(latest.get("the")) || !Long.valueOf(75).equals(latest.get("dog")) || !Long.valueOf(50).equals(latest.get("a"))) {
                    if (System.currentTimeMillis() > deadline) throw new AssertionError("counts never became final: " + latest + " state " + streams.state());
                    for (ConsumerRecord<String, Long> r : consumer.poll(Duration.ofMillis(500))) latest.put(r.key(), r.value());
                }
            }
        }
        for (var e : latest.entrySet()) System.out.println("count " + e.getKey() + " " + e.getValue());
    }
}
