"""offsets.retention.minutes with Kafka 2.1+ semantics (KIP-211): a group's offsets expire that long
after the group became empty; offsets committed without a membership expire that long after their
own commit; a group with members keeps its offsets however old they are."""

from __future__ import annotations

from tierlog.server.groups.offsets_retention import EmptySince, expired_offsets
from tierlog.server.groups.records import OffsetValue

RET = 60_000


def test_offsets_of_a_group_expire_retention_after_it_became_empty() -> None:
    offsets = {("t", 0): OffsetValue(5, commit_timestamp_ms=0), ("t", 1): OffsetValue(7, commit_timestamp_ms=0)}
    seen = EmptySince()
    assert seen.observe("g", empty=False, had_members=True, now_ms=1_000) is None  # members: nothing expires
    since = seen.observe("g", empty=True, had_members=True, now_ms=500_000)
    assert since == 500_000
    assert expired_offsets(offsets, empty_since_ms=since, now_ms=500_000 + RET - 1, retention_ms=RET) == []
    assert sorted(expired_offsets(offsets, empty_since_ms=since, now_ms=500_000 + RET, retention_ms=RET)) == [
        ("t", 0), ("t", 1)]
    # Observed again later, the group keeps the time it became empty.
    assert seen.observe("g", empty=True, had_members=True, now_ms=900_000) == 500_000
    assert seen.observe("g", empty=False, had_members=True, now_ms=901_000) is None  # a member rejoined


def test_offsets_without_membership_age_from_their_commit() -> None:
    seen = EmptySince()
    assert seen.observe("tool", empty=True, had_members=False, now_ms=10) is None
    offsets = {("t", 0): OffsetValue(1, commit_timestamp_ms=1_000), ("t", 1): OffsetValue(2, commit_timestamp_ms=50_000)}
    assert expired_offsets(offsets, empty_since_ms=None, now_ms=1_000 + RET, retention_ms=RET) == [("t", 0)]
