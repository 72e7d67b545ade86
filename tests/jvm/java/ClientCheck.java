// Drives tierlog with Apache Kafka's own Java clients, unchanged: java ClientCheck BOOTSTRAP TOPIC_PREFIX CHECK
// CHECK is one of: produce (idempotent, every codec), group (classic consumer group), admin.
// Prints "ok: ..." lines; any failure throws, so the exit status is non-zero.
import java.time.Duration;
import java.util.*;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.*;

public class ClientCheck {
    static final String[] CODECS = {"none", "gzip", "snappy", "lz4", "zstd"};
    static final int N = 500;
    // Recent timestamps: older ones would be past the default 7-day retention and deleted at once.
    static final long BASE_MS = System.currentTimeMillis() - 60_000;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], prefix = args[1], check = args[2];
        switch (check) {
            case "produce" -> produceAndRead(bootstrap, prefix);
            case "group" -> group(bootstrap, prefix, args.length > 3 ? args[3] : "classic");
            case "admin" -> admin(bootstrap, prefix);
            case "static" -> staticMember(bootstrap, prefix);
            default -> throw new IllegalArgumentException(check);
        }
    }

    // Security settings (security.protocol, ssl.*, sasl.*) from the properties file named by
    // TIERLOG_CLIENT_CONFIG, as Kafka's tools take them with --command-config.
    static Properties common(String bootstrap) {
        Properties p = new Properties();
        String config = System.getenv("TIERLOG_CLIENT_CONFIG");
        if (config != null) {
            try (java.io.FileReader r = new java.io.FileReader(config)) {
                p.load(r);
            } catch (java.io.IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        }
        p.put("bootstrap.servers", bootstrap);
        return p;
    }

    static void check(boolean condition, String what) {
        if (!condition) throw new AssertionError(what);
    }

    static KafkaProducer<String, String> producer(String bootstrap, String codec) {
        Properties p = common(bootstrap);
        p.put("enable.idempotence", "true");
        p.put("acks", "all");
        p.put("compression.type", codec);
        p.put("linger.ms", "5");
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    static void produceAndRead(String bootstrap, String prefix) throws Exception {
        for (String codec : CODECS) {
            String topic = prefix + "-" + codec;
            List<RecordMetadata> acked = new ArrayList<>();
            try (KafkaProducer<String, String> p = producer(bootstrap, codec)) {
                List<java.util.concurrent.Future<RecordMetadata>> futures = new ArrayList<>();
                for (int i = 0; i < N; i++) {
                    ProducerRecord<String, String> r = new ProducerRecord<>(topic, 0, BASE_MS + i, "k" + i, "v" + i + "-" + codec);
                    r.headers().add("i", Integer.toString(i).getBytes());
                    futures.add(p.send(r));
                }
                for (var f : futures) acked.add(f.get(60, TimeUnit.SECONDS));
            }
            for (int i = 0; i < N; i++) check(acked.get(i).offset() == i, codec + ": record " + i + " acked at " + acked.get(i).offset());
            Properties c = common(bootstrap);
            c.put("auto.offset.reset", "earliest");
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c, new StringDeserializer(), new StringDeserializer())) {
                TopicPartition tp = new TopicPartition(topic, 0);
                consumer.assign(List.of(tp));
                consumer.seekToBeginning(List.of(tp));
                int seen = 0;
                long deadline = System.currentTimeMillis() + 60_000;
                while (seen < N && System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                        check(r.offset() == seen, codec + ": offset " + r.offset() + " where " + seen + " expected");
                        check(r.key().equals("k" + seen) && r.value().equals("v" + seen + "-" + codec), codec + ": record " + seen);
                        check(r.timestamp() == BASE_MS + seen, codec + ": timestamp of " + seen);
                        Header h = r.headers().lastHeader("i");
                        check(h != null && new String(h.value()).equals(Integer.toString(seen)), codec + ": header of " + seen);
                        seen++;
                    }
                }
                check(seen == N, codec + ": read " + seen + " of " + N);
            }
            System.out.println("ok: produce+read " + codec + " " + N);
        }
    }

    static void group(String bootstrap, String prefix, String protocol) throws Exception {
        String topic = prefix + "-group";
        try (Admin admin = Admin.create(common(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 4, (short) 1))).all().get(60, TimeUnit.SECONDS);
        }
        try (KafkaProducer<String, String> p = producer(bootstrap, "lz4")) {
            for (int i = 0; i < 400; i++) p.send(new ProducerRecord<>(topic, "k" + i, "v" + i));
            p.flush();
        }
        String group = prefix + "-g-" + protocol;
        Properties c = common(bootstrap);
        c.put("group.id", group);
        c.put("group.protocol", protocol);
        c.put("auto.offset.reset", "earliest");
        c.put("enable.auto.commit", "false");
        Set<String> seen = new HashSet<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c, new StringDeserializer(), new StringDeserializer())) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 90_000;
            while (seen.size() < 400 && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) seen.add(r.value());
            }
            check(seen.size() == 400, "group consumer read " + seen.size() + " of 400");
            check(consumer.assignment().size() == 4, "assignment " + consumer.assignment());
            consumer.commitSync();
        }
        try (Admin admin = Admin.create(common(bootstrap))) {
            Map<TopicPartition, OffsetAndMetadata> committed = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(60, TimeUnit.SECONDS);
            long total = committed.values().stream().mapToLong(OffsetAndMetadata::offset).sum();
            check(total == 400, "committed offsets sum to " + total);
        }
        System.out.println("ok: group " + protocol + " 400");
    }

    /** A static member (group.instance.id) of a classic group, removed by the Admin by its instance id
     *  (LeaveGroup v3+ with only the instance id), as removeMembersFromConsumerGroup does. */
    static void staticMember(String bootstrap, String prefix) throws Exception {
        String topic = prefix + "-static", group = prefix + "-g-static", instance = prefix + "-instance";
        try (Admin admin = Admin.create(common(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all().get(60, TimeUnit.SECONDS);
        }
        Properties c = common(bootstrap);
        c.put("group.id", group);
        c.put("group.instance.id", instance);
        c.put("session.timeout.ms", "60000");
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c, new StringDeserializer(), new StringDeserializer());
             Admin admin = Admin.create(common(bootstrap))) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 60_000;
            while (consumer.assignment().size() < 2 && System.currentTimeMillis() < deadline) consumer.poll(Duration.ofMillis(200));
            check(consumer.assignment().size() == 2, "static member assignment " + consumer.assignment());
            ConsumerGroupDescription before = admin.describeConsumerGroups(List.of(group)).describedGroups().get(group).get();
            check(before.members().size() == 1 && before.members().iterator().next().groupInstanceId().equals(Optional.of(instance)),
                  "described members " + before.members());
            admin.removeMembersFromConsumerGroup(group, new RemoveMembersFromConsumerGroupOptions(
                List.of(new MemberToRemove(instance)))).all().get(60, TimeUnit.SECONDS);
            ConsumerGroupDescription after = admin.describeConsumerGroups(List.of(group)).describedGroups().get(group).get();
            check(after.members().stream().noneMatch(m -> m.groupInstanceId().equals(Optional.of(instance))),
                  "after removal " + after.members());
            boolean unknown = false;
            try {
                admin.removeMembersFromConsumerGroup(group, new RemoveMembersFromConsumerGroupOptions(
                    List.of(new MemberToRemove(prefix + "-nobody")))).all().get(60, TimeUnit.SECONDS);
            } catch (java.util.concurrent.ExecutionException e) {
                unknown = e.getCause() instanceof org.apache.kafka.common.errors.UnknownMemberIdException;
            }
            check(unknown, "removing an unknown instance id fails with UNKNOWN_MEMBER_ID");
        }
        System.out.println("ok: static member removed by instance id");
    }

    static void admin(String bootstrap, String prefix) throws Exception {
        String topic = prefix + "-admin";
        try (Admin admin = Admin.create(common(bootstrap))) {
            DescribeClusterResult cluster = admin.describeCluster();
            check(cluster.nodes().get().size() == 1, "nodes " + cluster.nodes().get());
            check(cluster.clusterId().get() != null, "cluster id");
            System.out.println("ok: describeCluster " + cluster.clusterId().get() + " controller " + cluster.controller().get().id());
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1).configs(Map.of("retention.ms", "3600000")))).all().get(60, TimeUnit.SECONDS);
            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            check(d.partitions().size() == 3, "partitions " + d.partitions());
            check(admin.listTopics().names().get().contains(topic), "listTopics");
            System.out.println("ok: createTopics describeTopics listTopics " + d.topicId());
            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Config cfg = admin.describeConfigs(List.of(res)).all().get().get(res);
            check(cfg.get("retention.ms").value().equals("3600000"), "retention.ms " + cfg.get("retention.ms"));
            admin.incrementalAlterConfigs(Map.of(res, List.of(new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET)))).all().get();
            cfg = admin.describeConfigs(List.of(res)).all().get().get(res);
            check(cfg.get("retention.ms").value().equals("7200000"), "after alter " + cfg.get("retention.ms"));
            ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, Integer.toString(cluster.controller().get().id()));
            check(!admin.describeConfigs(List.of(broker)).all().get().get(broker).entries().isEmpty(), "broker configs");
            System.out.println("ok: describeConfigs incrementalAlterConfigs");
            admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(4))).all().get();
            check(admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size() == 4, "createPartitions");
            System.out.println("ok: createPartitions");
            // describeTopics goes through DescribeTopicPartitions: two partitions per response make the
            // admin follow the broker's cursor; the authorized operations are every topic operation.
            TopicDescription paged = admin.describeTopics(List.of(topic), new DescribeTopicsOptions()
                .partitionSizeLimitPerResponse(2).includeAuthorizedOperations(true)).allTopicNames().get().get(topic);
            check(paged.partitions().size() == 4 && paged.partitions().get(3).partition() == 3, "paged " + paged.partitions());
            check(paged.authorizedOperations() != null && paged.authorizedOperations().size() == 8,
                  "topic authorized operations " + paged.authorizedOperations());
            System.out.println("ok: describeTopics paged " + paged.authorizedOperations().size() + " operations");
            TopicPartition tp = new TopicPartition(topic, 0);
            try (KafkaProducer<String, String> p = producer(bootstrap, "none")) {
                for (int i = 0; i < 10; i++) p.send(new ProducerRecord<>(topic, 0, BASE_MS + i * 1000, "k", "v" + i));
                p.flush();
            }
            check(admin.listOffsets(Map.of(tp, OffsetSpec.latest())).all().get().get(tp).offset() == 10, "latest");
            check(admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).all().get().get(tp).offset() == 0, "earliest");
            check(admin.listOffsets(Map.of(tp, OffsetSpec.forTimestamp(BASE_MS + 4500))).all().get().get(tp).offset() == 5, "forTimestamp");
            check(admin.listOffsets(Map.of(tp, OffsetSpec.maxTimestamp())).all().get().get(tp).offset() == 9, "maxTimestamp");
            System.out.println("ok: listOffsets");
            admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(4))).all().get();
            check(admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).all().get().get(tp).offset() == 4, "earliest after deleteRecords");
            System.out.println("ok: deleteRecords");
            String group = prefix + "-admin-g";
            admin.alterConsumerGroupOffsets(group, Map.of(tp, new OffsetAndMetadata(7))).all().get();
            check(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get().get(tp).offset() == 7, "listConsumerGroupOffsets");
            check(admin.listGroups().all().get().stream().anyMatch(g -> g.groupId().equals(group)), "listGroups");
            ConsumerGroupDescription gd = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            check(gd.groupId().equals(group), "describeConsumerGroups");
            admin.deleteConsumerGroupOffsets(group, Set.of(tp)).all().get();
            check(!admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get().containsKey(tp), "deleteConsumerGroupOffsets");
            System.out.println("ok: deleteConsumerGroupOffsets");
            admin.deleteConsumerGroups(List.of(group)).all().get();
            System.out.println("ok: consumer group admin (" + gd.groupState() + ")");
            admin.deleteTopics(List.of(topic)).all().get();
            long deadline = System.currentTimeMillis() + 30_000;
            while (admin.listTopics().names().get().contains(topic) && System.currentTimeMillis() < deadline) Thread.sleep(200);
            check(!admin.listTopics().names().get().contains(topic), "deleteTopics");
            System.out.println("ok: deleteTopics");
        }
    }
}
