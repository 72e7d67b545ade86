"""The consumer group protocol of KIP-848 (ConsumerGroupHeartbeat, ConsumerGroupDescribe) and
OffsetDelete. The state lives in :mod:`tierlog.server.groups`."""

from __future__ import annotations

from typing import Any

from tierlog.errors import ErrorCode
from tierlog.metadata.acls import AclOperation, ResourceType
from tierlog.protocol import ApiKey, ParsedRequest, build_response, to_millis
from tierlog.server.connection import ClientInfo, Reply
from tierlog.server.context import BrokerContext, topic_uuid, uuid_bytes
from tierlog.server.groups.assignors import Assignment
from tierlog.server.groups.consumer_group import HeartbeatRequest
from tierlog.server.groups.coordinator import GroupCoordinator


def _coordinator(ctx: BrokerContext) -> GroupCoordinator:
    assert ctx.groups is not None, "the broker wires a group coordinator"
    return ctx.groups


def _owned(topic_partitions: Any) -> Assignment | None:
    if topic_partitions is None:
        return None
    out: dict[bytes, frozenset[int]] = {}
    for tp in topic_partitions:
        tid = uuid_bytes(tp.topic_id)
        if tid is not None:
            out[tid] = out.get(tid, frozenset()) | frozenset(int(p) for p in tp.partitions)
    return out


def _topic_partitions(assignment: Assignment) -> list[dict[str, Any]]:
    return [{"topic_id": topic_uuid(tid), "partitions": sorted(ps)} for tid, ps in sorted(assignment.items()) if ps]


async def handle_consumer_group_heartbeat(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    if not ctx.allowed(client, AclOperation.READ, ResourceType.GROUP, body.group_id):
        return build_response(ApiKey.CONSUMER_GROUP_HEARTBEAT, request.api_version, {
            "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "error_message": None, "member_id": None,
            "member_epoch": -1, "heartbeat_interval": 0, "assignment": None})
    req = HeartbeatRequest(
        group_id=body.group_id, member_id=body.member_id, member_epoch=body.member_epoch,
        instance_id=body.instance_id, rack_id=body.rack_id, rebalance_timeout_ms=to_millis(body.rebalance_timeout),
        subscribed_topic_names=None if body.subscribed_topic_names is None else tuple(body.subscribed_topic_names),
        subscribed_topic_regex=getattr(body, "subscribed_topic_regex", None), server_assignor=body.server_assignor,
        owned=_owned(body.topic_partitions), client_id=client.client_id, client_host=f"/{client.host}")
    coordinator = _coordinator(ctx)
    result = await coordinator.consumer.heartbeat(req, request.api_version)
    return build_response(ApiKey.CONSUMER_GROUP_HEARTBEAT, request.api_version, {
        "error_code": result.error_code, "error_message": result.error_message,
        "member_id": result.member_id or None, "member_epoch": result.member_epoch,
        "heartbeat_interval": coordinator.consumer.settings_for(body.group_id).heartbeat_interval_ms,
        "assignment": None if result.assignment is None else {
            "topic_partitions": _topic_partitions(result.assignment)},
    })


async def handle_consumer_group_describe(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    coordinator = _coordinator(ctx)
    names = {t.topic_id: name for name, t in ctx.image.topics_by_name.items()}
    include_ops = request.body.include_authorized_operations

    def described(assignment: Assignment) -> dict[str, Any]:
        return {"topic_partitions": [
            {"topic_id": topic_uuid(tid), "topic_name": names.get(tid, ""), "partitions": sorted(ps)}
            for tid, ps in sorted(assignment.items()) if ps]}

    out = []
    for group_id in request.body.group_ids:
        if not ctx.allowed(client, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            out.append({"group_id": group_id, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                        "error_message": None, "group_state": "", "group_epoch": -1, "assignment_epoch": -1,
                        "assignor_name": "", "members": []})
            continue
        group = coordinator.consumer.groups.get(group_id)
        if group is None:
            message = (f"Group {group_id} is not a consumer group." if group_id in coordinator.groups
                       else f"Group {group_id} not found.")
            out.append({"group_id": group_id, "error_code": ErrorCode.GROUP_ID_NOT_FOUND, "error_message": message,
                        "group_state": "Dead", "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "",
                        "members": []})
            continue
        out.append({
            "group_id": group_id, "error_code": 0, "group_state": group.state.value,
            "group_epoch": group.group_epoch, "assignment_epoch": group.assignment_epoch,
            "assignor_name": group.assignor,
            "members": [{
                "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed_topic_names),
                "subscribed_topic_regex": m.subscribed_topic_regex,
                "assignment": described(m.assigned), "target_assignment": described(group.target.get(m.member_id, {})),
                "member_type": 1,
            } for m in group.members.values()],
            "authorized_operations": ctx.authorized_operations(client, ResourceType.GROUP, group_id) if include_ops
            else -(2**31),
        })
    return build_response(ApiKey.CONSUMER_GROUP_DESCRIBE, request.api_version, {"groups": out})


async def handle_offset_delete(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    image = ctx.image
    if not ctx.allowed(client, AclOperation.DELETE, ResourceType.GROUP, body.group_id):
        return build_response(ApiKey.OFFSET_DELETE, request.api_version, {
            "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "topics": []})
    refused = {t.name for t in body.topics if not ctx.allowed(client, AclOperation.READ, ResourceType.TOPIC, t.name)}
    wanted = [(t.name, p.partition_index) for t in body.topics for p in t.partitions if t.name not in refused]
    known = [(n, p) for n, p in wanted if n in image.topics_by_name and p in image.topics_by_name[n].partitions]
    error, codes = await _coordinator(ctx).delete_offsets(body.group_id, known)
    by_tp: dict[tuple[str, int], int] = dict(zip(known, codes, strict=True)) if not error else {}
    by_tp.update(((t.name, p.partition_index), ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                 for t in body.topics if t.name in refused for p in t.partitions)
    topics = [{"name": t.name, "partitions": [
        {"partition_index": p.partition_index,
         "error_code": by_tp.get((t.name, p.partition_index), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)}
        for p in t.partitions]} for t in body.topics] if not error else []
    return build_response(ApiKey.OFFSET_DELETE, request.api_version, {"error_code": error, "topics": topics})


HANDLERS = {
    ApiKey.CONSUMER_GROUP_HEARTBEAT: handle_consumer_group_heartbeat,
    ApiKey.CONSUMER_GROUP_DESCRIBE: handle_consumer_group_describe,
    ApiKey.OFFSET_DELETE: handle_offset_delete,
}
