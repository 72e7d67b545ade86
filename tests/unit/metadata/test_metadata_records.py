"""Metadata record encoding: Kafka's frame, the flexible field encoding, and round trips."""

from __future__ import annotations

import pytest

from tierlog.metadata.errors import MetadataReplayError, UnsupportedVersionError
from tierlog.metadata.records import (
    RECORD_TYPES,
    BrokerEndpoint,
    BrokerFeature,
    ConfigRecord,
    ConfigResourceType,
    FeatureLevelRecord,
    MetadataRecord,
    NoOpRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    decode_record,
    encode_record,
)

TID = bytes(range(16))

SAMPLES: list[MetadataRecord] = [
    TopicRecord("orders", TID),
    PartitionRecord(3, TID, (1,), (1,), 1, 7, 9),
    PartitionRecord(0, TID, (1, 2, 3), (1, 2), 2, 0, 1, (3,), (4, 5), leader_recovery_state=1),
    PartitionRecord(0, TID, tuple(range(40)), (), -1, -1, -1),
    ConfigRecord(int(ConfigResourceType.TOPIC), "orders", "retention.ms", "1000"),
    ConfigRecord(int(ConfigResourceType.BROKER), "", "log.retention.ms", None),
    RemoveTopicRecord(TID),
    ProducerIdsRecord(1, 42, 3000),
    FeatureLevelRecord("metadata.version", 21),
    NoOpRecord(),
    RegisterBrokerRecord(1, TID, 17, (BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9092, 0),),
                         (BrokerFeature("metadata.version", 1, 21),), "rack-a", False),
]


@pytest.mark.parametrize("record", SAMPLES, ids=lambda r: type(r).__name__)
def test_round_trip(record: MetadataRecord) -> None:
    assert decode_record(encode_record(record)) == record


def test_kafka_api_keys() -> None:
    expected = {0: RegisterBrokerRecord, 2: TopicRecord, 3: PartitionRecord, 4: ConfigRecord, 9: RemoveTopicRecord,
                12: FeatureLevelRecord, 15: ProducerIdsRecord, 20: NoOpRecord}
    for key, cls in expected.items():
        assert RECORD_TYPES[key] is cls


def test_topic_record_bytes() -> None:
    # frame version 1, apiKey 2, version 0; compact string "ab" = len+1; 16-byte uuid; no tagged fields
    assert encode_record(TopicRecord("ab", TID)) == bytes([1, 2, 0, 3]) + b"ab" + TID + b"\x00"


def test_config_record_null_value_bytes() -> None:
    value = encode_record(ConfigRecord(2, "t", "k", None))
    assert value == bytes([1, 4, 0, 2, 2]) + b"t" + bytes([2]) + b"k" + b"\x00" + b"\x00"


def test_partition_record_bytes() -> None:
    value = encode_record(PartitionRecord(1, TID, (5,), (5,), 5, 2, 3))
    body = (b"\x00\x00\x00\x01" + TID + b"\x02\x00\x00\x00\x05" + b"\x02\x00\x00\x00\x05" + b"\x01" + b"\x01"
            + b"\x00\x00\x00\x05" + b"\x00\x00\x00\x02" + b"\x00\x00\x00\x03" + b"\x00")
    assert value == bytes([1, 3, 0]) + body


def test_partition_record_tagged_recovery_state() -> None:
    value = encode_record(PartitionRecord(0, TID, (), (), -1, 0, 0, leader_recovery_state=1))
    # one tagged field: tag 0, size 1, value 1
    assert value.endswith(b"\x01\x00\x01\x01")


def test_unknown_tagged_fields_are_skipped() -> None:
    value = encode_record(TopicRecord("ab", TID))[:-1] + b"\x01\x05\x02zz"
    assert decode_record(value) == TopicRecord("ab", TID)


def test_unknown_api_key() -> None:
    with pytest.raises(MetadataReplayError, match="apiKey 99"):
        decode_record(bytes([1, 99, 0, 0]))


def test_newer_version_is_rejected() -> None:
    with pytest.raises(UnsupportedVersionError):
        decode_record(bytes([1, 2, 5]) + encode_record(TopicRecord("ab", TID))[3:])


def test_bad_frame_version() -> None:
    with pytest.raises(MetadataReplayError, match="frame version"):
        decode_record(bytes([2, 2, 0]))


@pytest.mark.parametrize("record", SAMPLES, ids=lambda r: type(r).__name__)
def test_truncated_records_are_rejected(record: MetadataRecord) -> None:
    value = encode_record(record)
    for cut in range(3, len(value)):
        with pytest.raises(MetadataReplayError):
            decode_record(value[:cut])


def test_trailing_bytes_are_rejected() -> None:
    with pytest.raises(MetadataReplayError, match="unexpected bytes"):
        decode_record(encode_record(NoOpRecord()) + b"\x00")


def test_null_value_is_rejected() -> None:
    with pytest.raises(MetadataReplayError):
        decode_record(None)
