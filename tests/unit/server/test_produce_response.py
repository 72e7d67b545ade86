"""The hand-written Produce response encoder must produce exactly kio's bytes for every version."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.protocol import ApiKey, build_response, encode_response, parse_response
from tierlog.server.partitions import AppendResult
from tierlog.server.produce_response import MAX_VERSION, MIN_VERSION, TopicAnswers, encode_produce_response

results = st.builds(
    AppendResult,
    error_code=st.sampled_from([0, 0, 2, 10, 47, 87]),
    base_offset=st.integers(min_value=-1, max_value=2**63 - 1),
    log_append_time_ms=st.sampled_from([-1, 0, 1_700_000_000_000]),
    log_start_offset=st.integers(min_value=-1, max_value=2**40),
    error_message=st.none() | st.text(max_size=30),
    record_errors=st.lists(st.tuples(st.integers(min_value=0, max_value=2**31 - 1), st.text(max_size=20)),
                           max_size=3).map(tuple),
)
topic_keys = st.text(min_size=1, max_size=20) | st.uuids() | st.none()


def _kio_bytes(version: int, correlation_id: int, topics: list[TopicAnswers], throttle_ms: int) -> bytes:
    """What the handler sent before: the response built as kio dataclasses and encoded by kio."""
    key_name = "topic_id" if version >= 13 else "name"
    parts: list[dict[str, Any]] = []
    for key, partitions in topics:
        parts.append({key_name: key, "partition_responses": [{
            "index": index,
            "error_code": r.error_code,
            "base_offset": r.base_offset,
            "log_append_time": r.log_append_time_ms,
            "log_start_offset": r.log_start_offset,
            "error_message": r.error_message if r.error_code else None,
            "record_errors": [{"batch_index": i, "batch_index_error_message": m} for i, m in r.record_errors],
        } for index, r in partitions]})
    body = build_response(ApiKey.PRODUCE, version, {"responses": parts, "throttle_time": throttle_ms})
    return encode_response(ApiKey.PRODUCE, version, correlation_id, body)


@settings(max_examples=150, deadline=None)
@given(
    version=st.integers(min_value=MIN_VERSION, max_value=MAX_VERSION),
    correlation_id=st.integers(min_value=-2**31, max_value=2**31 - 1),
    topics=st.lists(st.tuples(topic_keys, st.lists(st.tuples(st.integers(min_value=0, max_value=2**31 - 1), results),
                                                   max_size=3)), max_size=3),
    throttle_ms=st.integers(min_value=0, max_value=2**31 - 1),
)
def test_the_bytes_are_kios_for_every_version(version: int, correlation_id: int,
                                               topics: list[tuple[Any, list[tuple[int, AppendResult]]]],
                                               throttle_ms: int) -> None:
    # A version's topic key is a name before v13 and an id from v13 on.
    answers: list[TopicAnswers] = [
        (key if version >= 13 and not isinstance(key, str) else
         (str(key) if version < 13 else uuid.uuid5(uuid.NAMESPACE_DNS, key)), partitions)
        for key, partitions in topics]
    expected = _kio_bytes(version, correlation_id, answers, throttle_ms)
    reply = encode_produce_response(version, correlation_id, answers, throttle_time_ms=throttle_ms)
    assert reply.parts == (expected,)
    # Quotas set the throttle time afterwards: the same bytes as encoding it in.
    unthrottled = encode_produce_response(version, correlation_id, answers)
    assert unthrottled.with_throttle_time(throttle_ms).parts == (expected,)


def test_a_client_reads_the_answer() -> None:
    answer = AppendResult(0, base_offset=41, log_start_offset=7)
    reply = encode_produce_response(9, 5, [("orders", [(2, answer)])], throttle_time_ms=30)
    frame = reply.parts[0]
    assert isinstance(frame, bytes)
    correlation_id, body = parse_response(ApiKey.PRODUCE, 9, frame[4:])
    assert correlation_id == 5 and body.throttle_time.total_seconds() == 0.03
    [topic] = body.responses
    assert topic.name == "orders"
    [partition] = topic.partition_responses
    assert (partition.index, partition.error_code, partition.base_offset, partition.log_start_offset) == (2, 0, 41, 7)
