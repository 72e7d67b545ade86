"""offsets.retention.minutes by Kafka's rules (GroupMetadata.removeExpiredOffsets and the new
coordinator's OffsetExpirationCondition): an Empty group's offsets expire that long after it became
empty; a standalone consumer's offsets that long after their commit; a Stable consumer group (classic
or KIP-848) keeps the offsets of topics it subscribes to and expires the others by commit time; a
rebalancing group keeps everything; a pending transactional offset does not expire."""

from __future__ import annotations

from tierlog.server.groups.offsets_retention import (
    ExpiryCondition,
    classic_condition,
    consumer_group_condition,
    expired_offsets,
)
from tierlog.server.groups.records import OffsetValue

RET = 60_000


def test_offsets_of_an_empty_group_expire_retention_after_it_became_empty() -> None:
    offsets = {("t", 0): OffsetValue(5, commit_timestamp_ms=0), ("t", 1): OffsetValue(7, commit_timestamp_ms=0)}
    cond = classic_condition(protocol_type="consumer", empty=True, stable=False, empty_since_ms=500_000,
                             subscribed=set())
    assert expired_offsets(offsets, cond, now_ms=500_000 + RET - 1, retention_ms=RET) == []
    assert sorted(expired_offsets(offsets, cond, now_ms=500_000 + RET, retention_ms=RET)) == [("t", 0), ("t", 1)]


def test_an_empty_group_without_a_state_timestamp_ages_each_offset_from_its_commit() -> None:
    offsets = {("t", 0): OffsetValue(1, commit_timestamp_ms=1_000), ("t", 1): OffsetValue(2, commit_timestamp_ms=50_000)}
    cond = classic_condition(protocol_type="consumer", empty=True, stable=False, empty_since_ms=None, subscribed=None)
    assert expired_offsets(offsets, cond, now_ms=1_000 + RET, retention_ms=RET) == [("t", 0)]


def test_offsets_without_a_group_protocol_age_from_their_commit() -> None:
    offsets = {("t", 0): OffsetValue(1, commit_timestamp_ms=1_000), ("t", 1): OffsetValue(2, commit_timestamp_ms=50_000)}
    cond = classic_condition(protocol_type=None, empty=True, stable=False, empty_since_ms=None, subscribed=None)
    assert cond == ExpiryCondition()
    assert expired_offsets(offsets, cond, now_ms=1_000 + RET, retention_ms=RET) == [("t", 0)]


def test_a_stable_consumer_group_expires_only_unsubscribed_topics_by_commit_time() -> None:
    offsets = {("sub", 0): OffsetValue(1, commit_timestamp_ms=0), ("old", 0): OffsetValue(2, commit_timestamp_ms=0),
               ("old", 1): OffsetValue(3, commit_timestamp_ms=RET)}
    for cond in (classic_condition(protocol_type="consumer", empty=False, stable=True, empty_since_ms=None,
                                   subscribed={"sub"}),
                 consumer_group_condition({"sub"})):
        assert expired_offsets(offsets, cond, now_ms=RET, retention_ms=RET) == [("old", 0)]
        assert expired_offsets(offsets, cond, now_ms=10 * RET, retention_ms=RET) == [("old", 0), ("old", 1)]


def test_a_rebalancing_or_unreadable_group_keeps_its_offsets() -> None:
    assert classic_condition(protocol_type="consumer", empty=False, stable=False, empty_since_ms=None,
                             subscribed={"a"}) is None
    assert classic_condition(protocol_type="consumer", empty=False, stable=True, empty_since_ms=None,
                             subscribed=None) is None
    assert classic_condition(protocol_type="connect", empty=False, stable=True, empty_since_ms=None,
                             subscribed=set()) is None
    offsets = {("t", 0): OffsetValue(1, commit_timestamp_ms=0)}
    assert expired_offsets(offsets, None, now_ms=10 * RET, retention_ms=RET) == []


def test_an_empty_kip848_group_expires_everything_by_commit_time() -> None:
    offsets = {("t", 0): OffsetValue(1, commit_timestamp_ms=0), ("t", 1): OffsetValue(1, commit_timestamp_ms=RET)}
    assert expired_offsets(offsets, consumer_group_condition(set()), now_ms=RET, retention_ms=RET) == [("t", 0)]


def test_a_pending_transactional_offset_does_not_expire() -> None:
    offsets = {("t", 0): OffsetValue(1, commit_timestamp_ms=0), ("t", 1): OffsetValue(1, commit_timestamp_ms=0)}
    assert expired_offsets(offsets, ExpiryCondition(), now_ms=RET, retention_ms=RET, pending={("t", 0)}) == [("t", 1)]
