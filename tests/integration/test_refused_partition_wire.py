"""A partition refused at startup (its files hold a record format tierlog does not read, see
tests/unit/storage/test_unsupported_format.py) answers each request for it with KAFKA_STORAGE_ERROR,
while the other partitions of the same request are served and the connection stays open. Before,
a Fetch or OffsetForLeaderEpoch naming it raised out of the handler and the broker closed the
client's connection (found by a disk-damage round: a flipped magic byte on a segment's last batch),
and DescribeProducers answered UNKNOWN_TOPIC_OR_PARTITION."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Producer

from tests.helpers.broker import BrokerProcess
from tests.helpers.raw_client import RawClient
from tests.helpers.records import legacy_message
from tests.reliability.harness import create_topic, fetch_request
from tierlog.errors import ErrorCode
from tierlog.protocol import ApiKey
from tierlog.records import SimpleRecord, build_batch, decode_batch, iter_headers
from tierlog.storage.checkpoints import CLEAN_SHUTDOWN

SEGMENT = "00000000000000000000.log"


def test_a_refused_partition_answers_kafka_storage_error_and_keeps_the_connection(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        create_topic(broker.port, "old", 1)
        create_topic(broker.port, "good", 1)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        producer.produce("good", b"fine", partition=0)
        assert producer.flush(30) == 0
        assert broker.stop() == 0, broker.stderr_tail()
        old_bytes = legacy_message(0, b"a") + legacy_message(1, b"b")
        (tmp_path / "data" / "old-0" / SEGMENT).write_bytes(old_bytes)
        (tmp_path / "data" / CLEAN_SHUTDOWN).unlink()  # recovery walks the segment: refused at startup
        broker.start()
        assert "partition refused topic=old partition=0" in broker.log_path.read_text(), broker.stderr_tail()
        with RawClient(broker.port) as client:
            request = fetch_request("old", 0, 0, 1 << 20)
            request["topics"].append(fetch_request("good", 0, 0, 1 << 20)["topics"][0])
            fetched = {t.topic: t.partitions[0] for t in client.call(ApiKey.FETCH, 11, request).responses}
            assert fetched["old"].error_code == ErrorCode.KAFKA_STORAGE_ERROR, broker.stderr_tail()
            assert fetched["good"].error_code == ErrorCode.NONE
            values = [r.value for h in iter_headers(bytes(fetched["good"].records or b"")) for r in decode_batch(h)]
            assert values == [b"fine"]
            epochs = client.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {"replica_id": -1, "topics": [
                {"topic": "old", "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]})
            assert epochs.topics[0].partitions[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR
            listed = client.call(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": "old", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
            assert listed.topics[0].partitions[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR
            described = client.call(ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [
                {"name": "old", "partition_indexes": [0]}, {"name": "good", "partition_indexes": [0]}]})
            codes = {t.name: t.partitions[0].error_code for t in described.topics}
            assert codes == {"old": ErrorCode.KAFKA_STORAGE_ERROR, "good": ErrorCode.NONE}, broker.stderr_tail()
        assert "Traceback" not in broker.log_path.read_text(), broker.stderr_tail()
        assert broker.stop() == 0, broker.stderr_tail()
        assert (tmp_path / "data" / "old-0" / SEGMENT).read_bytes() == old_bytes  # left as it was
    finally:
        broker.kill()


def _produce(client: RawClient, topic: str, value: bytes) -> int:
    body = client.call(ApiKey.PRODUCE, 9, {"acks": -1, "timeout": 10000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": build_batch([SimpleRecord(None, value)])}]}]})
    return int(body.responses[0].partition_responses[0].error_code)


def test_a_newer_batch_found_by_a_fetch_after_a_clean_shutdown_refuses_the_partition(tmp_path: Path) -> None:
    """After a clean shutdown startup does not walk an inactive segment, so an intact batch of a newer
    format at its end is found by the first fetch reaching it. From then on the partition is refused
    as a SIGKILL's recovery would have refused it at startup: ERROR naming the file and the format,
    Fetch and Produce answered KAFKA_STORAGE_ERROR, the segment's bytes untouched. Before, only that
    fetch failed and produce requests were still appended after the unreadable batch."""
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        create_topic(broker.port, "late", 1, {"segment.bytes": "4096"})
        with RawClient(broker.port) as client:
            for i in range(4):  # 1,500-byte records: the first segment rolls after two batches
                assert _produce(client, "late", b"%d" % i * 1500) == ErrorCode.NONE
        assert broker.stop() == 0, broker.stderr_tail()
        segment = tmp_path / "data" / "late-0" / SEGMENT
        raw = bytearray(segment.read_bytes())
        starts = [0]
        while starts[-1] + 12 + int.from_bytes(raw[starts[-1] + 8:starts[-1] + 12], "big") < len(raw):
            starts.append(starts[-1] + 12 + int.from_bytes(raw[starts[-1] + 8:starts[-1] + 12], "big"))
        assert len(starts) >= 2 and (tmp_path / "data" / CLEAN_SHUTDOWN).exists()
        raw[starts[-1] + 16] = 3  # the magic, outside the CRC-32C: the segment's last batch is intact, of magic 3
        segment.write_bytes(bytes(raw))
        broker.start()
        assert "partition refused" not in broker.log_path.read_text()  # a clean start: not walked
        with RawClient(broker.port) as client:
            fetched = client.call(ApiKey.FETCH, 11, fetch_request("late", 0, 0, 1 << 20)).responses[0].partitions[0]
            assert fetched.error_code == ErrorCode.KAFKA_STORAGE_ERROR, broker.stderr_tail()
            refusal = [line for line in broker.log_path.read_text().splitlines()
                       if "partition refused topic=late partition=0" in line]
            assert len(refusal) == 1 and " ERROR " in refusal[0], broker.stderr_tail()
            assert str(segment) in refusal[0] and "record batch of magic 3" in refusal[0]
            assert _produce(client, "late", b"after") == ErrorCode.KAFKA_STORAGE_ERROR
            fetched = client.call(ApiKey.FETCH, 11, fetch_request("late", 0, 0, 1 << 20)).responses[0].partitions[0]
            assert fetched.error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert broker.stop() == 0, broker.stderr_tail()
        assert segment.read_bytes() == bytes(raw)
        assert "Traceback" not in broker.log_path.read_text(), broker.stderr_tail()
    finally:
        broker.kill()
