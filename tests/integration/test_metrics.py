"""``tierlog serve`` with ``metrics.listener``: librdkafka produces and consumes, two scrapes of
``/metrics`` show the per-API counters, the topic's log size and segments moving, and a timestamp
floor set with the admin client shows up as deletions of reason ``timestamp_floor``."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.broker import BrokerProcess

METRICS_LINE = "tierlog metrics on "
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def metrics_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data: Path = tmp_path_factory.mktemp("metrics") / "data"
    b = BrokerProcess(data, {"metrics.listener": "http://127.0.0.1:0"}).start()
    yield b
    assert b.stop() == 0, b.stderr_tail()


def metrics_url(broker: BrokerProcess) -> str:
    # The metrics line comes before the listener line, so start() has read it already.
    lines = [line.strip() for line in broker.stdout_lines if line.startswith(METRICS_LINE)]
    assert len(lines) == 1, broker.stdout_lines
    url = lines[0][len(METRICS_LINE):]
    assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
    return url


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def get(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_scrapes_show_requests_logs_and_retention_deletions(metrics_broker: BrokerProcess, topic_name: str) -> None:
    url = metrics_url(metrics_broker)
    topic = topic_name
    admin = AdminClient({"bootstrap.servers": metrics_broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1, config={
        "segment.bytes": "4096", "retention.ms": "-1"})])[topic].result(30)
    before = scrape(url)
    assert get(before, "tierlog_log_segments", topic=topic, partition="0") == 1
    assert get(before, "tierlog_log_size_bytes", topic=topic, partition="0") == 0

    producer = Producer({"bootstrap.servers": metrics_broker.bootstrap, "linger.ms": 0, "batch.num.messages": 10})
    for i in range(300):
        producer.produce(topic, key=b"k%d" % i, value=b"v" * 100)
        if i % 10 == 9:
            producer.flush(10)  # small batches, so the records span several 4 KiB segments
    assert producer.flush(30) == 0
    produced_ms = int(time.time() * 1000)

    consumer = Consumer({"bootstrap.servers": metrics_broker.bootstrap, "group.id": f"{topic}-g",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    received = 0
    deadline = time.monotonic() + 60
    while received < 300 and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            received += 1
    assert received == 300

    after = scrape(url)
    assert get(after, "tierlog_connections", listener="PLAINTEXT") >= 2  # the consumer's are still open
    consumer.close()
    for api in ("Produce", "Fetch", "Metadata", "ApiVersions"):
        assert get(after, "tierlog_requests_total", api=api) > get(before, "tierlog_requests_total", api=api), api
        assert get(after, "tierlog_request_duration_seconds_count", api=api) \
            == get(after, "tierlog_requests_total", api=api), api
    # 300 values of 100 bytes went in with Produce and came out with Fetch.
    produce_in = get(after, "tierlog_network_received_bytes_total", api="Produce") \
        - get(before, "tierlog_network_received_bytes_total", api="Produce")
    fetch_out = get(after, "tierlog_network_sent_bytes_total", api="Fetch") \
        - get(before, "tierlog_network_sent_bytes_total", api="Fetch")
    assert produce_in > 30_000 and fetch_out > 30_000
    assert get(after, "tierlog_network_sent_bytes_total", api="Produce") \
        > get(before, "tierlog_network_sent_bytes_total", api="Produce")
    size = get(after, "tierlog_log_size_bytes", topic=topic, partition="0")
    segments = get(after, "tierlog_log_segments", topic=topic, partition="0")
    assert size > 30_000 and segments > 3
    assert get(after, "tierlog_log_end_offset", topic=topic, partition="0") == 300
    assert ("tierlog_metadata_log_size_bytes", frozenset()) in after

    # Seed 004: a timestamp floor above every record deletes the topic's segments; the broker checks
    # retention every 500 ms in these tests.
    floor_before = get(after, "tierlog_log_segment_deletions_total", reason="timestamp_floor")
    change = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("log.retention.min.timestamp", str(produced_ms + 1), incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([change])[change].result(30)
    deadline = time.monotonic() + 30
    latest = after
    while time.monotonic() < deadline:
        latest = scrape(url)
        if get(latest, "tierlog_log_segment_deletions_total", reason="timestamp_floor") >= floor_before + segments - 1:
            break
        time.sleep(0.3)
    deleted = get(latest, "tierlog_log_segment_deletions_total", reason="timestamp_floor") - floor_before
    assert deleted >= segments - 1, (deleted, segments)
    assert get(latest, "tierlog_log_segment_deletions_total", reason="time") == get(
        after, "tierlog_log_segment_deletions_total", reason="time")
    assert get(latest, "tierlog_log_start_offset", topic=topic, partition="0") > 0
    assert get(latest, "tierlog_log_size_bytes", topic=topic, partition="0") < size


def test_a_produce_of_many_partitions_is_synced_by_one_syncfs(metrics_broker: BrokerProcess, topic_name: str) -> None:
    """kafka-python (like Java's producer) puts a batch of every ready partition into one Produce
    request: with acks=all under log.durable.acks=all their files are synced together by syncfs
    (storage/group_commit.py), every record is acknowledged and reads back."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    from tierlog.storage.group_commit import syncfs_stands_in

    if not syncfs_stands_in(metrics_broker.data_dir):
        pytest.skip("syncfs standing in for fdatasyncs needs Linux 5.8+ and the data dir on ext4, XFS or Btrfs")
    url = metrics_url(metrics_broker)
    partitions = 8
    admin = AdminClient({"bootstrap.servers": metrics_broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, num_partitions=partitions, replication_factor=1)])[topic_name].result(30)
    before = scrape(url)
    producer = KafkaProducer(bootstrap_servers=metrics_broker.bootstrap, acks="all", linger_ms=500)
    try:
        producer.partitions_for(topic_name)  # metadata first, so the sends below batch up together
        futures = [producer.send(topic_name, value=f"v{p}".encode(), partition=p) for p in range(partitions)]
        producer.flush(30)
        offsets = [f.get(30).offset for f in futures]
    finally:
        producer.close(10)
    assert offsets == [0] * partitions, metrics_broker.stderr_tail()
    after = scrape(url)
    syncfs_calls = sum(v for (name, _), v in after.items() if name == "tierlog_group_commit_syncfs_total") - sum(
        v for (name, _), v in before.items() if name == "tierlog_group_commit_syncfs_total")
    assert syncfs_calls >= 1, f"{after}\n{metrics_broker.stderr_tail()}"
    consumer = KafkaConsumer(bootstrap_servers=metrics_broker.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=20_000)
    try:
        consumer.assign([TopicPartition(topic_name, p) for p in range(partitions)])
        consumer.seek_to_beginning()
        got = {m.partition: m.value for _, m in zip(range(partitions), consumer, strict=False)}
    finally:
        consumer.close()
    assert got == {p: f"v{p}".encode() for p in range(partitions)}, metrics_broker.stderr_tail()
