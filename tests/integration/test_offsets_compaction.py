"""``__consumer_offsets`` stays bounded: many offset commits from a few groups, then the log cleaner
compacts the topic to about one record per (group, partition) of its 100 groups; the size on disk follows the live
groups, and a restarted broker loads the groups quickly with every group's latest offsets.

TIERLOG_IT_MESSAGES scales the commit count (default 20,000; the issue's 1,000,000 runs the same way)."""

from __future__ import annotations

import re
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.broker import BrokerProcess, message_count

GROUPS = 100
PARTITIONS = 4
COMMITS = message_count(20_000)


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir() if p.suffix == ".log")


def _sync_commits(consumers: list[Consumer], topic: str, latest: dict[tuple[int, int], int]) -> None:
    for g, c in enumerate(consumers):
        offsets = [TopicPartition(topic, p, latest[(g, p)]) for p in range(PARTITIONS) if (g, p) in latest]
        if offsets:
            c.commit(offsets=offsets, asynchronous=False)


def test_offsets_topic_is_bounded_by_live_groups(tmp_path: Path, topic_name: str) -> None:
    broker = BrokerProcess(tmp_path / "data", {
        "offsets.topic.num.partitions": "1", "offsets.topic.segment.bytes": "65536",
        "log.cleaner.backoff.ms": "200", "log.segment.delete.delay.ms": "0",
        "log.cleaner.min.cleanable.ratio": "0.5"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic_name, num_partitions=PARTITIONS,
                                      replication_factor=1)])[topic_name].result(30)
        consumers = [Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g{g}",
                               "enable.auto.commit": False}) for g in range(GROUPS)]
        latest: dict[tuple[int, int], int] = {}
        for i in range(COMMITS):
            g, p = i % GROUPS, (i // GROUPS) % PARTITIONS
            consumers[g].commit(offsets=[TopicPartition(topic_name, p, i)], asynchronous=True)
            latest[(g, p)] = i
            if i % 1000 == 999:
                consumers[g].poll(0)
            if i % 20_000 == 19_999:
                _sync_commits(consumers, topic_name, latest)  # backpressure: no more than 20,000 in flight
        # A synchronous commit per consumer last: everything before it is stored.
        _sync_commits(consumers, topic_name, latest)
        offsets_dir = broker.data_dir / "__consumer_offsets-0"
        _, high = consumers[0].get_watermark_offsets(TopicPartition("__consumer_offsets", 0), timeout=30)
        assert high >= COMMITS  # every commit is a record of the topic's history

        deadline = time.monotonic() + 120
        # One offset record (~100 B in its batch) per (group, partition), plus group records.
        bound = 2 * 65536 + GROUPS * PARTITIONS * 150
        while time.monotonic() < deadline and _dir_bytes(offsets_dir) > bound:
            time.sleep(0.2)
        compacted = _dir_bytes(offsets_dir)
        # Bounded by the live groups: the active segment and at most one dirty segment (each at most
        # segment.bytes; min.cleanable.dirty.ratio 0.5 over a clean part this small) plus about one record
        # per (group, partition) and group, whatever the number of commits.
        assert compacted <= bound, (high, compacted, broker.stderr_tail())

        for c in consumers:
            c.close()
        broker.stop()
        started = time.monotonic()
        broker.start()
        startup_s = time.monotonic() - started
        loaded = [line for line in broker.log_path.read_text().splitlines() if "committed offsets of" in line]
        assert loaded, broker.stderr_tail()
        match = re.search(r"loaded (\d+) committed offsets of (\d+) groups from \S+ in ([\d.]+) s", loaded[-1])
        assert match is not None and int(match.group(2)) == GROUPS, loaded[-1]
        load_s = float(match.group(3))
        assert load_s < 1.0
        assert startup_s < 30  # the broker process start itself dominates; see docs/benchmarks.md
        for g in range(GROUPS):
            c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g{g}"})
            got = c.committed([TopicPartition(topic_name, p) for p in range(PARTITIONS)], timeout=30)
            assert {tp.partition: tp.offset for tp in got} == {p: latest[(g, p)] for p in range(PARTITIONS)}
            c.close()
        print(f"__consumer_offsets: {COMMITS} commits ({high} records), {compacted} bytes after "
              f"cleaning, restart {startup_s:.2f} s, groups loaded in {load_s:.3f} s")
    finally:
        if broker.alive():
            broker.stop()
