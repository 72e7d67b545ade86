"""The server-side assignors of consumer groups (KIP-848): pure functions from the members'
subscriptions and current target assignment to the next target assignment.

``uniform`` (Kafka's UniformAssignor) spreads the subscribed partitions so member counts differ by at
most one where the subscriptions allow it, and is sticky: a partition stays with its current owner
unless moving it is needed for balance. Kafka uses two algorithms (one when every member subscribes to
the same topics, one otherwise); here a single one serves both: keep what can be kept, hand out the
rest to the least-loaded subscriber, then move partitions from the most- to the least-loaded
subscriber until no move narrows the gap. ``range`` (Kafka's RangeAssignor) gives each subscriber of
a topic a contiguous range of its partitions, members in member-id order, the first
``partitions % members`` one partition more -- topics with the same subscribers and partition count
are therefore co-partitioned.

Topics are identified by their topic id (``bytes``); names only order them, so results do not depend
on dict order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

TopicId = bytes
#: topic id -> partitions
Assignment = dict[TopicId, frozenset[int]]

UNIFORM = "uniform"
RANGE = "range"
#: Kafka's class names, accepted in group.consumer.assignors and from clients, for the short names.
CLASS_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": UNIFORM,
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": RANGE,
}


def assignor_name(name: str) -> str | None:
    """The short name of a known assignor (``uniform`` or ``range``); None when unknown."""
    short = CLASS_NAMES.get(name, name)
    return short if short in (UNIFORM, RANGE) else None


@dataclass(frozen=True)
class TopicInfo:
    name: str
    num_partitions: int


@dataclass(frozen=True)
class MemberSpec:
    #: The topic ids the member subscribes to (resolved from names and regex; existing topics only).
    subscribed: frozenset[TopicId]
    #: The member's current target assignment (stickiness starts from it).
    current: Mapping[TopicId, frozenset[int]] = field(default_factory=dict)


def assign(assignor: str, members: Mapping[str, MemberSpec], topics: Mapping[TopicId, TopicInfo]) -> dict[str, Assignment]:
    """The target assignment of every member (members with nothing get an empty one)."""
    if assignor == RANGE:
        return range_assign(members, topics)
    return uniform_assign(members, topics)


def _normalise(counts: dict[str, list[tuple[TopicId, int]]]) -> dict[str, Assignment]:
    out: dict[str, Assignment] = {}
    for member_id, owned in counts.items():
        by_topic: dict[TopicId, set[int]] = {}
        for tid, p in owned:
            by_topic.setdefault(tid, set()).add(p)
        out[member_id] = {tid: frozenset(ps) for tid, ps in by_topic.items()}
    return out


def range_assign(members: Mapping[str, MemberSpec], topics: Mapping[TopicId, TopicInfo]) -> dict[str, Assignment]:
    owned: dict[str, list[tuple[TopicId, int]]] = {m: [] for m in members}
    for tid in sorted(topics, key=lambda t: topics[t].name):
        subscribers = sorted(m for m, spec in members.items() if tid in spec.subscribed)
        if not subscribers:
            continue
        per, extra = divmod(topics[tid].num_partitions, len(subscribers))
        start = 0
        for i, member_id in enumerate(subscribers):
            count = per + (1 if i < extra else 0)
            owned[member_id].extend((tid, p) for p in range(start, start + count))
            start += count
    return _normalise(owned)


def uniform_assign(members: Mapping[str, MemberSpec], topics: Mapping[TopicId, TopicInfo]) -> dict[str, Assignment]:
    def order(tp: tuple[TopicId, int]) -> tuple[str, int]:
        return topics[tp[0]].name, tp[1]

    subscribers: dict[TopicId, list[str]] = {
        tid: sorted(m for m, spec in members.items() if tid in spec.subscribed) for tid in topics
    }
    owner: dict[tuple[TopicId, int], str] = {}
    # 1. Stickiness: every partition stays with its current owner while that owner still subscribes.
    for member_id in sorted(members):
        spec = members[member_id]
        for tid, partitions in spec.current.items():
            info = topics.get(tid)
            if info is None or tid not in spec.subscribed:
                continue
            for p in partitions:
                if p < info.num_partitions and (tid, p) not in owner:
                    owner[(tid, p)] = member_id
    load: dict[str, int] = {m: 0 for m in members}
    for m in owner.values():
        load[m] += 1
    # 2. Unowned partitions go to the least-loaded subscriber; topics with fewer subscribers first,
    #    so the members that alone can take them are not filled up by others first.
    unowned = [(tid, p) for tid in topics for p in range(topics[tid].num_partitions)
               if subscribers[tid] and (tid, p) not in owner]
    unowned.sort(key=lambda tp: (len(subscribers[tp[0]]), *order(tp)))
    for tp in unowned:
        target = min(subscribers[tp[0]], key=lambda m: (load[m], m))
        owner[tp] = target
        load[target] += 1
    # 3. Balance: move a partition from a member to a subscriber holding at least two fewer. Each move
    #    lowers the sum of squared loads, so the loop ends.
    moved = True
    while moved:
        moved = False
        for tp in sorted(owner, key=lambda tp: (-load[owner[tp]], *order(tp))):
            current = owner[tp]
            target = min(subscribers[tp[0]], key=lambda m: (load[m], m))
            if load[current] - load[target] > 1:
                owner[tp] = target
                load[current] -= 1
                load[target] += 1
                moved = True
    owned: dict[str, list[tuple[TopicId, int]]] = {m: [] for m in members}
    for tp, m in owner.items():
        owned[m].append(tp)
    return _normalise(owned)
