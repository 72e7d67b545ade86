"""CreateAcls, DescribeAcls and DeleteAcls (KIP-140, KIP-290), through the controller.

As Kafka: without an authorizer each answers SECURITY_DISABLED; the caller needs ALTER on the
cluster to create or delete ACLs and DESCRIBE to list them (CLUSTER_AUTHORIZATION_FAILED
otherwise); a creation Kafka refuses (a MATCH or ANY pattern, an UNKNOWN or ANY field, an empty
name, a CLUSTER resource not named kafka-cluster, a principal without a type) gets INVALID_REQUEST
and the valid ones of the same request are created; an ACL that already exists is not stored twice.
"""

from __future__ import annotations

from typing import Any

from tierlog.errors import ErrorCode
from tierlog.ids import random_uuid
from tierlog.metadata.acls import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
    validate_new_acl,
)
from tierlog.metadata.records import AccessControlEntryRecord, MetadataRecord, RemoveAccessControlEntryRecord
from tierlog.protocol import ApiKey, ParsedRequest, build_response
from tierlog.server.connection import ClientInfo, Reply
from tierlog.server.context import BrokerContext
from tierlog.server.security.authz import acl_of

NO_AUTHORIZER = "No Authorizer is configured."
#: Kafka's message for CLUSTER_AUTHORIZATION_FAILED (librdkafka reports a top-level error only with one).
CLUSTER_DENIED = "Cluster authorization failed."


def _enum(kind: Any, value: int) -> Any:
    try:
        return kind(value)
    except ValueError:
        return kind(0)  # UNKNOWN: refused by validation or matching nothing, as Kafka's fromCode does


def _filter(f: Any) -> AclBindingFilter:
    return AclBindingFilter(_enum(ResourceType, int(f.resource_type_filter)), f.resource_name_filter,
                            _enum(PatternType, int(f.pattern_type_filter)), f.principal_filter, f.host_filter,
                            _enum(AclOperation, int(f.operation)), _enum(AclPermissionType, int(f.permission_type)))


def _acl_fields(acl: StandardAcl) -> dict[str, Any]:
    return {"resource_type": int(acl.resource_type), "resource_name": acl.resource_name,
            "pattern_type": int(acl.pattern_type), "principal": acl.principal, "host": acl.host,
            "operation": int(acl.operation), "permission_type": int(acl.permission)}


async def handle_create(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    creations = request.body.creations
    def respond(results: list[dict[str, Any]]) -> Reply:
        return build_response(ApiKey.CREATE_ACLS, request.api_version, {"throttle_time": 0, "results": results})
    if not ctx.acl_gate.enabled:
        return respond([{"error_code": ErrorCode.SECURITY_DISABLED, "error_message": NO_AUTHORIZER}
                        for _ in creations])
    if not ctx.allowed(client, AclOperation.ALTER):
        return respond([{"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "error_message": CLUSTER_DENIED}
                        for _ in creations])
    existing = {acl_of(r) for r in ctx.image.acls.values()}
    results: list[dict[str, Any]] = []
    records: list[MetadataRecord] = []
    for c in creations:
        acl = StandardAcl(_enum(ResourceType, int(c.resource_type)), str(c.resource_name),
                          _enum(PatternType, int(c.resource_pattern_type)), str(c.principal), str(c.host),
                          _enum(AclOperation, int(c.operation)), _enum(AclPermissionType, int(c.permission_type)))
        problem = validate_new_acl(acl)
        if problem is not None:
            results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": problem})
            continue
        if acl not in existing:
            existing.add(acl)
            records.append(AccessControlEntryRecord(random_uuid(), int(acl.resource_type), acl.resource_name,
                                                    int(acl.pattern_type), acl.principal, acl.host,
                                                    int(acl.operation), int(acl.permission)))
        results.append({"error_code": 0, "error_message": None})
    if records:
        await ctx.io.run(ctx.controller.commit_records, records)
    return respond(results)


async def handle_describe(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    def respond(code: int, message: str | None, resources: list[dict[str, Any]]) -> Reply:
        return build_response(ApiKey.DESCRIBE_ACLS, request.api_version, {
            "throttle_time": 0, "error_code": code, "error_message": message, "resources": resources})
    if not ctx.acl_gate.enabled:
        return respond(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER, [])
    if not ctx.allowed(client, AclOperation.DESCRIBE):
        return respond(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED, [])
    flt = _filter(request.body)
    problem = flt.problem()
    if problem is not None:
        return respond(ErrorCode.INVALID_REQUEST, problem, [])
    grouped: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    for acl in sorted((acl_of(r) for r in ctx.image.acls.values()), key=_sort_key):
        if flt.matches(acl):
            grouped.setdefault((int(acl.resource_type), acl.resource_name, int(acl.pattern_type)), []).append(
                {"principal": acl.principal, "host": acl.host, "operation": int(acl.operation),
                 "permission_type": int(acl.permission)})
    return respond(0, None, [{"resource_type": rt, "resource_name": name, "pattern_type": pt, "acls": entries}
                             for (rt, name, pt), entries in grouped.items()])


def _sort_key(acl: StandardAcl) -> tuple[int, str, int, str, str, int, int]:
    return (int(acl.resource_type), acl.resource_name, int(acl.pattern_type), acl.principal, acl.host,
            int(acl.operation), int(acl.permission))


async def handle_delete(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    filters = request.body.filters
    def respond(results: list[dict[str, Any]]) -> Reply:
        return build_response(ApiKey.DELETE_ACLS, request.api_version, {"throttle_time": 0, "filter_results": results})
    if not ctx.acl_gate.enabled:
        return respond([{"error_code": ErrorCode.SECURITY_DISABLED, "error_message": NO_AUTHORIZER,
                         "matching_acls": []} for _ in filters])
    if not ctx.allowed(client, AclOperation.ALTER):
        return respond([{"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "error_message": CLUSTER_DENIED,
                         "matching_acls": []} for _ in filters])
    current = sorted(((acl_id, acl_of(r)) for acl_id, r in ctx.image.acls.items()), key=lambda p: _sort_key(p[1]))
    removed: set[bytes] = set()
    records: list[MetadataRecord] = []
    results: list[dict[str, Any]] = []
    for f in filters:
        flt = _filter(f)
        problem = flt.problem()
        if problem is not None:
            results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": problem, "matching_acls": []})
            continue
        matching = []
        for acl_id, acl in current:
            if flt.matches(acl):
                matching.append({"error_code": 0, "error_message": None, **_acl_fields(acl)})
                if acl_id not in removed:
                    removed.add(acl_id)
                    records.append(RemoveAccessControlEntryRecord(acl_id))
        results.append({"error_code": 0, "error_message": None, "matching_acls": matching})
    if records:
        await ctx.io.run(ctx.controller.commit_records, records)
    return respond(results)


HANDLERS = {ApiKey.CREATE_ACLS: handle_create, ApiKey.DESCRIBE_ACLS: handle_describe,
            ApiKey.DELETE_ACLS: handle_delete}
