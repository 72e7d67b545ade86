"""Expiry of committed offsets (``offsets.retention.minutes``), by Kafka's rules (GroupMetadata's
removeExpiredOffsets, the new coordinator's OffsetExpirationCondition):

- a classic group of some protocol type that is Empty: every offset expires that long after the
  group became empty (its current-state timestamp, persisted in the group's metadata record so it
  survives a restart); a group record without that timestamp (an old schema) ages each offset from
  its commit;
- a classic ``consumer`` group that is Stable with readable subscriptions, and every KIP-848
  consumer group: offsets of topics no member subscribes to expire that long after their commit;
  offsets of subscribed topics never expire;
- offsets without a group protocol (a standalone consumer or a tool): each expires that long after
  its commit;
- any other group (rebalancing, or subscriptions that cannot be read): nothing expires.

An offset with a transactional commit still pending does not expire. Expired offsets get tombstones
in ``__consumer_offsets``, which the log cleaner then removes, so the topic's size and the broker's
start time follow the live groups, not the history of commits."""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass

from tierlog.ids import TopicPartition
from tierlog.server.groups.offset_delete import CONSUMER_PROTOCOL_TYPE
from tierlog.server.groups.records import OffsetValue


@dataclass(frozen=True, slots=True)
class ExpiryCondition:
    """Kafka's OffsetExpirationCondition: each offset ages from ``empty_since_ms`` when set (the group
    became empty then), else from its own commit; offsets of ``subscribed`` topics never expire."""

    empty_since_ms: int | None = None
    subscribed: frozenset[str] = frozenset()


def classic_condition(*, protocol_type: str | None, empty: bool, stable: bool, empty_since_ms: int | None,
                      subscribed: Set[str] | None) -> ExpiryCondition | None:
    """The condition of a classic group (None: none of its offsets expire now). ``subscribed``: the
    topics its members subscribe to, None when they cannot be read."""
    if not protocol_type:
        return ExpiryCondition()
    if empty:
        return ExpiryCondition(empty_since_ms=empty_since_ms)
    if protocol_type == CONSUMER_PROTOCOL_TYPE and stable and subscribed is not None:
        return ExpiryCondition(subscribed=frozenset(subscribed))
    return None


def consumer_group_condition(subscribed: Set[str]) -> ExpiryCondition:
    """The condition of a KIP-848 consumer group, whatever its state (Kafka's ConsumerGroup)."""
    return ExpiryCondition(subscribed=frozenset(subscribed))


def expired_offsets(offsets: Mapping[TopicPartition, OffsetValue], condition: ExpiryCondition | None, *,
                    now_ms: int, retention_ms: int, pending: Set[TopicPartition] = frozenset()) -> list[TopicPartition]:
    """The offsets to expire now under ``condition``; ``pending``: partitions with a transactional
    offset commit not yet completed."""
    if condition is None:
        return []
    out: list[TopicPartition] = []
    for tp, value in offsets.items():
        if tp[0] in condition.subscribed or tp in pending:
            continue
        base_ms = condition.empty_since_ms if condition.empty_since_ms is not None else value.commit_timestamp_ms
        if base_ms >= 0 and now_ms - base_ms >= retention_ms:
            out.append(tp)
    return out
