"""ClientQuotaRecord (Kafka's metadata apiKey 14): bytes, replay into the image, snapshots."""

from __future__ import annotations

from tierlog.metadata.delta import replay_records
from tierlog.metadata.image import EMPTY_IMAGE, image_records, quota_entity
from tierlog.metadata.records import (
    RECORD_TYPES,
    ClientQuotaRecord,
    QuotaEntityPart,
    decode_record,
    encode_record,
)

ALICE_ANY_CLIENT = (QuotaEntityPart("user", "alice"), QuotaEntityPart("client-id", None))


def test_golden_bytes() -> None:
    # Kafka's layout: frame 1, apiKey 14, version 0; compact array of {EntityType string, EntityName
    # nullable string, tagged}; Key string; Value float64 big-endian; Remove bool; tagged fields.
    record = ClientQuotaRecord(ALICE_ANY_CLIENT, "producer_byte_rate", 1024.0)
    expected = (bytes([1, 14, 0, 3]) + b"\x05user" + b"\x06alice" + b"\x00" + b"\x0aclient-id" + b"\x00" + b"\x00"
                + b"\x13producer_byte_rate" + bytes.fromhex("4090000000000000") + b"\x00" + b"\x00")
    assert encode_record(record) == expected
    assert decode_record(expected) == record
    assert RECORD_TYPES[14] is ClientQuotaRecord


def test_remove_round_trip() -> None:
    record = ClientQuotaRecord((QuotaEntityPart("client-id", "c1"),), "request_percentage", 0.0, remove=True)
    assert decode_record(encode_record(record)) == record


def test_replay_sets_and_removes_and_snapshot_keeps() -> None:
    image = replay_records(EMPTY_IMAGE, [
        ClientQuotaRecord(ALICE_ANY_CLIENT, "producer_byte_rate", 1024.0),
        ClientQuotaRecord(ALICE_ANY_CLIENT, "consumer_byte_rate", 2048.0),
        # The same entity with its parts in the other order is the same entity.
        ClientQuotaRecord(tuple(reversed(ALICE_ANY_CLIENT)), "consumer_byte_rate", 4096.0),
        ClientQuotaRecord((QuotaEntityPart("client-id", "c1"),), "request_percentage", 50.0),
    ])
    alice = quota_entity([("user", "alice"), ("client-id", None)])
    assert dict(image.client_quotas[alice]) == {"producer_byte_rate": 1024.0, "consumer_byte_rate": 4096.0}
    assert not image.is_empty
    # A snapshot (image_records) rebuilds the same image.
    assert replay_records(EMPTY_IMAGE, image_records(image)) == image
    image = replay_records(image, [
        ClientQuotaRecord((QuotaEntityPart("client-id", "c1"),), "request_percentage", 0.0, remove=True)])
    assert quota_entity([("client-id", "c1")]) not in image.client_quotas
    assert alice in image.client_quotas
