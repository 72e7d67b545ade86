"""The server-side assignors of KIP-848 consumer groups: pure functions, checked for coverage,
balance, stickiness and range's contiguous co-partitioned ranges."""

from __future__ import annotations

import random

import pytest

from tierlog.server.groups.assignors import (
    MemberSpec,
    TopicInfo,
    assign,
    assignor_name,
    range_assign,
    uniform_assign,
)

T1, T2, T3 = b"\x01" * 16, b"\x02" * 16, b"\x03" * 16
TOPICS = {T1: TopicInfo("a", 6), T2: TopicInfo("b", 3), T3: TopicInfo("c", 4)}


def _owned(result: dict[str, dict[bytes, frozenset[int]]]) -> list[tuple[bytes, int]]:
    return [(t, p) for a in result.values() for t, ps in a.items() for p in ps]


def _sizes(result: dict[str, dict[bytes, frozenset[int]]]) -> dict[str, int]:
    return {m: sum(len(ps) for ps in a.values()) for m, a in result.items()}


def test_names() -> None:
    assert assignor_name("uniform") == "uniform"
    assert assignor_name("org.apache.kafka.coordinator.group.assignor.RangeAssignor") == "range"
    assert assignor_name("sticky") is None


@pytest.mark.parametrize("members", [1, 2, 3, 5, 14])
def test_uniform_homogeneous_covers_everything_once_and_balances(members: int) -> None:
    specs = {f"m{i}": MemberSpec(frozenset(TOPICS)) for i in range(members)}
    result = uniform_assign(specs, TOPICS)
    owned = _owned(result)
    assert sorted(owned) == sorted((t, p) for t, info in TOPICS.items() for p in range(info.num_partitions))
    sizes = _sizes(result).values()
    assert max(sizes) - min(sizes) <= 1


def test_uniform_is_sticky_when_a_member_joins_and_leaves() -> None:
    two = uniform_assign({"a": MemberSpec(frozenset(TOPICS)), "b": MemberSpec(frozenset(TOPICS))}, TOPICS)
    three = uniform_assign({"a": MemberSpec(frozenset(TOPICS), two["a"]), "b": MemberSpec(frozenset(TOPICS), two["b"]),
                            "c": MemberSpec(frozenset(TOPICS))}, TOPICS)
    assert sorted(_sizes(three).values()) == [4, 4, 5]
    moved = sum(1 for m in ("a", "b") for tp in _owned({m: two[m]}) if tp not in _owned({m: three[m]}))
    assert moved == len(_owned({"c": three["c"]}))  # only what the newcomer needed moved
    back = uniform_assign({"a": MemberSpec(frozenset(TOPICS), three["a"]), "c": MemberSpec(frozenset(TOPICS), three["c"])},
                          TOPICS)
    for m in ("a", "c"):
        assert set(_owned({m: three[m]})) <= set(_owned({m: back[m]}))  # survivors keep what they had


def test_uniform_heterogeneous_subscriptions_respected() -> None:
    specs = {"a": MemberSpec(frozenset({T1})), "b": MemberSpec(frozenset({T1, T2})), "c": MemberSpec(frozenset({T3}))}
    result = uniform_assign(specs, TOPICS)
    assert set(result["a"]) <= {T1} and set(result["b"]) <= {T1, T2} and set(result["c"]) == {T3}
    assert sorted(_owned(result)) == sorted((t, p) for t, info in TOPICS.items() for p in range(info.num_partitions))
    sizes = _sizes(result)
    assert sizes["c"] == 4 and abs(sizes["a"] - sizes["b"]) <= 1 and sizes["a"] + sizes["b"] == 9


def test_uniform_drops_partitions_of_unsubscribed_or_shrunk_topics() -> None:
    specs = {"a": MemberSpec(frozenset({T1}), {T1: frozenset({0, 1, 9}), T2: frozenset({0})})}
    assert uniform_assign(specs, TOPICS) == {"a": {T1: frozenset(range(6))}}


def test_uniform_random_cases_stay_valid() -> None:
    rng = random.Random(848)
    for _ in range(50):
        members = {f"m{i}": MemberSpec(frozenset(rng.sample(list(TOPICS), rng.randint(1, 3))))
                   for i in range(rng.randint(1, 6))}
        result = uniform_assign(members, TOPICS)
        owned = _owned(result)
        assert len(owned) == len(set(owned))
        wanted = {(t, p) for t, info in TOPICS.items() for p in range(info.num_partitions)
                  if any(t in s.subscribed for s in members.values())}
        assert set(owned) == wanted
        for m, a in result.items():
            assert set(a) <= members[m].subscribed


def test_range_gives_contiguous_co_partitioned_ranges() -> None:
    topics = {T1: TopicInfo("a", 5), T2: TopicInfo("b", 5)}
    specs = {"m2": MemberSpec(frozenset(topics)), "m1": MemberSpec(frozenset(topics))}
    result = range_assign(specs, topics)
    assert result == {"m1": {T1: frozenset({0, 1, 2}), T2: frozenset({0, 1, 2})},
                      "m2": {T1: frozenset({3, 4}), T2: frozenset({3, 4})}}
    assert assign("range", specs, topics) == result


def test_range_only_subscribers_of_each_topic() -> None:
    specs = {"a": MemberSpec(frozenset({T1})), "b": MemberSpec(frozenset({T1, T2}))}
    result = range_assign(specs, TOPICS)
    assert result["a"] == {T1: frozenset({0, 1, 2})}
    assert result["b"] == {T1: frozenset({3, 4, 5}), T2: frozenset({0, 1, 2})}
