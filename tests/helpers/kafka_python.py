"""kafka-python group consumers that hold their topics' metadata before they first join.

kafka-python (3.0.12, the newest) subscribes in its constructor but fetches the topics' metadata
asynchronously, so the first JoinGroup can come back before it has it. A leader then assigns with
"No partition metadata" (nothing for anyone) and rejoins later only because its metadata snapshot
changed, with ``rejoin_needed`` still false. In that rejoin its own assignment makes the snapshots
equal again before SyncGroup is answered; a ``poll(timeout_ms=...)`` that runs out in that window
returns, and the next poll sees no rejoin needed, never awaits the pending SyncGroup, never turns
its heartbeat back on and keeps its old assignment: the broker expires it a session timeout later
and the test waits in vain. On a loaded machine that window (the JoinGroup answer to the SyncGroup
answer) is long enough to hit with a 200 ms poll. Fetching the metadata before the first poll
takes the snapshot path away: every rejoin then comes from the coordinator (REBALANCE_IN_PROGRESS,
UNKNOWN_MEMBER_ID...), which keeps ``rejoin_needed`` set until the join is complete.
"""

from __future__ import annotations

from typing import Any

from kafka import KafkaConsumer


def group_consumer(*topics: str, **config: Any) -> KafkaConsumer:
    """A ``KafkaConsumer`` subscribed to ``topics`` that knows their partitions before it joins."""
    consumer = KafkaConsumer(*topics, **config)
    try:
        for topic in topics:
            # Blocks on a metadata fetch when the topic is not known yet; the consumer's coordinator
            # hears of that fetch (a metadata listener, on the client's I/O thread) before it can
            # handle any JoinGroup answer.
            if not consumer.partitions_for_topic(topic):
                raise AssertionError(f"kafka-python sees no partitions of {topic}")
    except BaseException:
        consumer.close()
        raise
    return consumer
