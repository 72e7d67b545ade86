"""Kafka's internal topics (``Topic.INTERNAL_TOPICS``: ``__consumer_offsets`` and
``__transaction_state``) through ``tierlog serve``: Metadata marks both internal, and a client may not
produce to, delete, or delete records of either (INVALID_TOPIC_EXCEPTION, as Kafka's ReplicaManager and
controller answer); the coordinators' own state is theirs alone. Other partitions of the same requests
are served."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.helpers.broker import BrokerProcess
from tests.helpers.raw_client import RawClient
from tierlog.protocol import ApiKey
from tierlog.records import SimpleRecord, build_batch

INTERNAL = ("__consumer_offsets", "__transaction_state")
INVALID_TOPIC_EXCEPTION = 17


def _make_both_internal_topics(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "internal-topics-test"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"v")
    producer.commit_transaction(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "internal-topics-test",
                         "enable.auto.commit": False})
    try:
        consumer.assign([])
        consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        consumer.close()


def test_clients_may_read_but_not_write_trim_or_delete_internal_topics(broker: BrokerProcess, topic_name: str) -> None:
    _make_both_internal_topics(broker.bootstrap, topic_name)
    with RawClient(broker.port, client_id="internal-topics") as c:
        meta = c.call(ApiKey.METADATA, 12, {"topics": [{"name": n, "topic_id": None} for n in (*INTERNAL, topic_name)],
                                            "allow_auto_topic_creation": False,
                                            "include_topic_authorized_operations": False})
        assert {t.name: (t.error_code, t.is_internal) for t in meta.topics} == {
            "__consumer_offsets": (0, True), "__transaction_state": (0, True), topic_name: (0, False)}, broker.stderr_tail()

        records = build_batch([SimpleRecord(b"k", b"v")])
        produced = c.call(ApiKey.PRODUCE, 9, {"acks": -1, "timeout": 30000, "topic_data": [
            {"name": n, "partition_data": [{"index": 0, "records": records}]} for n in (*INTERNAL, topic_name)]})
        codes = {t.name: t.partition_responses[0].error_code for t in produced.responses}
        assert codes == {"__consumer_offsets": INVALID_TOPIC_EXCEPTION, "__transaction_state": INVALID_TOPIC_EXCEPTION,
                         topic_name: 0}, (codes, broker.stderr_tail())

        trimmed = c.call(ApiKey.DELETE_RECORDS, 2, {"timeout": 30000, "topics": [
            {"name": n, "partitions": [{"partition_index": 0, "offset": -1}]} for n in (*INTERNAL, topic_name)]})
        answers = {t.name: (t.partitions[0].error_code, t.partitions[0].low_watermark) for t in trimmed.topics}
        assert answers["__consumer_offsets"] == (INVALID_TOPIC_EXCEPTION, -1), (answers, broker.stderr_tail())
        assert answers["__transaction_state"] == (INVALID_TOPIC_EXCEPTION, -1)
        assert answers[topic_name][0] == 0 and answers[topic_name][1] > 0

        deleted = c.call(ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": n, "topic_id": None} for n in INTERNAL],
                                                   "timeout": 30000})
        assert {r.name: r.error_code for r in deleted.responses} == {n: INVALID_TOPIC_EXCEPTION for n in INTERNAL}

    # The coordinators' state is intact: the committed offset is still there.
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "internal-topics-test"})
    try:
        [committed] = consumer.committed([TopicPartition(topic_name, 0)], timeout=30)
        assert committed.offset == 1, broker.stderr_tail()
    finally:
        consumer.close()
