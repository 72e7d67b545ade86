"""A classic consumer group: members, generations and the rebalance state machine of Kafka's
GroupCoordinator (Empty → PreparingRebalance → CompletingRebalance → Stable), without any I/O.

Time comes in as ``now_ms`` and waiting members are callbacks, so every transition is a plain method
call that the unit tests drive with made-up clocks. The coordinator owns the event loop side: it turns
callbacks into futures and calls :meth:`Group.tick` on a timer.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from tierlog.config.settings import broker_default
from tierlog.errors import ErrorCode
from tierlog.server.groups.records import GroupValue, MemberValue

log = logging.getLogger(__name__)


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class JoinResult:
    error_code: int
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    #: (member_id, group_instance_id, metadata) -- only the leader gets them, to compute assignments.
    members: tuple[tuple[str, str | None, bytes], ...] = ()
    #: KIP-814: a static leader that rejoined a stable group gets the members but must not assign.
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult:
    error_code: int
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    last_heartbeat_ms: int
    assignment: bytes = b""
    awaiting_join: JoinCallback | None = None
    awaiting_sync: SyncCallback | None = None
    is_new: bool = True

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def alive(self, now_ms: int) -> bool:
        # A member waiting in JoinGroup or SyncGroup cannot heartbeat on that connection; the
        # rebalance deadline bounds how long it waits instead.
        if self.awaiting_join is not None or self.awaiting_sync is not None:
            return True
        return now_ms - self.last_heartbeat_ms < self.session_timeout_ms


@dataclass
class Group:
    group_id: str
    #: Kafka's group.initial.rebalance.delay.ms: the first rebalance of an empty group waits this long
    #: (extended by each new member, up to the rebalance timeout) so members starting together land
    #: in one generation instead of several.
    initial_rebalance_delay_ms: int = broker_default("group.initial.rebalance.delay.ms")
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    #: Member ids handed out with MEMBER_ID_REQUIRED and the deadline to come back with them.
    pending_members: dict[str, int] = field(default_factory=dict)
    #: KIP-345: group.instance.id -> the member id that instance has now.
    static_members: dict[str, str] = field(default_factory=dict)
    rebalance_deadline_ms: int = 0
    initial_delay_deadline_ms: int | None = None
    initial_delay_limit_ms: int = 0
    state_timestamp_ms: int = -1
    #: Called when a generation is complete or the group emptied, to persist the group.
    on_change: Callable[[Group], None] | None = None

    # -- queries ---------------------------------------------------------------------------------

    def is_empty(self) -> bool:
        return not self.members

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        sets = [set(m.protocol_names()) for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if not protocol_type or not protocols:
            return False
        if self.is_empty():
            return True
        if protocol_type != self.protocol_type:
            return False
        return bool(self.candidate_protocols() & {name for name, _ in protocols})

    def select_protocol(self) -> str | None:
        candidates = self.candidate_protocols()
        if not candidates:
            return None
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = next(name for name in m.protocol_names() if name in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes.items(), key=lambda kv: kv[1])[0]

    def to_value(self) -> GroupValue:
        members = tuple(
            MemberValue(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                        m.session_timeout_ms, m.metadata_for(self.protocol_name), m.assignment)
            for m in self.members.values()
        ) if self.state is GroupState.STABLE else ()
        return GroupValue(self.protocol_type or "", self.generation_id, self.protocol_name,
                          self.leader_id if members else None, self.state_timestamp_ms, members)

    def validate_member(self, member_id: str, group_instance_id: str | None) -> int:
        """Kafka's member check of Join (known id), Sync, Heartbeat, LeaveGroup and OffsetCommit: an
        instance id held by another member id means this one was replaced (FENCED_INSTANCE_ID)."""
        if group_instance_id is not None:
            current = self.static_members.get(group_instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if current != member_id:
                log.info("group %s: member %s of instance %s is fenced by member %s", self.group_id, member_id,
                         group_instance_id, current)
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

    def restore(self, value: GroupValue, now_ms: int) -> None:
        """Kafka's group load: the members of the last stored generation come back with their
        assignments and a fresh session, so after a broker restart they go on heartbeating without a
        rebalance, a static member that restarts meanwhile is still recognised, and members that are
        gone expire after their session timeout."""
        self.protocol_type = value.protocol_type or None
        self.generation_id = value.generation
        self.protocol_name = value.protocol
        self.members.clear()
        self.static_members.clear()
        for m in value.members:
            rebalance_timeout_ms = m.rebalance_timeout_ms if m.rebalance_timeout_ms >= 0 else m.session_timeout_ms
            self.members[m.member_id] = Member(
                m.member_id, m.group_instance_id, m.client_id, m.client_host, rebalance_timeout_ms,
                m.session_timeout_ms, value.protocol_type, [(value.protocol or "", m.subscription)], now_ms,
                assignment=m.assignment, is_new=False)
            if m.group_instance_id is not None:
                self.static_members[m.group_instance_id] = m.member_id
        self.leader_id = value.leader if value.leader in self.members else next(iter(self.members), None)
        self.state = GroupState.STABLE if self.members else GroupState.EMPTY
        self.state_timestamp_ms = now_ms  # the caller turns the record's wall-clock time into this clock

    # -- transitions -----------------------------------------------------------------------------

    def join(self, *, member_id: str, group_instance_id: str | None, client_id: str, client_host: str,
             session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
             protocols: list[tuple[str, bytes]], require_known_member_id: bool, now_ms: int,
             callback: JoinCallback, supports_skip_assignment: bool = False) -> None:
        """JoinGroup. ``callback`` gets the answer, now or when the rebalance completes."""
        if self.state is GroupState.DEAD:
            callback(JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id))
            return
        if not self.supports(protocol_type, protocols):
            callback(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id))
            return
        if not member_id and group_instance_id is not None:
            # A static member (re)starting: never MEMBER_ID_REQUIRED, its instance id identifies it.
            new_id = f"{group_instance_id}-{uuid.uuid4()}"
            old_id = self.static_members.get(group_instance_id)
            if old_id is not None and old_id in self.members:
                self._replace_static_member(old_id, new_id, protocols, session_timeout_ms, rebalance_timeout_ms,
                                            supports_skip_assignment, now_ms, callback)
                return
            self._add_member(new_id, group_instance_id, client_id, client_host, session_timeout_ms,
                             rebalance_timeout_ms, protocol_type, protocols, now_ms, callback)
            return
        if not member_id:
            new_id = f"{client_id}-{uuid.uuid4()}"
            if require_known_member_id:
                # KIP-394: the member must come back with this id, so a client that retries a
                # timed-out join does not leave a ghost member behind.
                self.pending_members[new_id] = now_ms + session_timeout_ms
                callback(JoinResult(ErrorCode.MEMBER_ID_REQUIRED, new_id))
                return
            self._add_member(new_id, group_instance_id, client_id, client_host, session_timeout_ms,
                             rebalance_timeout_ms, protocol_type, protocols, now_ms, callback)
            return
        if member_id in self.pending_members:
            del self.pending_members[member_id]
            self._add_member(member_id, group_instance_id, client_id, client_host, session_timeout_ms,
                             rebalance_timeout_ms, protocol_type, protocols, now_ms, callback)
            return
        code = self.validate_member(member_id, group_instance_id)
        if code:
            callback(JoinResult(code, member_id))
            return
        member = self.members[member_id]
        member.last_heartbeat_ms = now_ms
        changed = member.protocols != protocols
        if self.state is GroupState.PREPARING_REBALANCE:
            self._update_member(member, protocols, session_timeout_ms, rebalance_timeout_ms, callback)
            self.try_complete_join(now_ms)
        elif self.state is GroupState.COMPLETING_REBALANCE:
            if not changed:
                # A retried join of this generation: answer it again.
                callback(self._join_result(member, ErrorCode.NONE))
            else:
                self._update_member(member, protocols, session_timeout_ms, rebalance_timeout_ms, callback)
                self.prepare_rebalance(now_ms, f"member {member_id} changed its protocols")
        elif self.state is GroupState.STABLE:
            if member_id == self.leader_id or changed:
                # The leader rejoining means the subscription may have changed: rebalance.
                self._update_member(member, protocols, session_timeout_ms, rebalance_timeout_ms, callback)
                self.prepare_rebalance(now_ms, f"{'leader' if member_id == self.leader_id else 'member'} {member_id} rejoined")
            else:
                callback(self._join_result(member, ErrorCode.NONE))
        else:
            callback(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))

    def _update_member(self, member: Member, protocols: list[tuple[str, bytes]], session_timeout_ms: int,
                       rebalance_timeout_ms: int, callback: JoinCallback) -> None:
        if member.awaiting_join is not None:
            # A second join while one waits can only come on a new connection (requests of one
            # connection are served in turn): the client gave up on the first. It is released with a
            # retriable error; the member itself stays.
            member.awaiting_join(JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))
        member.protocols = protocols
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.awaiting_join = callback

    def _replace_static_member(self, old_id: str, new_id: str, protocols: list[tuple[str, bytes]],
                               session_timeout_ms: int, rebalance_timeout_ms: int, supports_skip_assignment: bool,
                               now_ms: int, callback: JoinCallback) -> None:
        """KIP-345: a static member rejoining with an unknown member id takes over its instance's
        place under a new member id; the old id is fenced. A stable group whose protocol stays the
        same does not rebalance: the member gets the current generation and, at SyncGroup, its
        previous assignment (Kafka's updateStaticMemberAndRebalance)."""
        member = self.members.pop(old_id)
        if member.awaiting_join is not None:
            waiting_join, member.awaiting_join = member.awaiting_join, None
            waiting_join(JoinResult(ErrorCode.FENCED_INSTANCE_ID, old_id))
        if member.awaiting_sync is not None:
            waiting_sync, member.awaiting_sync = member.awaiting_sync, None
            waiting_sync(SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        current_leader = self.leader_id
        member.member_id = new_id
        self.members[new_id] = member
        assert member.group_instance_id is not None
        self.static_members[member.group_instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        member.last_heartbeat_ms = now_ms
        member.protocols = protocols
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        log.info("group %s: static member %s rejoined as %s (was %s)", self.group_id, member.group_instance_id,
                 new_id, old_id)
        if self.state is GroupState.STABLE and self.select_protocol() == self.protocol_name:
            self._changed()  # the new member id is what a restarted broker must know
            is_leader = self.leader_id == new_id
            if is_leader and supports_skip_assignment:
                # KIP-814: the leader learns the members (for its metadata) but keeps the assignment.
                members = tuple((m.member_id, m.group_instance_id, m.metadata_for(self.protocol_name))
                                for m in self.members.values())
                callback(JoinResult(ErrorCode.NONE, new_id, self.generation_id, self.protocol_type,
                                    self.protocol_name, new_id, members, skip_assignment=True))
            else:
                # The old leader id, so a leader that cannot skip the assignment does not compute one a
                # stable group would never hand out.
                callback(JoinResult(ErrorCode.NONE, new_id, self.generation_id, self.protocol_type,
                                    self.protocol_name, current_leader or ""))
            return
        member.awaiting_join = callback
        if self.state is GroupState.PREPARING_REBALANCE:
            self.try_complete_join(now_ms)
        else:
            self.prepare_rebalance(now_ms, f"static member {member.group_instance_id} rejoined as {new_id}")

    def _add_member(self, member_id: str, group_instance_id: str | None, client_id: str, client_host: str,
                    session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                    protocols: list[tuple[str, bytes]], now_ms: int, callback: JoinCallback) -> None:
        if self.is_empty():
            self.protocol_type = protocol_type
        member = Member(member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                        session_timeout_ms, protocol_type, protocols, now_ms, awaiting_join=callback)
        self.members[member_id] = member
        if group_instance_id is not None:
            self.static_members[group_instance_id] = member_id
        if self.leader_id is None:
            self.leader_id = member_id
        if self.state is GroupState.PREPARING_REBALANCE:
            if self.initial_delay_deadline_ms is not None:
                # Each new member extends the initial delay, up to the rebalance timeout.
                self.initial_delay_deadline_ms = min(now_ms + self.initial_rebalance_delay_ms,
                                                     self.initial_delay_limit_ms)
            self.try_complete_join(now_ms)
        else:
            self.prepare_rebalance(now_ms, f"new member {member_id} joined")

    def prepare_rebalance(self, now_ms: int, reason: str = "") -> None:
        log.info("group %s: preparing to rebalance (generation %d, %d members%s)", self.group_id, self.generation_id,
                 len(self.members), f": {reason}" if reason else "")
        if self.state is GroupState.COMPLETING_REBALANCE:
            self._fail_syncs(ErrorCode.REBALANCE_IN_PROGRESS)
        timeout = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
        if self.state is GroupState.EMPTY and self.initial_rebalance_delay_ms > 0:
            self.initial_delay_limit_ms = now_ms + max(timeout, self.initial_rebalance_delay_ms)
            self.initial_delay_deadline_ms = min(now_ms + self.initial_rebalance_delay_ms, self.initial_delay_limit_ms)
        else:
            self.initial_delay_deadline_ms = None
        self.rebalance_deadline_ms = now_ms + timeout
        self._transition(GroupState.PREPARING_REBALANCE, now_ms)
        self.try_complete_join(now_ms)

    def try_complete_join(self, now_ms: int) -> None:
        if self.state is not GroupState.PREPARING_REBALANCE:
            return
        if self.initial_delay_deadline_ms is not None:
            if now_ms < self.initial_delay_deadline_ms:
                return
            self.initial_delay_deadline_ms = None
            self.rebalance_deadline_ms = now_ms  # the delay was the whole wait
        all_joined = not self.pending_members and all(m.awaiting_join is not None for m in self.members.values())
        if not all_joined and now_ms < self.rebalance_deadline_ms:
            return
        # Dynamic members that did not rejoin are gone; static ones stay until their session expires.
        for member in [m for m in self.members.values() if m.awaiting_join is None and m.group_instance_id is None]:
            self._remove(member)
        self.pending_members.clear()
        joined = [m.member_id for m in self.members.values() if m.awaiting_join is not None]
        if self.members and not joined:
            # Only static members that have not rejoined: wait for them (or for their sessions to end).
            self.rebalance_deadline_ms = now_ms + max(m.rebalance_timeout_ms for m in self.members.values())
            return
        if self.leader_id is not None and self.leader_id in self.members and \
                self.members[self.leader_id].awaiting_join is None:
            self.leader_id = joined[0]
        self.generation_id += 1
        if self.is_empty():
            self.protocol_name = None
            self._transition(GroupState.EMPTY, now_ms)
            self._changed()
            return
        self.protocol_name = self.select_protocol()
        if self.leader_id not in self.members:
            self.leader_id = next(iter(self.members))
        log.info("group %s: generation %d with %d members, protocol %s, leader %s", self.group_id,
                 self.generation_id, len(self.members), self.protocol_name, self.leader_id)
        self._transition(GroupState.COMPLETING_REBALANCE, now_ms)
        for member in list(self.members.values()):
            callback, member.awaiting_join = member.awaiting_join, None
            member.is_new = False
            member.assignment = b""
            member.last_heartbeat_ms = now_ms
            if callback is not None:
                callback(self._join_result(member, ErrorCode.NONE))

    def _join_result(self, member: Member, error_code: int) -> JoinResult:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if member.member_id == self.leader_id:
            members = tuple((m.member_id, m.group_instance_id, m.metadata_for(self.protocol_name))
                            for m in self.members.values())
        return JoinResult(error_code, member.member_id, self.generation_id, self.protocol_type, self.protocol_name,
                          self.leader_id or "", members)

    def sync(self, *, member_id: str, generation_id: int, protocol_type: str | None, protocol_name: str | None,
             assignments: dict[str, bytes], now_ms: int, callback: SyncCallback,
             group_instance_id: str | None = None) -> None:
        if self.state is GroupState.DEAD:
            callback(SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        code = self.validate_member(member_id, group_instance_id)
        if code or self.state is GroupState.EMPTY:
            callback(SyncResult(code or ErrorCode.UNKNOWN_MEMBER_ID))
            return
        member = self.members[member_id]
        if generation_id != self.generation_id:
            callback(SyncResult(ErrorCode.ILLEGAL_GENERATION))
            return
        if (protocol_type is not None and protocol_type != self.protocol_type) or \
                (protocol_name is not None and protocol_name != self.protocol_name):
            callback(SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        member.last_heartbeat_ms = now_ms
        if self.state is GroupState.PREPARING_REBALANCE:
            callback(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        elif self.state is GroupState.COMPLETING_REBALANCE:
            if member.awaiting_sync is not None:
                member.awaiting_sync(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
            member.awaiting_sync = callback
            if member_id == self.leader_id:
                for m in self.members.values():
                    m.assignment = assignments.get(m.member_id, b"")
                self._transition(GroupState.STABLE, now_ms)
                self._changed()
                for m in self.members.values():
                    waiting, m.awaiting_sync = m.awaiting_sync, None
                    if waiting is not None:
                        waiting(SyncResult(ErrorCode.NONE, m.assignment, self.protocol_type, self.protocol_name))
        else:
            callback(SyncResult(ErrorCode.NONE, member.assignment, self.protocol_type, self.protocol_name))

    def heartbeat(self, member_id: str, generation_id: int, now_ms: int, group_instance_id: str | None = None) -> int:
        if self.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        code = self.validate_member(member_id, group_instance_id)
        if code or self.state is GroupState.EMPTY:
            return code or ErrorCode.UNKNOWN_MEMBER_ID
        member = self.members[member_id]
        if generation_id != self.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        member.last_heartbeat_ms = now_ms
        if self.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(self, member_id: str, now_ms: int, group_instance_id: str | None = None) -> int:
        if not member_id:
            # LeaveGroup v3+ by instance id alone: the admin removing a static member
            # (removeMembersFromConsumerGroup).
            current = self.static_members.get(group_instance_id) if group_instance_id is not None else None
            if current is None or current not in self.members:
                return ErrorCode.UNKNOWN_MEMBER_ID
            self._remove_and_rebalance(self.members[current], now_ms,
                                       f"static member {group_instance_id} removed")
            return ErrorCode.NONE
        if member_id in self.pending_members:
            del self.pending_members[member_id]
            self.try_complete_join(now_ms)
            return ErrorCode.NONE
        code = self.validate_member(member_id, group_instance_id)
        if code:
            return code
        self._remove_and_rebalance(self.members[member_id], now_ms, f"member {member_id} left")
        return ErrorCode.NONE

    def _remove_and_rebalance(self, member: Member, now_ms: int, reason: str) -> None:
        if member.awaiting_join is not None:
            callback, member.awaiting_join = member.awaiting_join, None
            callback(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member.member_id))
        if member.awaiting_sync is not None:
            waiting, member.awaiting_sync = member.awaiting_sync, None
            waiting(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        self._remove(member)
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.prepare_rebalance(now_ms, reason)
        elif self.state is GroupState.PREPARING_REBALANCE:
            self.try_complete_join(now_ms)

    def _remove(self, member: Member) -> None:
        self.members.pop(member.member_id, None)
        if member.group_instance_id is not None and \
                self.static_members.get(member.group_instance_id) == member.member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member.member_id:
            self.leader_id = next(iter(self.members), None)

    def tick(self, now_ms: int) -> None:
        """Expire members whose session ran out and pending member ids never used; complete a
        rebalance whose deadline passed."""
        for pending, deadline in list(self.pending_members.items()):
            if now_ms >= deadline:
                del self.pending_members[pending]
        for member in list(self.members.values()):
            if member.member_id in self.members and not member.alive(now_ms):
                log.info("group %s: member %s expired (no heartbeat for %d ms)", self.group_id, member.member_id,
                         now_ms - member.last_heartbeat_ms)
                self._remove_and_rebalance(member, now_ms, "session timeout")
        self.try_complete_join(now_ms)

    def _fail_syncs(self, error_code: int) -> None:
        for m in self.members.values():
            waiting, m.awaiting_sync = m.awaiting_sync, None
            if waiting is not None:
                waiting(SyncResult(error_code))

    def _transition(self, state: GroupState, now_ms: int) -> None:
        self.state = state
        self.state_timestamp_ms = now_ms

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self)

    def shutdown(self) -> None:
        """Answer every waiting member (the broker is stopping): they retry against the next broker."""
        for m in self.members.values():
            if m.awaiting_join is not None:
                callback, m.awaiting_join = m.awaiting_join, None
                callback(JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, m.member_id))
        self._fail_syncs(ErrorCode.COORDINATOR_NOT_AVAILABLE)
