"""Disk damage: random byte flips and truncations in the files of a stopped broker -- segments,
offset and time indexes, producer snapshots, the checkpoint files, partition and directory metadata,
the listing manifest, and the metadata log and its snapshots -- after a clean shutdown or a SIGKILL,
with every segment checked at startup or only the active one (seed 003). The broker must then:

* start without help;
* never serve a batch that fails its CRC (every batch read back is checked), nor a record at an
  offset the partition never had;
* serve every record below the first damaged batch of each partition, with its original value
  (the files are parsed before the damage: that is the truth);
* say so in its log when a partition lost records (an ERROR line naming the partition, as
  ``<topic>-<partition>`` or ``topic=<topic> partition=<partition>``);
* keep serving: new records produced afterwards are acknowledged and read back;
* keep its cluster id (or say at ERROR that it lost it: meta.properties holds its only copy).

``run_damage_round`` runs one round and ``summarize`` adds up the figures of many; the test runs a
few rounds and ``bench/chaos.py`` many.
"""

from __future__ import annotations

import os
import random
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from tests.helpers.raw_client import RawClient
from tests.reliability.harness import ChaosBroker, create_topic, read_partition
from tierlog.errors import TierlogError
from tierlog.records import decode_batch, iter_headers
from tierlog.records.header import MAGIC, MAGIC_V2
from tierlog.storage.checkpoints import parse_java_properties, well_formed_cluster_id

TOPIC = "damage"
#: Time retention is on (Kafka's default week): nothing produced in a round is that old, so a segment
#: it deletes was made to look old by the damage (a time index is what retention reads).
RETENTION_MS = 7 * 24 * 3600 * 1000
KINDS = ("log", "index", "timeindex", "snapshot", "checkpoint", "leader-epoch", "metadata-snapshot",
         "partition-metadata", "meta-properties", "listing-manifest", "metadata-log")


@dataclass(frozen=True)
class StoredBatch:
    path: Path
    start: int  # byte position in the file
    end: int
    base_offset: int
    last_offset: int
    values: tuple[tuple[int, bytes | None], ...]


@dataclass
class Damage:
    kind: str
    path: Path
    how: str  # "flip" or "truncate"
    detail: str
    #: byte ranges [start, end) of the file made invalid
    ranges: list[tuple[int, int]]


@dataclass
class DamageRoundResult:
    shutdown: str
    damages: list[Damage]
    seed: int | None = None
    #: Seed 003: only the active segment checked at startup (sanity.check.all.logs.enabled=false).
    lazy: bool = False
    frequent_snapshots: bool = True
    started: bool = False
    start_seconds: float = 0.0
    bad_batches: int = 0
    #: records below the damage point that could not be read back (must be 0)
    lost_before_damage: int = 0
    wrong_values: int = 0
    #: records served at offsets the partition never had (must be 0)
    unexpected_records: int = 0
    #: records at or after the damage point no longer served (allowed, but must be reported)
    dropped_after_damage: int = 0
    unreported_partitions: list[int] = field(default_factory=list)
    reported_lines: list[str] = field(default_factory=list)
    serving_after: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (self.started and self.bad_batches == 0 and self.lost_before_damage == 0 and self.wrong_values == 0
                and self.unexpected_records == 0 and not self.unreported_partitions and self.serving_after
                and not self.problems)

    def describe(self) -> str:
        """Everything needed to understand a failed round."""
        lines = [f"seed {self.seed}, {self.shutdown} shutdown, {'lazy' if self.lazy else 'full'} startup check, "
                 f"{'a metadata snapshot per record' if self.frequent_snapshots else 'default metadata snapshots'}: "
                 f"started={self.started} ({self.start_seconds:.2f} s) bad_batches={self.bad_batches} "
                 f"lost_before_damage={self.lost_before_damage} wrong_values={self.wrong_values} "
                 f"unexpected_records={self.unexpected_records} dropped_after_damage={self.dropped_after_damage} "
                 f"unreported_partitions={self.unreported_partitions} serving_after={self.serving_after}"]
        lines += [f"  damage: {d.kind} {d.path.parent.name}/{d.path.name} {d.how} {d.detail}" for d in self.damages]
        lines += [f"  problem: {p}" for p in self.problems]
        lines += [f"  reported: {line}" for line in self.reported_lines[-30:]]
        return "\n".join(lines)


def stored_batches(partition_dir: Path) -> list[StoredBatch]:
    """Every batch in the partition's segment files, in offset order, CRC-checked."""
    out: list[StoredBatch] = []
    for path in sorted(partition_dir.glob("*.log")):
        data = path.read_bytes()
        for h in iter_headers(data):
            h.ensure_valid()
            values = tuple((r.offset, r.value) for r in decode_batch(h))
            out.append(StoredBatch(path, h.position, h.position + h.size_bytes, h.base_offset, h.last_offset, values))
    return out


def _produce(bootstrap: str, partitions: int, count: int, codec: str, start: int) -> int:
    acked = [0]

    def on_delivery(err: object, _msg: object) -> None:
        if err is None:
            acked[0] += 1

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 2, "batch.num.messages": 40, "compression.type": codec, "log_level": 0})
    rng = random.Random(start)
    for i in range(start, start + count):
        # Values that do not compress to nothing, so segments hold many batches.
        value = f"{i}:".encode() + rng.randbytes(rng.randrange(20, 120)).hex().encode()
        producer.produce(TOPIC, value=value, key=str(i).encode(), partition=i % partitions, on_delivery=on_delivery)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    return acked[0]


def populate(broker: ChaosBroker, partitions: int, records: int) -> None:
    create_topic(broker.port, TOPIC, partitions, {"segment.bytes": "24000", "retention.ms": str(RETENTION_MS),
                                                  "segment.index.bytes": "4096", "index.interval.bytes": "512"})
    half = records // 2
    assert _produce(broker.bootstrap, partitions, half, "none", 0) == half
    assert _produce(broker.bootstrap, partitions, records - half, "zstd", half) == records - half


def _targets(data_dir: Path, kind: str, partitions: int, rng: random.Random) -> list[Path]:
    pdirs = [data_dir / f"{TOPIC}-{p}" for p in range(partitions)]
    if kind in ("log", "index", "timeindex", "snapshot"):
        suffix = {"log": ".log", "index": ".index", "timeindex": ".timeindex", "snapshot": ".snapshot"}[kind]
        return sorted(f for d in pdirs for f in d.glob(f"*{suffix}") if f.stat().st_size > 0)
    if kind == "checkpoint":
        return [p for p in (data_dir / "recovery-point-offset-checkpoint", data_dir / "log-start-offset-checkpoint")
                if p.exists() and p.stat().st_size > 0]
    if kind == "leader-epoch":
        return [d / "leader-epoch-checkpoint" for d in pdirs if (d / "leader-epoch-checkpoint").exists()]
    if kind == "metadata-snapshot":
        return sorted(p for p in (data_dir / "__cluster_metadata-0").glob("*.checkpoint") if p.stat().st_size > 0)
    if kind == "metadata-log":
        return sorted(p for p in (data_dir / "__cluster_metadata-0").glob("*.log") if p.stat().st_size > 0)
    if kind == "partition-metadata":
        return [d / "partition.metadata" for d in pdirs if (d / "partition.metadata").exists()]
    if kind == "meta-properties":
        return [p for p in (data_dir / "meta.properties",) if p.exists()]
    if kind == "listing-manifest":
        return [p for p in (data_dir / "tierlog-listing-manifest",) if p.exists()]
    raise ValueError(kind)


def damage_file(path: Path, kind: str, rng: random.Random) -> Damage:
    data = bytearray(path.read_bytes())
    size = len(data)
    if rng.random() < 0.5 and size > 1:
        cut = rng.randrange(0, size)
        os.truncate(path, cut)
        return Damage(kind, path, "truncate", f"{size} -> {cut} bytes", [(cut, size)])
    flips = rng.randint(1, 4)
    ranges: list[tuple[int, int]] = []
    for _ in range(flips):
        pos = rng.randrange(0, size)
        data[pos] ^= rng.randrange(1, 256)
        ranges.append((pos, pos + 1))
    detail = f"bytes {sorted(r[0] for r in ranges)} of {size}"
    if kind == "log":
        kept = _no_newer_format(bytes(path.read_bytes()), data)
        if kept:
            detail += f" (the magic of the batches at {kept} set to 0: it read as a newer format)"
    path.write_bytes(bytes(data))
    return Damage(kind, path, "flip", detail, ranges)


def _no_newer_format(before: bytes, data: bytearray) -> list[int]:
    """A flipped magic byte that makes a segment's batch read as whole, intact data of a newer format:
    magic above 2 (the byte lies outside the CRC-32C, which still holds) and no v2 batch after it in
    the file to say the byte is damaged. Such bytes cannot be told from a newer broker's batch, and
    tierlog refuses the partition with its files kept as they are, as it must for such data
    (tests/unit/storage/test_unsupported_format.py, tests/integration/test_refused_partition_wire.py),
    so the round's promise -- the records before the damage served -- is not the one that applies.
    Each is set to 0 instead (a magic-0 message whose CRC-32 does not hold: damage), in place, and
    its batch's position returned. A data partition only: the metadata log is v2 alone, so there
    any other magic is damage anyway."""
    starts = [h.position for h in iter_headers(before)]
    kept = []
    for i, at in enumerate(starts):
        magic = at + MAGIC
        after = starts[i + 1] + MAGIC if i + 1 < len(starts) else None
        if data[magic] != before[magic] and data[magic] > MAGIC_V2 and (after is None or data[after] != MAGIC_V2):
            data[magic] = 0
            kept.append(at)
    return kept


def damage_point(batches: list[StoredBatch], damages: list[Damage]) -> int | None:
    """The base offset of the first batch with a damaged byte (None: the records are untouched)."""
    hit = [b.base_offset for b in batches for d in damages if d.path == b.path
           for lo, hi in d.ranges if lo < b.end and hi > b.start]
    return min(hit) if hit else None


@dataclass(frozen=True)
class RoundPlan:
    seed: int
    clean_shutdown: bool
    lazy: bool
    kinds: tuple[str, ...]
    #: A metadata snapshot after every record (so there are snapshots to damage); otherwise the
    #: defaults, where the metadata log alone holds the topics.
    frequent_snapshots: bool = True


def plan_round(seed: int) -> RoundPlan:
    """A round drawn from ``seed`` alone, so a failure is replayed from the seed it prints: mostly
    clean shutdowns (where nothing is recovered and only the reads can find damage), lazy or full
    startup checks, and every kind of file at once or a few."""
    rng = random.Random(f"plan-{seed}")
    kinds = tuple(KINDS) if rng.random() < 0.4 else tuple(rng.sample(KINDS, rng.randint(1, 4)))
    clean, lazy = rng.random() < 0.65, rng.random() < 0.5
    return RoundPlan(seed, clean_shutdown=clean, lazy=lazy, kinds=kinds, frequent_snapshots=rng.random() < 0.6)


def run_planned_round(parent: Path, plan: RoundPlan) -> DamageRoundResult:
    """Run ``plan`` in a new directory under ``parent``."""
    round_dir = parent / f"round-{plan.seed}"
    round_dir.mkdir(parents=True, exist_ok=True)
    return run_damage_round(round_dir / "data", clean_shutdown=plan.clean_shutdown, kinds=plan.kinds,
                            seed=plan.seed, lazy=plan.lazy, frequent_snapshots=plan.frequent_snapshots)


def run_damage_round(data_dir: Path, *, clean_shutdown: bool, kinds: list[str] | tuple[str, ...], partitions: int = 3,
                     records: int = 3000, seed: int | None = None, lazy: bool = False,
                     frequent_snapshots: bool = True) -> DamageRoundResult:
    """One round in ``data_dir`` (its parent must exist: the broker's stderr goes beside it)."""
    rng = random.Random(seed)
    overrides = {"sanity.check.all.logs.enabled": "false" if lazy else "true"}
    if frequent_snapshots:
        overrides["metadata.log.max.record.bytes.between.snapshots"] = "1"
    broker = ChaosBroker(data_dir, overrides)
    broker.start()
    populate(broker, partitions, records)
    cluster_id = _cluster_id(broker)
    if clean_shutdown:
        assert broker.stop() == 0, broker.stderr_tail()
    else:
        broker.sigkill()
    truth = {p: stored_batches(data_dir / f"{TOPIC}-{p}") for p in range(partitions)}
    damages: list[Damage] = []
    for kind in kinds:
        targets = [t for t in _targets(data_dir, kind, partitions, rng) if t not in {d.path for d in damages}]
        if targets:
            damages.append(damage_file(rng.choice(targets), kind, rng))
    result = DamageRoundResult("clean" if clean_shutdown else "SIGKILL", damages, seed=seed, lazy=lazy,
                               frequent_snapshots=frequent_snapshots)
    damaged_cluster_id = _cluster_id_in(data_dir / "meta.properties")
    log_before = len(broker.log_text())
    t0 = time.monotonic()
    try:
        broker.start()
    except AssertionError as e:
        result.problems.append(f"did not start: {e}")
        return result
    result.started = True
    result.start_seconds = time.monotonic() - t0
    try:
        _check(broker, partitions, truth, damages, result, log_before)
        now = _cluster_id(broker)
        # Its one copy is meta.properties (one log dir), in Kafka's format without a checksum: a change
        # said at ERROR is all a broker can do, and a flip that leaves another well-formed id there
        # cannot be told from the real one.
        if (now != cluster_id and now != damaged_cluster_id
                and not any("cluster id" in line and _LOSS_REPORT.search(line) for line in result.reported_lines)):
            result.problems.append(f"the cluster id changed from {cluster_id} to {now} without an ERROR saying so")
    finally:
        broker.stop()
    return result


def _cluster_id_in(path: Path) -> str | None:
    """The cluster id a (maybe damaged) meta.properties names, if it is a well-formed one."""
    try:
        cluster_id = parse_java_properties(path.read_bytes().decode("latin-1")).get("cluster.id")
    except (OSError, TierlogError):
        return None
    return cluster_id if well_formed_cluster_id(cluster_id) else None


def _cluster_id(broker: ChaosBroker) -> str | None:
    cluster_id = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=30).cluster_id
    return None if cluster_id is None else str(cluster_id)


_REPORT = re.compile(r"\b(WARNING|ERROR|CRITICAL)\b")
#: Lost records are an error: a warning naming the partition (an index rebuilt, say) does not count.
_LOSS_REPORT = re.compile(r"\b(ERROR|CRITICAL)\b")


def names_partition(line: str, topic: str, partition: int) -> bool:
    """Whether a log line names the partition, as ``<topic>-<partition>`` (also inside a path) or as
    key=value fields ``topic=<topic> ... partition=<partition>``."""
    t = re.escape(topic)
    return bool(re.search(rf"(?<![\w.-]){t}-{partition}(?!\d)", line)
                or re.search(rf"\btopic={t}(?![\w.-]).*\bpartition={partition}(?!\d)", line))


def _check(broker: ChaosBroker, partitions: int, truth: dict[int, list[StoredBatch]], damages: list[Damage],
           result: DamageRoundResult, log_before: int) -> None:
    reads = {}
    with RawClient(broker.port) as client:
        for p in range(partitions):
            reads[p] = read_partition(client, TOPIC, p)
    log_lines = broker.log_text()[log_before:].splitlines()
    reports = [line for line in log_lines if _REPORT.search(line)]
    result.reported_lines = reports
    if any("Traceback" in line for line in log_lines):
        result.problems.append("a traceback in the broker log")
    for p in range(partitions):
        read = reads[p]
        result.bad_batches += len(read.bad_batches)
        expected = {o: v for b in truth[p] for o, v in b.values}
        point = damage_point(truth[p], damages)
        got = dict(read.records)
        for offset, value in got.items():
            if offset not in expected:
                result.unexpected_records += 1
            elif expected[offset] != value:
                result.wrong_values += 1
        missing = [o for o in expected if o not in got]
        below = [o for o in missing if point is None or o < point]
        result.lost_before_damage += len(below)
        if below:
            result.problems.append(f"partition {p}: {len(below)} records below the damage point {point} unreadable "
                                   f"(first {min(below)}; read error {read.error_code} at {read.error_offset})")
        dropped = len(missing) - len(below)
        result.dropped_after_damage += dropped
        if dropped and not any(names_partition(line, TOPIC, p) for line in reports if _LOSS_REPORT.search(line)):
            result.unreported_partitions.append(p)
    # Still serving: new records are acknowledged and read back after whatever is left.
    try:
        before = {p: reads[p].high_watermark for p in range(partitions)}
        acked = _produce(broker.bootstrap, partitions, 30 * partitions, "lz4", 10_000_000)
        with RawClient(broker.port) as client:
            after = {p: read_partition(client, TOPIC, p, start=max(before[p], 0)) for p in range(partitions)}
        fresh = sum(1 for r in after.values() for _, v in r.records if v is not None and int(v.split(b":")[0]) >= 10**7)
        result.bad_batches += sum(len(r.bad_batches) for r in after.values())
        result.serving_after = acked == 30 * partitions and fresh == acked
        if not result.serving_after:
            result.problems.append(f"after the damage: {acked} acked, {fresh} read back of {30 * partitions}")
    except Exception as e:  # a broken broker shows here
        result.problems.append(f"after the damage: {type(e).__name__}: {e}")


def summarize(results: list[DamageRoundResult]) -> dict[str, object]:
    """The figures of many rounds. Must be 0: bad_batches_served, lost_before_damage, wrong_values,
    unexpected_records, unreported, failed_rounds; started must equal rounds."""
    kinds = Counter(d.kind for r in results for d in r.damages)
    starts = sorted(r.start_seconds for r in results if r.started)
    return {
        "rounds": len(results),
        "clean_shutdowns": sum(r.shutdown == "clean" for r in results),
        "lazy_startups": sum(r.lazy for r in results),
        "default_metadata_snapshots": sum(not r.frequent_snapshots for r in results),
        "damaged_files": sum(len(r.damages) for r in results),
        "by_kind": dict(sorted(kinds.items())),
        "started": sum(r.started for r in results),
        "bad_batches_served": sum(r.bad_batches for r in results),
        "lost_before_damage": sum(r.lost_before_damage for r in results),
        "wrong_values": sum(r.wrong_values for r in results),
        "unexpected_records": sum(r.unexpected_records for r in results),
        "dropped_after_damage": sum(r.dropped_after_damage for r in results),
        "unreported": sum(len(r.unreported_partitions) for r in results),
        "start_seconds_median": starts[len(starts) // 2] if starts else None,
        "start_seconds_max": starts[-1] if starts else None,
        "failed_rounds": sum(not r.ok for r in results),
        "failed_seeds": [r.seed for r in results if not r.ok],
    }

