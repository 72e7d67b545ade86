"""Property tests over the whole schema: random messages of every API cross-checked with kafka-python
and kio's own reader, and random or mangled bytes that must only ever raise our ProtocolErrors."""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest
from kio.serial import entity_reader, entity_writer

from tierlog.protocol import (
    SUPPORTED_APIS,
    ProtocolError,
    encode_response,
    parse_request,
    parse_response,
    request_type,
    response_type,
)

# Generation only: a failure here is a schema mismatch, and hypothesis' shrinking of a deep kio
# message would cost far more than it explains.
QUICK = settings(
    max_examples=3,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)


def _kafka_python_classes() -> dict[tuple[int, str], Any]:
    found: dict[tuple[int, str], Any] = {}
    pending = list(ApiMessage.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if getattr(cls, "_class_version", None) is None and getattr(cls, "_json", None):
            found[(cls.API_KEY, cls.type)] = cls
    return found


KAFKA_PYTHON = _kafka_python_classes()


#: APIs kafka-python 3.0 has no message classes for (KIP-848's consumer group protocol): their
#: requests and responses are checked against Kafka's own clients in tests/jvm and against librdkafka
#: in tests/integration/test_consumer_group_protocol.py instead.
NOT_IN_KAFKA_PYTHON = {68, 69}


def test_kafka_python_lacks_only_the_named_apis() -> None:
    assert {k for k in SUPPORTED_APIS if (k, "request") not in KAFKA_PYTHON} == NOT_IN_KAFKA_PYTHON


def _versions(every: bool) -> list[tuple[int, int]]:
    cases = []
    for api_key, spec in SUPPORTED_APIS.items():
        if api_key in NOT_IN_KAFKA_PYTHON:
            continue
        versions = set(range(spec.min_version, spec.max_version + 1))
        if not every:
            flexible = [v for v in versions if request_type(api_key, v).__flexible__]
            versions = {spec.min_version, spec.max_version, *flexible[:1]}
        cases.extend((api_key, version) for version in sorted(versions))
    return cases


def _kio_bytes(entity: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def _request_frame(api_key: int, version: int, header_version: int, body: bytes) -> bytes:
    header = struct.pack(">hhih", api_key, version, 1, 1) + b"c"
    return header + (b"\x00" if header_version == 2 else b"") + body


def _check_request(api_key: int, version: int) -> None:
    body_type = request_type(api_key, version)
    kp_type = KAFKA_PYTHON[(api_key, "request")]
    header_version = 2 if body_type.__flexible__ else 1

    @QUICK
    @given(st.from_type(body_type))
    def check(original: Any) -> None:
        # kafka-python decodes kio's encoding and re-encodes it with its own encoder: we parse that.
        decoded = kp_type.decode(_kio_bytes(original), version=version)
        decoded.with_header()
        parsed = parse_request(_request_frame(api_key, version, header_version, decoded.encode()))
        assert parsed.body == original

    check()


def _check_response(api_key: int, version: int) -> None:
    body_type = response_type(api_key, version)
    kp_type = KAFKA_PYTHON[(api_key, "response")]

    @QUICK
    @given(st.from_type(body_type))
    def check(original: Any) -> None:
        frame = encode_response(api_key, version, 5, original)
        payload = frame[4:]
        # kafka-python reads our bytes and writes back exactly the same ones...
        decoded = kp_type.decode(payload, version=version, header=True)
        assert decoded.header.correlation_id == 5
        assert decoded.encode(header=True) == payload
        # ... and our own reader agrees with kio's native one on valid input.
        assert parse_response(api_key, version, payload) == (5, original)
        body_offset = len(payload) - len(_kio_bytes(original))
        assert entity_reader(body_type)(payload, body_offset)[0] == original

    check()


# ApiVersions' api_keys is a map keyed by api_key in kafka-python: random duplicates do not survive
# its decoding. ApiVersions has its own exact tests in test_protocol_codec.py.
# SaslAuthenticate v1+ responses carry session_lifetime_ms, which kio holds as a timedelta: hypothesis
# draws timedeltas whose milliseconds overflow on the way back (kio's limit, not the wire format's);
# tests/unit/server/security covers that response with real values.
def _response_checked(api_key: int, version: int) -> bool:
    return api_key != 18 and not (api_key == 36 and version >= 1)


def _cases(every: bool, kind: str) -> list[tuple[int, int]]:
    return [(k, v) for k, v in _versions(every) if kind == "request" or _response_checked(k, v)]


@pytest.mark.parametrize(("api_key", "version"), _cases(False, "request"))
def test_kafka_python_encoded_requests_parse_to_the_original(api_key: int, version: int) -> None:
    _check_request(api_key, version)


@pytest.mark.parametrize(("api_key", "version"), _cases(False, "response"))
def test_responses_survive_kafka_python_and_kio(api_key: int, version: int) -> None:
    _check_response(api_key, version)


@pytest.mark.slow
@pytest.mark.parametrize(("api_key", "version"), sorted(set(_versions(True)) - set(_versions(False))))
def test_every_other_version_against_kafka_python(api_key: int, version: int) -> None:
    _check_request(api_key, version)
    if _response_checked(api_key, version):  # the same exceptions as the responses' test above
        _check_response(api_key, version)


# --- hostile bytes ---------------------------------------------------------------------------------


def _only_protocol_errors(frame: bytes) -> None:
    try:
        parse_request(frame)
    except ProtocolError:
        pass


supported_prefix = st.sampled_from(sorted(SUPPORTED_APIS)).flatmap(
    lambda key: st.tuples(
        st.just(key),
        st.integers(SUPPORTED_APIS[key].min_version, SUPPORTED_APIS[key].max_version),
    )
)

FUZZ = settings(max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_protocol_errors(frame: bytes) -> None:
    _only_protocol_errors(frame)


@FUZZ
@given(supported_prefix, st.integers(-(2**31), 2**31 - 1), st.binary(max_size=300))
def test_random_bodies_of_supported_apis_raise_only_protocol_errors(
    key_version: tuple[int, int], correlation_id: int, rest: bytes
) -> None:
    api_key, version = key_version
    _only_protocol_errors(struct.pack(">hhi", api_key, version, correlation_id) + rest)


def _seed_requests() -> list[bytes]:
    seeds = []
    for version in (1, 12):
        request = MetadataRequest[version](topics=[MetadataRequest.MetadataRequestTopic(name="orders")])
        request.with_header(correlation_id=1, client_id="c")
        seeds.append(request.encode(header=True))
    topic = ProduceRequest.TopicProduceData
    for version in (3, 9):
        produce = ProduceRequest[version](
            acks=1,
            timeout_ms=100,
            topic_data=[topic(name="t", partition_data=[topic.PartitionProduceData(index=0, records=b"r" * 20)])],
        )
        produce.with_header(correlation_id=2, client_id="c")
        seeds.append(produce.encode(header=True))
    return seeds


Mutation = Callable[[bytearray], None]


@st.composite
def mutated_requests(draw: st.DrawFn) -> bytes:
    frame = bytearray(draw(st.sampled_from(_seed_requests())))
    for _ in range(draw(st.integers(1, 4))):
        where = draw(st.integers(8, len(frame) - 1))  # keep the header prefix: reach the body parser
        kind = draw(st.sampled_from(["flip", "set", "truncate", "insert"]))
        if kind == "flip":
            frame[where] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set":
            frame[where] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]))
        elif kind == "truncate":
            del frame[where:]
        else:
            frame[where:where] = draw(st.binary(min_size=1, max_size=4))
        if len(frame) <= 9:
            break
    return bytes(frame)


@FUZZ
@given(mutated_requests())
def test_mangled_real_requests_raise_only_protocol_errors(frame: bytes) -> None:
    _only_protocol_errors(frame)
