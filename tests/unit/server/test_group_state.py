"""The classic group state machine, driven with made-up clocks (no event loop, no sockets)."""

from __future__ import annotations

from tierlog.errors import ErrorCode
from tierlog.server.groups.group import Group, GroupState, JoinResult, SyncResult

PROTOCOLS = [("range", b"range-meta"), ("roundrobin", b"rr-meta")]


class Answers:
    """Collects what the group answers each request with."""

    def __init__(self) -> None:
        self.joins: dict[str, list[JoinResult]] = {}
        self.syncs: dict[str, list[SyncResult]] = {}

    def join_cb(self, key: str):  # type: ignore[no-untyped-def]
        return lambda r: self.joins.setdefault(key, []).append(r)

    def sync_cb(self, key: str):  # type: ignore[no-untyped-def]
        return lambda r: self.syncs.setdefault(key, []).append(r)


def join(group: Group, answers: Answers, key: str, member_id: str = "", *, now: int = 0,
         protocols: list[tuple[str, bytes]] = PROTOCOLS, session_ms: int = 10_000, rebalance_ms: int = 30_000,
         require_known: bool = True) -> None:
    group.join(member_id=member_id, group_instance_id=None, client_id=key, client_host="/127.0.0.1",
               session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms, protocol_type="consumer",
               protocols=protocols, require_known_member_id=require_known, now_ms=now, callback=answers.join_cb(key))


def sync(group: Group, answers: Answers, key: str, member_id: str, generation: int, *, now: int = 0,
         assignments: dict[str, bytes] | None = None) -> None:
    group.sync(member_id=member_id, generation_id=generation, protocol_type="consumer", protocol_name=None,
               assignments=assignments or {}, now_ms=now, callback=answers.sync_cb(key))


def new_member(group: Group, answers: Answers, key: str, now: int = 0) -> str:
    join(group, answers, key, now=now)
    first = answers.joins[key][-1]
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED and first.member_id.startswith(key)
    join(group, answers, key, first.member_id, now=now)
    return first.member_id


def test_single_member_joins_syncs_and_heartbeats() -> None:
    group, answers = Group("g", initial_rebalance_delay_ms=0), Answers()
    a = new_member(group, answers, "a")
    result = answers.joins["a"][-1]
    assert (result.error_code, result.generation_id, result.leader, result.protocol_name) == (ErrorCode.NONE, 1, a, "range")
    assert result.members == ((a, None, b"range-meta"),)
    assert group.state is GroupState.COMPLETING_REBALANCE

    sync(group, answers, "a", a, 1, assignments={a: b"all"})
    assert answers.syncs["a"][-1] == SyncResult(ErrorCode.NONE, b"all", "consumer", "range")
    assert group.state is GroupState.STABLE
    assert group.heartbeat(a, 1, 100) == ErrorCode.NONE
    assert group.heartbeat(a, 0, 100) == ErrorCode.ILLEGAL_GENERATION
    assert group.heartbeat("stranger", 1, 100) == ErrorCode.UNKNOWN_MEMBER_ID


def test_second_member_triggers_a_rebalance_and_both_get_assignments() -> None:
    group, answers = Group("g", initial_rebalance_delay_ms=0), Answers()
    a = new_member(group, answers, "a")
    sync(group, answers, "a", a, 1, assignments={a: b"p0p1"})

    b = new_member(group, answers, "b", now=10)
    assert group.state is GroupState.PREPARING_REBALANCE
    assert "b" not in answers.syncs and len(answers.joins["b"]) == 1  # b waits for a to rejoin
    assert group.heartbeat(a, 1, 20) == ErrorCode.REBALANCE_IN_PROGRESS

    join(group, answers, "a", a, now=30)
    ja, jb = answers.joins["a"][-1], answers.joins["b"][-1]
    assert ja.generation_id == jb.generation_id == 2
    assert ja.leader == jb.leader == a
    assert {m for m, _, _ in ja.members} == {a, b} and jb.members == ()

    sync(group, answers, "b", b, 2, now=40)  # the follower waits for the leader's assignments
    assert "b" not in answers.syncs
    sync(group, answers, "a", a, 2, now=41, assignments={a: b"p0", b: b"p1"})
    assert answers.syncs["a"][-1].assignment == b"p0"
    assert answers.syncs["b"][-1].assignment == b"p1"
    assert group.state is GroupState.STABLE


def test_leave_rebalances_the_rest_and_the_last_leave_empties_the_group() -> None:
    group, answers = Group("g", initial_rebalance_delay_ms=0), Answers()
    a = new_member(group, answers, "a")
    b = new_member(group, answers, "b")
    join(group, answers, "a", a)
    sync(group, answers, "a", a, 2, assignments={a: b"x", b: b"y"})
    assert group.leave(b, 50) == ErrorCode.NONE
    assert group.state is GroupState.PREPARING_REBALANCE
    join(group, answers, "a", a, now=60)
    assert answers.joins["a"][-1].generation_id == 3
    assert group.leave(a, 70) == ErrorCode.NONE
    assert group.state is GroupState.EMPTY and not group.members
    assert group.leave(a, 80) == ErrorCode.UNKNOWN_MEMBER_ID


def test_session_timeout_expires_a_silent_member() -> None:
    group, answers = Group("g", initial_rebalance_delay_ms=0), Answers()
    a = new_member(group, answers, "a")
    b = new_member(group, answers, "b")
    join(group, answers, "a", a)
    sync(group, answers, "a", a, 2, assignments={a: b"x", b: b"y"})
    sync(group, answers, "b", b, 2)
    group.tick(5_000)
    assert set(group.members) == {a, b}
    assert group.heartbeat(a, 2, 9_000) == ErrorCode.NONE
    group.tick(10_001)  # b has been silent since 0
    assert set(group.members) == {a}
    assert group.state is GroupState.PREPARING_REBALANCE


def test_rebalance_deadline_drops_members_that_do_not_rejoin() -> None:
    group, answers = Group("g", initial_rebalance_delay_ms=0), Answers()
    a = new_member(group, answers, "a", now=0)
    sync(group, answers, "a", a, 1, assignments={a: b"x"})
    b = new_member(group, answers, "b", now=100)  # a never rejoins, though it heartbeats
    for t in range(1_000, 30_000, 1_000):
        group.heartbeat(a, 1, t)
        group.tick(t)
    assert group.state is GroupState.PREPARING_REBALANCE
    group.tick(30_100)  # the rebalance timeout (30 s) has passed
    assert set(group.members) == {b}
    assert answers.joins["b"][-1].generation_id == 2


def test_initial_delay_collects_members_that_start_together() -> None:
    group, answers = Group("g", initial_rebalance_delay_ms=3_000), Answers()
    join(group, answers, "a", require_known=False, now=0)
    join(group, answers, "b", require_known=False, now=1_000)
    assert "a" not in answers.joins or not answers.joins["a"]
    group.tick(3_500)  # the delay was extended to 4000 by b
    assert group.state is GroupState.PREPARING_REBALANCE
    group.tick(4_000)
    assert answers.joins["a"][-1].generation_id == answers.joins["b"][-1].generation_id == 1
    assert len(group.members) == 2


def test_protocol_checks() -> None:
    group, answers = Group("g", initial_rebalance_delay_ms=0), Answers()
    new_member(group, answers, "a")
    join(group, answers, "c", protocols=[("sticky", b"")])
    assert answers.joins["c"][-1].error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    b = new_member(group, answers, "b")
    assert b in group.members
    join(group, answers, "x", "made-up-id")
    assert answers.joins["x"][-1].error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_protocol_vote_prefers_what_members_rank_first() -> None:
    group, answers = Group("g", initial_rebalance_delay_ms=0), Answers()
    join(group, answers, "a", require_known=False, protocols=[("roundrobin", b""), ("range", b"")])
    a = answers.joins["a"][-1].member_id
    assert answers.joins["a"][-1].protocol_name == "roundrobin"
    join(group, answers, "b", require_known=False, protocols=[("range", b""), ("roundrobin", b"")])
    join(group, answers, "c", require_known=False, protocols=[("range", b"")])
    join(group, answers, "a", a, protocols=[("roundrobin", b""), ("range", b"")])
    # Only "range" is supported by all three members.
    assert answers.joins["a"][-1].protocol_name == "range"


def test_a_second_join_releases_the_first_without_dropping_the_member() -> None:
    group, answers = Group("g", initial_rebalance_delay_ms=0), Answers()
    a = new_member(group, answers, "a")
    sync(group, answers, "a", a, 1, assignments={a: b"x"})
    b = new_member(group, answers, "b")  # waits for a to rejoin
    assert len(answers.joins["b"]) == 1
    join(group, answers, "b-retry", b, now=5)  # b gave up and retried on a new connection
    assert answers.joins["b"][-1].error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert b in group.members
    join(group, answers, "a", a, now=6)
    assert answers.joins["b-retry"][-1].generation_id == answers.joins["a"][-1].generation_id == 2
