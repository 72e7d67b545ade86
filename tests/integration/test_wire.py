"""The wire protocol with a raw socket: requests crafted with tierlog's own codec.

* a retried duplicate batch of an idempotent producer is acknowledged with its first offset and
  stored once;
* bad input -- negative or oversized frame sizes, garbage, unknown APIs -- closes only the
  offending connection while another client carries on; an ApiVersions version the broker does not
  know is answered with v0 and UNSUPPORTED_VERSION;
* pipelined requests are answered in order; acks=0 sends no response;
* a batch whose header max timestamp is -1 (Sarama 1.22) is stored with its records' maximum.
"""

from __future__ import annotations

import re
import socket
import struct
import subprocess
import sys
import time
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from tests.helpers.broker import BrokerProcess
from tests.helpers.raw_client import RawClient as _RawClient
from tierlog.protocol import ApiKey
from tierlog.records import BatchHeader, CompressionType, SimpleRecord, build_batch, iter_batches


def now_ms() -> int:
    # Records carry the current time: the session broker runs retention every half second, and
    # records older than retention.ms (7 days) would be deleted under the test's feet.
    return int(time.time() * 1000)


class RawClient(_RawClient):
    def __init__(self, port: int) -> None:
        super().__init__(port, client_id="wire-test")


def create_topic(client: RawClient, name: str, partitions: int = 1) -> None:
    body = client.call(ApiKey.CREATE_TOPICS, 7, {"topics": [
        {"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout": 30000, "validate_only": False})
    assert body.topics[0].error_code == 0, body


def produce(client: RawClient, topic: str, records: bytes, acks: int = -1) -> Any:
    values = {"acks": acks, "timeout": 30000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]}
    if acks == 0:
        client.send(ApiKey.PRODUCE, 9, values)
        return None
    return client.call(ApiKey.PRODUCE, 9, values).responses[0].partition_responses[0]


def fetch_all(client: RawClient, topic: str) -> bytes:
    body = client.call(ApiKey.FETCH, 11, {"max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 24, "isolation_level": 0,
                                          "session_id": 0, "session_epoch": -1, "replica_id": -1, "topics": [
        {"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 24,
                                         "current_leader_epoch": -1, "log_start_offset": -1}]}],
        "forgotten_topics_data": [], "rack_id": ""})
    partition = body.responses[0].partitions[0]
    assert partition.error_code == 0
    return bytes(partition.records or b"")


def test_retried_duplicate_batch_gets_its_original_offset_and_is_stored_once(broker: BrokerProcess, topic_name: str) -> None:
    client = RawClient(broker.port)
    try:
        create_topic(client, topic_name)
        init = client.call(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                                        "producer_id": -1, "producer_epoch": -1})
        assert init.error_code == 0 and init.producer_id >= 0
        pid = init.producer_id

        def batch(seq: int, n: int) -> bytes:
            return build_batch([SimpleRecord(None, f"r{seq + i}".encode(), timestamp=now_ms()) for i in range(n)],
                               producer_id=pid, producer_epoch=0, base_sequence=seq)

        assert produce(client, topic_name, batch(0, 5)).base_offset == 0  # something before the batch under test
        first = produce(client, topic_name, batch(5, 3))
        assert (first.error_code, first.base_offset) == (0, 5)
        retry = produce(client, topic_name, batch(5, 3))  # the producer never saw the first answer
        assert (retry.error_code, retry.base_offset) == (0, 5)
        later = produce(client, topic_name, batch(8, 2))
        assert (later.error_code, later.base_offset) == (0, 8)
        gap = produce(client, topic_name, batch(20, 1))
        assert gap.error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER

        stored = fetch_all(client, topic_name)
        values = [r.value for _, records in iter_batches(stored) for r in records]
        assert values == [f"r{i}".encode() for i in range(10)]

        listed = client.call(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic_name, "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]})
        assert listed.topics[0].partitions[0].offset == 10
    finally:
        client.close()


def test_bad_input_closes_only_that_connection(broker: BrokerProcess, topic_name: str) -> None:
    healthy = RawClient(broker.port)
    create_topic(healthy, topic_name)
    assert produce(healthy, topic_name, build_batch([SimpleRecord(None, b"before", timestamp=now_ms())])).error_code == 0

    bad_inputs = [
        struct.pack(">i", -5),  # negative frame size
        struct.pack(">i", 0x7FFFFFF0),  # larger than socket.request.max.bytes
        struct.pack(">i", 3) + b"\x00\x03\x00",  # a frame too short for a request header
        struct.pack(">ihhi", 8, 3, 12, 77),  # Metadata v12 with no client id and no body
        struct.pack(">ihhi", 10, 999, 0, 78) + b"\xff\xff",  # unknown API key
        struct.pack(">ihhi", 10, 0, 99, 79) + b"\xff\xff",  # Produce v99
        struct.pack(">i", 64) + bytes(range(64)),  # garbage
    ]
    for raw in bad_inputs:
        bad = RawClient(broker.port)
        bad.sock.sendall(raw)
        assert bad.closed_by_peer(), raw
        bad.close()
        # The healthy connection is untouched and still served.
        body = healthy.call(ApiKey.METADATA, 12, {"topics": [{"name": topic_name, "topic_id": None}],
                                                  "allow_auto_topic_creation": False,
                                                  "include_topic_authorized_operations": False})
        assert body.topics[0].error_code == 0

    # A corrupt batch is refused with CORRUPT_MESSAGE and the connection stays usable.
    corrupt = bytearray(build_batch([SimpleRecord(None, b"x" * 20, timestamp=now_ms())]))
    corrupt[-1] ^= 0xFF
    assert produce(healthy, topic_name, bytes(corrupt)).error_code == 2
    assert produce(healthy, topic_name, build_batch([SimpleRecord(None, b"after", timestamp=now_ms())])).error_code == 0
    values = [r.value for _, records in iter_batches(fetch_all(healthy, topic_name)) for r in records]
    assert values == [b"before", b"after"]
    healthy.close()


def test_unknown_api_versions_version_is_answered(broker: BrokerProcess) -> None:
    client = RawClient(broker.port)
    try:
        client.sock.sendall(struct.pack(">ihhi", 10, 18, 99, 5) + b"\xff\xff")
        frame = client.read_frame()
        corr, error_code = struct.unpack_from(">ih", frame)
        assert (corr, error_code) == (5, 35)
        body = client.call(ApiKey.API_VERSIONS, 3, {"client_software_name": "wire-test",
                                                    "client_software_version": "1.0"})
        assert body.error_code == 0
        advertised = {k.api_key for k in body.api_keys}
        assert {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 18, 19, 22} <= advertised
        assert not advertised & {71, 72}  # no telemetry APIs: librdkafka would loop on them
    finally:
        client.close()


def test_pipelined_requests_in_order_and_acks_zero(broker: BrokerProcess, topic_name: str) -> None:
    client = RawClient(broker.port)
    try:
        create_topic(client, topic_name)
        # acks=0: no response, but the records are appended.
        produce(client, topic_name, build_batch([SimpleRecord(None, b"quiet", timestamp=now_ms())]), acks=0)
        sent = []
        for i in range(20):
            sent.append(client.send(ApiKey.PRODUCE, 9, {"acks": 1, "timeout": 1000, "topic_data": [
                {"name": topic_name, "partition_data": [{"index": 0, "records": build_batch([SimpleRecord(None, str(i).encode(), timestamp=now_ms())])}]}]}))
        offsets = [client.receive(ApiKey.PRODUCE, 9, corr).responses[0].partition_responses[0].base_offset for corr in sent]
        assert offsets == list(range(1, 21))
    finally:
        client.close()


def test_long_poll_fetch_is_woken_by_a_produce(broker: BrokerProcess, topic_name: str) -> None:
    waiting, writer = RawClient(broker.port), RawClient(broker.port)
    try:
        create_topic(writer, topic_name)
        corr = waiting.send(ApiKey.FETCH, 11, {"max_wait": 10000, "min_bytes": 1, "max_bytes": 1 << 20,
                                               "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                                               "replica_id": -1, "topics": [
            {"topic": topic_name, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                                                  "current_leader_epoch": -1, "log_start_offset": -1}]}],
                                               "forgotten_topics_data": [], "rack_id": ""})
        time.sleep(0.3)
        start = time.monotonic()
        assert produce(writer, topic_name, build_batch([SimpleRecord(None, b"wake", timestamp=now_ms())])).error_code == 0
        body = waiting.receive(ApiKey.FETCH, 11, corr)
        assert time.monotonic() - start < 5
        records = body.responses[0].partitions[0].records
        assert [r.value for _, rs in iter_batches(records) for r in rs] == [b"wake"]
    finally:
        waiting.close()
        writer.close()


def test_client_vanishing_during_a_large_fetch(broker: BrokerProcess, topic_name: str) -> None:
    client = RawClient(broker.port)
    create_topic(client, topic_name)
    big = build_batch([SimpleRecord(None, bytes(1000), timestamp=now_ms()) for _ in range(900)])
    for _ in range(4):  # ~3.6 MB: the fetch below leaves through sendfile
        assert produce(client, topic_name, big).error_code == 0
    for _ in range(5):
        leaving = RawClient(broker.port)
        leaving.send(ApiKey.FETCH, 11, {"max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 24, "isolation_level": 0,
                                         "session_id": 0, "session_epoch": -1, "replica_id": -1, "topics": [
            {"topic": topic_name, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 24,
                                                  "current_leader_epoch": -1, "log_start_offset": -1}]}],
            "forgotten_topics_data": [], "rack_id": ""})
        leaving.sock.close()
    # The broker carries on; a full read still returns every record.
    values = [r for _, rs in iter_batches(fetch_all(client, topic_name)) for r in rs]
    assert len(values) == 3600
    client.close()
    assert "Traceback" not in broker.stderr_tail(200)


def _fetch_request(topic: str, fetch_offset: int, max_bytes: int) -> dict[str, Any]:
    return {"max_wait": 0, "min_bytes": 0, "max_bytes": max_bytes, "isolation_level": 0, "session_id": 0,
            "session_epoch": -1, "replica_id": -1, "topics": [
                {"topic": topic, "partitions": [{"partition": 0, "fetch_offset": fetch_offset,
                                                 "partition_max_bytes": max_bytes, "current_leader_epoch": -1,
                                                 "log_start_offset": -1}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def test_a_fetch_larger_than_the_socket_takes_at_once_resumes_and_returns_the_segment_bytes(
        broker: BrokerProcess, topic_name: str) -> None:
    """A fetch's record set leaves by one sendfile straight from the event loop when the socket
    takes it whole, and the rest by asyncio's sendfile when it does not: ~18 MB cannot fit a
    loopback socket's send buffer (4 MiB at most here), least of all towards a client with a small
    receive buffer, so the first sendfile is partial and the response resumes. Every byte is the
    segment file's, and pipelined requests behind it are answered after it, in order."""
    client = RawClient(broker.port)
    create_topic(client, topic_name)
    big = build_batch([SimpleRecord(None, bytes([i % 251]) * 1000, timestamp=now_ms()) for i in range(900)])
    for _ in range(18):
        assert produce(client, topic_name, big).error_code == 0  # acks=all: below the high watermark
    client.close()
    segment = broker.data_dir / f"{topic_name}-0" / "00000000000000000000.log"
    on_disk = segment.read_bytes()
    assert len(on_disk) == 18 * len(big)

    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
    slow.settimeout(60)
    slow.connect(("127.0.0.1", broker.port))
    reader = RawClient.__new__(RawClient)
    _RawClient.__init__(reader, broker.port, client_id="wire-test")
    reader.sock.close()
    reader.sock = slow
    try:
        first = reader.send(ApiKey.FETCH, 11, _fetch_request(topic_name, 0, 32 << 20))
        between = reader.send(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        second = reader.send(ApiKey.FETCH, 11, _fetch_request(topic_name, 900 * 9, 32 << 20))
        whole = reader.receive(ApiKey.FETCH, 11, first).responses[0].partitions[0]
        assert whole.error_code == 0 and whole.high_watermark == 18 * 900
        assert bytes(whole.records) == on_disk
        assert reader.receive(ApiKey.API_VERSIONS, 3, between).error_code == 0
        half = reader.receive(ApiKey.FETCH, 11, second).responses[0].partitions[0]
        assert bytes(half.records) == on_disk[9 * len(big):]
    finally:
        reader.close()
    assert "Traceback" not in broker.stderr_tail(200)


def test_flexible_fetches_sent_by_sendfile_end_with_their_tagged_fields_and_keep_their_order(
        broker: BrokerProcess, topic_name: str) -> None:
    """Fetch v12 and later (librdkafka asks v16) has tagged fields after each record set: they leave
    right after the file's bytes, in the same corked stream. Pipelined flexible fetches -- read
    committed and not -- with another request between them are answered in order, every record set
    the segment file's bytes, every response whole (kio's parser reads the fields after them)."""
    client = RawClient(broker.port)
    create_topic(client, topic_name)
    big = build_batch([SimpleRecord(None, bytes([i % 251]) * 1000, timestamp=now_ms()) for i in range(900)])
    for _ in range(3):
        assert produce(client, topic_name, big).error_code == 0
    on_disk = (broker.data_dir / f"{topic_name}-0" / "00000000000000000000.log").read_bytes()
    assert len(on_disk) == 3 * len(big)

    def flexible(fetch_offset: int, isolation_level: int) -> dict[str, Any]:
        values = _fetch_request(topic_name, fetch_offset, 32 << 20)
        values["isolation_level"] = isolation_level
        return values

    try:
        sent = [client.send(ApiKey.FETCH, 12, flexible(0, 1)),
                client.send(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}),
                client.send(ApiKey.FETCH, 12, flexible(900, 0))]
        first = client.receive(ApiKey.FETCH, 12, sent[0]).responses[0].partitions[0]
        assert first.error_code == 0 and bytes(first.records) == on_disk and first.aborted_transactions == ()
        assert client.receive(ApiKey.API_VERSIONS, 3, sent[1]).error_code == 0
        second = client.receive(ApiKey.FETCH, 12, sent[2]).responses[0].partitions[0]
        assert bytes(second.records) == on_disk[len(big):] and second.aborted_transactions is None
        # Alone (nothing queued behind it: its tagged fields are sent at once), then a small request.
        last = client.call(ApiKey.FETCH, 12, flexible(1800, 0)).responses[0].partitions[0]
        assert bytes(last.records) == on_disk[2 * len(big):]
        assert client.call(ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                    "client_software_version": "1"}).error_code == 0
    finally:
        client.close()
    assert "Traceback" not in broker.stderr_tail(200)


def test_a_batch_whose_header_max_timestamp_is_minus_one_is_found_by_its_records(
        broker: BrokerProcess, topic_name: str) -> None:
    """Sarama 1.22 writes -1 as a batch's max timestamp, compressed or not. The broker stores the
    records' maximum instead (issue 20), so ListOffsets by timestamp through a real client finds the
    records and ``tierlog dump-log`` shows their CreateTime."""
    client = RawClient(broker.port)
    try:
        create_topic(client, topic_name)
        base = now_ms() - 60_000
        timestamps = [[base + i * 1000 for i in range(5)], [base + 10_000 + i * 1000 for i in (0, 4, 2, 1, 3)]]
        for codec, stamps in zip((CompressionType.NONE, CompressionType.GZIP), timestamps, strict=True):
            data = build_batch([SimpleRecord(None, f"r{ts}".encode(), timestamp=ts) for ts in stamps],
                               compression=codec, max_timestamp=-1)
            assert BatchHeader(data).max_timestamp == -1
            assert produce(client, topic_name, data).error_code == 0
    finally:
        client.close()

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{topic_name}-g"})
    try:
        asked = [base - 1, base + 2500, base + 10_000 + 1500, base + 60_000]
        # One partition per request: librdkafka merges repeated partitions of one request.
        found = [consumer.offsets_for_times([TopicPartition(topic_name, 0, ts)], timeout=30)[0] for ts in asked]
        # Before every record: the first offset; then the first offset whose record is at or after
        # the timestamp (offset 6 holds base+14000: the second batch is not in time order); after
        # every record, none (-1).
        assert [tp.offset for tp in found] == [0, 3, 6, -1]
    finally:
        consumer.close()

    segment = broker.data_dir / f"{topic_name}-0" / f"{0:020d}.log"
    dumped = subprocess.run([sys.executable, "-m", "tierlog.cli.main", "dump-log", str(segment)],
                            capture_output=True, text=True, timeout=60)
    assert dumped.returncode == 0, dumped.stderr
    create_times = re.findall(r"CreateTime: (-?\d+)", dumped.stdout)
    assert create_times == [str(base + 4000), str(base + 14_000)], dumped.stdout
    assert dumped.stdout.count("isvalid: true") == 2, dumped.stdout


def test_an_api_kafka_has_and_tierlog_lacks_is_answered_not_hung_up(broker: BrokerProcess, topic_name: str) -> None:
    """Sarama's ClusterAdmin sends DescribeAcls without looking at ApiVersions: Kafka without an
    authorizer answers SECURITY_DISABLED and the connection carries on; an API Kafka's broker does
    not serve (Vote, 52) or does not know still closes it."""
    client = RawClient(broker.port)
    try:
        body = client.call(29, 1, {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 3,
                                   "principal_filter": None, "host_filter": None, "operation": 1,
                                   "permission_type": 1})
        assert (body.error_code, body.error_message) == (54, "No Authorizer is configured.")
        body = client.call(30, 3, {"creations": [
            {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3, "principal": "User:a",
             "host": "*", "operation": 3, "permission_type": 3}]})
        assert [r.error_code for r in body.results] == [54]
        # An API tierlog does not implement (ListPartitionReassignments): Kafka's error answer, not a hang-up.
        body = client.call(46, 0, {"timeout": 30000, "topics": None})
        assert body.error_code == 35 and not body.topics
        body = client.call(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                                 "include_topic_authorized_operations": False})
        assert body.brokers and body.brokers[0].port == broker.port
    finally:
        client.close()
    for raw in (struct.pack(">ihhi", 10, 52, 0, 80) + b"\xff\xff",  # Vote: a controller API
                struct.pack(">ihhi", 10, 29, 9, 81) + b"\xff\xff"):  # DescribeAcls v9 does not exist
        bad = RawClient(broker.port)
        bad.sock.sendall(raw)
        assert bad.closed_by_peer(), raw
        bad.close()


def test_a_burst_of_bad_requests_logs_one_line_with_the_client_id(own_broker: BrokerProcess) -> None:
    """A client's reconnect loop sending the same refused request (Vote, a controller API) 40 times:
    one WARNING line for the address and reason within the minute, naming the request header's client
    id; the connections are all closed as Kafka closes them."""
    client_id = b"burst-client"
    raw = struct.pack(">ihhih", 10 + len(client_id), 52, 0, 90, len(client_id)) + client_id
    for _ in range(40):
        bad = _RawClient(own_broker.port)
        bad.sock.sendall(raw)
        assert bad.closed_by_peer()
        bad.close()
    lines = [line for line in own_broker.stderr_tail().splitlines() if "closing connection" in line]
    assert len(lines) == 1, lines
    assert "(client 'burst-client')" in lines[0], lines[0]
