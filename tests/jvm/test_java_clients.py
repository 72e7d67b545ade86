"""Apache Kafka 4.3.1's Java clients and command-line tools, unchanged, against ``tierlog serve``.

The clients run from tests/jvm/java/ClientCheck.java (compiled against Kafka's jars at test time);
the tools run by their main classes, as bin/kafka-*.sh would.
"""

from __future__ import annotations

import re
import subprocess
import urllib.request
import uuid

from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.broker import BrokerProcess
from tests.jvm.kafka import (
    BROKER_API_VERSIONS,
    CONFIGS,
    CONSOLE_CONSUMER,
    CONSOLE_PRODUCER,
    CONSUMER_GROUPS,
    CONSUMER_PERF,
    GET_OFFSETS,
    PRODUCER_PERF,
    TOPICS,
    compiled_classes,
    java_command,
    run_tool,
)


def _client(broker: BrokerProcess, check: str, *extra: str, allow_fail: bool = False) -> subprocess.CompletedProcess[str]:
    prefix = f"java-{check}-{uuid.uuid4().hex[:6]}"
    proc = subprocess.run(java_command("ClientCheck", [broker.bootstrap, prefix, check, *extra], extra_cp=[compiled_classes()]),
                          capture_output=True, text=True, timeout=240)
    if not allow_fail:
        assert proc.returncode == 0, f"ClientCheck {check} failed:\n{proc.stdout}\n{proc.stderr[-4000:]}\n{broker.stderr_tail()}"
    return proc


def test_java_producer_idempotent_every_codec_and_consumer(kafka_jars: None, tierlog_broker: BrokerProcess) -> None:
    out = _client(tierlog_broker, "produce").stdout
    assert [line.split()[2] for line in out.splitlines() if line.startswith("ok: produce+read")] == [
        "none", "gzip", "snappy", "lz4", "zstd"]


def test_java_consumer_group_classic_protocol(kafka_jars: None, tierlog_broker: BrokerProcess) -> None:
    assert "ok: group classic 400" in _client(tierlog_broker, "group", "classic").stdout


def test_java_consumer_group_kip848_protocol(kafka_jars: None, tierlog_broker: BrokerProcess) -> None:
    assert "ok: group consumer 400" in _client(tierlog_broker, "group", "consumer").stdout


def test_java_admin_removes_a_static_member_by_instance_id(kafka_jars: None, tierlog_broker: BrokerProcess) -> None:
    assert "ok: static member removed by instance id" in _client(tierlog_broker, "static").stdout


def test_java_admin_client(kafka_jars: None, tierlog_broker: BrokerProcess) -> None:
    before = _requests_by_api(tierlog_broker).get("DescribeTopicPartitions", 0.0)
    out = _client(tierlog_broker, "admin").stdout
    for step in ("describeCluster", "describeTopics", "describeConfigs", "createPartitions", "listOffsets",
                 "deleteRecords", "deleteConsumerGroupOffsets", "consumer group admin", "deleteTopics"):
        assert step in out, out
    assert "ok: describeTopics paged 8 operations" in out, out
    # Kafka 4's Admin describes topics with DescribeTopicPartitions (three calls, the paged one two
    # requests), not Metadata.
    assert _requests_by_api(tierlog_broker).get("DescribeTopicPartitions", 0.0) - before >= 4


def test_kafka_configs_tool_on_groups(kafka_jars: None, tierlog_broker: BrokerProcess) -> None:
    """kafka-configs --entity-type groups (KIP-848 group configs on the GROUP resource)."""
    b = tierlog_broker.bootstrap
    group = f"cfg-{uuid.uuid4().hex[:6]}"
    run_tool(CONFIGS, "--bootstrap-server", b, "--alter", "--entity-type", "groups", "--entity-name", group,
             "--add-config", "consumer.session.timeout.ms=50000,share.auto.offset.reset=earliest")
    described = run_tool(CONFIGS, "--bootstrap-server", b, "--describe", "--entity-type", "groups",
                         "--entity-name", group).stdout
    assert "consumer.session.timeout.ms=50000" in described and "share.auto.offset.reset=earliest" in described, \
        described
    every = run_tool(CONFIGS, "--bootstrap-server", b, "--describe", "--entity-type", "groups", "--entity-name",
                     group, "--all").stdout
    assert "consumer.heartbeat.interval.ms=5000" in every, every
    # Without a name the tool lists the groups that have configs (ListConfigResources, API 74).
    listed = run_tool(CONFIGS, "--bootstrap-server", b, "--describe", "--entity-type", "groups").stdout
    assert f"Dynamic configs for group {group} are:" in listed and "consumer.session.timeout.ms=50000" in listed, \
        listed
    refused = run_tool(CONFIGS, "--bootstrap-server", b, "--alter", "--entity-type", "groups", "--entity-name",
                       group, "--add-config", "consumer.session.timeout.ms=1000", check=False)
    assert refused.returncode != 0
    assert "must be greater than or equal to group.consumer.min.session.timeout.ms" in refused.stdout + refused.stderr
    run_tool(CONFIGS, "--bootstrap-server", b, "--alter", "--entity-type", "groups", "--entity-name", group,
             "--delete-config", "consumer.session.timeout.ms")
    described = run_tool(CONFIGS, "--bootstrap-server", b, "--describe", "--entity-type", "groups",
                         "--entity-name", group).stdout
    assert "consumer.session.timeout.ms" not in described and "share.auto.offset.reset=earliest" in described, \
        described


def _requests_by_api(broker: BrokerProcess) -> dict[str, float]:
    url = next(line.strip()[len("tierlog metrics on "):] for line in broker.stdout_lines
               if line.startswith("tierlog metrics on "))
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {s.labels["api"]: s.value for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == "tierlog_requests_total"}


def test_cli_topics_configs_and_get_offsets(kafka_jars: None, tierlog_broker: BrokerProcess) -> None:
    b = tierlog_broker.bootstrap
    topic = f"cli-{uuid.uuid4().hex[:6]}"
    run_tool(TOPICS, "--bootstrap-server", b, "--create", "--topic", topic, "--partitions", "3",
             "--config", "retention.ms=86400000")
    assert topic in run_tool(TOPICS, "--bootstrap-server", b, "--list").stdout.split()
    described = run_tool(TOPICS, "--bootstrap-server", b, "--describe", "--topic", topic).stdout
    assert "PartitionCount: 3" in described and "retention.ms=86400000" in described, described
    run_tool(TOPICS, "--bootstrap-server", b, "--alter", "--topic", topic, "--partitions", "4")
    run_tool(CONFIGS, "--bootstrap-server", b, "--alter", "--entity-type", "topics", "--entity-name", topic,
             "--add-config", "retention.ms=3600000,segment.bytes=2000000")
    configs = run_tool(CONFIGS, "--bootstrap-server", b, "--describe", "--entity-type", "topics",
                       "--entity-name", topic).stdout
    assert "retention.ms=3600000" in configs and "segment.bytes=2000000" in configs, configs
    brokers = run_tool(CONFIGS, "--bootstrap-server", b, "--describe", "--entity-type", "brokers", "--all").stdout
    assert "log.retention.hours" in brokers or "log.segment.bytes" in brokers, brokers[:2000]

    lines = "".join(f"k{i}:v{i}\n" for i in range(30))
    run_tool(CONSOLE_PRODUCER, "--bootstrap-server", b, "--topic", topic, "--property", "parse.key=true",
             "--property", "key.separator=:", "--producer-property", "enable.idempotence=true", input_text=lines)
    offsets = run_tool(GET_OFFSETS, "--bootstrap-server", b, "--topic", topic).stdout
    ends = {int(m.group(1)): int(m.group(2)) for m in re.finditer(rf"^{re.escape(topic)}:(\d+):(\d+)$", offsets, re.M)}
    assert len(ends) == 4 and sum(ends.values()) == 30, offsets
    earliest = run_tool(GET_OFFSETS, "--bootstrap-server", b, "--topic", topic, "--time", "-2").stdout
    assert all(line.endswith(":0") for line in earliest.split()), earliest

    group = f"console-{topic}"
    consumed = run_tool(CONSOLE_CONSUMER, "--bootstrap-server", b, "--topic", topic, "--from-beginning",
                        "--max-messages", "30", "--group", group, "--formatter-property", "print.key=true",
                        "--formatter-property", "key.separator=:").stdout
    assert sorted(consumed.split()) == sorted(f"k{i}:v{i}" for i in range(30)), consumed
    groups = run_tool(CONSUMER_GROUPS, "--bootstrap-server", b, "--list").stdout
    assert group in groups.split(), groups
    described = run_tool(CONSUMER_GROUPS, "--bootstrap-server", b, "--describe", "--group", group).stdout
    lags = [line.split() for line in described.splitlines() if line.startswith(group)]
    assert len(lags) == 4 and all(row[5] == "0" for row in lags), described  # LAG column
    reset = run_tool(CONSUMER_GROUPS, "--bootstrap-server", b, "--reset-offsets", "--group", group, "--topic",
                     topic, "--to-earliest", "--execute").stdout
    reset_rows = [line.split() for line in reset.splitlines() if line.startswith(group)]
    assert sorted(int(r[2]) for r in reset_rows) == [0, 1, 2, 3] and all(r[3] == "0" for r in reset_rows), reset
    run_tool(CONSUMER_GROUPS, "--bootstrap-server", b, "--delete", "--group", group)
    run_tool(TOPICS, "--bootstrap-server", b, "--delete", "--topic", topic)


def test_cli_perf_tests_and_broker_api_versions(kafka_jars: None, tierlog_broker: BrokerProcess) -> None:
    b = tierlog_broker.bootstrap
    topic = f"perf-{uuid.uuid4().hex[:6]}"
    produced = run_tool(PRODUCER_PERF, "--topic", topic, "--num-records", "20000", "--record-size", "100",
                        "--throughput", "-1", "--producer-props", f"bootstrap.servers={b}", "acks=all",
                        "compression.type=lz4").stdout
    assert "20000 records sent" in produced, produced
    consumed = run_tool(CONSUMER_PERF, "--bootstrap-server", b, "--topic", topic, "--messages", "20000",
                        "--timeout", "60000").stdout
    row = consumed.strip().splitlines()[-1].split(",")
    assert int(row[4].strip()) == 20000, consumed  # data.consumed.in.nMsg
    versions = run_tool(BROKER_API_VERSIONS, "--bootstrap-server", b).stdout
    assert "Produce(0):" in versions and "Fetch(1):" in versions and "ApiVersions(18):" in versions, versions
    assert "UNKNOWN" not in versions.split("Produce(0)", 1)[1].split(",", 1)[0], versions
