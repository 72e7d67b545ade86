"""The codec against an independent implementation: kafka-python encodes the requests we parse and
decodes the responses we encode (its 2.x hand-written classes in ``kafka.protocol.old`` for old
versions, its 3.x JSON-driven classes for flexible ones)."""

from __future__ import annotations

import datetime
import struct
import uuid

import kafka.protocol.old.metadata as old_metadata
import kafka.protocol.old.produce as old_produce
import pytest
from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.consumer import FetchRequest, FetchResponse, JoinGroupRequest, OffsetCommitRequest
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from tierlog.protocol import (
    ApiKey,
    MalformedRequestError,
    ProtocolError,
    ResponseEncodeError,
    UnsupportedApiError,
    UnsupportedVersionError,
    api_versions_response,
    build_request,
    build_response,
    encode_request,
    encode_response,
    parse_request,
    parse_response,
    unsupported_api_versions_response,
)

# A real-looking but never parsed record set: the codec must hand it over byte for byte.
RECORDS = bytes(range(256)) * 3


def _payload(frame: bytes) -> bytes:
    """Strip and check the size prefix of an encoded response."""
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    return frame[4:]


# --- request headers --------------------------------------------------------------------------------


def test_header_v1_from_kafka_python_old_metadata_v0() -> None:
    request = old_metadata.MetadataRequest[0](topics=["a", "b"])
    request.with_header(correlation_id=11, client_id="legacy-client")
    parsed = parse_request(request.encode(header=True))
    assert (parsed.api_key, parsed.api_version, parsed.correlation_id) == (3, 0, 11)
    assert parsed.client_id == "legacy-client"
    assert parsed.header_version == 1
    assert parsed.api is ApiKey.METADATA
    assert [topic.name for topic in parsed.body.topics] == ["a", "b"]


def test_header_v1_from_kafka_python_old_metadata_v1_all_topics() -> None:
    request = old_metadata.MetadataRequest[1](topics=None)  # null = all topics, from v1
    request.with_header(correlation_id=12, client_id="c")
    parsed = parse_request(request.encode(header=True))
    assert parsed.header_version == 1
    assert parsed.body.topics is None


def test_header_v2_from_kafka_python_flexible_metadata() -> None:
    request = MetadataRequest[12](
        topics=[MetadataRequest.MetadataRequestTopic(name="orders")],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=True,
    )
    request.with_header(correlation_id=2**31 - 1, client_id="flexible")
    parsed = parse_request(request.encode(header=True))
    assert parsed.header_version == 2
    assert parsed.response_header_version == 1
    assert parsed.correlation_id == 2**31 - 1
    assert parsed.client_id == "flexible"
    assert parsed.body.topics[0].name == "orders"
    assert parsed.body.topics[0].topic_id is None
    assert parsed.body.allow_auto_topic_creation is False
    assert parsed.body.include_topic_authorized_operations is True


def test_null_client_id() -> None:
    frame = struct.pack(">hhih", 3, 1, 5, -1) + struct.pack(">i", -1)
    parsed = parse_request(frame)
    assert parsed.client_id is None
    assert parsed.body.topics is None


def test_api_versions_requests_old_and_flexible() -> None:
    for version in (0, 1, 2):
        request = ApiVersionsRequest[version]()
        request.with_header(correlation_id=version, client_id="c")
        parsed = parse_request(request.encode(header=True))
        assert (parsed.api_version, parsed.header_version) == (version, 1)
    request = ApiVersionsRequest[3](client_software_name="kafka-python", client_software_version="3.0.12")
    request.with_header(correlation_id=3, client_id="c")
    parsed = parse_request(request.encode(header=True))
    assert parsed.header_version == 2
    assert parsed.body.client_software_name == "kafka-python"
    assert parsed.body.client_software_version == "3.0.12"


# --- Produce: record sets stay opaque -------------------------------------------------------------


def test_produce_v3_from_kafka_python_old_classes_keeps_records_opaque() -> None:
    request = old_produce.ProduceRequest[3](None, -1, 1500, [("events", [(7, RECORDS)])])
    request.with_header(correlation_id=5, client_id="old")
    frame = request.encode(header=True)
    parsed = parse_request(frame)
    assert parsed.header_version == 1
    body = parsed.body
    assert body.transactional_id is None
    assert body.acks == -1
    assert body.timeout == datetime.timedelta(milliseconds=1500)
    partition = body.topic_data[0].partition_data[0]
    assert body.topic_data[0].name == "events"
    assert partition.index == 7
    # A view of the frame, not a copy: the log writes a produce's records from the request's bytes.
    assert type(partition.records) is memoryview and partition.records.obj is frame
    assert partition.records == RECORDS


@pytest.mark.parametrize("version", [3, 7, 9, 12, 13])
def test_produce_from_kafka_python_at_old_and_flexible_versions(version: int) -> None:
    topic = ProduceRequest.TopicProduceData
    topic_id = uuid.uuid4()
    where = {"name": "events"} if version < 13 else {"topic_id": topic_id}
    request = ProduceRequest[version](
        transactional_id="txn" if version >= 9 else None,
        acks=1,
        timeout_ms=30_000,
        topic_data=[
            topic(partition_data=[topic.PartitionProduceData(index=0, records=RECORDS)], **where),
            topic(partition_data=[topic.PartitionProduceData(index=1, records=None)], **where),
        ],
    )
    request.with_header(correlation_id=version, client_id="p")
    parsed = parse_request(request.encode(header=True))
    assert parsed.header_version == (2 if version >= 9 else 1)
    first, second = parsed.body.topic_data
    if version < 13:
        assert first.name == "events"
    else:
        assert first.topic_id == topic_id
    assert first.partition_data[0].records == RECORDS
    assert second.partition_data[0].records is None
    assert parsed.body.transactional_id == ("txn" if version >= 9 else None)


@pytest.mark.parametrize("version", [3, 8, 9, 13])
def test_produce_response_decoded_by_kafka_python(version: int) -> None:
    topic_id = uuid.uuid4()
    response = build_response(
        ApiKey.PRODUCE,
        version,
        {
            "responses": [
                {
                    "name": "events",
                    "topic_id": topic_id,
                    "partition_responses": [
                        {"index": 0, "error_code": 0, "base_offset": 42, "log_append_time": -1, "log_start_offset": 3},
                        {"index": 1, "error_code": 6, "base_offset": -1, "error_message": "not leader"},
                    ],
                }
            ],
            "throttle_time": 5,
        },
    )
    decoded = ProduceResponse.decode(_payload(encode_response(0, version, 99, response)), version=version, header=True)
    assert decoded.header.correlation_id == 99
    assert decoded.throttle_time_ms == 5
    topic = decoded.responses[0]
    assert (topic.name if version < 13 else topic.topic_id) == ("events" if version < 13 else topic_id)
    ok, failed = topic.partition_responses
    assert (ok.index, ok.error_code, ok.base_offset, ok.log_append_time_ms) == (0, 0, 42, -1)
    assert failed.error_code == 6
    if version >= 5:
        assert ok.log_start_offset == 3
    if version >= 8:
        assert failed.error_message == "not leader"


# --- Fetch: record sets stay opaque on the way out -------------------------------------------------


@pytest.mark.parametrize("version", [4, 11, 12, 13, 16, 18])
def test_fetch_response_carries_records_unchanged_to_kafka_python(version: int) -> None:
    topic_id = uuid.uuid4()
    response = build_response(
        ApiKey.FETCH,
        version,
        {
            "throttle_time": 0,
            "error_code": 0,
            "session_id": 0,
            "responses": [
                {
                    "topic": "events",
                    "topic_id": topic_id,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "error_code": 0,
                            "high_watermark": 100,
                            "last_stable_offset": 100,
                            "log_start_offset": 0,
                            "aborted_transactions": None,
                            "preferred_read_replica": -1,
                            "records": RECORDS,
                        },
                        {"partition_index": 1, "error_code": 1, "high_watermark": -1},
                    ],
                }
            ],
        },
    )
    frame = encode_response(1, version, 7, response)
    # The record set is written contiguously, not re-encoded.
    assert RECORDS in frame
    decoded = FetchResponse.decode(_payload(frame), version=version, header=True)
    topic = decoded.responses[0]
    assert (topic.topic if version < 13 else topic.topic_id) == ("events" if version < 13 else topic_id)
    data, empty = topic.partitions
    assert data.records == RECORDS
    assert data.high_watermark == 100
    assert empty.error_code == 1
    assert not empty.records  # null records for a partition in error


@pytest.mark.parametrize("version", [4, 11, 12, 13, 15, 17, 18])
def test_fetch_requests_from_kafka_python(version: int) -> None:
    fetch_topic = FetchRequest.FetchTopic
    topic_id = uuid.uuid4()
    where = {"topic": "events"} if version < 13 else {"topic_id": topic_id}
    request = FetchRequest[version](
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=1,
        session_id=0,
        session_epoch=-1,
        topics=[
            fetch_topic(
                partitions=[
                    fetch_topic.FetchPartition(
                        partition=3, fetch_offset=12345, partition_max_bytes=1 << 16, current_leader_epoch=4
                    )
                ],
                **where,
            )
        ],
        forgotten_topics_data=[],
        rack_id="rack-a",
        cluster_id="cluster-1",  # a tagged field (tag 0) from v12
    )
    request.with_header(correlation_id=version, client_id="consumer")
    body = parse_request(request.encode(header=True)).body
    assert body.max_wait == datetime.timedelta(milliseconds=500)
    assert body.isolation_level == 1
    partition = body.topics[0].partitions[0]
    assert (partition.partition, partition.fetch_offset, partition.partition_max_bytes) == (3, 12345, 1 << 16)
    if version >= 13:
        assert body.topics[0].topic_id == topic_id
    else:
        assert body.topics[0].topic == "events"
    if version >= 11:
        assert body.rack_id == "rack-a"
    if version >= 12:
        assert body.cluster_id == "cluster-1"


# --- other APIs at old and flexible versions -------------------------------------------------------


@pytest.mark.parametrize("version", [0, 5, 6, 9])
def test_join_group_request(version: int) -> None:
    protocol = JoinGroupRequest.JoinGroupRequestProtocol
    request = JoinGroupRequest[version](
        group_id="g",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=300_000,
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[protocol(name="range", metadata=b"\x00\x01meta")],
        reason="because",
    )
    request.with_header(correlation_id=1, client_id="c")
    body = parse_request(request.encode(header=True)).body
    assert body.group_id == "g"
    assert body.session_timeout == datetime.timedelta(seconds=10)
    assert body.protocols[0].name == "range"
    assert body.protocols[0].metadata == b"\x00\x01meta"
    if version >= 1:
        assert body.rebalance_timeout == datetime.timedelta(minutes=5)
    if version >= 8:
        assert body.reason == "because"


@pytest.mark.parametrize("version", [2, 8])
def test_offset_commit_request(version: int) -> None:
    topic = OffsetCommitRequest.OffsetCommitRequestTopic
    request = OffsetCommitRequest[version](
        group_id="g",
        generation_id_or_member_epoch=3,
        member_id="m",
        retention_time_ms=-1,
        topics=[
            topic(
                name="t",
                partitions=[
                    topic.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=77, committed_leader_epoch=-1, committed_metadata=""
                    )
                ],
            )
        ],
    )
    request.with_header(correlation_id=1, client_id="c")
    body = parse_request(request.encode(header=True)).body
    assert body.topics[0].partitions[0].committed_offset == 77
    assert body.generation_id_or_member_epoch == 3


def test_create_topics_v5_flexible_request() -> None:
    topic = CreateTopicsRequest.CreatableTopic
    request = CreateTopicsRequest[5](
        topics=[
            topic(
                name="new",
                num_partitions=3,
                replication_factor=1,
                assignments=[],
                configs=[topic.CreatableTopicConfig(name="retention.ms", value="1000")],
            )
        ],
        timeout_ms=5000,
        validate_only=False,
    )
    request.with_header(correlation_id=1, client_id="admin")
    body = parse_request(request.encode(header=True)).body
    assert body.topics[0].num_partitions == 3
    assert body.topics[0].configs[0].value == "1000"


@pytest.mark.parametrize("version", [1, 9, 12])
def test_metadata_response_decoded_by_kafka_python(version: int) -> None:
    topic_id = uuid.uuid4()
    response = build_response(
        ApiKey.METADATA,
        version,
        {
            "brokers": [{"node_id": 1, "host": "localhost", "port": 9092, "rack": None}],
            "cluster_id": "tierlog-cluster",
            "controller_id": 1,
            "topics": [
                {
                    "error_code": 0,
                    "name": "events",
                    "topic_id": topic_id,
                    "is_internal": False,
                    "partitions": [
                        {"partition_index": 0, "leader_id": 1, "leader_epoch": 5, "replica_nodes": [1], "isr_nodes": [1]}
                    ],
                }
            ],
        },
    )
    frame = encode_response(3, version, 1234, response)
    payload = _payload(frame)
    # Response header v1 (flexible, from v9) ends with an empty tagged-field section.
    assert payload[:4] == struct.pack(">i", 1234)
    decoded = MetadataResponse.decode(payload, version=version, header=True)
    assert decoded.header.correlation_id == 1234
    broker = decoded.brokers[0]
    assert (broker.node_id, broker.host, broker.port) == (1, "localhost", 9092)
    topic = decoded.topics[0]
    assert topic.name == "events"
    assert topic.partitions[0].replica_nodes == [1]
    assert decoded.controller_id == 1
    if version >= 10:
        assert topic.topic_id == topic_id
    if version >= 7:
        assert topic.partitions[0].leader_epoch == 5


def test_flexible_response_header_has_a_tagged_field_section() -> None:
    body = {"brokers": [], "topics": [], "controller_id": -1}
    v8 = _payload(encode_response(3, 8, 1, build_response(3, 8, body)))
    v9 = _payload(encode_response(3, 9, 1, build_response(3, 9, body)))
    assert v8[:4] == v9[:4] == b"\x00\x00\x00\x01"
    assert v8[4:8] == b"\x00\x00\x00\x00"  # v8 body starts right away: throttle_time_ms
    assert v9[4] == 0  # v9: header tagged fields (none)
    assert v9[5:9] == b"\x00\x00\x00\x00"


def test_find_coordinator_v4_batched_response() -> None:
    response = build_response(
        ApiKey.FIND_COORDINATOR,
        4,
        {"coordinators": [{"key": "g", "node_id": 1, "host": "h", "port": 9092, "error_code": 0}]},
    )
    decoded = FindCoordinatorResponse.decode(_payload(encode_response(10, 4, 3, response)), version=4, header=True)
    assert decoded.coordinators[0].key == "g"
    assert decoded.coordinators[0].port == 9092


# --- ApiVersions ------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_response_uses_header_v0_at_every_version(version: int) -> None:
    frame = encode_response(18, version, 21, api_versions_response(version))
    payload = _payload(frame)
    assert payload[:4] == struct.pack(">i", 21)
    assert payload[4:6] == b"\x00\x00"  # error code right after the correlation id: no tagged fields
    decoded = ApiVersionsResponse.decode(payload, version=version, header=True)
    advertised = {entry.api_key: (entry.min_version, entry.max_version) for entry in decoded.api_keys}
    assert advertised[0] == (0, 13)
    assert advertised[18] == (0, 4)
    assert 71 not in advertised and 72 not in advertised


def test_unsupported_api_versions_version_gets_the_v0_fallback_bytes() -> None:
    request = struct.pack(">hhih", 18, 99, 1234, 1) + b"c" + b"\x00garbage body we do not read"
    with pytest.raises(UnsupportedVersionError) as info:
        parse_request(request)
    assert (info.value.api_key, info.value.api_version, info.value.correlation_id) == (18, 99, 1234)
    assert info.value.error_code == 35
    frame = unsupported_api_versions_response(info.value.correlation_id or 0)
    # size 16 | correlation id | error 35 | one entry: ApiVersions 0..4
    assert frame.hex() == "00000010" "000004d2" "0023" "00000001" "0012" "0000" "0004"
    decoded = ApiVersionsResponse.decode(frame[4:], version=0, header=True)
    assert decoded.error_code == 35


# --- errors -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("api_key", [4, 71, 72, 1000, -1])
def test_unknown_api_key_carries_the_correlation_id(api_key: int) -> None:
    with pytest.raises(UnsupportedApiError) as info:
        parse_request(struct.pack(">hhi", api_key, 0, 77) + b"\x00\x00")
    assert (info.value.api_key, info.value.correlation_id) == (api_key, 77)


@pytest.mark.parametrize(("api_key", "version"), [(0, 2), (0, 0), (0, 14), (1, 3), (3, 14), (22, 6), (3, -1)])
def test_unsupported_version_carries_key_version_and_correlation_id(api_key: int, version: int) -> None:
    with pytest.raises(UnsupportedVersionError) as info:
        parse_request(struct.pack(">hhi", api_key, version, 8))
    assert (info.value.api_key, info.value.api_version, info.value.correlation_id) == (api_key, version, 8)


def test_a_frame_too_short_for_a_header_has_no_correlation_id() -> None:
    with pytest.raises(MalformedRequestError) as info:
        parse_request(b"\x00\x03\x00")
    assert info.value.correlation_id is None


def test_truncated_body_is_malformed_with_the_correlation_id() -> None:
    request = MetadataRequest[12](topics=[MetadataRequest.MetadataRequestTopic(name="orders")])
    request.with_header(correlation_id=31, client_id="c")
    data = request.encode(header=True)
    for cut in range(8, len(data)):
        with pytest.raises(MalformedRequestError) as info:
            parse_request(data[:cut])
        assert info.value.correlation_id == 31
        assert (info.value.api_key, info.value.api_version) == (3, 12)


def test_huge_declared_array_is_rejected_without_allocating_it() -> None:
    # kio's native reader allocates 2**31 elements for this 12-byte body and aborts the process.
    frame = struct.pack(">hhih", 3, 1, 1, 0) + struct.pack(">i", 2**31 - 1) + b"\x00\x01a"
    with pytest.raises(MalformedRequestError, match="only 3 bytes left"):
        parse_request(frame)
    compact = struct.pack(">hhih", 3, 12, 1, 0) + b"\x00" + b"\xff\xff\xff\xff\x07"
    with pytest.raises(MalformedRequestError):
        parse_request(compact)


def test_non_nullable_null_is_malformed() -> None:
    # Metadata v1 topic name (a non-nullable string) sent as null.
    frame = struct.pack(">hhih", 3, 1, 1, 0) + struct.pack(">ih", 1, -1)
    with pytest.raises(MalformedRequestError):
        parse_request(frame)


def test_trailing_bytes_are_ignored_as_kafka_does() -> None:
    frame = struct.pack(">hhih", 3, 1, 1, 0) + struct.pack(">i", -1) + b"extra"
    assert parse_request(frame).body.topics is None


def test_encode_response_refuses_a_body_of_another_version_or_api() -> None:
    with pytest.raises(ResponseEncodeError):
        encode_response(3, 12, 1, build_response(3, 11, {}))
    with pytest.raises(ResponseEncodeError):
        encode_response(3, 12, 1, build_response(18, 3, {}))
    with pytest.raises(UnsupportedVersionError):
        encode_response(3, 99, 1, build_response(3, 12, {}))


def test_encode_response_wraps_out_of_range_values() -> None:
    response = build_response(ApiKey.HEARTBEAT, 0, {"error_code": 0})
    bad = type(response)(error_code=response.error_code)  # fine
    encode_response(12, 0, 1, bad)
    too_big = build_response(ApiKey.METADATA, 1, {"brokers": [{"node_id": 2**40, "host": "h", "port": 1}]})
    with pytest.raises(ResponseEncodeError):
        encode_response(3, 1, 1, too_big)


def test_own_client_side_round_trip() -> None:
    request = build_request(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "timestamp": -2}]}]})
    parsed = parse_request(encode_request(2, 7, 5, "me", request)[4:])
    assert parsed.body == request
    assert parsed.client_id == "me"
    response = build_response(ApiKey.LIST_OFFSETS, 7, {"topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "offset": 10, "timestamp": -1}]}]})
    correlation_id, body = parse_response(2, 7, encode_response(2, 7, 5, response)[4:])
    assert (correlation_id, body) == (5, response)


def test_every_protocol_error_is_a_tierlog_error() -> None:
    for error_type in (MalformedRequestError, UnsupportedApiError, UnsupportedVersionError, ResponseEncodeError):
        assert issubclass(error_type, ProtocolError)
