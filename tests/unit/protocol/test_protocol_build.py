from __future__ import annotations

import datetime
import uuid

import pytest
from kio.schema.errors import ErrorCode

from tierlog.protocol import ApiKey, EntityBuildError, build, build_response, response_type
from tierlog.protocol.build import to_millis

TOPIC = {"error_code": 3, "name": "t", "topic_id": uuid.UUID(int=5), "partitions": []}


def test_fields_the_version_lacks_are_dropped_and_missing_ones_defaulted() -> None:
    old = build_response(ApiKey.METADATA, 0, {"topics": [TOPIC], "cluster_id": "c", "throttle_time": 3})
    assert not hasattr(old, "cluster_id")
    assert old.topics[0].error_code is ErrorCode.unknown_topic_or_partition
    assert old.brokers == ()
    new = build_response(ApiKey.METADATA, 12, {"topics": [TOPIC], "cluster_id": "c", "throttle_time": 3})
    assert new.cluster_id == "c"
    assert new.throttle_time == datetime.timedelta(milliseconds=3)
    assert new.topics[0].topic_id == uuid.UUID(int=5)
    assert new.topics[0].is_internal is False
    assert new.controller_id == -1  # kio's (Kafka's) schema default, not 0


def test_a_key_of_no_version_is_a_typo() -> None:
    with pytest.raises(EntityBuildError, match="'topicz'"):
        build_response(ApiKey.METADATA, 12, {"topicz": []})
    with pytest.raises(EntityBuildError, match="'nmae'"):
        build_response(ApiKey.METADATA, 12, {"topics": [{"nmae": "t"}]})


def test_values_are_coerced_to_kio_types() -> None:
    response = build_response(
        ApiKey.PRODUCE,
        9,
        {"responses": [{"name": "t", "partition_responses": [
            {"index": 0, "error_code": ErrorCode.none, "log_append_time": 1_700_000_000_123},
            {"index": 1, "error_code": 6, "log_append_time": -1},
        ]}]},
    )
    first, second = response.responses[0].partition_responses
    assert first.log_append_time == datetime.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=datetime.UTC)
    assert second.log_append_time is None
    assert second.error_code is ErrorCode.not_leader_or_follower


def test_bytes_like_records_become_bytes() -> None:
    response = build_response(ApiKey.FETCH, 4, {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "records": memoryview(b"abc")}]}]})
    assert response.responses[0].partitions[0].records == b"abc"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"brokers": "not a list"}, "expected a sequence"),
        ({"brokers": [5]}, "expected a mapping"),
        ({"brokers": [{"host": 5}]}, "expected str"),
        ({"brokers": [{"port": "9092"}]}, "expected int"),
        ({"brokers": None}, "not nullable"),
        ({"topics": [{"error_code": 12345}]}, "not a Kafka error code"),
        ({"topics": [{"topic_id": "abc"}]}, "expected a UUID"),
        ({"throttle_time": 1.5}, "expected milliseconds"),
    ],
)
def test_wrong_values_raise_build_errors(values: dict[str, object], message: str) -> None:
    with pytest.raises(EntityBuildError, match=message):
        build_response(ApiKey.METADATA, 12, values)


def test_prebuilt_entities_are_accepted_as_is() -> None:
    topic_type = response_type(ApiKey.METADATA, 12).__dataclass_fields__["topics"].type.__args__[0]
    topic = build(topic_type, {"name": "t"})
    assert build_response(ApiKey.METADATA, 12, {"topics": [topic]}).topics == (topic,)


def test_to_millis() -> None:
    assert to_millis(datetime.timedelta(seconds=1.5)) == 1500
    assert to_millis(datetime.timedelta(milliseconds=-1)) == -1
