"""``max.request.partition.size.limit`` is a key tierlog acts on: DescribeTopicPartitions responses hold
at most that many partitions (the rest through the cursor, as Kafka pages them), and the key is
described and documented as tierlog's own -- not as one of Kafka's keys it accepts and ignores."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.broker import BrokerProcess
from tests.helpers.raw_client import RawClient
from tierlog.config.keys import BROKER_DEF, UNMODELLED_GROUP
from tierlog.protocol import ApiKey

KEY = "max.request.partition.size.limit"


@pytest.fixture
def limited_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", {KEY: "3"}).start()
    yield b
    assert b.stop() == 0, b.stderr_tail()


def test_describe_topic_partitions_pages_by_the_limit(limited_broker: BrokerProcess, topic_name: str) -> None:
    client = RawClient(limited_broker.port, client_id="limit")
    try:
        body = client.call(ApiKey.CREATE_TOPICS, 7, {"topics": [
            {"name": topic_name, "num_partitions": 5, "replication_factor": 1, "assignments": [], "configs": []}],
            "timeout": 30000, "validate_only": False})
        assert body.topics[0].error_code == 0
        body = client.call(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, {
            "topics": [{"name": topic_name}], "response_partition_limit": 2000, "cursor": None})
        assert [p.partition_index for p in body.topics[0].partitions] == [0, 1, 2]
        assert (body.next_cursor.topic_name, body.next_cursor.partition_index) == (topic_name, 3)
        body = client.call(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, {
            "topics": [{"name": topic_name}], "response_partition_limit": 2000,
            "cursor": {"topic_name": topic_name, "partition_index": 3}})
        assert [p.partition_index for p in body.topics[0].partitions] == [3, 4] and body.next_cursor is None
        configs = client.call(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
            {"resource_type": 4, "resource_name": "1", "configuration_keys": [KEY]}],
            "include_synonyms": False, "include_documentation": True}).results[0].configs
        assert [(c.name, c.value) for c in configs] == [(KEY, "3")]
        assert "DescribeTopicPartitions" in configs[0].documentation
        assert "does not act on" not in configs[0].documentation
    finally:
        client.close()


def test_the_key_is_documented_as_one_tierlog_acts_on() -> None:
    key = BROKER_DEF.require(KEY)
    assert key.group != UNMODELLED_GROUP and "does not act on" not in key.doc
    docs = subprocess.run([sys.executable, "-m", "tierlog.cli.main", "config", "docs"], capture_output=True,
                          text=True, check=True).stdout
    kafka_section = docs[docs.index("Apache Kafka's other keys"):]
    assert f"`{KEY}`" in docs and f"`{KEY}`" not in kafka_section
