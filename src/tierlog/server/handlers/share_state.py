"""The share-group APIs (KIP-932) that carry per-item answers, answered as Kafka's single broker with
share groups off answers them (none is advertised in ApiVersions: tierlog has no share groups).

* The share coordinator's state APIs -- InitializeShareGroupState, ReadShareGroupState,
  WriteShareGroupState, DeleteShareGroupState, ReadShareGroupStateSummary (83-87): Kafka's KafkaApis
  checks CLUSTER_ACTION on the cluster (else every partition CLUSTER_AUTHORIZATION_FAILED, the
  response's toGlobalErrorResponse) and hands the request to its ShareCoordinatorService, which
  answers an empty response when the group id, the topics or some topic's partitions are empty, and
  otherwise asks the coordinator runtime for the shard of each (group, topic id, partition) key: with
  no ``__share_group_state`` topic this broker leads no shard, so each partition gets NOT_COORDINATOR
  with "Unable to <verb> share group state: This is not the correct coordinator.".
* DescribeShareGroupOffsets (90): each group UNSUPPORTED_VERSION (KafkaApis, share groups off).
"""

from __future__ import annotations

from tierlog.errors import ErrorCode
from tierlog.metadata.acls import AclOperation
from tierlog.protocol import ParsedRequest, build_response
from tierlog.protocol.error_answers import error_answer
from tierlog.server.connection import ClientInfo, Reply
from tierlog.server.context import BrokerContext

#: InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState, DeleteShareGroupState,
#: ReadShareGroupStateSummary.
STATE_APIS = (83, 84, 85, 86, 87)
DESCRIBE_SHARE_GROUP_OFFSETS = 90


async def handle_state(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    if ctx.allowed(client, AclOperation.CLUSTER_ACTION):
        return error_answer(request)  # NOT_COORDINATOR per partition, or Kafka's empty answer
    # KafkaApis: every partition CLUSTER_AUTHORIZATION_FAILED (the response's toGlobalErrorResponse).
    error = {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "error_message": "Cluster authorization failed."}
    return build_response(request.api_key, request.api_version, {"results": [
        {"topic_id": t.topic_id, "partitions": [{"partition": int(p.partition), **error} for p in t.partitions]}
        for t in request.body.topics]})


async def handle_describe_offsets(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    return error_answer(request)  # each group UNSUPPORTED_VERSION, before any authorization


HANDLERS = {**dict.fromkeys(STATE_APIS, handle_state), DESCRIBE_SHARE_GROUP_OFFSETS: handle_describe_offsets}
