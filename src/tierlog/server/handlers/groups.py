"""The classic consumer-group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, ListGroups, DescribeGroups and DeleteGroups. This broker coordinates
every group; the state lives in :mod:`tierlog.server.groups`."""

from __future__ import annotations

from typing import Any

from tierlog.errors import ErrorCode, TierlogError
from tierlog.metadata.acls import AclOperation, ResourceType
from tierlog.protocol import ApiKey, ParsedRequest, build_response, to_millis
from tierlog.server.connection import ClientInfo, Reply
from tierlog.server.context import BrokerContext, topic_uuid, uuid_bytes
from tierlog.server.groups.coordinator import GroupCoordinator
from tierlog.server.groups.group import GroupState

GROUP_KEY = 0
TRANSACTION_KEY = 1


def _may(ctx: BrokerContext, client: ClientInfo, op: AclOperation, group_id: str) -> bool:
    return ctx.allowed(client, op, ResourceType.GROUP, group_id)


def _coordinator(ctx: BrokerContext) -> GroupCoordinator:
    assert ctx.groups is not None, "the broker wires a group coordinator"
    return ctx.groups


async def handle_find_coordinator(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    version = request.api_version
    key_type = getattr(body, "key_type", GROUP_KEY)
    keys = list(body.coordinator_keys) if version >= 4 else [body.key]
    host, port = ctx.endpoint(client)
    error, message = 0, None
    try:
        if key_type == GROUP_KEY:
            await _coordinator(ctx).ensure_topic()
        elif key_type == TRANSACTION_KEY and ctx.transactions is not None:
            await ctx.transactions.ensure_topic()
        else:
            error, message = ErrorCode.INVALID_REQUEST, f"unsupported coordinator key type {key_type}"
    except TierlogError as e:
        error, message = ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e)
    found = {"node_id": ctx.node_id, "host": host, "port": port} if not error else {"node_id": -1, "host": "", "port": -1}
    missing = {"node_id": -1, "host": "", "port": -1}
    def refusal(key: str) -> int:
        """Kafka: DESCRIBE on the group, or on the transactional id, whose coordinator is asked for."""
        if key_type == GROUP_KEY and not ctx.allowed(client, AclOperation.DESCRIBE, ResourceType.GROUP, key):
            return ErrorCode.GROUP_AUTHORIZATION_FAILED
        if key_type == TRANSACTION_KEY and not ctx.allowed(client, AclOperation.DESCRIBE,
                                                            ResourceType.TRANSACTIONAL_ID, key):
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return 0
    if version >= 4:
        coordinators = []
        for k in keys:
            denied = 0 if error else refusal(k)
            coordinators.append({"key": k, "error_code": denied, "error_message": None, **missing} if denied
                                else {"key": k, "error_code": error, "error_message": message, **found})
        return build_response(ApiKey.FIND_COORDINATOR, version, {"coordinators": coordinators})
    denied = 0 if error else refusal(keys[0])
    if denied:
        return build_response(ApiKey.FIND_COORDINATOR, version, {"error_code": denied, "error_message": None, **missing})
    return build_response(ApiKey.FIND_COORDINATOR, version, {"error_code": error, "error_message": message, **found})


async def handle_join_group(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    version = request.api_version
    session_ms = to_millis(body.session_timeout)
    rebalance_ms = to_millis(body.rebalance_timeout) if version >= 1 else session_ms
    if not _may(ctx, client, AclOperation.READ, body.group_id):
        return build_response(ApiKey.JOIN_GROUP, version, {
            "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "generation_id": -1, "protocol_type": None,
            "protocol_name": None if version >= 7 else "", "leader": "", "skip_assignment": False,
            "member_id": body.member_id, "members": []})
    instance_id = getattr(body, "group_instance_id", None)
    result = await _coordinator(ctx).join(
        body.group_id, body.member_id, instance_id, client.client_id,
        f"/{client.host}", session_ms, rebalance_ms, body.protocol_type,
        [(p.name, p.metadata) for p in body.protocols],
        # As Kafka: a static member is identified by its instance id, never sent back for a member id.
        require_known_member_id=version >= 4 and instance_id is None, supports_skip_assignment=version >= 9)
    nullable = version >= 7
    return build_response(ApiKey.JOIN_GROUP, version, {
        "error_code": result.error_code,
        "generation_id": result.generation_id,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name if (nullable or result.protocol_name) else "",
        "leader": result.leader,
        "skip_assignment": result.skip_assignment,
        "member_id": result.member_id,
        "members": [{"member_id": m, "group_instance_id": i, "metadata": md} for m, i, md in result.members],
    })


async def handle_sync_group(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    if not _may(ctx, client, AclOperation.READ, body.group_id):
        return build_response(ApiKey.SYNC_GROUP, request.api_version, {
            "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "protocol_type": None, "protocol_name": None,
            "assignment": b""})
    result = await _coordinator(ctx).sync(
        body.group_id, body.member_id, body.generation_id, getattr(body, "protocol_type", None),
        getattr(body, "protocol_name", None), {a.member_id: a.assignment for a in body.assignments},
        getattr(body, "group_instance_id", None))
    return build_response(ApiKey.SYNC_GROUP, request.api_version, {
        "error_code": result.error_code,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name,
        "assignment": result.assignment,
    })


async def handle_heartbeat(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    if not _may(ctx, client, AclOperation.READ, body.group_id):
        return build_response(ApiKey.HEARTBEAT, request.api_version, {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED})
    code = _coordinator(ctx).heartbeat(body.group_id, body.member_id, body.generation_id,
                                       getattr(body, "group_instance_id", None))
    return build_response(ApiKey.HEARTBEAT, request.api_version, {"error_code": code})


async def handle_leave_group(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    version = request.api_version
    if version >= 3:
        leaving = [(m.member_id, m.group_instance_id) for m in body.members]
    else:
        leaving = [(body.member_id, None)]
    if not _may(ctx, client, AclOperation.READ, body.group_id):
        return build_response(ApiKey.LEAVE_GROUP, version, {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                                            "members": []})
    error, codes = _coordinator(ctx).leave(body.group_id, leaving)
    if version < 3:
        return build_response(ApiKey.LEAVE_GROUP, version, {"error_code": error or codes[0]})
    return build_response(ApiKey.LEAVE_GROUP, version, {
        "error_code": error,
        "members": [{"member_id": m, "group_instance_id": i, "error_code": c}
                    for (m, i), c in zip(leaving, codes, strict=True)],
    })


async def handle_offset_commit(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    version = request.api_version
    image = ctx.image
    entries: list[tuple[str, int, int, int, str | None]] = []
    # (topic key, [(partition, entry index or the partition's error code)])
    layout: list[tuple[Any, list[tuple[int, int | None, int]]]] = []
    group_ok = _may(ctx, client, AclOperation.READ, body.group_id)
    for t in body.topics:
        if version >= 10:
            tid = uuid_bytes(t.topic_id)
            topic = image.topics_by_id.get(tid) if tid is not None else None
            key: Any = t.topic_id
            name = topic.name if topic is not None else None
        else:
            key = name = t.name
        slots: list[tuple[int, int | None, int]] = []
        topic_ok = name is not None and group_ok and ctx.allowed(client, AclOperation.READ, ResourceType.TOPIC, name)
        for p in t.partitions:
            if not group_ok:
                slots.append((p.partition_index, None, ErrorCode.GROUP_AUTHORIZATION_FAILED))
                continue
            if name is None:
                slots.append((p.partition_index, None, ErrorCode.UNKNOWN_TOPIC_ID))
                continue
            if not topic_ok:
                slots.append((p.partition_index, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            slots.append((p.partition_index, len(entries), 0))
            entries.append((name, p.partition_index, p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                            p.committed_metadata))
        layout.append((key, slots))
    codes = await _coordinator(ctx).commit(body.group_id, body.member_id, body.generation_id_or_member_epoch,
                                           entries, getattr(body, "group_instance_id", None)) if entries else []
    topic_field = "topic_id" if version >= 10 else "name"
    return build_response(ApiKey.OFFSET_COMMIT, version, {"topics": [
        {topic_field: key, "partitions": [
            {"partition_index": p, "error_code": code if i is None else codes[i]} for p, i, code in slots]}
        for key, slots in layout
    ]})


def _fetch_group(ctx: BrokerContext, client: ClientInfo, group_id: str, topics: Any, by_id: bool,
                 require_stable: bool = False) -> list[dict[str, Any]]:
    """Committed offsets of the group: with every topic asked for, those the principal may DESCRIBE;
    a topic named and not describable answers TOPIC_AUTHORIZATION_FAILED (Kafka's OffsetFetch)."""
    def describable(name: str, log_denied: bool = True) -> bool:
        return ctx.allowed(client, AclOperation.DESCRIBE, ResourceType.TOPIC, name, log_denied=log_denied)
    coordinator = _coordinator(ctx)
    image = ctx.image
    if topics is None:
        committed = coordinator.fetch(group_id, None)
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(committed):
            if describable(topic, log_denied=False):
                by_topic.setdefault(topic, []).append(partition)
        wanted = list(by_topic.items())
    else:
        wanted = []
        for t in topics:
            if by_id:
                tid = uuid_bytes(t.topic_id)
                found = image.topics_by_id.get(tid) if tid is not None else None
                wanted.append((found.name if found is not None else "", list(t.partition_indexes)))
            else:
                wanted.append((t.name, list(t.partition_indexes)))
        committed = coordinator.fetch(group_id, [(n, p) for n, parts in wanted for p in parts])
    # KIP-447: a consumer that asks for stable offsets waits while a transaction holds one pending.
    unstable = coordinator.has_pending_offsets(group_id, None) if require_stable else set()
    out: list[dict[str, Any]] = []
    for name, partitions in wanted:
        topic_image = image.topics_by_name.get(name)
        entries = []
        if topics is not None and not describable(name):
            out.append({"name": name, "topic_id": None, "partitions": [
                {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
                 "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED} for p in partitions]})
            continue
        for p in partitions:
            value = committed.get((name, p))
            entry: dict[str, Any] = {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1,
                                     "metadata": "", "error_code": ErrorCode.NONE}
            if value is not None:
                entry.update(committed_offset=value.offset, committed_leader_epoch=value.leader_epoch,
                             metadata=value.metadata)
            elif by_id and topic_image is None:
                entry["error_code"] = ErrorCode.UNKNOWN_TOPIC_ID
            if (name, p) in unstable:
                entry.update(error_code=ErrorCode.UNSTABLE_OFFSET_COMMIT, committed_offset=-1)
            entries.append(entry)
        out.append({"name": name, "topic_id": topic_uuid(topic_image.topic_id) if topic_image else None,
                    "partitions": entries})
    return out


async def handle_offset_fetch(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    version = request.api_version
    if version >= 8:
        stable = getattr(body, "require_stable", False)
        consumer = _coordinator(ctx).consumer
        groups = []
        for g in body.groups:
            # v9+: a member of a consumer group fetches with its member id and epoch, checked as commits are.
            member_id = getattr(g, "member_id", None)
            if not _may(ctx, client, AclOperation.DESCRIBE, g.group_id):
                groups.append({"group_id": g.group_id, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "topics": []})
                continue
            code = consumer.commit_error(g.group_id, member_id, getattr(g, "member_epoch", -1)) if member_id else None
            if code:
                groups.append({"group_id": g.group_id, "error_code": code, "topics": []})
                continue
            groups.append({"group_id": g.group_id, "error_code": 0,
                           "topics": _fetch_group(ctx, client, g.group_id, g.topics, version >= 10, stable)})
        return build_response(ApiKey.OFFSET_FETCH, version, {"groups": groups})
    if not _may(ctx, client, AclOperation.DESCRIBE, body.group_id):
        return build_response(ApiKey.OFFSET_FETCH, version, {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                                             "topics": []})
    return build_response(ApiKey.OFFSET_FETCH, version, {
        "error_code": 0, "topics": _fetch_group(ctx, client, body.group_id, body.topics, False,
                                                 getattr(body, "require_stable", False))})


async def handle_list_groups(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    states = {s.lower() for s in getattr(body, "states_filter", ())}
    types = {t.lower() for t in getattr(body, "types_filter", ())}
    groups: list[dict[str, Any]] = []
    # Kafka: DESCRIBE on the cluster lists every group, otherwise those the principal may DESCRIBE.
    everything = ctx.allowed(client, AclOperation.DESCRIBE, log_denied=False)
    for g in _coordinator(ctx).list_groups():
        if states and g.state.value.lower() not in states:
            continue
        if types and "classic" not in types:
            continue
        groups.append({"group_id": g.group_id, "protocol_type": g.protocol_type or "",
                       "group_state": g.state.value, "group_type": "classic"})
    for cg in _coordinator(ctx).consumer.groups.values():  # KIP-848 groups: type and protocol "consumer"
        if (states and cg.state.value.lower() not in states) or (types and "consumer" not in types):
            continue
        groups.append({"group_id": cg.group_id, "protocol_type": "consumer", "group_state": cg.state.value,
                       "group_type": "consumer"})
    if not everything:
        groups = [g for g in groups if ctx.allowed(client, AclOperation.DESCRIBE, ResourceType.GROUP, g["group_id"],
                                                   log_denied=False)]
    return build_response(ApiKey.LIST_GROUPS, request.api_version, {"error_code": 0, "groups": groups})


async def handle_describe_groups(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    version = request.api_version
    out = []
    with_ops = getattr(request.body, "include_authorized_operations", False)
    for group_id in request.body.groups:
        if not _may(ctx, client, AclOperation.DESCRIBE, group_id):
            out.append({"group_id": group_id, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                        "error_message": None, "group_state": "", "protocol_type": "", "protocol_data": "",
                        "members": [], "authorized_operations": -(2**31)})
            continue
        group = _coordinator(ctx).describe(group_id)
        if group is None and group_id in _coordinator(ctx).consumer.groups:
            # As Kafka: DescribeGroups describes classic groups; ConsumerGroupDescribe the others.
            out.append({"group_id": group_id, "error_code": ErrorCode.GROUP_ID_NOT_FOUND,
                        "error_message": f"Group {group_id} is not a classic group.",
                        "group_state": "", "protocol_type": "", "protocol_data": "", "members": [],
                        "authorized_operations": -(2**31)})
            continue
        if group is None:
            out.append({"group_id": group_id, "error_code": ErrorCode.GROUP_ID_NOT_FOUND if version >= 6 else 0,
                        "error_message": f"Group {group_id} not found." if version >= 6 else None,
                        "group_state": GroupState.DEAD.value, "protocol_type": "", "protocol_data": "",
                        "members": [], "authorized_operations": -(2**31)})
            continue
        stable = group.state is GroupState.STABLE
        out.append({
            "group_id": group_id, "error_code": ErrorCode.NONE, "group_state": group.state.value,
            "protocol_type": group.protocol_type or "",
            "protocol_data": (group.protocol_name or "") if stable else "",
            "members": [{
                "member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                "client_host": m.client_host,
                "member_metadata": m.metadata_for(group.protocol_name) if stable else b"",
                "member_assignment": m.assignment if stable else b"",
            } for m in group.members.values()],
            "authorized_operations": ctx.authorized_operations(client, ResourceType.GROUP, group_id) if with_ops
            else -(2**31),
        })
    return build_response(ApiKey.DESCRIBE_GROUPS, version, {"groups": out})


async def handle_delete_groups(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    results = []
    for group_id in request.body.groups_names:
        if not _may(ctx, client, AclOperation.DELETE, group_id):
            results.append({"group_id": group_id, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED})
            continue
        code = await _coordinator(ctx).delete(group_id)
        results.append({"group_id": group_id, "error_code": code})
    return build_response(ApiKey.DELETE_GROUPS, request.api_version, {"results": results})


HANDLERS = {
    ApiKey.FIND_COORDINATOR: handle_find_coordinator,
    ApiKey.JOIN_GROUP: handle_join_group,
    ApiKey.SYNC_GROUP: handle_sync_group,
    ApiKey.HEARTBEAT: handle_heartbeat,
    ApiKey.LEAVE_GROUP: handle_leave_group,
    ApiKey.OFFSET_COMMIT: handle_offset_commit,
    ApiKey.OFFSET_FETCH: handle_offset_fetch,
    ApiKey.LIST_GROUPS: handle_list_groups,
    ApiKey.DESCRIBE_GROUPS: handle_describe_groups,
    ApiKey.DELETE_GROUPS: handle_delete_groups,
}
