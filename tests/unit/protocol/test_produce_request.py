"""The hand-written Produce request reader must read exactly what the generic reader and kio's own
reader read, for every version it handles (3-13), and refuse exactly the bytes the generic reader
refuses: random requests, requests carrying unknown tagged fields at every level and nulls wherever
the schema allows them, and mangled copies of both."""

from __future__ import annotations

import io
import struct
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader, entity_writer

from tierlog._util.varint import unsigned_varint_bytes
from tierlog.protocol import MalformedRequestError, parse_request, request_type
from tierlog.protocol._decoder import DecodeError, decode
from tierlog.protocol.produce_request import MAX_VERSION, MIN_VERSION, decode_produce_request

VERSIONS = list(range(MIN_VERSION, MAX_VERSION + 1))
CHECKS = settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))


def _kio_bytes(entity: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def _outcome(read: Any, buf: bytes) -> tuple[str, Any]:
    try:
        return "ok", read(buf)
    except DecodeError:
        return "refused", None


def _by_hand(version: int) -> Any:
    return lambda buf: decode_produce_request(version, memoryview(buf), 0)


def _generic(version: int) -> Any:
    return lambda buf: decode(request_type(0, version), buf, 0, record_views=True)


def _same_as_generic(version: int, buf: bytes) -> None:
    assert _outcome(_by_hand(version), buf) == _outcome(_generic(version), buf)


@pytest.mark.parametrize("version", VERSIONS)
def test_random_requests_read_as_kio_and_the_generic_reader_read_them(version: int) -> None:
    body_type = request_type(0, version)

    @CHECKS
    @given(st.from_type(body_type))
    def check(original: Any) -> None:
        encoded = _kio_bytes(original)
        body, end = decode_produce_request(version, memoryview(encoded), 0)
        assert end == len(encoded)
        assert body == original
        assert body == entity_reader(body_type)(encoded, 0)[0]  # kio's own reader
        assert (body, end) == decode(body_type, encoded, 0, record_views=True)
        # Record sets are views of the request, not copies.
        for topic in body.topic_data:
            for partition in topic.partition_data:
                assert partition.records is None or isinstance(partition.records, memoryview)

    check()


# -- a flexible request written by hand, to put tagged fields and nulls where kio never writes them --


def _compact_string(value: str | None) -> bytes:
    if value is None:
        return b"\0"
    raw = value.encode()
    return unsigned_varint_bytes(len(raw) + 1) + raw


def _tagged(fields: list[tuple[int, bytes]]) -> bytes:
    out = unsigned_varint_bytes(len(fields))
    for tag, value in fields:
        out += unsigned_varint_bytes(tag) + unsigned_varint_bytes(len(value)) + value
    return out


tagged_fields = st.lists(st.tuples(st.integers(0, 2**20), st.binary(max_size=6)), max_size=3)


@st.composite
def flexible_requests(draw: st.DrawFn, version: int) -> tuple[bytes, bytes]:
    """(bytes with tagged fields, the same request as kio writes it, without them)."""
    txn = draw(st.none() | st.text(max_size=8))
    acks, timeout_ms = draw(st.sampled_from([-1, 0, 1, 7])), draw(st.integers(0, 2**31 - 1))
    topics = draw(st.lists(st.tuples(
        st.text(min_size=0, max_size=8) if version < 13 else st.sampled_from([uuid.UUID(int=0), uuid.uuid4()]),
        st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), st.none() | st.binary(max_size=40)), max_size=3),
    ), max_size=3))
    plain, tagged = bytearray(), bytearray()
    for out, with_tags in ((plain, False), (tagged, True)):
        out += _compact_string(txn) + struct.pack(">hi", acks, timeout_ms) + unsigned_varint_bytes(len(topics) + 1)
        for key, partitions in topics:
            out += key.bytes if isinstance(key, uuid.UUID) else _compact_string(key)
            out += unsigned_varint_bytes(len(partitions) + 1)
            for index, records in partitions:
                out += struct.pack(">i", index)
                out += b"\0" if records is None else unsigned_varint_bytes(len(records) + 1) + records
                out += _tagged(draw(tagged_fields) if with_tags else [])
            out += _tagged(draw(tagged_fields) if with_tags else [])
        out += _tagged(draw(tagged_fields) if with_tags else [])
    return bytes(tagged), bytes(plain)


@pytest.mark.parametrize("version", [v for v in VERSIONS if v >= 9])
def test_unknown_tagged_fields_and_nulls_are_read_past(version: int) -> None:
    @CHECKS
    @given(flexible_requests(version))
    def check(pair: tuple[bytes, bytes]) -> None:
        tagged, plain = pair
        expected = entity_reader(request_type(0, version))(plain, 0)[0]
        assert _kio_bytes(expected) == plain  # the hand-written request is kio's encoding
        body, end = decode_produce_request(version, memoryview(tagged), 0)
        assert (body, end) == (expected, len(tagged))
        assert (body, end) == decode(request_type(0, version), tagged, 0, record_views=True)

    check()


@st.composite
def mangled(draw: st.DrawFn, version: int) -> bytes:
    if version >= 9 and draw(st.booleans()):
        frame = bytearray(draw(flexible_requests(version))[0])
    else:
        frame = bytearray(_kio_bytes(draw(st.from_type(request_type(0, version)))))
    for _ in range(draw(st.integers(1, 4))):
        if not frame:
            break
        where = draw(st.integers(0, len(frame) - 1))
        kind = draw(st.sampled_from(["flip", "set", "truncate", "insert"]))
        if kind == "flip":
            frame[where] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set":
            frame[where] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]))
        elif kind == "truncate":
            del frame[where:]
        else:
            frame[where:where] = draw(st.binary(min_size=1, max_size=5))
    return bytes(frame)


@pytest.mark.parametrize("version", VERSIONS)
def test_mangled_requests_are_refused_exactly_where_the_generic_reader_refuses_them(version: int) -> None:
    @settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(mangled(version) | st.binary(max_size=80))
    def check(buf: bytes) -> None:
        _same_as_generic(version, buf)

    check()


@pytest.mark.parametrize("version", [3, 9, 13])
def test_a_malformed_produce_frame_is_still_a_malformed_request_with_its_correlation_id(version: int) -> None:
    header = struct.pack(">hhih", 0, version, 77, 1) + b"c" + (b"\0" if version >= 9 else b"")
    # A topic array that declares more topics than there are bytes left.
    body = (b"\0" if version >= 9 else b"\xff\xff") + struct.pack(">hi", 1, 1000) + (
        unsigned_varint_bytes(1000) if version >= 9 else struct.pack(">i", 1000))
    with pytest.raises(MalformedRequestError) as caught:
        parse_request(header + body)
    assert caught.value.correlation_id == 77
