"""Static membership (KIP-345) in the classic group state machine, with made-up clocks: a member with
a ``group.instance.id`` that restarts keeps its place without a rebalance, its old member id is fenced,
an admin removes it by instance id, and a restored group still knows it."""

from __future__ import annotations

from tests.unit.server.test_group_state import PROTOCOLS, Answers, sync
from tierlog.errors import ErrorCode
from tierlog.server.groups.group import Group, GroupState
from tierlog.server.groups.records import decode_group_value, encode_group_value


def static_join(group: Group, answers: Answers, key: str, instance: str, member_id: str = "", *, now: int = 0,
                protocols: list[tuple[str, bytes]] = PROTOCOLS, skip: bool = False, session_ms: int = 10_000) -> None:
    group.join(member_id=member_id, group_instance_id=instance, client_id=key, client_host="/127.0.0.1",
               session_timeout_ms=session_ms, rebalance_timeout_ms=30_000, protocol_type="consumer",
               protocols=protocols, require_known_member_id=False, now_ms=now, callback=answers.join_cb(key),
               supports_skip_assignment=skip)


def stable_pair(group: Group, answers: Answers, session_ms: int = 10_000) -> tuple[str, str]:
    """Two static members a (leader, instance ia) and b (instance ib), stable at generation 1."""
    static_join(group, answers, "a", "ia", session_ms=session_ms)
    static_join(group, answers, "b", "ib", session_ms=session_ms)
    group.tick(group.initial_rebalance_delay_ms)  # both land in the first generation
    a, b = answers.joins["a"][-1].member_id, answers.joins["b"][-1].member_id
    assert a.startswith("ia-") and b.startswith("ib-")  # no MEMBER_ID_REQUIRED round for static members
    assert answers.joins["a"][-1].generation_id == 1
    sync(group, answers, "a", a, 1, assignments={a: b"p0", b: b"p1"})
    sync(group, answers, "b", b, 1)
    assert group.state is GroupState.STABLE
    return a, b


def test_static_member_restart_keeps_its_assignment_without_a_rebalance() -> None:
    group, answers = Group("g", initial_rebalance_delay_ms=50), Answers()
    a, b = stable_pair(group, answers)

    static_join(group, answers, "b2", "ib", now=100)  # b restarted: it no longer knows its member id
    result = answers.joins["b2"][-1]
    assert result.error_code == ErrorCode.NONE and result.member_id not in (a, b)
    assert result.generation_id == 1 and result.leader == a and result.members == ()
    assert group.state is GroupState.STABLE and group.generation_id == 1
    assert group.static_members == {"ia": a, "ib": result.member_id}

    sync(group, answers, "b2", result.member_id, 1, now=110)
    assert answers.syncs["b2"][-1].error_code == ErrorCode.NONE and answers.syncs["b2"][-1].assignment == b"p1"
    assert group.heartbeat(a, 1, 120) == ErrorCode.NONE  # the other member sees no rebalance

    # The replaced member id is fenced wherever it shows up with the instance id.
    assert group.heartbeat(b, 1, 130, "ib") == ErrorCode.FENCED_INSTANCE_ID
    sync(group, answers, "b-old", b, 1, now=130)
    assert answers.syncs["b-old"][-1].error_code == ErrorCode.UNKNOWN_MEMBER_ID
    group.sync(member_id=b, generation_id=1, protocol_type="consumer", protocol_name=None, assignments={},
               now_ms=130, callback=answers.sync_cb("b-old"), group_instance_id="ib")
    assert answers.syncs["b-old"][-1].error_code == ErrorCode.FENCED_INSTANCE_ID
    static_join(group, answers, "b-old", "ib", b, now=130)
    assert answers.joins["b-old"][-1].error_code == ErrorCode.FENCED_INSTANCE_ID
    assert group.leave(b, 140, "ib") == ErrorCode.FENCED_INSTANCE_ID
    assert group.heartbeat(result.member_id, 1, 150, "unknown-instance") == ErrorCode.UNKNOWN_MEMBER_ID
    assert group.state is GroupState.STABLE and group.generation_id == 1


def test_static_member_changing_protocols_rebalances() -> None:
    group, answers = Group("g", initial_rebalance_delay_ms=50), Answers()
    stable_pair(group, answers)
    static_join(group, answers, "b2", "ib", now=100, protocols=[("roundrobin", b"rr")])
    assert group.state is GroupState.PREPARING_REBALANCE
    assert "b2" not in answers.joins  # it waits for the new generation


def test_static_leader_restart_gets_members_and_skips_assignment_from_join_v9() -> None:
    for skip in (True, False):
        group, answers = Group("g", initial_rebalance_delay_ms=50), Answers()
        a, b = stable_pair(group, answers)
        static_join(group, answers, "a2", "ia", now=100, skip=skip)
        result = answers.joins["a2"][-1]
        assert result.error_code == ErrorCode.NONE and group.state is GroupState.STABLE
        assert group.leader_id == result.member_id
        if skip:
            assert result.skip_assignment and result.leader == result.member_id
            assert {m for m, _, _ in result.members} == {result.member_id, b}
        else:
            # An older client must not believe it leads: it would compute an assignment nobody gets.
            assert not result.skip_assignment and result.leader == a and result.members == ()


def test_static_member_that_does_not_rejoin_stays_until_its_session_ends() -> None:
    group, answers = Group("g", initial_rebalance_delay_ms=50), Answers()
    a, b = stable_pair(group, answers, session_ms=60_000)  # sessions longer than the rebalance timeout
    group.prepare_rebalance(5_000, "test")
    static_join(group, answers, "a", "ia", a, now=5_000, session_ms=60_000)
    group.tick(5_000 + 30_000)  # the rebalance deadline passes without b
    assert group.generation_id == 2 and b in group.members  # static: kept, unlike a dynamic member
    assert {m for m, _, _ in answers.joins["a"][-1].members} == {a, b}
    # Completing the join renewed every session (as Kafka does); b's ends 60 s later, a heartbeats.
    assert group.heartbeat(a, 2, 90_000, "ia") == ErrorCode.NONE
    group.tick(94_999)
    assert b in group.members
    group.tick(95_001)
    assert b not in group.members and "ib" not in group.static_members
    assert group.state is GroupState.PREPARING_REBALANCE


def test_leave_group_by_instance_id_removes_the_static_member() -> None:
    group, answers = Group("g", initial_rebalance_delay_ms=50), Answers()
    _a, b = stable_pair(group, answers)
    assert group.leave("", 100, "nobody") == ErrorCode.UNKNOWN_MEMBER_ID
    assert group.leave("", 100, "ib") == ErrorCode.NONE
    assert b not in group.members and "ib" not in group.static_members
    assert group.state is GroupState.PREPARING_REBALANCE


def test_restored_group_keeps_static_members_and_their_assignments() -> None:
    group, answers = Group("g", initial_rebalance_delay_ms=50), Answers()
    a, b = stable_pair(group, answers)
    value = decode_group_value(encode_group_value(group.to_value()))

    restored = Group("g", initial_rebalance_delay_ms=0)
    restored.restore(value, now_ms=1_000)
    assert restored.state is GroupState.STABLE and restored.generation_id == 1 and restored.leader_id == a
    assert restored.static_members == {"ia": a, "ib": b}
    assert restored.heartbeat(a, 1, 1_100, "ia") == ErrorCode.NONE

    again = Answers()
    static_join(restored, again, "b2", "ib", now=1_200)
    new_b = again.joins["b2"][-1].member_id
    assert again.joins["b2"][-1].error_code == ErrorCode.NONE and restored.generation_id == 1
    sync(restored, again, "b2", new_b, 1, now=1_300)
    assert again.syncs["b2"][-1].assignment == b"p1"
