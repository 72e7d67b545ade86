"""Helpers shared by the metadata tests: a model that turns random operations into valid records."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from tierlog.metadata.records import (
    BrokerEndpoint,
    ConfigRecord,
    ConfigResourceType,
    FeatureLevelRecord,
    MetadataRecord,
    NoOpRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
)


def topic_id(n: int) -> bytes:
    return hashlib.md5(str(n).encode()).digest()


@dataclass
class RecordModel:
    """Tracks enough state to emit only records a controller could have written."""

    next_id: int = 0
    next_pid: int = 0

    def __post_init__(self) -> None:
        self.topics: dict[str, tuple[bytes, int]] = {}

    def apply(self, op: tuple[int, int, int]) -> list[MetadataRecord]:
        kind, a, b = op
        name = f"t{a % 5}"
        if kind == 0:
            if name in self.topics:
                return []
            tid = topic_id(self.next_id)
            self.next_id += 1
            self.topics[name] = (tid, b % 3 + 1)
            return [TopicRecord(name, tid)] + [PartitionRecord(p, tid, (1,), (1,), 1, 0, 0) for p in range(b % 3 + 1)]
        if kind == 1:
            if name not in self.topics:
                return []
            tid, _ = self.topics.pop(name)
            return [RemoveTopicRecord(tid)]
        if kind == 2:
            if name not in self.topics:
                return []
            tid, count = self.topics[name]
            self.topics[name] = (tid, count + 1)
            return [PartitionRecord(count, tid, (1,), (1,), 1, b % 4, b % 4)]
        if kind == 3:
            value = None if b % 3 == 0 else str(b)
            return [ConfigRecord(int(ConfigResourceType.TOPIC), name, f"k{b % 3}", value)]
        if kind == 4:
            return [ConfigRecord(int(ConfigResourceType.BROKER), "" if a % 2 else "1", f"b{b % 2}",
                                 None if b % 4 == 0 else str(b))]
        if kind == 5:
            return [FeatureLevelRecord("metadata.version", b % 21 + 1)]
        if kind == 6:
            self.next_pid += 1000
            return [ProducerIdsRecord(1, b, self.next_pid)]
        if kind == 7:
            return [RegisterBrokerRecord(a % 3, topic_id(1000 + b), b, (BrokerEndpoint("PLAINTEXT", "h", 9092),),
                                         (), None if b % 2 else "r1", False)]
        return [NoOpRecord()]

    def batches(self, ops: Sequence[tuple[int, int, int]]) -> list[list[MetadataRecord]]:
        out = []
        for op in ops:
            records = self.apply(op)
            if records:
                out.append(records)
        return out
