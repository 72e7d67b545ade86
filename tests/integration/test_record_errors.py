"""KIP-467 per-record errors through ``tierlog serve``: a produced batch some of whose records a check
refuses is refused whole, and ProduceResponse v8+ says which records (``record_errors``: index in the
batch and Kafka's message) and why (``error_message``), as Kafka's LogValidator and ReplicaManager
answer: INVALID_RECORD for keyless records on a compacted topic, INVALID_TIMESTAMP when a record's
timestamp is outside ``message.timestamp.before/after.max.ms``. librdkafka fails only the listed
records with INVALID_RECORD and the others of the batch with ``_INVALID_DIFFERENT_RECORD`` (its test
0011 counts them). Nothing of a refused batch is written."""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker import BrokerProcess
from tests.helpers.raw_client import RawClient
from tierlog.protocol import ApiKey
from tierlog.records import SimpleRecord, build_batch


def _now_ms() -> int:
    return int(time.time() * 1000)


def _create(client: RawClient, name: str, configs: dict[str, str]) -> None:
    body = client.call(ApiKey.CREATE_TOPICS, 7, {"topics": [
        {"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [],
         "configs": [{"name": k, "value": v} for k, v in configs.items()]}], "timeout": 30000, "validate_only": False})
    assert body.topics[0].error_code == 0, body


def _produce(client: RawClient, topic: str, records: bytes, version: int) -> object:
    return client.call(ApiKey.PRODUCE, version, {"acks": -1, "timeout": 30000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]}).responses[0].partition_responses[0]


def _end_offset(client: RawClient, topic: str) -> int:
    body = client.call(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    return int(body.topics[0].partitions[0].offset)


def test_keyless_records_on_a_compacted_topic_are_listed_by_index(broker: BrokerProcess, topic_name: str) -> None:
    client = RawClient(broker.port, client_id="record-errors")
    try:
        _create(client, topic_name, {"cleanup.policy": "compact"})
        now = _now_ms()
        keys = [b"a", None, b"c", None, b"e", None, None]
        batch = build_batch([SimpleRecord(k, b"v", timestamp=now) for k in keys])
        for version in (8, 9, 11):
            part = _produce(client, topic_name, batch, version)
            assert part.error_code == 87, part  # INVALID_RECORD
            assert (part.base_offset, part.log_start_offset) == (-1, 0)
            expected = f"Compacted topic cannot accept message without key in topic partition {topic_name}-0"
            assert [(e.batch_index, e.batch_index_error_message) for e in part.record_errors] == [
                (1, expected), (3, expected), (5, expected), (6, expected)]
            assert part.error_message == (
                "One or more records have been rejected due to 4 record errors in total, and only showing the "
                f"first three errors at most: [RecordError(batchIndex=1, message='{expected}'), "
                f"RecordError(batchIndex=3, message='{expected}'), RecordError(batchIndex=5, message='{expected}')]")
        assert _end_offset(client, topic_name) == 0  # nothing of the refused batch was written
        keyed = build_batch([SimpleRecord(b"k%d" % i, b"v", timestamp=now) for i in range(3)])
        part = _produce(client, topic_name, keyed, 9)
        assert (part.error_code, list(part.record_errors)) == (0, [])
        assert _end_offset(client, topic_name) == 3
    finally:
        client.close()


def test_records_out_of_the_timestamp_range_are_listed_by_index(broker: BrokerProcess, topic_name: str) -> None:
    client = RawClient(broker.port, client_id="record-errors")
    try:
        _create(client, topic_name, {"message.timestamp.before.max.ms": "3600000",
                                     "message.timestamp.after.max.ms": "3600000"})
        now = _now_ms()
        stamps = [now, now - 86_400_000, now, now + 86_400_000]
        part = _produce(client, topic_name, build_batch([SimpleRecord(b"k", b"v", timestamp=t) for t in stamps]), 9)
        assert part.error_code == 32, part  # INVALID_TIMESTAMP
        assert part.error_message == "One or more records have been rejected due to invalid timestamp"
        assert [e.batch_index for e in part.record_errors] == [1, 3]
        for error, stamp in zip(part.record_errors, (stamps[1], stamps[3]), strict=True):
            # "Timestamp T of message with offset N is out of range. The timestamp should be within [A, B]"
            assert error.batch_index_error_message.startswith(
                f"Timestamp {stamp} of message with offset {error.batch_index} is out of range. "
                "The timestamp should be within ["), error
        assert _end_offset(client, topic_name) == 0
    finally:
        client.close()


def test_librdkafka_fails_only_the_listed_records_as_invalid(broker: BrokerProcess, topic_name: str) -> None:
    """confluent-kafka's delivery reports: the keyless records INVALID_RECORD, the rest of their batch
    _INVALID_DIFFERENT_RECORD (as librdkafka's test 0011 expects of Kafka)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1, config={"cleanup.policy": "compact"})])[topic_name].result(30)
    errors: list[int] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 30000, "batch.num.messages": 1000,
                         "retries": 0})
    for i in range(100):
        producer.produce(topic_name, key=None if i % 10 == 3 else b"k%d" % i, value=b"v%d" % i, partition=0,
                         on_delivery=lambda err, _m: errors.append(err.code() if err is not None else 0))
    assert producer.flush(60) == 0
    # One batch of all 100 records: flush() sends at once, and the long linger keeps a stalled produce
    # loop on a loaded machine from letting part of them go early as a batch of their own.
    seen = {code: errors.count(code) for code in set(errors)}
    assert seen == {KafkaError.INVALID_RECORD: 10, KafkaError._INVALID_DIFFERENT_RECORD: 90}, broker.stderr_tail()


def test_a_record_set_of_two_batches_is_refused_whole_and_the_connection_carries_on(
        broker: BrokerProcess, topic_name: str) -> None:
    """Kafka's LogValidator takes one v2 batch per partition from a client: two are INVALID_RECORD with
    its message, nothing of them written; the same connection then produces one batch as usual."""
    client = RawClient(broker.port, client_id="record-errors")
    try:
        _create(client, topic_name, {})
        now = _now_ms()
        one = build_batch([SimpleRecord(b"k", b"v", timestamp=now)])
        part = _produce(client, topic_name, one + one, 9)
        assert part.error_code == 87, part  # INVALID_RECORD
        assert part.error_message == "Compressed outer record has more than one batch"
        assert _end_offset(client, topic_name) == 0
        part = _produce(client, topic_name, one, 9)
        assert (part.error_code, part.base_offset) == (0, 0), part
        assert _end_offset(client, topic_name) == 1
    finally:
        client.close()
