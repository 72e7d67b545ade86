"""The error answers of APIs Kafka's broker serves and tierlog does not implement: every version of
every such API gets a response that encodes and reads back with the API's error code."""

from __future__ import annotations

import struct
import types
import uuid

import pytest
from kio.index import api_key_map, schema_name_map

from tierlog.errors import ErrorCode
from tierlog.protocol import UnsupportedApiError, parse_request, parse_response
from tierlog.protocol.apis import ANSWERED_APIS, SUPPORTED_APIS
from tierlog.protocol.codec import ParsedRequest, encode_response
from tierlog.protocol.error_answers import error_answer

CASES = [(api.api_key, v) for api in ANSWERED_APIS.values() for v in range(api.min_version, api.max_version + 1)]


@pytest.mark.parametrize(("api_key", "version"), CASES)
def test_every_answered_api_version_encodes_its_error(api_key: int, version: int) -> None:
    topic = types.SimpleNamespace(topic_id=uuid.uuid4(), partitions=[types.SimpleNamespace(partition=2)])
    body = types.SimpleNamespace(creations=[object(), object()], filters=[object()], group_ids=["g1", "g2"],
                                 groups=[types.SimpleNamespace(group_id="g1")], group_id="g", topics=[topic])
    request = ParsedRequest(api_key=api_key, api_version=version, correlation_id=7, client_id="c",
                            header_version=1, body=body)
    frame = encode_response(api_key, version, 7, error_answer(request))
    corr, parsed = parse_response(api_key, version, frame[4:])
    assert corr == 7
    expected = ANSWERED_APIS[api_key].error_code
    if hasattr(parsed, "error_code"):
        assert parsed.error_code == expected
    elif api_key in (83, 84, 85, 86, 87):  # per partition, with ShareCoordinatorService's message
        assert [(p.partition, p.error_code, p.error_message) for p in parsed.results[0].partitions] == [
            (2, expected, ANSWERED_APIS[api_key].error_message)]
    else:
        items = getattr(parsed, "results", None) or getattr(parsed, "filter_results", None) or parsed.groups
        assert items and {i.error_code for i in items} == {expected}


@pytest.mark.parametrize("api_key", sorted(ANSWERED_APIS))
def test_answered_versions_are_kafkas(api_key: int) -> None:
    versions = sorted(schema_name_map[api_key_map[api_key]])
    assert (ANSWERED_APIS[api_key].min_version, ANSWERED_APIS[api_key].max_version) == (versions[0], versions[-1])


def test_an_implementation_overrides_the_answer() -> None:
    # CreateAcls/DescribeAcls/DeleteAcls are implemented (the security work): no longer answered here.
    assert not {29, 30, 31} & set(ANSWERED_APIS) and {29, 30, 31} <= set(SUPPORTED_APIS)
    assert not set(ANSWERED_APIS) & set(SUPPORTED_APIS)
    assert ANSWERED_APIS[38].error_code == ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED


@pytest.mark.parametrize("api_key", [52, 58, 62, 63, 71, 72, 999])
def test_apis_kafka_brokers_do_not_serve_are_still_refused(api_key: int) -> None:
    with pytest.raises(UnsupportedApiError):
        parse_request(struct.pack(">hhi", api_key, 0, 1) + b"\xff\xff")
