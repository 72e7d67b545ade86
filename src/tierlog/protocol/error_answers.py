"""The answer to a request of an API tierlog does not implement but Kafka's broker serves
(:mod:`tierlog.protocol.unimplemented`): the response Kafka's ``getErrorResponse`` builds, with the
API's error code at the top level, or on every item of the request where the response has no
top-level error code (CreateAcls' creations, DeleteAcls' filters, a describe's group ids, each
group of DescribeShareGroupOffsets, each partition of the share coordinator's state APIs -- whose
ShareCoordinatorService answers an empty response when the group id, the topics or a topic's
partitions are empty). ShareGroupDescribe and StreamsGroupDescribe have no other shape."""

from __future__ import annotations

import dataclasses
from typing import Any

from tierlog.protocol.apis import ANSWERED_APIS, ResponseBody, response_type
from tierlog.protocol.build import build_response
from tierlog.protocol.codec import ParsedRequest

CREATE_ACLS = 30
DELETE_ACLS = 31
SHARE_GROUP_DESCRIBE = 77
STREAMS_GROUP_DESCRIBE = 89
#: InitializeShareGroupState .. ReadShareGroupStateSummary: group_id, topics[topic_id, partitions[partition]].
SHARE_STATE_APIS = frozenset({83, 84, 85, 86, 87})
DESCRIBE_SHARE_GROUP_OFFSETS = 90


def error_answer(request: ParsedRequest) -> ResponseBody:
    """The error response of an answered API's request (KeyError for any other API)."""
    api = ANSWERED_APIS[request.api_key]
    fields = {f.name for f in dataclasses.fields(response_type(request.api_key, request.api_version))}
    error: dict[str, Any] = {"error_code": api.error_code, "error_message": api.error_message}
    body = request.body
    values: dict[str, Any]
    if "error_code" in fields:
        values = error if "error_message" in fields else {"error_code": api.error_code}
    elif request.api_key == CREATE_ACLS:  # one result per creation
        values = {"results": [dict(error) for _ in body.creations]}
    elif request.api_key == DELETE_ACLS:  # one result per filter
        values = {"filter_results": [dict(error) for _ in body.filters]}
    elif request.api_key in (SHARE_GROUP_DESCRIBE, STREAMS_GROUP_DESCRIBE):  # one per group id
        values = {"groups": [{"group_id": g, **error} for g in body.group_ids]}
    elif request.api_key == DESCRIBE_SHARE_GROUP_OFFSETS:  # one per group, no message (KafkaApis)
        values = {"groups": [{"group_id": g.group_id, "error_code": api.error_code} for g in body.groups]}
    elif request.api_key in SHARE_STATE_APIS:  # one per partition, unless something is empty
        empty = not body.group_id or not body.topics or any(not t.partitions for t in body.topics)
        values = {"results": [] if empty else [
            {"topic_id": t.topic_id, "partitions": [{"partition": p.partition, **error} for p in t.partitions]}
            for t in body.topics]}
    else:
        # No API answered here lacks both a top-level and a per-item error field.
        values = {}
    return build_response(request.api_key, request.api_version, values)
