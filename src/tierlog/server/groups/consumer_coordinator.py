"""The consumer groups (KIP-848) of the group coordinator: ConsumerGroupHeartbeat and
ConsumerGroupDescribe, their records in ``__consumer_offsets``, session expiry, and the checks other
group APIs make when a group id belongs to this kind of group.

A group id names either a classic group or a consumer group, never both: a heartbeat for a non-empty
classic group gets GROUP_ID_NOT_FOUND and a JoinGroup for a non-empty consumer group
INCONSISTENT_GROUP_PROTOCOL (Kafka's answers when no migration between the protocols applies); an
empty group of the other kind is replaced, keeping its committed offsets. State changes happen in
:class:`~tierlog.server.groups.consumer_group.ConsumerGroup`; this module appends the records it
returns to the group's partition before the answer goes out.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import uuid
from typing import TYPE_CHECKING

from tierlog.errors import ErrorCode
from tierlog.metadata import ConfigResourceType
from tierlog.server.groups import consumer_records as cr
from tierlog.server.groups.consumer_group import (
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerGroupSettings,
    HeartbeatRequest,
    HeartbeatResult,
    TopicsView,
)
from tierlog.server.groups.group import GroupState
from tierlog.server.groups.records import GroupKey, encode_group_key

if TYPE_CHECKING:
    from tierlog.server.groups.coordinator import GroupCoordinator

log = logging.getLogger(__name__)


def new_member_id() -> str:
    """A member id as Kafka's Uuid.toString writes one (URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")


def invalid_request_reason(req: HeartbeatRequest, api_version: int) -> str | None:
    """Kafka's validation of a ConsumerGroupHeartbeat request (INVALID_REQUEST when it fails)."""
    if not req.group_id:
        return "GroupId can't be empty."
    if api_version >= 1 and not req.member_id:
        return "MemberId can't be empty."
    if req.instance_id == "":
        return "InstanceId can't be empty."
    if req.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        return f"MemberEpoch {req.member_epoch} is invalid."
    if req.member_epoch == 0:
        if req.rebalance_timeout_ms == -1:
            return "RebalanceTimeoutMs must be provided in first request."
        if req.owned is None or req.owned:
            return "TopicPartitions must be empty when (re-)joining."
        if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
            return "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
    if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH and req.instance_id is None:
        return "InstanceId can't be null when leaving the group with member epoch -2."
    return None


class ConsumerGroups:
    def __init__(self, coordinator: GroupCoordinator, settings: ConsumerGroupSettings) -> None:
        self.coordinator = coordinator
        self.settings = settings
        self.groups: dict[str, ConsumerGroup] = {}

    def topics_view(self) -> TopicsView:
        return {name: (t.topic_id, t.num_partitions)
                for name, t in self.coordinator.partitions.image.topics_by_name.items()}

    def settings_for(self, group_id: str) -> ConsumerGroupSettings:
        """The broker's consumer-group settings with the group's own configs (the GROUP config
        resource, KIP-848) over them, read from the current metadata image so a change applies at the
        group's next heartbeat or expiry check, as in Kafka's GroupConfigManager."""
        overrides = self.coordinator.partitions.image.configs.get((ConfigResourceType.GROUP, group_id))
        if not overrides:
            return self.settings
        session_ms = overrides.get("consumer.session.timeout.ms")
        heartbeat_ms = overrides.get("consumer.heartbeat.interval.ms")
        return self.settings.for_group(None if session_ms is None else int(session_ms),
                                       None if heartbeat_ms is None else int(heartbeat_ms))

    def _get_or_create(self, group_id: str) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ConsumerGroup(group_id, self.settings)
        return group

    # -- requests --------------------------------------------------------------------------------

    async def heartbeat(self, req: HeartbeatRequest, api_version: int) -> HeartbeatResult:
        reason = invalid_request_reason(req, api_version)
        if reason is not None:
            return HeartbeatResult(ErrorCode.INVALID_REQUEST, req.member_id, error_message=reason)
        if not req.member_id and req.member_epoch == 0:  # v0: the coordinator names new members
            req = HeartbeatRequest(**{**req.__dict__, "member_id": new_member_id()})
        records: list[cr.Record] = []
        classic = self.coordinator.groups.get(req.group_id)
        if classic is not None:
            if classic.members or classic.pending_members or classic.state is not GroupState.EMPTY:
                return HeartbeatResult(ErrorCode.GROUP_ID_NOT_FOUND, req.member_id,
                                       error_message=f"Group {req.group_id} is not a consumer group.")
            if req.member_epoch != 0:
                return HeartbeatResult(ErrorCode.GROUP_ID_NOT_FOUND, req.member_id,
                                       error_message=f"Group {req.group_id} is not a consumer group.")
            # An empty classic group becomes a consumer group; its committed offsets stay.
            del self.coordinator.groups[req.group_id]
            if classic.generation_id > 0:
                records.append((encode_group_key(GroupKey(req.group_id)), None))
        group = self.groups.get(req.group_id)
        if group is None:
            if req.member_epoch != 0:
                # Not GROUP_ID_NOT_FOUND, which clients treat as fatal: an unknown member rejoins.
                return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID, req.member_id,
                                       error_message=f"group {req.group_id} has no member {req.member_id}")
            group = self._get_or_create(req.group_id)
        group.settings = self.settings_for(req.group_id)
        result = group.heartbeat(req, self.topics_view(), self.coordinator.now_ms())
        records += result.records
        if records:
            code = await self.coordinator._append(req.group_id, records)
            if code and not result.error_code:
                result.error_code, result.assignment = code, None
        log.debug("group %s: ConsumerGroupHeartbeat from %s epoch %d -> error %d, epoch %d", req.group_id,
                  req.member_id, req.member_epoch, result.error_code, result.member_epoch)
        return result

    def commit_error(self, group_id: str, member_id: str, member_epoch: int) -> int | None:
        """The error of an offset commit to a consumer group; None when ``group_id`` is not one."""
        group = self.groups.get(group_id)
        return None if group is None else group.validate_offset_commit(member_id, member_epoch)

    def subscribed_topics(self, group_id: str) -> set[str] | None:
        group = self.groups.get(group_id)
        return None if group is None else group.subscribed_topic_names(self.topics_view())

    # -- lifecycle -------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        for group in list(self.groups.values()):
            if not group.members:
                continue
            group.settings = self.settings_for(group.group_id)
            records = group.expire(now_ms)
            if records:
                self._store(group.group_id, records)

    def _store(self, group_id: str, records: list[cr.Record]) -> None:
        task = asyncio.get_running_loop().create_task(self.coordinator._append(group_id, records))
        task.add_done_callback(_log_failure)

    def replay(self, raw_key: bytes, raw_value: bytes | None) -> None:
        key = cr.decode_key(raw_key)
        if key.record_type == cr.PARTITION_METADATA:
            return  # Kafka 4.0's subscription metadata: recomputed here from the image
        group = self._get_or_create(key.group)
        if key.record_type == cr.GROUP_METADATA and raw_value is None:
            del self.groups[key.group]
            return
        group.replay(key, raw_value, self.coordinator.now_ms())

    def remove_if_empty(self, group_id: str, store: bool) -> bool:
        """Forget an empty consumer group (with tombstones when ``store``); False if it has members."""
        group = self.groups.get(group_id)
        if group is None:
            return True
        if group.members:
            return False
        del self.groups[group_id]
        if store:
            self._store(group_id, group.tombstones())
        return True

    def tombstones(self, group_id: str) -> list[cr.Record]:
        group = self.groups.get(group_id)
        return [] if group is None else group.tombstones()


def _log_failure(task: asyncio.Task[int]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("storing consumer group records failed", exc_info=task.exception())
