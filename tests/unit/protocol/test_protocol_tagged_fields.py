"""Tagged fields (KIP-482), with requests built by hand so that they carry tags no schema knows."""

from __future__ import annotations

import struct
import uuid

import pytest

from tierlog.protocol import MalformedRequestError, parse_request


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def compact_string(text: str) -> bytes:
    raw = text.encode()
    return uvarint(len(raw) + 1) + raw


def tags(*fields: tuple[int, bytes]) -> bytes:
    return uvarint(len(fields)) + b"".join(uvarint(tag) + uvarint(len(value)) + value for tag, value in fields)


def header_v2(api_key: int, version: int, correlation_id: int, client_id: str, tag_section: bytes) -> bytes:
    raw = client_id.encode()
    return struct.pack(">hhih", api_key, version, correlation_id, len(raw)) + raw + tag_section


def test_unknown_tags_are_skipped_in_the_header_the_body_and_nested_structs() -> None:
    topic_id = uuid.uuid4()
    frame = (
        header_v2(3, 12, 77, "hand-made", tags((9, b"xyz")))
        # topics: compact array of 1
        + uvarint(2)
        + topic_id.bytes
        + compact_string("orders")
        + tags((42, b"\x01\x02"), (1000, b""))  # unknown tags inside MetadataRequestTopic
        + b"\x01"  # allow_auto_topic_creation
        + b"\x00"  # include_topic_authorized_operations
        + tags((0, b""), (7, b"\xff"), (2**20, b"a longer unknown value"))
    )
    parsed = parse_request(frame)
    assert parsed.correlation_id == 77
    assert parsed.client_id == "hand-made"
    assert parsed.header_version == 2
    (topic,) = parsed.body.topics
    assert topic.topic_id == topic_id
    assert topic.name == "orders"
    assert parsed.body.allow_auto_topic_creation is True
    assert parsed.body.include_topic_authorized_operations is False


def _fetch_v12(tag_section: bytes) -> bytes:
    return (
        header_v2(1, 12, 5, "c", tags())
        + struct.pack(">iiiib", -1, 500, 1, 1 << 20, 0)  # replica, max wait, min/max bytes, isolation
        + struct.pack(">ii", 0, -1)  # session id, session epoch
        + uvarint(1)  # topics: empty compact array
        + uvarint(1)  # forgotten topics: empty
        + compact_string("")  # rack id
        + tag_section
    )


def test_a_known_tag_is_read_and_unknown_ones_beside_it_skipped() -> None:
    body = parse_request(_fetch_v12(tags((0, compact_string("cluster-x")), (3, b"??")))).body
    assert body.cluster_id == "cluster-x"


def test_a_known_tag_whose_value_does_not_fill_its_declared_size_is_malformed() -> None:
    value = compact_string("abc") + b"\x00"  # one byte more than the string uses
    with pytest.raises(MalformedRequestError, match="tagged field 0"):
        parse_request(_fetch_v12(tags((0, value))))


def test_a_known_tag_cannot_read_past_its_declared_size() -> None:
    # The string claims 9 bytes but the tag holds 4: the reader must not borrow from what follows.
    value = uvarint(10) + b"abc"
    frame = _fetch_v12(uvarint(1) + uvarint(0) + uvarint(len(value)) + value + b"xxxxxxxx")
    with pytest.raises(MalformedRequestError):
        parse_request(frame)


def test_a_tag_running_past_the_frame_is_malformed() -> None:
    with pytest.raises(MalformedRequestError):
        parse_request(_fetch_v12(uvarint(1) + uvarint(5) + uvarint(100) + b"short"))
