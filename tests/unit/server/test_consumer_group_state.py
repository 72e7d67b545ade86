"""The KIP-848 consumer group state machine (sans-IO), driven heartbeat by heartbeat with a made-up
clock: epochs, revocation before reassignment, fencing, leaving, static members, session and
revocation timeouts, and the records it asks the coordinator to persist (replayed back)."""

from __future__ import annotations

from tierlog.errors import ErrorCode
from tierlog.server.groups import consumer_records as cr
from tierlog.server.groups.consumer_group import (
    ConsumerGroup,
    ConsumerGroupSettings,
    ConsumerGroupState,
    HeartbeatRequest,
    HeartbeatResult,
    MemberState,
)

T = b"\x07" * 16
U = b"\x08" * 16
TOPICS = {"t": (T, 4), "u": (U, 2), "__consumer_offsets": (b"\x09" * 16, 3)}
SETTINGS = ConsumerGroupSettings(session_timeout_ms=45000, heartbeat_interval_ms=5000)


def join(g: ConsumerGroup, member: str, now: int, topics: tuple[str, ...] = ("t",), **kw: object) -> HeartbeatResult:
    req = HeartbeatRequest("g", member, 0, rebalance_timeout_ms=30000, subscribed_topic_names=topics, owned={}, **kw)  # type: ignore[arg-type]
    return g.heartbeat(req, TOPICS, now)


def beat(g: ConsumerGroup, member: str, epoch: int, now: int, owned: dict[bytes, frozenset[int]] | None = None,
         **kw: object) -> HeartbeatResult:
    return g.heartbeat(HeartbeatRequest("g", member, epoch, owned=owned, **kw), TOPICS, now)  # type: ignore[arg-type]


def owners(g: ConsumerGroup) -> dict[int, str]:
    out: dict[int, str] = {}
    for m in g.members.values():
        for p in m.assigned.get(T, frozenset()) | m.pending_revocation.get(T, frozenset()):
            assert p not in out, f"partition {p} owned twice"
            out[p] = m.member_id
    return out


def test_first_member_gets_everything_at_epoch_one() -> None:
    g = ConsumerGroup("g", SETTINGS)
    r = join(g, "a", 0)
    assert (r.error_code, r.member_epoch, r.assignment) == (ErrorCode.NONE, 1, {T: frozenset(range(4))})
    assert g.state is ConsumerGroupState.STABLE
    kinds = [cr.record_type_of(k) for k, _ in r.records]
    assert kinds == [cr.MEMBER_METADATA, cr.GROUP_METADATA, cr.TARGET_ASSIGNMENT_MEMBER, cr.TARGET_ASSIGNMENT_METADATA,
                     cr.CURRENT_MEMBER_ASSIGNMENT]
    # A plain heartbeat changes nothing and sends no assignment.
    r = beat(g, "a", 1, 1000)
    assert (r.error_code, r.member_epoch, r.assignment, r.records) == (ErrorCode.NONE, 1, None, [])


def test_partition_moves_only_after_the_previous_owner_revokes_it() -> None:
    g = ConsumerGroup("g", SETTINGS)
    join(g, "a", 0)
    r = join(g, "b", 100)
    assert r.member_epoch == 2 and r.assignment == {}  # its target partitions are still a's
    b_target = g.target["b"][T]
    assert len(b_target) == 2 and g.members["b"].state is MemberState.UNRELEASED_PARTITIONS
    assert g.state is ConsumerGroupState.RECONCILING
    # a learns it must give up b's partitions: its epoch stays until it has revoked them.
    r = beat(g, "a", 1, 200)
    assert r.member_epoch == 1 and r.assignment == {T: frozenset(range(4)) - b_target}
    assert g.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    owners(g)
    # b asks again while a has not acknowledged: still nothing.
    assert beat(g, "b", 2, 300).assignment is None and g.members["b"].assigned == {}
    # a's heartbeat still claims them (owned not sent = unknown): nothing moves.
    assert beat(g, "a", 1, 400).member_epoch == 1
    # a acknowledges: new epoch; then b gets the partitions.
    r = beat(g, "a", 1, 500, owned={T: frozenset(range(4)) - b_target})
    assert r.member_epoch == 2 and g.members["a"].state is MemberState.STABLE
    r = beat(g, "b", 2, 600)
    assert r.assignment == {T: b_target} and g.members["b"].state is MemberState.STABLE
    assert g.state is ConsumerGroupState.STABLE
    assert sorted(owners(g)) == [0, 1, 2, 3]


def test_fencing_and_unknown_members() -> None:
    g = ConsumerGroup("g", SETTINGS)
    join(g, "a", 0)
    assert beat(g, "a", 5, 10).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert beat(g, "zz", 1, 10).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    join(g, "b", 20)
    beat(g, "a", 1, 30)
    beat(g, "a", 1, 40, owned=g.members["a"].assigned)  # a moves to epoch 2 (previous 1)
    assert g.members["a"].member_epoch == 2
    # The epoch-2 answer was lost: a retries with epoch 1 and owns a subset of its assignment -> accepted.
    assert beat(g, "a", 1, 50, owned=g.members["a"].assigned).error_code == ErrorCode.NONE
    # The previous epoch while claiming partitions it has given up -> fenced.
    assert beat(g, "a", 1, 60, owned={T: frozenset(range(4))}).error_code == ErrorCode.FENCED_MEMBER_EPOCH


def test_leave_frees_partitions_and_bumps_the_group_epoch() -> None:
    g = ConsumerGroup("g", SETTINGS)
    join(g, "a", 0)
    join(g, "b", 10)
    beat(g, "a", 1, 20)
    beat(g, "a", 1, 30, owned=g.members["a"].assigned)
    beat(g, "b", 2, 40)
    epoch = g.group_epoch
    r = g.heartbeat(HeartbeatRequest("g", "b", -1), TOPICS, 50)
    assert (r.error_code, r.member_epoch) == (ErrorCode.NONE, -1) and "b" not in g.members and g.group_epoch == epoch + 1
    assert [v for _, v in r.records][:3] == [None, None, None]  # tombstones of b's records
    r = beat(g, "a", 2, 60)
    assert r.member_epoch == g.group_epoch and r.assignment == {T: frozenset(range(4))}


def test_static_member_restart_keeps_its_partitions_and_duplicate_is_refused() -> None:
    g = ConsumerGroup("g", SETTINGS)
    join(g, "a", 0, instance_id="i1")
    join(g, "b", 10)
    beat(g, "a", 1, 20)
    beat(g, "a", 1, 30, owned=g.members["a"].assigned)
    beat(g, "b", 2, 40)
    a_parts = g.members["a"].assigned
    epoch = g.group_epoch
    assert join(g, "a2", 50, instance_id="i1").error_code == ErrorCode.UNRELEASED_INSTANCE_ID
    r = g.heartbeat(HeartbeatRequest("g", "a", -2, instance_id="i1"), TOPICS, 60)
    assert (r.error_code, r.member_epoch) == (ErrorCode.NONE, -2) and g.members["a"].assigned == a_parts
    r = join(g, "a2", 70, instance_id="i1")
    assert r.error_code == ErrorCode.NONE and r.assignment == a_parts and g.group_epoch == epoch
    assert "a" not in g.members and g.members["a2"].instance_id == "i1"


def test_session_and_revocation_timeouts_remove_members() -> None:
    g = ConsumerGroup("g", SETTINGS)
    join(g, "a", 0)
    join(g, "b", 1000)
    beat(g, "a", 1, 2000)  # a must revoke now, within its rebalance timeout of 30 s
    assert g.expire(31999) == []
    records = g.expire(32001)
    assert "a" not in g.members and records
    beat(g, "b", 2, 33000)
    assert g.expire(33000 + 44999) == []
    g.expire(33000 + 45000)
    assert not g.members and g.state is ConsumerGroupState.EMPTY


def test_regex_subscription_and_validation() -> None:
    g = ConsumerGroup("g", SETTINGS)
    r = g.heartbeat(HeartbeatRequest("g", "a", 0, rebalance_timeout_ms=1000, subscribed_topic_regex=".*", owned={}),
                    TOPICS, 0)
    assert r.assignment == {T: frozenset(range(4)), U: frozenset(range(2))}  # never __consumer_offsets
    bad = g.heartbeat(HeartbeatRequest("g", "b", 0, rebalance_timeout_ms=1000, subscribed_topic_regex="(", owned={}),
                      TOPICS, 0)
    assert bad.error_code == ErrorCode.INVALID_REGULAR_EXPRESSION
    assert join(g, "c", 0, server_assignor="sticky").error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
    r = join(g, "d", 0, topics=("u",), server_assignor="range")
    assert g.assignor == "range" and r.error_code == ErrorCode.NONE


def test_new_partitions_bump_the_epoch_and_are_assigned() -> None:
    g = ConsumerGroup("g", SETTINGS)
    join(g, "a", 0)
    more = {**TOPICS, "t": (T, 6)}
    r = g.heartbeat(HeartbeatRequest("g", "a", 1), more, 10)
    assert r.member_epoch == 2 and r.assignment == {T: frozenset(range(6))}


def test_records_replay_to_the_same_group() -> None:
    g = ConsumerGroup("g", SETTINGS)
    records = join(g, "a", 0, instance_id="i").records + join(g, "b", 10).records
    records += beat(g, "a", 1, 20).records
    copy = ConsumerGroup("g", SETTINGS)
    for key, value in records:
        copy.replay(cr.decode_key(key), value, 99)
    assert (copy.group_epoch, copy.assignment_epoch) == (g.group_epoch, g.assignment_epoch)
    assert copy.target == g.target
    for member_id, m in g.members.items():
        c = copy.members[member_id]
        assert (c.member_epoch, c.state, c.assigned, c.pending_revocation, c.instance_id, c.subscribed_topic_names) == (
            m.member_epoch, m.state, m.assigned, m.pending_revocation, m.instance_id, m.subscribed_topic_names)


def test_offset_commit_checks_member_epoch() -> None:
    g = ConsumerGroup("g", SETTINGS)
    join(g, "a", 0)
    assert g.validate_offset_commit("a", 1) == ErrorCode.NONE
    assert g.validate_offset_commit("a", 0) == 113  # STALE_MEMBER_EPOCH
    assert g.validate_offset_commit("x", 1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert g.validate_offset_commit("", -1) == ErrorCode.UNKNOWN_MEMBER_ID  # admin commits need an empty group


def test_group_configs_override_the_broker_settings_within_its_bounds() -> None:
    settings = ConsumerGroupSettings(session_timeout_ms=45000, heartbeat_interval_ms=5000,
                                     min_session_timeout_ms=45000, max_session_timeout_ms=60000,
                                     min_heartbeat_interval_ms=5000, max_heartbeat_interval_ms=15000)
    assert settings.for_group(None, None) == settings
    own = settings.for_group(50000, 7000)
    assert (own.session_timeout_ms, own.heartbeat_interval_ms) == (50000, 7000)
    # Values stored under wider bounds are capped, as Kafka's GroupConfig.evaluate caps them.
    capped = settings.for_group(1000, 20000)
    assert (capped.session_timeout_ms, capped.heartbeat_interval_ms) == (45000, 15000)
