"""ListOffsets MAX_TIMESTAMP with Kafka >= 3.8's meaning (KAFKA-16310, issue 27 point 4): the offset of
the record with the highest timestamp -- the first of equals -- not the last offset of its batch;
also when that record is only in the remote tier."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from tests.helpers.broker import BrokerProcess
from tests.helpers.raw_client import RawClient
from tierlog.protocol import ApiKey
from tierlog.records import SimpleRecord, build_batch


def produce_batch(port: int, topic: str, timestamps: list[int]) -> int:
    data = build_batch([SimpleRecord(None, b"r%d" % i, timestamp=ts) for i, ts in enumerate(timestamps)])
    with RawClient(port) as c:
        body = c.call(ApiKey.PRODUCE, 9, {"acks": -1, "timeout": 10000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": data}]}]})
    p = body.responses[0].partition_responses[0]
    assert p.error_code == 0, p
    return int(p.base_offset)


def max_timestamp(admin: AdminClient, topic: str) -> tuple[int, int]:
    tp = TopicPartition(topic, 0)
    info = admin.list_offsets({tp: OffsetSpec.max_timestamp()}, request_timeout=30)[tp].result(30)
    return int(info.offset), int(info.timestamp)


def wait(what: str, check: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_the_record_with_the_highest_timestamp_first_of_equals(broker: BrokerProcess, topic_name: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    # retention.ms=-1: these 2023 timestamps are past the default 7 days, and the shared broker's
    # retention check (every 5 minutes) would delete the segment whenever it runs.
    admin.create_topics([NewTopic(topic_name, 1, 1, config={"retention.ms": "-1"})])[topic_name].result(30)
    t = 1_700_000_000_000
    produce_batch(broker.port, topic_name, [t + 5, t + 1, t + 2])          # offsets 0-2
    produce_batch(broker.port, topic_name, [t + 3, t + 9, t + 2, t + 9])   # offsets 3-6: max at 4 and 6
    produce_batch(broker.port, topic_name, [t + 7, t + 8])                 # offsets 7-8
    assert max_timestamp(admin, topic_name) == (4, t + 9), broker.stderr_tail()


@pytest.fixture
def tier_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", {"remote.log.manager.task.interval.ms": "200",
                                          "log.retention.check.interval.ms": "200",
                                          "log.segment.delete.delay.ms": "0"}).start()
    yield b
    if b.alive():
        b.stop()


def test_in_the_remote_tier(tier_broker: BrokerProcess, topic_name: str) -> None:
    broker, data = tier_broker, tier_broker.data_dir
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1, config={
        "segment.bytes": "1024", "retention.ms": "-1", "remote.storage.enable": "true",
        "local.retention.bytes": "1"})])[topic_name].result(30)
    t = 1_700_000_000_000
    first = produce_batch(broker.port, topic_name, [t + 10 + i for i in range(20)] + [t + 99, t + 50, t + 99])
    for n in range(6):  # later batches, all older than the max: each in a segment of its own
        produce_batch(broker.port, topic_name, [t + 60 + n] * 30)
    wait("the first segment to be tiered and deleted locally",
         lambda: min(int(p.stem) for p in (data / f"{topic_name}-0").glob("*.log")) > first)
    assert max_timestamp(admin, topic_name) == (first + 20, t + 99)
