// Kafka's Java producer with transaction.version 2 (KIP-890 part 2) against tierlog:
//   java TxnV2Check BOOTSTRAP TOPIC TRANSACTIONAL_ID TRANSACTIONS
// Finalizes transaction.version=2 with the Admin client (as kafka-features.sh upgrade does), then runs
// TRANSACTIONS transactions (every third aborted) with one producer, each writing to two partitions and
// committing a group offset, and prints after each end the producer id and epoch DescribeTransactions
// and DescribeProducers show. Then reads the topic read_committed. Prints "epoch: ..." and "ok: ..."
// lines; any failure throws, so the exit status is non-zero.
import java.time.Duration;
import java.util.*;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.serialization.*;

public class TxnV2Check {
    static void check(boolean condition, String what) {
        if (!condition) throw new AssertionError(what);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], txnId = args[2];
        int transactions = Integer.parseInt(args[3]);
        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(common)) {
            admin.updateFeatures(Map.of("transaction.version",
                    new FeatureUpdate((short) 2, FeatureUpdate.UpgradeType.UPGRADE)), new UpdateFeaturesOptions())
                .all().get(30, TimeUnit.SECONDS);
            FinalizedVersionRange tv = admin.describeFeatures().featureMetadata().get(30, TimeUnit.SECONDS)
                .finalizedFeatures().get("transaction.version");
            check(tv != null && tv.maxVersionLevel() == 2, "transaction.version not finalized at 2: " + tv);
            admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all().get(30, TimeUnit.SECONDS);

            Properties p = new Properties();
            p.putAll(common);
            p.put("transactional.id", txnId);
            p.put("linger.ms", "5");
            List<String> committed = new ArrayList<>();
            TopicPartition tp0 = new TopicPartition(topic, 0);
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
                producer.initTransactions();
                for (int t = 0; t < transactions; t++) {
                    boolean abort = t % 3 == 2;
                    producer.beginTransaction();
                    List<String> values = new ArrayList<>();
                    for (int i = 0; i < 10; i++) {
                        String v = "t" + t + "-" + i;
                        producer.send(new ProducerRecord<>(topic, i % 2, "k" + i, v));
                        values.add(v);
                    }
                    producer.flush();
                    producer.sendOffsetsToTransaction(Map.of(tp0, new OffsetAndMetadata(t + 1)),
                            new ConsumerGroupMetadata(txnId + "-group"));
                    if (abort) producer.abortTransaction(); else { producer.commitTransaction(); committed.addAll(values); }
                    TransactionDescription d = admin.describeTransactions(List.of(txnId)).description(txnId)
                        .get(30, TimeUnit.SECONDS);
                    ProducerState onPartition = admin.describeProducers(List.of(tp0)).partitionResult(tp0)
                        .get(30, TimeUnit.SECONDS).activeProducers().stream()
                        .filter(s -> s.producerId() == d.producerId()).findFirst().orElseThrow();
                    System.out.println("epoch: " + (abort ? "abort" : "commit") + " " + d.state() + " "
                            + d.producerId() + " " + d.producerEpoch() + " " + onPartition.producerEpoch());
                }
            }

            Properties c = new Properties();
            c.putAll(common);
            c.put("isolation.level", "read_committed");
            c.put("auto.offset.reset", "earliest");
            List<String> seen = new ArrayList<>();
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c, new StringDeserializer(), new StringDeserializer())) {
                List<TopicPartition> tps = List.of(tp0, new TopicPartition(topic, 1));
                consumer.assign(tps);
                consumer.seekToBeginning(tps);
                Map<TopicPartition, Long> ends = consumer.endOffsets(tps);
                long deadline = System.currentTimeMillis() + 60_000;
                while (System.currentTimeMillis() < deadline
                        && tps.stream().anyMatch(x -> consumer.position(x) < ends.get(x))) {
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) seen.add(r.value());
                }
            }
            Collections.sort(seen);
            Collections.sort(committed);
            check(seen.equals(committed), "read_committed read " + seen.size() + " records, " + committed.size()
                    + " committed: " + seen);
            try (KafkaConsumer<String, String> group = new KafkaConsumer<>(Map.of("bootstrap.servers", bootstrap,
                    "group.id", txnId + "-group"), new StringDeserializer(), new StringDeserializer())) {
                OffsetAndMetadata o = group.committed(Set.of(tp0), Duration.ofSeconds(30)).get(tp0);
                System.out.println("ok: group offset " + (o == null ? -1 : o.offset()));
            }
            System.out.println("ok: read_committed " + seen.size() + " of " + committed.size() + " committed");
        }
    }
}
