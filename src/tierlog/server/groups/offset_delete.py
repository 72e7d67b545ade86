"""Kafka's rules for OffsetDelete (API 47): which committed offsets of a group may be deleted.

An offset may go only while the group does not consume its topic: a partition of a topic the group
subscribes to gets GROUP_SUBSCRIBED_TO_TOPIC. A classic group whose members do not use the consumer
protocol (so their subscriptions cannot be read) must be empty (NON_EMPTY_GROUP otherwise); a group
that does not exist gets GROUP_ID_NOT_FOUND.
"""

from __future__ import annotations

import struct

from tierlog.server.groups.group import Group, GroupState

CONSUMER_PROTOCOL_TYPE = "consumer"
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def subscription_topics(metadata: bytes) -> set[str] | None:
    """The topics of a ConsumerProtocolSubscription (any version: the topic list comes first after
    the version); None when it cannot be read."""
    try:
        pos = 2
        (count,) = _I32.unpack_from(metadata, pos)
        pos += 4
        topics = set()
        for _ in range(count):
            (n,) = _I16.unpack_from(metadata, pos)
            pos += 2
            if n < 0 or pos + n > len(metadata):
                return None
            topics.add(metadata[pos:pos + n].decode("utf-8"))
            pos += n
        return topics
    except (struct.error, UnicodeDecodeError):
        return None


def classic_subscribed_topics(group: Group) -> set[str] | None:
    """The topics the members of a classic group subscribe to; None when the group does not use the
    consumer protocol or a subscription cannot be read."""
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return None
    out: set[str] = set()
    for member in group.members.values():
        topics = subscription_topics(member.metadata_for(group.protocol_name) or
                                     (member.protocols[0][1] if member.protocols else b""))
        if topics is None:
            return None
        out |= topics
    return out


def classic_group_error(group: Group) -> int:
    """The group-level error of OffsetDelete on a classic group (0 when it may proceed)."""
    if group.state is GroupState.DEAD:
        return 69  # GROUP_ID_NOT_FOUND
    if group.members and classic_subscribed_topics(group) is None:
        return 68  # NON_EMPTY_GROUP
    return 0
