"""DescribeClientQuotas and AlterClientQuotas (KIP-546): client quotas stored in the metadata log as
ClientQuotaRecords through the controller. The rules (valid entities and keys, filter matching) are
in :mod:`tierlog.metadata.client_quotas`; errors are Kafka's: INVALID_REQUEST for a bad entity, key,
value or filter, per entry for AlterClientQuotas and for the whole request for DescribeClientQuotas.
"""

from __future__ import annotations

from typing import Any

from tierlog.errors import ErrorCode
from tierlog.metadata.acls import AclOperation
from tierlog.metadata.client_quotas import (
    InvalidQuotaRequest,
    QuotaFilter,
    describe,
    validate_entity,
    validate_filter,
    validate_op,
)
from tierlog.metadata.records import ClientQuotaRecord, MetadataRecord, QuotaEntityPart
from tierlog.protocol import ApiKey, ParsedRequest, build_response
from tierlog.server.connection import ClientInfo, Reply
from tierlog.server.context import BrokerContext


def _entity_out(entity: Any) -> list[dict[str, Any]]:
    return [{"entity_type": t, "entity_name": n} for t, n in entity]


async def handle_describe(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    if not ctx.allowed(client, AclOperation.DESCRIBE_CONFIGS):
        # Kafka: DESCRIBE_CONFIGS on the cluster.
        return build_response(ApiKey.DESCRIBE_CLIENT_QUOTAS, request.api_version, {
            "throttle_time": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "error_message": "Cluster authorization failed.", "entries": None})
    try:
        components = validate_filter(QuotaFilter(str(c.entity_type), int(c.match_type),
                                                 None if c.match is None else str(c.match)) for c in body.components)
    except InvalidQuotaRequest as e:
        return build_response(ApiKey.DESCRIBE_CLIENT_QUOTAS, request.api_version, {
            "throttle_time": 0, "error_code": ErrorCode.INVALID_REQUEST, "error_message": str(e), "entries": None})
    entries = [{"entity": _entity_out(entity), "values": [{"key": k, "value": v} for k, v in sorted(values.items())]}
               for entity, values in describe(ctx.image.client_quotas, components, bool(body.strict))]
    return build_response(ApiKey.DESCRIBE_CLIENT_QUOTAS, request.api_version, {
        "throttle_time": 0, "error_code": 0, "error_message": None, "entries": entries})


async def handle_alter(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    results: list[dict[str, Any]] = []
    planned: list[MetadataRecord] = []
    # Kafka: ALTER_CONFIGS on the cluster, else every entry is refused and nothing changes.
    permitted = ctx.allowed(client, AclOperation.ALTER_CONFIGS)
    for entry in body.entries:
        raw = [(str(e.entity_type), None if e.entity_name is None else str(e.entity_name)) for e in entry.entity]
        if not permitted:
            results.append({"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                            "error_message": "Cluster authorization failed.", "entity": raw})
            continue
        try:
            entity = validate_entity(raw)
            keys = [str(op.key) for op in entry.ops]
            if len(set(keys)) != len(keys):
                raise InvalidQuotaRequest("Duplicate quota key in one entry")
            records = []
            for op in entry.ops:
                validate_op(entity, str(op.key), float(op.value), bool(op.remove))
                parts = tuple(QuotaEntityPart(t, n) for t, n in entity)
                records.append(ClientQuotaRecord(parts, str(op.key), 0.0 if op.remove else float(op.value),
                                                 bool(op.remove)))
        except InvalidQuotaRequest as e:
            results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": str(e), "entity": raw})
            continue
        planned.extend(records)
        results.append({"error_code": 0, "error_message": None, "entity": raw})
    if planned and not body.validate_only:
        await ctx.io.run(ctx.controller.commit_records, planned)
    return build_response(ApiKey.ALTER_CLIENT_QUOTAS, request.api_version, {
        "throttle_time": 0, "entries": [{**r, "entity": _entity_out(r["entity"])} for r in results]})


HANDLERS = {ApiKey.DESCRIBE_CLIENT_QUOTAS: handle_describe, ApiKey.ALTER_CLIENT_QUOTAS: handle_alter}
