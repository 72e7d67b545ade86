"""A consumer group of Kafka's new protocol (KIP-848, ``group.protocol=consumer``), without any I/O.

The state is Kafka's: a *group epoch* bumped whenever the membership, a subscription or the
subscribed topics' metadata change; a *target assignment* computed by a server-side assignor for the
group epoch (its *assignment epoch*); and for each member a *current assignment* with a *member
epoch* that moves towards the target one heartbeat at a time:

* partitions a member must give up are first only removed from what it is told it owns (state
  UNREVOKED_PARTITIONS, member epoch unchanged); the member moves to the new epoch only once a
  heartbeat shows it no longer owns them;
* a partition the target gives to a member while another still owns (or has not yet acknowledged
  revoking) it is withheld (state UNRELEASED_PARTITIONS) until its previous owner lets it go -- so a
  partition never has two owners.

Every change comes back as ``__consumer_offsets`` records (:mod:`.consumer_records`) for the
coordinator to append before it answers; loading replays the same records through :meth:`replay`.
Time comes in as ``now_ms``.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from tierlog.config.settings import setting
from tierlog.errors import ErrorCode
from tierlog.server.groups import consumer_records as cr
from tierlog.server.groups.assignors import Assignment, MemberSpec, TopicInfo, assign, assignor_name

log = logging.getLogger(__name__)

#: The member epochs a leaving member sends: -1 leaves for good, -2 (static members) for a restart.
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

#: topic name -> (topic id, partition count): the part of the metadata image a group looks at.
TopicsView = Mapping[str, tuple[bytes, int]]


class MemberState(enum.IntEnum):
    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


def _assignor_names(configured: tuple[str, ...]) -> tuple[str, ...]:
    """``group.consumer.assignors`` as short names (Kafka's class names accepted), each once."""
    return tuple(dict.fromkeys(assignor_name(a) or a for a in configured))


@dataclass(frozen=True)
class ConsumerGroupSettings:
    session_timeout_ms: int = setting("group.consumer.session.timeout.ms")
    heartbeat_interval_ms: int = setting("group.consumer.heartbeat.interval.ms")
    #: Short names (uniform, range); the first is the default.
    assignors: tuple[str, ...] = setting("group.consumer.assignors", _assignor_names)
    #: The bounds a group's own session timeout and heartbeat interval (group configs) are kept within.
    min_session_timeout_ms: int = setting("group.consumer.min.session.timeout.ms")
    max_session_timeout_ms: int = setting("group.consumer.max.session.timeout.ms")
    min_heartbeat_interval_ms: int = setting("group.consumer.min.heartbeat.interval.ms")
    max_heartbeat_interval_ms: int = setting("group.consumer.max.heartbeat.interval.ms")

    def for_group(self, session_timeout_ms: int | None, heartbeat_interval_ms: int | None) -> ConsumerGroupSettings:
        """These settings with a group's own configs over them, each kept within the broker's bounds as
        Kafka 4.3's GroupConfig.evaluate does (a value stored under wider bounds, before a restart
        narrowed them, is capped rather than refused)."""
        def clamp(value: int | None, default: int, low: int, high: int) -> int:
            return default if value is None else max(low, min(high, value))

        return dataclasses.replace(
            self,
            session_timeout_ms=clamp(session_timeout_ms, self.session_timeout_ms, self.min_session_timeout_ms,
                                     self.max_session_timeout_ms),
            heartbeat_interval_ms=clamp(heartbeat_interval_ms, self.heartbeat_interval_ms,
                                        self.min_heartbeat_interval_ms, self.max_heartbeat_interval_ms))


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    last_heartbeat_ms: int = 0
    revocation_deadline_ms: int | None = None

    def metadata(self) -> cr.MemberMetadata:
        return cr.MemberMetadata(self.instance_id, self.rack_id, self.client_id, self.client_host,
                                 self.subscribed_topic_names, self.subscribed_topic_regex, self.rebalance_timeout_ms,
                                 self.server_assignor)

    def current(self) -> cr.CurrentAssignment:
        return cr.CurrentAssignment(self.member_epoch, self.previous_member_epoch, int(self.state), self.assigned,
                                    self.pending_revocation)

    def subscribed_topics(self, topic_names: list[str]) -> set[str]:
        """The existing topics this member subscribes to (by name or by regex, which must match the
        whole name as RE2J's ``matches`` does; internal topics never match a regex)."""
        out = {n for n in self.subscribed_topic_names if n in topic_names}
        if self.subscribed_topic_regex:
            try:
                pattern = re.compile(self.subscribed_topic_regex)
            except re.error:
                return out
            out.update(n for n in topic_names if not n.startswith("__") and pattern.fullmatch(n))
        return out


@dataclass(frozen=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    #: None: not sent (unchanged since the last heartbeat).
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass
class HeartbeatResult:
    error_code: int
    member_id: str
    member_epoch: int = -1
    error_message: str | None = None
    assignment: Assignment | None = None
    records: list[cr.Record] = field(default_factory=list)


def _flatten(a: Mapping[bytes, frozenset[int]]) -> set[tuple[bytes, int]]:
    return {(tid, p) for tid, ps in a.items() for p in ps}


def _group(tps: set[tuple[bytes, int]]) -> Assignment:
    out: dict[bytes, set[int]] = {}
    for tid, p in tps:
        out.setdefault(tid, set()).add(p)
    return {tid: frozenset(ps) for tid, ps in out.items()}


class ConsumerGroup:
    def __init__(self, group_id: str, settings: ConsumerGroupSettings) -> None:
        self.group_id = group_id
        self.settings = settings
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.target: dict[str, Assignment] = {}
        #: The subscribed topics' (name, id, partitions) the last target was computed for.
        self.subscription_metadata: tuple[tuple[str, bytes, int], ...] | None = None
        self.assignor = settings.assignors[0] if settings.assignors else "uniform"

    # -- queries ---------------------------------------------------------------------------------

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.assignment_epoch < self.group_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def subscribed_topic_names(self, topics: TopicsView) -> set[str]:
        names = sorted(topics)
        out: set[str] = set()
        for m in self.members.values():
            out |= m.subscribed_topics(names)
        return out

    def owners(self, exclude: str | None = None) -> set[tuple[bytes, int]]:
        """Partitions some member (other than ``exclude``) owns or has yet to revoke."""
        out: set[tuple[bytes, int]] = set()
        for m in self.members.values():
            if m.member_id != exclude:
                out |= _flatten(m.assigned) | _flatten(m.pending_revocation)
        return out

    def validate_offset_commit(self, member_id: str, member_epoch: int) -> int:
        """Kafka's check of OffsetCommit v9+ (and OffsetFetch v9+) from a member of this group."""
        if member_epoch < 0 and not member_id:
            return ErrorCode.NONE if not self.members else ErrorCode.UNKNOWN_MEMBER_ID  # an admin commit needs an empty group
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    # -- heartbeat -------------------------------------------------------------------------------

    def heartbeat(self, req: HeartbeatRequest, topics: TopicsView, now_ms: int) -> HeartbeatResult:
        if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            return self._leave(req)
        if req.subscribed_topic_regex is not None:
            try:
                re.compile(req.subscribed_topic_regex)
            except re.error as e:
                return HeartbeatResult(ErrorCode.INVALID_REGULAR_EXPRESSION, req.member_id,
                                       error_message=f"SubscribedTopicRegex {req.subscribed_topic_regex!r} is "
                                                     f"not a valid regular expression: {e}")
        if req.server_assignor is not None and (assignor_name(req.server_assignor) is None or
                                                assignor_name(req.server_assignor) not in self.settings.assignors):
            return HeartbeatResult(ErrorCode.UNSUPPORTED_ASSIGNOR, req.member_id,
                                   error_message=f"ServerAssignor {req.server_assignor} is not supported; "
                                                 f"supported: {', '.join(self.settings.assignors)}")
        records: list[cr.Record] = []
        member = self.members.get(req.member_id)
        bump = False
        if req.member_epoch == 0:
            if req.instance_id is not None:
                static = next((m for m in self.members.values() if m.instance_id == req.instance_id), None)
                if static is not None and static.member_id != req.member_id:
                    if static.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                        return HeartbeatResult(ErrorCode.UNRELEASED_INSTANCE_ID, req.member_id, error_message=(
                            f"static member {req.instance_id} is still in use by member {static.member_id}"))
                    member = self._replace_static(static, req.member_id, records)
            if member is None:
                member = self.members[req.member_id] = ConsumerMember(req.member_id, member_epoch=0)
                bump = True
            elif member.member_epoch != 0 and member.member_id == req.member_id:
                # A known member rejoining with epoch 0 has dropped what it owned: start it afresh.
                member.assigned, member.pending_revocation = {}, {}
                member.state = MemberState.STABLE
                member.previous_member_epoch, member.member_epoch = member.member_epoch, 0
        else:
            if member is None:
                return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID, req.member_id,
                                       error_message=f"member {req.member_id} is not in group {self.group_id}")
            code = self._check_epoch(member, req)
            if code:
                return HeartbeatResult(code, req.member_id, error_message=(
                    f"member epoch {req.member_epoch} of {req.member_id} is fenced (current {member.member_epoch})"))
        member.last_heartbeat_ms = now_ms
        before_metadata = member.metadata()
        old_subscription = (member.subscribed_topic_names, member.subscribed_topic_regex)
        self._update_member(member, req)
        if member.metadata() != before_metadata or bump:
            records.append((cr.encode_key(cr.MEMBER_METADATA, self.group_id, member.member_id),
                            cr.encode_member_metadata(member.metadata())))
        if (member.subscribed_topic_names, member.subscribed_topic_regex) != old_subscription:
            bump = True
        metadata = self._subscription_metadata(topics)
        if metadata != self.subscription_metadata:
            self.subscription_metadata = metadata
            bump = True
        if bump:
            self.group_epoch += 1
            records.append((cr.encode_key(cr.GROUP_METADATA, self.group_id), cr.encode_group_metadata(self.group_epoch)))
        if self.group_epoch > self.assignment_epoch:
            self._compute_target(topics, records)
        before = (member.member_epoch, member.state, member.assigned, member.pending_revocation)
        self._reconcile(member, req.owned, topics)
        if (member.member_epoch, member.state, member.assigned, member.pending_revocation) != before or bump:
            records.append((cr.encode_key(cr.CURRENT_MEMBER_ASSIGNMENT, self.group_id, member.member_id),
                            cr.encode_current_assignment(member.current())))
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if member.revocation_deadline_ms is None:
                member.revocation_deadline_ms = now_ms + max(member.rebalance_timeout_ms, 0)
        else:
            member.revocation_deadline_ms = None
        full = (req.rebalance_timeout_ms != -1 and req.owned is not None
                and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None))
        send_assignment = req.member_epoch == 0 or full or member.assigned != before[2]
        return HeartbeatResult(ErrorCode.NONE, member.member_id, member.member_epoch,
                               assignment=dict(member.assigned) if send_assignment else None, records=records)

    def _check_epoch(self, member: ConsumerMember, req: HeartbeatRequest) -> int:
        if req.member_epoch == member.member_epoch:
            return ErrorCode.NONE
        if req.member_epoch < member.member_epoch and req.member_epoch == member.previous_member_epoch \
                and req.owned is not None and _flatten(req.owned) <= _flatten(member.assigned):
            return ErrorCode.NONE  # the response that bumped the epoch was lost: the member may retry with the old one
        return ErrorCode.FENCED_MEMBER_EPOCH

    def _update_member(self, member: ConsumerMember, req: HeartbeatRequest) -> None:
        if req.instance_id is not None:
            member.instance_id = req.instance_id
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        if req.client_id:
            member.client_id = req.client_id
        if req.client_host:
            member.client_host = req.client_host
        if req.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.subscribed_topic_names is not None:
            member.subscribed_topic_names = tuple(req.subscribed_topic_names)
        if req.subscribed_topic_regex is not None:
            member.subscribed_topic_regex = req.subscribed_topic_regex or None
        if req.server_assignor is not None:
            member.server_assignor = req.server_assignor or None

    def _replace_static(self, old: ConsumerMember, member_id: str, records: list[cr.Record]) -> ConsumerMember:
        """A static member restarting under a new member id takes over the old one's assignment,
        without a new group epoch."""
        records.extend(self._remove_records(old.member_id))
        del self.members[old.member_id]
        target = self.target.pop(old.member_id, {})
        new = ConsumerMember(member_id, instance_id=old.instance_id, rack_id=old.rack_id,
                             subscribed_topic_names=old.subscribed_topic_names,
                             subscribed_topic_regex=old.subscribed_topic_regex,
                             rebalance_timeout_ms=old.rebalance_timeout_ms, server_assignor=old.server_assignor,
                             member_epoch=old.previous_member_epoch, previous_member_epoch=-1,
                             assigned=dict(old.assigned), pending_revocation=dict(old.pending_revocation))
        self.members[member_id] = new
        self.target[member_id] = target
        records.append((cr.encode_key(cr.TARGET_ASSIGNMENT_MEMBER, self.group_id, member_id),
                        cr.encode_target_member(target)))
        log.info("group %s: static member %s restarted as %s", self.group_id, old.instance_id, member_id)
        return new

    def _leave(self, req: HeartbeatRequest) -> HeartbeatResult:
        member = self.members.get(req.member_id)
        if member is None and req.instance_id is not None:
            member = next((m for m in self.members.values() if m.instance_id == req.instance_id), None)
        if member is None:
            return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID, req.member_id,
                                   error_message=f"member {req.member_id} is not in group {self.group_id}")
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH and member.instance_id is not None:
            # A static member going away for a restart keeps its partitions until its session ends.
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH
            return HeartbeatResult(ErrorCode.NONE, member.member_id, LEAVE_GROUP_STATIC_MEMBER_EPOCH, records=[
                (cr.encode_key(cr.CURRENT_MEMBER_ASSIGNMENT, self.group_id, member.member_id),
                 cr.encode_current_assignment(member.current()))])
        return HeartbeatResult(ErrorCode.NONE, member.member_id, LEAVE_GROUP_MEMBER_EPOCH,
                               records=self.remove_member(member.member_id, "left the group"))

    # -- membership changes ----------------------------------------------------------------------

    def _remove_records(self, member_id: str) -> list[cr.Record]:
        return [(cr.encode_key(cr.CURRENT_MEMBER_ASSIGNMENT, self.group_id, member_id), None),
                (cr.encode_key(cr.TARGET_ASSIGNMENT_MEMBER, self.group_id, member_id), None),
                (cr.encode_key(cr.MEMBER_METADATA, self.group_id, member_id), None)]

    def remove_member(self, member_id: str, reason: str) -> list[cr.Record]:
        """Remove a member (its partitions become free at once) and bump the group epoch."""
        log.info("group %s: member %s removed: %s", self.group_id, member_id, reason)
        self.members.pop(member_id, None)
        self.target.pop(member_id, None)
        self.group_epoch += 1
        return [*self._remove_records(member_id), (cr.encode_key(cr.GROUP_METADATA, self.group_id), cr.encode_group_metadata(self.group_epoch))]

    def expire(self, now_ms: int) -> list[cr.Record]:
        """Remove members whose session ran out, or that did not revoke partitions within their
        rebalance timeout."""
        records: list[cr.Record] = []
        for member in list(self.members.values()):
            if now_ms - member.last_heartbeat_ms >= self.settings.session_timeout_ms:
                records += self.remove_member(member.member_id, f"session timeout ({self.settings.session_timeout_ms} ms)")
            elif member.revocation_deadline_ms is not None and now_ms >= member.revocation_deadline_ms:
                records += self.remove_member(member.member_id, "partitions not revoked within the rebalance timeout")
        return records

    # -- target assignment and reconciliation ----------------------------------------------------

    def _subscription_metadata(self, topics: TopicsView) -> tuple[tuple[str, bytes, int], ...]:
        return tuple((n, topics[n][0], topics[n][1]) for n in sorted(self.subscribed_topic_names(topics)))

    def _choose_assignor(self) -> str:
        # Kafka: the assignor most members name, else the first configured one.
        named = Counter(assignor_name(m.server_assignor) for m in self.members.values() if m.server_assignor)
        if named:
            return str(max(sorted(named.items(), key=lambda kv: str(kv[0])), key=lambda kv: kv[1])[0])
        return self.settings.assignors[0] if self.settings.assignors else "uniform"

    def _compute_target(self, topics: TopicsView, records: list[cr.Record]) -> None:
        names = sorted(topics)
        infos = {topics[n][0]: TopicInfo(n, topics[n][1]) for n in names}
        specs = {m.member_id: MemberSpec(frozenset(topics[n][0] for n in m.subscribed_topics(names)),
                                         self.target.get(m.member_id, {}))
                 for m in self.members.values()}
        self.assignor = self._choose_assignor()
        new = assign(self.assignor, specs, infos)
        for member_id, assignment in sorted(new.items()):
            if self.target.get(member_id) != assignment or member_id not in self.target:
                records.append((cr.encode_key(cr.TARGET_ASSIGNMENT_MEMBER, self.group_id, member_id),
                                cr.encode_target_member(assignment)))
        self.target = new
        self.assignment_epoch = self.group_epoch
        records.append((cr.encode_key(cr.TARGET_ASSIGNMENT_METADATA, self.group_id),
                        cr.encode_target_metadata(self.assignment_epoch)))
        log.info("group %s: target assignment of epoch %d by %s for %d members", self.group_id,
                 self.assignment_epoch, self.assignor, len(new))

    def _reconcile(self, member: ConsumerMember, owned: Assignment | None, topics: TopicsView) -> None:
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if _owns_any(owned, member.pending_revocation):
                return  # still waiting for the member to let go
        elif member.state is MemberState.STABLE and member.member_epoch == self.assignment_epoch:
            return
        subscribed = {topics[n][0] for n in member.subscribed_topics(sorted(topics))}
        target = {tid: ps for tid, ps in self.target.get(member.member_id, {}).items() if tid in subscribed}
        current = _flatten(member.assigned)
        wanted = _flatten(target)
        kept = current & wanted
        revoke = current - kept
        others = self.owners(exclude=member.member_id)
        pending = wanted - kept
        unreleased = pending & others
        pending -= unreleased
        if revoke and _owns_any(owned, _group(revoke)):
            member.state = MemberState.UNREVOKED_PARTITIONS
            member.assigned = _group(kept)
            member.pending_revocation = _group(revoke)
            return
        member.pending_revocation = {}
        member.assigned = _group(kept | pending)
        if member.member_epoch != self.assignment_epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = self.assignment_epoch
        member.state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE

    # -- loading ---------------------------------------------------------------------------------

    def replay(self, key: cr.ConsumerGroupKey, value: bytes | None, now_ms: int) -> None:
        """Apply one record read back from ``__consumer_offsets``."""
        t, member_id = key.record_type, key.member_id or ""
        if t == cr.GROUP_METADATA:
            if value is not None:
                self.group_epoch = cr.decode_group_metadata(value)
        elif t == cr.TARGET_ASSIGNMENT_METADATA:
            if value is not None:
                self.assignment_epoch = cr.decode_target_metadata(value)
        elif t == cr.MEMBER_METADATA:
            if value is None:
                self.members.pop(member_id, None)
                return
            md = cr.decode_member_metadata(value)
            m = self.members.setdefault(member_id, ConsumerMember(member_id))
            m.instance_id, m.rack_id, m.client_id, m.client_host = md.instance_id, md.rack_id, md.client_id, md.client_host
            m.subscribed_topic_names, m.subscribed_topic_regex = md.subscribed_topic_names, md.subscribed_topic_regex
            m.rebalance_timeout_ms, m.server_assignor = md.rebalance_timeout_ms, md.server_assignor
            m.last_heartbeat_ms = now_ms  # sessions restart when the group is loaded
        elif t == cr.TARGET_ASSIGNMENT_MEMBER:
            if value is None:
                self.target.pop(member_id, None)
            else:
                self.target[member_id] = cr.decode_target_member(value)
        elif t == cr.CURRENT_MEMBER_ASSIGNMENT:
            m2 = self.members.get(member_id)
            if value is None or m2 is None:
                return
            a = cr.decode_current_assignment(value)
            m2.member_epoch, m2.previous_member_epoch = a.member_epoch, a.previous_member_epoch
            m2.state = MemberState(a.state) if a.state in MemberState._value2member_map_ else MemberState.UNKNOWN
            m2.assigned, m2.pending_revocation = a.assigned, a.pending_revocation

    def tombstones(self) -> list[cr.Record]:
        """The records deleting this group (an empty one: members leave tombstones as they go)."""
        return [(cr.encode_key(cr.TARGET_ASSIGNMENT_METADATA, self.group_id), None),
                (cr.encode_key(cr.GROUP_METADATA, self.group_id), None)]


def _owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Whether the member still reports owning any of ``partitions``; not knowing (no owned list in
    the request) counts as owning them."""
    if owned is None:
        return True
    return bool(_flatten(owned) & _flatten(partitions))
