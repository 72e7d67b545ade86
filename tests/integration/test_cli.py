"""The client commands of the ``tierlog`` CLI (topics, produce, consume, groups), each run through
its entry point as a subprocess against a live broker, with what they claim checked independently
through confluent-kafka's own clients."""

from __future__ import annotations

import json
import socket
import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

from tests.helpers.broker import BrokerProcess
from tests.helpers.cli import cli, fails, ok

pytestmark = pytest.mark.integration


def _admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _topic_configs(broker: BrokerProcess, topic: str) -> dict[str, tuple[str, int]]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = _admin(broker)  # kept alive until the future resolves: a collected client fails it
    entries = admin.describe_configs([resource])[resource].result(30)
    return {name: (e.value, e.source) for name, e in entries.items()}


def _committed(broker: BrokerProcess, group: str, topic: str, partitions: int = 1) -> list[int]:
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    admin = _admin(broker)
    result = admin.list_consumer_group_offsets([request])[group].result(30)
    return [tp.offset for tp in sorted(result.topic_partitions, key=lambda tp: tp.partition)]


def test_topics_create_list_describe_alter_delete(broker: BrokerProcess, topic_name: str) -> None:
    b = ("--bootstrap-server", broker.bootstrap)
    out = ok("topics", "create", topic_name, "--partitions", "3", "--config", "retention.ms=86400000",
             "--config", "segment.bytes=1048576", *b)
    assert out.startswith(f"created topic {topic_name} with 3 partitions")

    metadata = _admin(broker).list_topics(topic_name, timeout=10).topics[topic_name]
    assert metadata.error is None and sorted(metadata.partitions) == [0, 1, 2]
    configs = _topic_configs(broker, topic_name)
    assert configs["retention.ms"] == ("86400000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert configs["segment.bytes"] == ("1048576", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)

    listing = ok("topics", "list", *b).splitlines()
    assert listing[0].split() == ["TOPIC", "PARTITIONS"]
    assert [topic_name, "3"] in [line.split() for line in listing[1:]]
    assert not any(line.startswith("__") for line in listing)
    listed = [json.loads(line) for line in ok("topics", "list", "--json", *b).splitlines()]
    assert {"topic": topic_name, "partitions": 3} in listed

    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for _ in range(4):
        producer.produce(topic_name, b"x", partition=1)
    assert producer.flush(30) == 0

    text = ok("topics", "describe", topic_name, *b)
    assert f"Topic: {topic_name}" in text and "Partitions: 3" in text
    assert "  retention.ms=86400000" in text and "  segment.bytes=1048576" in text
    assert "max.message.bytes" not in text  # at its default
    rows = [line.split() for line in text.splitlines()]
    header = rows.index(["PARTITION", "LEADER", "REPLICAS", "ISR", "LOG-START", "LOG-END"])
    assert rows[header + 1:header + 4] == [["0", "1", "1", "1", "0", "0"], ["1", "1", "1", "1", "0", "4"],
                                           ["2", "1", "1", "1", "0", "0"]]
    described = json.loads(ok("topics", "describe", topic_name, "--json", *b))
    assert described["topic"] == topic_name and len(described["topic_id"]) == 22
    # Kafka's spelling of the id, as partition.metadata stores it (not librdkafka's base64 alphabet).
    stored = (broker.data_dir / f"{topic_name}-0" / "partition.metadata").read_text()
    assert f"topic_id: {described['topic_id']}" in stored, stored
    assert {"name": "retention.ms", "value": "86400000", "source": "topic"} in described["configs"]
    assert [p["log_end_offset"] for p in described["partitions"]] == [0, 4, 0]

    out = ok("topics", "alter", topic_name, "--config", "log.retention.min.timestamp=1700000000000",
             "--config", "retention.ms=3600000", "--delete-config", "segment.bytes", "--partitions", "5", *b)
    assert out.startswith(f"altered topic {topic_name}")
    configs = _topic_configs(broker, topic_name)
    assert configs["log.retention.min.timestamp"] == ("1700000000000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert configs["retention.ms"] == ("3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert configs["segment.bytes"][1] == ConfigSource.DEFAULT_CONFIG.value
    assert len(_admin(broker).list_topics(topic_name, timeout=10).topics[topic_name].partitions) == 5

    assert "TOPIC_ALREADY_EXISTS" in fails("topics", "create", topic_name, *b)
    assert ok("topics", "create", topic_name, "--if-not-exists", *b) == f"topic {topic_name} already exists\n"
    assert "retention.ms" in fails("topics", "alter", topic_name, "--config", "retention.ms=-7", *b)
    assert "partition" in fails("topics", "alter", topic_name, "--partitions", "2", *b)

    assert ok("topics", "delete", topic_name, *b) == f"deleted topic {topic_name}\n"
    deadline = time.monotonic() + 10
    while topic_name in _admin(broker).list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.1)
    assert topic_name not in _admin(broker).list_topics(timeout=10).topics
    assert "UNKNOWN_TOPIC" in fails("topics", "describe", topic_name, *b)
    assert "UNKNOWN_TOPIC" in fails("topics", "delete", topic_name, *b)
    assert ok("topics", "delete", topic_name, "--if-exists", *b) == ""


def test_produce_consume_round_trip_with_keys_and_headers(broker: BrokerProcess, topic_name: str) -> None:
    b = ("--bootstrap-server", broker.bootstrap)
    ok("topics", "create", topic_name, "--partitions", "2", *b)
    lines = [f"key-{i % 5}|value {i} with | inside" for i in range(50)] + ["|keyless is an empty key"]
    out = ok("produce", topic_name, "--key-separator", "|", "--header", "origin=cli", "--header", "n=7",
             "--compression", "zstd", *b, stdin="\n".join(lines) + "\n")
    assert out == f"{len(lines)} of {len(lines)} records acknowledged by {topic_name}\n"

    # What the broker holds, read with librdkafka directly: keys, values and headers as sent.
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"check-{topic_name}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic_name, p, 0) for p in (0, 1)])
    seen = []
    deadline = time.monotonic() + 30
    while len(seen) < len(lines) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            seen.append((msg.partition(), msg.key(), msg.value(), msg.headers()))
    consumer.close()
    expected = {(line.split("|", 1)[0].encode(), line.split("|", 1)[1].encode()) for line in lines}
    assert {(k, v) for _, k, v, _ in seen} == expected and len(seen) == len(lines)
    assert all(h == [("origin", b"cli"), ("n", b"7")] for *_, h in seen)
    by_key: dict[bytes | None, set[int]] = {}
    for p, k, _, _ in seen:
        by_key.setdefault(k, set()).add(p)
    assert all(len(ps) == 1 for ps in by_key.values())  # one key, one partition

    out = ok("consume", topic_name, "--from-beginning", "--max-messages", str(len(lines)), "--print-key",
             "--print-headers", "--print-partition", "--print-offset", *b)
    printed = [line.split("\t") for line in out.splitlines()]
    assert len(printed) == len(lines)
    assert sorted(f"{k}|{v}" for _, _, _, k, v in printed) == sorted(lines)
    assert {h for _, _, h, _, _ in printed} == {"origin:cli,n:7"}
    partitions = {(int(p.removeprefix("Partition:")), int(o.removeprefix("Offset:"))) for p, o, *_ in printed}
    assert len(partitions) == len(lines)

    records = [json.loads(line) for line in ok("consume", topic_name, "--from-beginning", "--json",
                                               "--timeout-ms", "1500", *b).splitlines()]
    assert sorted(f"{r['key']}|{r['value']}" for r in records) == sorted(lines)
    assert all(r["headers"] == [["origin", "cli"], ["n", "7"]] and r["topic"] == topic_name for r in records)

    # Without a key separator each whole line is the value and keys are null; --partition pins it.
    plain = ["alpha", "", "gamma"]
    assert ok("produce", topic_name, "--partition", "1", *b, stdin="\n".join(plain) + "\n").startswith("3 of 3")
    tail = ok("consume", topic_name, "--partition", "1", "--offset", str(max(o for p, o in partitions if p == 1) + 1),
              "--print-key", "--timeout-ms", "1500", *b)
    assert tail.splitlines() == [f"null\t{v}" for v in plain]

    error = fails("produce", topic_name, "--key-separator", "|", *b, stdin="k|v\nno separator here\n")
    assert "line 2 has no key separator" in error


def _produce_ten(broker: BrokerProcess, topic: str) -> int:
    """Records m0..m9 a second apart from an hour ago; returns the first one's timestamp."""
    base = int(time.time() * 1000) - 3_600_000
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(10):
        producer.produce(topic, value=f"m{i}".encode(), timestamp=base + i * 1000)
    assert producer.flush(30) == 0
    return base


def test_consume_from_timestamp_and_offset(broker: BrokerProcess, topic_name: str) -> None:
    b = ("--bootstrap-server", broker.bootstrap)
    ok("topics", "create", topic_name, *b)
    base = _produce_ten(broker, topic_name)

    out = ok("consume", topic_name, "--timestamp", str(base + 6500), "--print-timestamp", "--timeout-ms", "1500", *b)
    assert out.splitlines() == [f"CreateTime:{base + i * 1000}\tm{i}" for i in range(7, 10)]
    out = ok("consume", topic_name, "--timestamp", str(base + 6000), "--max-messages", "2", *b)
    assert out.splitlines() == ["m6", "m7"]
    # Nothing at or after the timestamp: starts at the end, prints nothing.
    assert ok("consume", topic_name, "--timestamp", str(base + 60_000), "--timeout-ms", "1000", *b) == ""
    assert ok("consume", topic_name, "--offset", "8", "--timeout-ms", "1500", *b).splitlines() == ["m8", "m9"]
    # By default a consumer without a group starts at the end.
    assert ok("consume", topic_name, "--timeout-ms", "1000", *b) == ""
    assert "does not exist" in fails("consume", topic_name + "-missing", "--timeout-ms", "1000", *b)
    assert "no partition 3" in fails("consume", topic_name, "--partition", "3", "--timeout-ms", "500", *b)


def test_groups_describe_lag_and_reset_offsets(broker: BrokerProcess, topic_name: str) -> None:
    b = ("--bootstrap-server", broker.bootstrap)
    group = f"g-{topic_name}"
    ok("topics", "create", topic_name, *b)
    base = _produce_ten(broker, topic_name)

    out = ok("consume", topic_name, "--group", group, "--from-beginning", "--max-messages", "4", *b)
    assert out.splitlines() == ["m0", "m1", "m2", "m3"]
    assert _committed(broker, group, topic_name) == [4]

    assert [group, "Empty"] in [line.split() for line in ok("groups", "list", *b).splitlines()]
    text = ok("groups", "describe", group, *b)
    assert f"Group: {group}  State: Empty  Members: 0" in text
    assert [topic_name, "0", "4", "10", "6", "-", "-", "-"] in [line.split() for line in text.splitlines()]
    described = json.loads(ok("groups", "describe", group, "--json", *b))
    assert described["partitions"] == [{"topic": topic_name, "partition": 0, "current_offset": 4,
                                         "log_end_offset": 10, "lag": 6, "consumer_id": None, "host": None,
                                         "client_id": None}]

    # A second run resumes from the committed offset.
    assert ok("consume", topic_name, "--group", group, "--max-messages", "2", *b).splitlines() == ["m4", "m5"]
    assert _committed(broker, group, topic_name) == [6]

    dry = cli("groups", "reset-offsets", group, "--topic", topic_name, "--to-earliest", *b)
    assert dry.returncode == 0, dry.stderr
    assert [group, topic_name, "0", "6", "0"] in [line.split() for line in dry.stdout.splitlines()]
    assert "dry run" in dry.stderr
    assert _committed(broker, group, topic_name) == [6]  # nothing moved

    def reset(*how: str) -> list[dict[str, object]]:
        return [json.loads(line) for line in ok("groups", "reset-offsets", group, "--topic", topic_name, *how,
                                                "--execute", "--json", *b).splitlines()]

    assert reset("--to-earliest") == [{"group": group, "topic": topic_name, "partition": 0, "current_offset": 6,
                                       "new_offset": 0}]
    assert _committed(broker, group, topic_name) == [0]
    assert reset("--to-offset", "7")[0]["new_offset"] == 7
    assert _committed(broker, group, topic_name) == [7]
    assert reset("--to-offset", "999")[0]["new_offset"] == 10  # kept within the log
    assert reset("--to-timestamp", str(base + 2500))[0]["new_offset"] == 3
    assert _committed(broker, group, topic_name) == [3]
    assert reset("--to-latest")[0]["new_offset"] == 10
    assert _committed(broker, group, topic_name) == [10]
    assert reset("--to-timestamp", str(base + 99_000))[0]["new_offset"] == 10
    ok("groups", "reset-offsets", group, f"--topic={topic_name}:0", "--to-offset", "5", "--execute", *b)
    assert ok("consume", topic_name, "--group", group, "--max-messages", "1", *b) == "m5\n"

    # An active member owns the offsets: describe shows it, and --execute refuses.
    member = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "client.id": "the-member",
                       "enable.auto.commit": False})
    try:
        member.subscribe([topic_name])
        deadline = time.monotonic() + 30
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.2)
        assert member.assignment()
        described = json.loads(ok("groups", "describe", group, "--json", *b))
        assert described["state"] == "Stable" and described["members"] == 1
        assert described["partitions"][0]["client_id"] == "the-member"
        assert described["partitions"][0]["current_offset"] == 6
        error = fails("groups", "reset-offsets", group, "--topic", topic_name, "--to-earliest", "--execute", *b)
        assert "no active members" in error and "Stable" in error
        assert _committed(broker, group, topic_name) == [6]
    finally:
        member.close()

    assert "does not exist" in fails("groups", "describe", f"{group}-missing", *b)
    assert "does not exist" in fails("groups", "reset-offsets", group, "--topic", "no-such-topic", "--to-latest", *b)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("command", [
    ["topics", "list"], ["topics", "create", "t"], ["topics", "describe"], ["topics", "alter", "t", "--partitions", "2"],
    ["topics", "delete", "t"], ["produce", "t"], ["consume", "t"], ["groups", "list"], ["groups", "describe", "g"],
    ["groups", "reset-offsets", "g", "--all-topics", "--to-latest"], ["features", "describe"],
    ["features", "upgrade", "--metadata", "3.9-IV0"], ["features", "downgrade", "--metadata", "3.8-IV0"],
])
def test_unreachable_broker_is_one_line_and_exit_1(command: list[str]) -> None:
    bootstrap = f"127.0.0.1:{_closed_port()}"
    started = time.monotonic()
    error = fails(*command, "--bootstrap-server", bootstrap, "--timeout", "2", stdin="a\n")
    assert time.monotonic() - started < 20
    assert error.startswith(f"error: no broker reachable at {bootstrap} within 2s"), error


def test_usage_errors(broker: BrokerProcess, topic_name: str) -> None:
    b = ("--bootstrap-server", broker.bootstrap)
    assert "is not KEY=VALUE" in fails("topics", "create", topic_name, "--config", "retention.ms", *b)
    assert "nothing to change" in fails("topics", "alter", topic_name, *b)
    assert "is not KEY=VALUE" in fails("produce", topic_name, "--header", "novalue", *b, stdin="x\n")
    # argparse's own errors: exit 2 and usage, as every command of the CLI.
    done = cli("groups", "reset-offsets", "g", "--topic", "t", *b)
    assert done.returncode == 2 and "one of the arguments --to-earliest" in done.stderr


@pytest.mark.parametrize("command", [
    [], ["topics"], ["topics", "create"], ["topics", "list"], ["topics", "describe"], ["topics", "alter"],
    ["topics", "delete"], ["produce"], ["consume"], ["groups"], ["groups", "list"], ["groups", "describe"],
    ["groups", "reset-offsets"], ["features"], ["features", "describe"], ["features", "upgrade"],
    ["features", "downgrade"],
])
def test_help(command: list[str]) -> None:
    done = cli(*command, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: tierlog"), done.stdout
    if command and command[-1] in ("list", "describe", "create", "alter", "delete", "produce", "consume",
                                   "reset-offsets", "upgrade", "downgrade"):
        assert "--bootstrap-server HOST:PORT" in done.stdout
