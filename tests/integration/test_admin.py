"""Administration through confluent-kafka's AdminClient: topics with configs, config changes that
reach the logs (the timestamp floor of seed 004 deleting old segments), DeleteRecords, offsets by
time, partitions, groups, and topic deletion."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from tests.helpers.broker import BrokerProcess

DAY_MS = 86_400_000


def _admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _earliest(admin: AdminClient, topic: str, spec: OffsetSpec | None = None) -> int:
    tp = TopicPartition(topic, 0)
    result = admin.list_offsets({tp: spec or OffsetSpec.earliest()}, request_timeout=30)
    return int(result[tp].result(30).offset)


def test_topic_lifecycle_with_configs_retention_floor_and_delete_records(broker: BrokerProcess, topic_name: str) -> None:
    admin = _admin(broker)
    topic = topic_name
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1, config={
        "segment.bytes": "4096", "retention.ms": "-1", "cleanup.policy": "delete"})])[topic].result(30)

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["segment.bytes"].value == "4096"
    assert configs["segment.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["retention.ms"].value == "-1"
    assert configs["log.retention.min.timestamp"].value == "0"
    assert configs["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value

    now = int(time.time() * 1000)
    old, new = now - 10 * DAY_MS, now - DAY_MS
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.num.messages": 10})
    for i in range(300):
        producer.produce(topic, value=b"v" * 100, timestamp=old if i < 200 else new)
        if i % 10 == 9:
            producer.flush(10)  # small batches, so the old records span several 4 KiB segments
    assert producer.flush(30) == 0
    assert _earliest(admin, topic) == 0
    assert _earliest(admin, topic, OffsetSpec.latest()) == 300
    assert _earliest(admin, topic, OffsetSpec.for_timestamp(new)) == 200
    assert _earliest(admin, topic, OffsetSpec.max_timestamp()) >= 200

    floor = now - 5 * DAY_MS
    change = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("log.retention.min.timestamp", str(floor), incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([change])[change].result(30)
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["log.retention.min.timestamp"].value == str(floor)

    deadline = time.monotonic() + 30
    earliest = 0
    while time.monotonic() < deadline:
        earliest = _earliest(admin, topic)
        if earliest > 0:
            break
        time.sleep(0.2)
    # Every segment holding only old records is gone; the one where the new records start stays.
    assert 100 < earliest <= 200, earliest

    deleted = admin.delete_records([TopicPartition(topic, 0, 250)])
    low = next(iter(deleted.values())).result(30)
    assert low.low_watermark == 250
    assert _earliest(admin, topic) == 250

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])  # below the start offset: reset to earliest
    msg = None
    deadline = time.monotonic() + 30
    while msg is None and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
    consumer.close()
    assert msg is not None and msg.error() is None and msg.offset() == 250

    admin.delete_topics([topic])[topic].result(30)
    deadline = time.monotonic() + 10
    while topic in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.1)
    assert topic not in admin.list_topics(timeout=10).topics


def test_create_topic_errors_partitions_and_cluster(broker: BrokerProcess, topic_name: str) -> None:
    admin = _admin(broker)
    with pytest.raises(Exception, match="(?i)invalid|illegal"):
        admin.create_topics([NewTopic("bad name!", num_partitions=1, replication_factor=1)])["bad name!"].result(30)
    with pytest.raises(Exception, match="(?i)replication"):
        admin.create_topics([NewTopic(topic_name + "-rf", num_partitions=1, replication_factor=3)])[
            topic_name + "-rf"].result(30)
    with pytest.raises(Exception, match="(?i)config"):
        admin.create_topics([NewTopic(topic_name + "-cfg", num_partitions=1, replication_factor=1,
                                      config={"retention.ms": "-7"})])[topic_name + "-cfg"].result(30)

    admin.create_topics([NewTopic(topic_name, num_partitions=2, replication_factor=1)])[topic_name].result(30)
    with pytest.raises(Exception, match="(?i)exist"):
        admin.create_topics([NewTopic(topic_name, num_partitions=2, replication_factor=1)])[topic_name].result(30)
    admin.create_partitions([NewPartitions(topic_name, 5)])[topic_name].result(30)
    assert len(admin.list_topics(topic_name, timeout=10).topics[topic_name].partitions) == 5

    cluster = admin.describe_cluster().result(30)
    assert [n.port for n in cluster.nodes] == [broker.port]
    assert cluster.controller.id == 1

    broker_resource = ConfigResource(ConfigResource.Type.BROKER, "1")
    configs = admin.describe_configs([broker_resource])[broker_resource].result(30)
    assert configs["offsets.topic.num.partitions"].value == "10"
    assert configs["offsets.topic.num.partitions"].source == ConfigSource.STATIC_BROKER_CONFIG.value


def test_consumer_groups_admin(broker: BrokerProcess, topic_name: str) -> None:
    admin = _admin(broker)
    admin.create_topics([NewTopic(topic_name, num_partitions=1, replication_factor=1)])[topic_name].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        producer.produce(topic_name, value=str(i).encode())
    producer.flush(30)
    group = f"g-{topic_name}"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic_name])
    got = 0
    deadline = time.monotonic() + 30
    while got < 10 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got += 1
    consumer.commit(asynchronous=False)

    described = admin.describe_consumer_groups([group])[group].result(30)
    assert described.state.name == "STABLE"
    assert len(described.members) == 1
    listed = admin.list_consumer_groups().result(30)
    assert group in {g.group_id for g in listed.valid}

    consumer.close()
    from confluent_kafka import ConsumerGroupTopicPartitions

    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
    assert [(tp.topic, tp.partition, tp.offset) for tp in offsets.topic_partitions] == [(topic_name, 0, 10)]
    admin.delete_consumer_groups([group])[group].result(30)
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(30).valid}
