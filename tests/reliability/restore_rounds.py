"""Partitions lost and rebuilt from the remote tier, round after round (issue 20).

A real ``tierlog serve`` tiers a topic's partitions (small segments, a 100 ms remote log manager
interval) while an idempotent acks=all librdkafka producer writes to them. Each round produces, waits
until most of what it wrote is tiered, stops the broker (SIGTERM or SIGKILL, drawn), removes the
directories of some partitions (a lost disk), and starts it again; some rounds SIGKILL the broker
while it starts, in the middle of the restore, and start it once more. The harness keeps, per
partition, what every offset held when it was acknowledged; a wipe drops the offsets above what the
remote tier held (never tiered: lost with the disk, counted apart).

At the end every partition is read from offset 0 (CRC-checked): every offset the harness still
expects must hold the record acknowledged there -- a tiered offset given to another record is an
*offset reused* -- and no record may appear twice. Each restart also checks, right after the start,
that a wiped partition's log end is the remote tier's end + 1, before anything is produced.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from tests.helpers.raw_client import RawClient
from tests.helpers.waits import wait_until
from tests.reliability.harness import ChaosBroker, read_partition

TOPIC = "restore-rounds"
OVERRIDES = {"remote.log.manager.task.interval.ms": "100", "log.retention.check.interval.ms": "200",
             "log.segment.delete.delay.ms": "0"}


@dataclass
class RestoreRoundsResult:
    rounds: int = 0
    partitions_wiped: int = 0
    sigkills: int = 0
    #: SIGKILLs while the broker started with wiped partitions to restore, and how many of them came
    #: after at least one restore had finished (the others: before or during the restores).
    sigkills_while_starting: int = 0
    sigkills_after_a_restore: int = 0
    acked: int = 0
    #: Acknowledged, never tiered, on a wiped partition: gone with the disk (expected).
    lost_untiered: int = 0
    #: Acknowledged and tiered, then missing or changed at the end (must be 0).
    lost_tiered: int = 0
    offsets_reused: int = 0
    duplicated: int = 0
    bad_batches: int = 0
    #: A wiped partition whose log end after the restart was not the remote end + 1.
    wrong_restart_offsets: list[str] = field(default_factory=list)
    read_errors: list[str] = field(default_factory=list)
    restores_logged: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return (self.lost_tiered == 0 and self.offsets_reused == 0 and self.duplicated == 0 and self.bad_batches == 0
                and not self.wrong_restart_offsets and not self.read_errors
                and self.restores_logged >= self.partitions_wiped > 0)

    def summary(self) -> dict[str, object]:
        return {
            "rounds": self.rounds, "partitions wiped and restored": self.partitions_wiped,
            "broker SIGKILLs before a wipe": self.sigkills,
            "SIGKILLs while starting with partitions to restore (after a restore had finished)":
                f"{self.sigkills_while_starting} ({self.sigkills_after_a_restore})",
            "records acknowledged": self.acked,
            "**tiered records lost or changed** (must be 0)": self.lost_tiered,
            "**offsets reused** (a tiered offset given to another record; must be 0)": self.offsets_reused,
            "**duplicated** (must be 0)": self.duplicated,
            "restarts at another offset than the remote end + 1 (must be 0)": len(self.wrong_restart_offsets),
            "batches served that fail their CRC": self.bad_batches,
            "acknowledged but never tiered, lost with the wiped disk (expected)": self.lost_untiered,
            "restores logged": self.restores_logged,
            "duration": f"{self.seconds:.0f} s",
        }


def tiered_to(data_dir: Path) -> dict[int, int]:
    """Highest tiered offset per partition of the topic, read from the data dir (broker stopped or not)."""
    out = subprocess.run([sys.executable, "-m", "tierlog.cli.main", "tier", "status", "--json", "--data-dir",
                          str(data_dir)], capture_output=True, text=True, timeout=60, check=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    return {r["partition"]: int(r["highest_tiered_offset"]) for r in rows if r["topic"] == TOPIC}


def _latest(bootstrap: str, partitions: int) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tps = {KafkaTopicPartition(TOPIC, p): OffsetSpec.latest() for p in range(partitions)}
    got = admin.list_offsets(tps, request_timeout=30)
    return {tp.partition: int(f.result(30).offset) for tp, f in got.items()}


def _produce(bootstrap: str, partitions: int, count: int, round_no: int,
             expected: dict[int, dict[int, bytes]]) -> int:
    acked = 0
    errors: list[str] = []

    def on_delivery(err: object, msg: object) -> None:
        nonlocal acked
        if err is not None:
            errors.append(str(err))
            return
        expected[msg.partition()][msg.offset()] = msg.value()  # type: ignore[attr-defined]
        acked += 1

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "batch.num.messages": 40})
    for i in range(count):
        p = i % partitions
        producer.produce(TOPIC, value=b"r%03d-%07d-" % (round_no, i) + bytes(30), partition=p,
                         on_delivery=on_delivery)
        if i % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(60)
    assert remaining == 0 and not errors, (remaining, errors[:3])
    return acked


def run_restore_rounds(root: Path, *, rounds: int = 4, partitions: int = 3, records_per_round: int = 3000,
                       seed: int = 0, progress: bool = False) -> RestoreRoundsResult:
    rng = random.Random(seed)
    result = RestoreRoundsResult()
    started = time.monotonic()
    root.mkdir(parents=True, exist_ok=True)
    broker = ChaosBroker(root / "data", OVERRIDES)
    expected: dict[int, dict[int, bytes]] = {p: {} for p in range(partitions)}

    def say(what: str) -> None:
        if progress:
            print(f"  [restore {time.monotonic() - started:6.1f} s] {what}", flush=True)

    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, partitions, 1, config={
            "segment.bytes": "8192", "retention.ms": "-1", "remote.storage.enable": "true"})])[TOPIC].result(30)
        for round_no in range(rounds):
            result.rounds += 1
            result.acked += _produce(broker.bootstrap, partitions, records_per_round, round_no, expected)
            # Most of what was written reaches the remote tier; the active segments never do.
            ends = {p: max(expected[p]) for p in range(partitions)}
            wait_until(lambda ends=ends: all(t >= ends[p] - 400 for p, t in tiered_to(broker.data_dir).items()), 60, 0.3)
            if rng.random() < 0.5:
                broker.sigkill()
                result.sigkills += 1
            else:
                assert broker.stop() == 0, broker.stderr_tail()
            remote_end = tiered_to(broker.data_dir)
            wiped = sorted(rng.sample(range(partitions), rng.randint(1, partitions)))
            for p in wiped:
                shutil.rmtree(broker.data_dir / f"{TOPIC}-{p}", ignore_errors=True)
                lost = [o for o in expected[p] if o > remote_end.get(p, -1)]
                for o in lost:
                    del expected[p][o]
                result.lost_untiered += len(lost)
            result.partitions_wiped += len(wiped)
            say(f"round {round_no}: wiped {wiped}, remote ends {remote_end}")
            if rng.random() < 0.4:
                # A SIGKILL while the broker starts: before, during or between the restores.
                before = broker.log_text().count("restored from the remote tier")
                broker.kill_while_starting(rng.uniform(0.3, 2.0))
                result.sigkills_while_starting += 1
                if broker.log_text().count("restored from the remote tier") > before:
                    result.sigkills_after_a_restore += 1
            broker.start()
            latest = _latest(broker.bootstrap, partitions)
            for p in wiped:
                if latest[p] != remote_end.get(p, -1) + 1:
                    result.wrong_restart_offsets.append(f"round {round_no} partition {p}: log end {latest[p]}, "
                                                        f"remote end {remote_end.get(p)}")
        result.restores_logged = broker.log_text().count("restored from the remote tier")
        with RawClient(broker.port) as client:
            for p in range(partitions):
                read = read_partition(client, TOPIC, p)
                result.bad_batches += len(read.bad_batches)
                if read.error_code:
                    result.read_errors.append(f"partition {p}: error {read.error_code} at {read.error_offset}")
                offsets = Counter(o for o, _ in read.records)
                values = Counter(v for _, v in read.records)
                result.duplicated += sum(n - 1 for n in offsets.values() if n > 1)
                result.duplicated += sum(n - 1 for n in values.values() if n > 1)
                got = dict(read.records)
                for offset, value in expected[p].items():
                    if offset not in got:
                        result.lost_tiered += 1
                    elif got[offset] != value:
                        result.offsets_reused += 1
    finally:
        if broker.alive():
            broker.stop()
        result.seconds = time.monotonic() - started
    return result
