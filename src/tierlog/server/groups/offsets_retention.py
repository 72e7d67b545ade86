"""Expiry of committed offsets (Kafka 2.1+, KIP-211, ``offsets.retention.minutes``): the offsets of
a group expire that long after the group became empty; a group that never had members (offsets
committed by a standalone consumer or a tool) expires each offset that long after its commit.
Expired offsets get tombstones in ``__consumer_offsets``, which the log cleaner then removes, so the
topic's size and the broker's start time follow the live groups, not the history of commits."""

from __future__ import annotations

from collections.abc import Mapping

from tierlog.ids import TopicPartition
from tierlog.server.groups.records import OffsetValue


def expired_offsets(offsets: Mapping[TopicPartition, OffsetValue], *, empty_since_ms: int | None, now_ms: int,
                    retention_ms: int) -> list[TopicPartition]:
    """The offsets to expire now. ``empty_since_ms``: when the group became empty, None when it never
    had members (each offset then ages from its own commit)."""
    if empty_since_ms is not None:
        return list(offsets) if now_ms - empty_since_ms >= retention_ms else []
    return [tp for tp, v in offsets.items() if v.commit_timestamp_ms >= 0 and now_ms - v.commit_timestamp_ms >= retention_ms]


class EmptySince:
    """When each group was first seen empty, by the periodic check (so within one check interval)."""

    def __init__(self) -> None:
        self._since: dict[str, int] = {}
        self._had_members: set[str] = set()

    def observe(self, group_id: str, *, empty: bool, had_members: bool, now_ms: int) -> int | None:
        """None while the group has members or never had any; else when it became empty."""
        if not empty:
            self._had_members.add(group_id)
            self._since.pop(group_id, None)
            return None
        if group_id not in self._since:
            if group_id not in self._had_members and not had_members:
                return None
            self._since[group_id] = now_ms
        return self._since[group_id]

    def forget(self, group_id: str) -> None:
        self._since.pop(group_id, None)
        self._had_members.discard(group_id)
