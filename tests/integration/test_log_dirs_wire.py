"""DescribeLogDirs, AlterReplicaLogDirs, ElectLeaders and the share-group state APIs through ``tierlog
serve``, answered item by item as Kafka's single broker answers them (server/handlers/log_dirs.py and
share_state.py say which Kafka code each answer follows), on the raw wire and through kafka-python's
and confluent-kafka's admin clients. Before, DescribeLogDirs and ElectLeaders answered
UNSUPPORTED_VERSION with no results, and AlterReplicaLogDirs and the share-state APIs closed the
connection."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import ElectionType, KafkaError
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient

from tests.helpers.broker import BrokerProcess
from tests.helpers.raw_client import RawClient
from tierlog.protocol import ApiKey
from tierlog.records import SimpleRecord, build_batch

NO_SUCH_DIR = "/nonexistent-tierlog-log-dir"


def _setup(client: RawClient, topic: str, partitions: int = 2) -> None:
    body = client.call(ApiKey.CREATE_TOPICS, 7, {"topics": [
        {"name": topic, "num_partitions": partitions, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout": 30000, "validate_only": False})
    assert body.topics[0].error_code == 0, body
    batch = build_batch([SimpleRecord(b"k", b"v" * 100) for _ in range(10)])
    body = client.call(ApiKey.PRODUCE, 9, {"acks": -1, "timeout": 30000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    assert body.responses[0].partition_responses[0].error_code == 0


def _log_dir(broker: BrokerProcess) -> str:
    return str(Path(broker.data_dir).resolve())


def test_describe_log_dirs_lists_each_dir_with_the_asked_partitions(broker: BrokerProcess, topic_name: str) -> None:
    with RawClient(broker.port, client_id="log-dirs") as client:
        _setup(client, topic_name)
        for version in (1, 2, 3, 4, 5):
            body = client.call(ApiKey.DESCRIBE_LOG_DIRS, version, {"topics": [
                {"topic": topic_name, "partitions": [0, 1, 7]}, {"topic": "no-such-topic", "partitions": [0]}]})
            if version >= 3:
                assert body.error_code == 0
            assert [r.log_dir for r in body.results] == [_log_dir(broker)]
            result = body.results[0]
            assert result.error_code == 0
            assert [t.name for t in result.topics] == [topic_name]  # the unknown topic and partition 7: left out
            parts = {p.partition_index: p for p in result.topics[0].partitions}
            assert sorted(parts) == [0, 1]
            assert parts[0].partition_size > 0 and parts[1].partition_size == 0
            assert {(p.offset_lag, p.is_future_key) for p in parts.values()} == {(0, False)}
            if version >= 4:
                assert 0 < result.usable_bytes <= result.total_bytes
        everything = client.call(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None}).results[0]
        assert topic_name in {t.name for t in everything.topics}
        nothing = client.call(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": []}).results[0]
        assert (nothing.error_code, list(nothing.topics)) == (0, [])


def test_alter_replica_log_dirs_answers_each_partition(broker: BrokerProcess, topic_name: str) -> None:
    with RawClient(broker.port, client_id="log-dirs") as client:
        _setup(client, topic_name)
        for version in (1, 2):
            body = client.call(ApiKey.ALTER_REPLICA_LOG_DIRS, version, {"dirs": [
                {"path": _log_dir(broker), "topics": [{"name": topic_name, "partitions": [0, 9]},
                                                      {"name": "no-such-topic", "partitions": [0]}]},
                {"path": NO_SUCH_DIR, "topics": [{"name": topic_name, "partitions": [1]}]}]})
            got = {(t.topic_name, p.partition_index): p.error_code for t in body.results for p in t.partitions}
            assert got == {(topic_name, 0): 0,  # already there
                           (topic_name, 9): 9, ("no-such-topic", 0): 9,  # REPLICA_NOT_AVAILABLE
                           (topic_name, 1): 57}  # LOG_DIR_NOT_FOUND


def test_elect_leaders_answers_each_partition(broker: BrokerProcess, topic_name: str) -> None:
    with RawClient(broker.port, client_id="log-dirs") as client:
        _setup(client, topic_name)
        asked = [{"topic": topic_name, "partitions": [0, 1, 5]}, {"topic": "no-such-topic", "partitions": [0]}]
        for version in (0, 1, 2):
            values = {"topic_partitions": asked, "timeout": 30000}
            if version >= 1:
                values["election_type"] = 0 if version == 1 else 1  # preferred, then unclean
            body = client.call(ApiKey.ELECT_LEADERS, version, values)
            if version >= 1:
                assert body.error_code == 0
            got = {(r.topic, p.partition_id): (p.error_code, p.error_message)
                   for r in body.replica_election_results for p in r.partition_result}
            assert got == {
                (topic_name, 0): (84, "Leader election not needed for topic partition."),
                (topic_name, 1): (84, "Leader election not needed for topic partition."),
                (topic_name, 5): (3, f"No such partition as {topic_name}-5"),
                ("no-such-topic", 0): (3, "No such topic as no-such-topic"),
            }
        # Every partition: only those needing an election are listed (none on one broker), each topic named.
        body = client.call(ApiKey.ELECT_LEADERS, 2, {"election_type": 0, "topic_partitions": None, "timeout": 30000})
        results = {r.topic: list(r.partition_result) for r in body.replica_election_results}
        assert results[topic_name] == []
        body = client.call(ApiKey.ELECT_LEADERS, 2, {"election_type": 7, "topic_partitions": asked[:1],
                                                     "timeout": 30000})
        assert body.error_code == 42  # INVALID_REQUEST, on the request and each partition
        assert [p.error_code for p in body.replica_election_results[0].partition_result] == [42, 42, 42]


@pytest.mark.parametrize("api_key,version,verb,fields", [
    (83, 0, "initialize share group state", {"state_epoch": 0, "start_offset": 0}),
    (84, 0, "read share group state", {"leader_epoch": 0}),
    (85, 0, "write share group state", {"state_epoch": 0, "leader_epoch": 0, "start_offset": 0, "state_batches": []}),
    (86, 0, "delete share group state", {}),
    (87, 0, "read share group state summary", {"leader_epoch": 0})])
def test_share_state_apis_answer_not_coordinator_per_partition(broker: BrokerProcess, api_key: int, version: int,
                                                                verb: str, fields: dict[str, object]) -> None:
    topic_id = uuid.uuid4()
    partition = {"partition": 3, **fields}
    with RawClient(broker.port, client_id="share-state") as client:
        body = client.call(api_key, version, {"group_id": "g", "topics": [
            {"topic_id": topic_id, "partitions": [partition, {**partition, "partition": 4}]}]})
        assert [r.topic_id for r in body.results] == [topic_id]
        assert [(p.partition, p.error_code, p.error_message) for p in body.results[0].partitions] == [
            (n, 16, f"Unable to {verb}: This is not the correct coordinator.") for n in (3, 4)]
        # An empty group id or topic list: Kafka's empty answer.
        assert list(client.call(api_key, version, {"group_id": "", "topics": [
            {"topic_id": topic_id, "partitions": [partition]}]}).results) == []
        assert list(client.call(api_key, version, {"group_id": "g", "topics": []}).results) == []
        # DescribeShareGroupOffsets: each group UNSUPPORTED_VERSION (share groups off); the connection lives.
        body = client.call(90, 0, {"groups": [{"group_id": "g1", "topics": None}, {"group_id": "g2", "topics": []}]})
        assert [(g.group_id, g.error_code) for g in body.groups] == [("g1", 35), ("g2", 35)]
        versions = {k.api_key for k in client.call(ApiKey.API_VERSIONS, 3, {
            "client_software_name": "t", "client_software_version": "1"}).api_keys}
        assert {34, 35, 43} <= versions and not versions & {83, 84, 85, 86, 87, 90}


def test_admin_clients_describe_log_dirs_and_elect_leaders(broker: BrokerProcess, topic_name: str) -> None:
    with RawClient(broker.port, client_id="log-dirs") as client:
        _setup(client, topic_name)
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)
    try:
        dirs = kp.describe_log_dirs({topic_name: [0, 1]})
        text = repr(dirs)
        assert _log_dir(broker) in text and topic_name in text, text
        moved = kp.alter_replica_log_dirs({(topic_name, 0, 1): _log_dir(broker),
                                           (topic_name, 1, 1): NO_SUCH_DIR})
        assert sorted(e.__name__ for e in moved.values()) == ["KafkaStorageError", "NoError"] or \
            sorted(e.__name__ for e in moved.values()) == ["LogDirNotFoundError", "NoError"], moved
        response = kp.elect_leaders(0, {topic_name: [0, 1]}, raise_errors=False)
        codes = [p.error_code for r in response.replica_election_results for p in r.partition_result]
        assert codes == [84, 84]
    finally:
        kp.close()
    ck = AdminClient({"bootstrap.servers": broker.bootstrap})
    result = ck.elect_leaders(ElectionType.PREFERRED, [CkTopicPartition(topic_name, 0)]).result(30)
    assert list(result) == [CkTopicPartition(topic_name, 0)], result
    error = next(iter(result.values()))
    assert error is not None and error.code() == KafkaError.ELECTION_NOT_NEEDED, result
