"""Remote tier faults against a running broker (issue 10 part 3, issue 7's fault clause).

Two scenarios, each a real ``tierlog serve`` with tiering on (24 KiB segments, a 100 ms remote log
manager interval, local retention of one byte so a local segment goes as soon as it is remote) under
an idempotent acks=all librdkafka producer, while a raw client keeps reading the partition from 0:

* :func:`run_flaky_plugin`: the broker's plugin is
  :class:`tierlog.testing.remote.FaultInjectingRemoteStorageManager` around the local-directory
  backend, injecting errors, timeouts (hung calls failing at a deadline, some after the work was
  done) and partial writes (a segment written short, an upload stopping after some files, a fetch
  breaking mid-body, a delete done but reported failed) into copy, fetch and delete. A second topic
  is deleted while one of its copies is in flight (held half-uploaded by the plugin).
* :func:`run_s3_kills`: the S3 backend against a moto server that is SIGKILLed and restarted during
  copies (and once during the deletes of total retention), and frozen (SIGSTOP: requests hang until
  the client's timeout). moto keeps its objects in process memory, so the server here
  (:mod:`tests.helpers.s3_server`) journals every mutating request before processing it and
  replays the journal before a restarted server binds its port: what it acknowledged survives the
  kill, as in a real store, and a request it received but never answered is applied -- the harder
  case for the broker (an upload it saw fail is there after all). The fault phase ends with the
  server down while the producer goes on, so convergence is measured from the end of an outage.

Both SIGKILL the broker while a copy is in flight (held by the plugin, or by a frozen S3 server): a
COPY_SEGMENT_STARTED record with a partial upload behind it, which the restarted broker cleans up.

Throughout, a watcher thread checks the central promise: every offset below the first local
segment is in a COPY_SEGMENT_FINISHED remote segment (the local directory is read first, the
durable metadata journal after it, so a correct broker can never look wrong). Then the faults stop
and the run measures how long copying takes to converge (every closed segment FINISHED, no STARTED
or DELETE_STARTED leftovers, the deleted topic's remote data gone), reads every partition from
offset 0 (every acknowledged record exactly once, CRC-checked, from both tiers), audits the store
against the metadata (no object without a segment, no FINISHED segment with objects missing or
short), applies total retention (``retention.ms``) with the faults back on, and audits again: the
store must end empty.

The scenario functions return a :class:`RemoteFaultsResult` (``ok`` and ``summary()``);
``tests/reliability/test_remote_faults.py`` runs them short, ``bench/chaos.py`` long.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from tests.helpers.raw_client import RawClient
from tests.helpers.s3_server import S3_ENV, JournaledS3Server
from tests.helpers.waits import wait_until
from tests.reliability.harness import ChaosBroker, create_topic, read_partition
from tests.reliability.remote_load import Filling, Producing, Reading, Watching
from tests.reliability.remote_view import (
    LocalDirStore,
    RemoteStore,
    S3Store,
    audit,
    finished_coverage,
    local_base_offsets,
    read_remote_metadata,
)
from tierlog.testing.remote import FaultControl, FaultRates, write_fault_control
from tierlog.tiered.api import RemoteLogSegmentState

S = RemoteLogSegmentState
TOPIC = "remote-faults"
#: A topic written to during the faults and deleted while one of its copies is in flight.
DOOMED_TOPIC = "remote-faults-doomed"
BUCKET = "tier-faults"
S3_PREFIX = "tiered"

DEFAULT_RATES = {
    "copy": FaultRates(error=0.12, timeout=0.05, partial=0.12, slow=0.05),
    "fetch": FaultRates(error=0.05, timeout=0.02, partial=0.05, slow=0.02),
    "delete": FaultRates(error=0.12, timeout=0.05, partial=0.12, slow=0.02),
}

TIERING = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": "100",
    "log.retention.check.interval.ms": "100",
    "log.segment.delete.delay.ms": "0",
}
TOPIC_CONFIG = {"remote.storage.enable": "true", "local.retention.bytes": "1", "retention.ms": "-1",
                "segment.bytes": str(24 << 10)}


@dataclass
class RemoteFaultsResult:
    backend: str
    seconds: float = 0.0
    sent: int = 0
    acked: int = 0
    delivery_failures: int = 0
    #: Closed segments in COPY_SEGMENT_FINISHED once copying converged.
    segments_copied: int = 0
    copy_attempts: int = 0
    #: Copies the plugin failed on purpose (flaky) or that failed while the server was down (S3).
    copy_failures_injected: int = 0
    faults_injected: Counter[str] = field(default_factory=Counter)
    #: Failed copy-task runs the broker logged and retried.
    retries: int = 0
    dangling_uploads_cleaned: int = 0
    converge_seconds: float | None = None
    s3_kills: int = 0
    s3_freezes: int = 0
    #: The longest an S3 server restart took (its journal replayed before it listens).
    s3_max_restart_seconds: float = 0.0
    broker_kills: int = 0
    #: Broker kills that left a COPY_SEGMENT_STARTED record behind (a copy was in flight).
    broker_kills_mid_copy: int = 0
    #: Deletions of a second topic while one of its copies was in flight.
    topic_deletions_mid_copy: int = 0
    invariant_checks: int = 0
    #: The largest local backlog seen (segments in one partition, the active one included).
    max_local_segments: int = 0
    local_deletions_before_remote: list[str] = field(default_factory=list)
    records_read: int = 0
    records_read_below_local_start: int = 0
    records_lost: int = 0
    duplicated: int = 0
    wrong_offset: int = 0
    bad_batches: int = 0
    read_errors: list[str] = field(default_factory=list)
    fetch_errors_during_faults: int = 0
    orphan_objects: list[str] = field(default_factory=list)
    metadata_without_objects: list[str] = field(default_factory=list)
    leftover_metadata: list[str] = field(default_factory=list)
    remote_objects_after_retention: int = -1
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (not self.local_deletions_before_remote and self.records_lost == 0 and self.duplicated == 0
                and self.wrong_offset == 0 and self.bad_batches == 0 and not self.read_errors
                and not self.orphan_objects and not self.metadata_without_objects and not self.leftover_metadata
                and self.converge_seconds is not None and self.remote_objects_after_retention == 0
                and not self.problems)

    def summary(self) -> dict[str, object]:
        return {
            "backend": self.backend, "seconds": round(self.seconds, 1), "acked": self.acked,
            "segments_copied": self.segments_copied, "copy_attempts": self.copy_attempts,
            "copy_failures_injected": self.copy_failures_injected, "faults_injected": dict(self.faults_injected),
            "retries": self.retries, "dangling_uploads_cleaned": self.dangling_uploads_cleaned,
            "converge_seconds": None if self.converge_seconds is None else round(self.converge_seconds, 2),
            "s3_kills": self.s3_kills, "s3_freezes": self.s3_freezes,
            "s3_max_restart_seconds": round(self.s3_max_restart_seconds, 2), "broker_kills": self.broker_kills,
            "broker_kills_mid_copy": self.broker_kills_mid_copy,
            "topic_deletions_mid_copy": self.topic_deletions_mid_copy, "invariant_checks": self.invariant_checks,
            "max_local_segments": self.max_local_segments,
            "local_deletions_before_remote": len(self.local_deletions_before_remote),
            "records_read": self.records_read, "records_read_below_local_start": self.records_read_below_local_start,
            "records_lost": self.records_lost, "duplicated": self.duplicated, "bad_batches": self.bad_batches,
            "fetch_errors_during_faults": self.fetch_errors_during_faults,
            "orphan_objects": len(self.orphan_objects), "metadata_without_objects": len(self.metadata_without_objects),
            "remote_objects_after_retention": self.remote_objects_after_retention, "ok": self.ok,
        }


# -- the scenario ----------------------------------------------------------------------------------------

BROKER_KILL = "broker-kill"
TOPIC_DELETION = "topic-deletion"


@dataclass
class _Setup:
    backend: str
    overrides: dict[str, str]
    store: Callable[[], RemoteStore]
    #: Ambient faults on and off (the plugin's fault rates; nothing for S3).
    faults_on: Callable[[], None]
    faults_off: Callable[[], None]
    #: The scenario's own fault events by name (an S3 kill, an S3 freeze).
    events: dict[str, Callable[[random.Random], None]] = field(default_factory=dict)
    #: Holds the copies of a topic ("*": all) in flight, half done, or lets them go (""), so a
    #: broker kill or a topic deletion hits one; the second argument pauses the delete faults.
    hold_copies: Callable[[str, bool], None] | None = None
    #: An outage that starts ``last_fault_s`` before the end of the fault phase and lasts until
    #: ``faults_off``: convergence is then measured from the end of an outage.
    last_fault: Callable[[], None] | None = None
    last_fault_s: float = 0.0
    #: Runs in a thread while total retention deletes, until the event is set (an S3 kill mid-delete).
    retention_fault: Callable[[threading.Event], None] | None = None


def _add_new(into: list[str], items: list[str]) -> None:
    into.extend(item for item in items if item not in into)


def _log_count(broker: ChaosBroker, needle: str) -> int:
    return broker.log_text().count(needle)


def _wait_for_log(broker: ChaosBroker, needle: str, timeout_s: float) -> bool:
    """Wait until the broker logs ``needle`` once more than now."""
    before = _log_count(broker, needle)
    return wait_until(lambda: _log_count(broker, needle) > before, timeout_s, 0.005)


def _alter_topic(bootstrap: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, TOPIC, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    admin.incremental_alter_configs([resource])[resource].result(30)


def _copy_in_flight(data_dir: Path, topic: str | None) -> bool:
    return any(m.state is S.COPY_SEGMENT_STARTED for m in read_remote_metadata(data_dir, topic))


def _kill_broker_mid_copy(broker: ChaosBroker, setup: _Setup, result: RemoteFaultsResult,
                          rng: random.Random) -> None:
    """SIGKILL the broker while a copy is in flight (a STARTED record on disk, part of the upload in
    the store), then start it again."""
    if setup.hold_copies is not None:
        setup.hold_copies("*", False)
    try:
        # Generous: with the S3 server just killed or frozen, copies back off for seconds, and more on
        # a loaded machine (5 s missed every copy once with four test workers on 2 cores).
        wait_until(lambda: _copy_in_flight(broker.data_dir, TOPIC), 30.0, 0.005)
        time.sleep(rng.uniform(0, 0.02))
        broker.sigkill()
    finally:
        if setup.hold_copies is not None:
            setup.hold_copies("", False)
    result.broker_kills += 1
    result.broker_kills_mid_copy += _copy_in_flight(broker.data_dir, None)
    broker.start()


def _delete_topic_mid_copy(broker: ChaosBroker, setup: _Setup, filling: Filling, result: RemoteFaultsResult) -> None:
    """Delete the doomed topic while one of its copies is in flight, half uploaded, and let the
    copy complete only once the deletion of the topic's remote data had every chance to finish
    (deletes unfaulted meanwhile): a deletion that does not wait for the copy leaves its objects
    behind, belonging to no segment."""
    if setup.hold_copies is not None:
        setup.hold_copies(DOOMED_TOPIC, False)
    try:
        caught = wait_until(lambda: _copy_in_flight(broker.data_dir, DOOMED_TOPIC), 10.0, 0.005)
        filling.stop_event.set()  # before the deletion: a producer could re-create the topic
        filling.join(60)
        if setup.hold_copies is not None:
            setup.hold_copies(DOOMED_TOPIC, True)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.delete_topics([DOOMED_TOPIC])[DOOMED_TOPIC].result(30)
        result.topic_deletions_mid_copy += int(caught)
        wait_until(lambda: not read_remote_metadata(broker.data_dir, DOOMED_TOPIC), 1.0, 0.02)
    finally:
        if setup.hold_copies is not None:
            setup.hold_copies("", False)


def _converged(data_dir: Path, partitions: int) -> bool:
    """Every closed segment FINISHED, nothing STARTED or half deleted, local retention done (each
    partition is down to its active segment), and the doomed topic's remote data gone."""
    segments = read_remote_metadata(data_dir, None)
    if any(m.state is not S.COPY_SEGMENT_FINISHED or m.topic_id_partition.topic != TOPIC for m in segments):
        return False
    for p in range(partitions):
        local = local_base_offsets(data_dir, TOPIC, p)
        if len(local) != 1 or finished_coverage(segments, p) < local[0]:
            return False
    return True


def _verify_reads(broker: ChaosBroker, partitions: int, acked: dict[int, list[tuple[int, int]]],
                  result: RemoteFaultsResult) -> None:
    """Read each partition from 0 (CRC-checked): every acknowledged value at its offset, every value
    once."""
    seen: Counter[int] = Counter()
    misplaced: list[int] = []
    with RawClient(broker.port) as client:
        for p in range(partitions):
            local_start = local_base_offsets(broker.data_dir, TOPIC, p)[0]
            read = read_partition(client, TOPIC, p, 0)
            if read.error_code:
                result.read_errors.append(f"partition {p}: error {read.error_code} at offset {read.error_offset}")
            if read.log_start_offset != 0:
                result.read_errors.append(f"partition {p}: log start offset {read.log_start_offset}, not 0")
            result.bad_batches += len(read.bad_batches)
            by_offset = {o: int(v.split(b":", 1)[0]) for o, v in read.records if v is not None}
            seen.update(by_offset.values())
            result.records_read += len(by_offset)
            result.records_read_below_local_start += sum(1 for o in by_offset if o < local_start)
            misplaced += [value for offset, value in acked[p] if by_offset.get(offset) != value]
    result.duplicated = sum(1 for n in seen.values() if n > 1)
    result.records_lost = len({v for records in acked.values() for _, v in records} - set(seen))
    result.wrong_offset = sum(1 for v in misplaced if v in seen)


def _audit_into(result: RemoteFaultsResult, setup: _Setup, data_dir: Path) -> None:
    orphans, missing = audit(setup.store(), read_remote_metadata(data_dir, None))
    _add_new(result.orphan_objects, orphans)
    _add_new(result.metadata_without_objects, missing)


def _fault_phase(broker: ChaosBroker, setup: _Setup, result: RemoteFaultsResult, rng: random.Random,
                 seconds: float, events: list[str], filling: Filling, progress: Callable[[str], None]) -> None:
    """Ambient faults throughout; the events at random moments; the last outage at the end."""
    rng.shuffle(events)
    span = seconds - setup.last_fault_s
    times = sorted(rng.uniform(0.1, 0.9) * span for _ in events)
    start = time.monotonic()
    for at, event in zip(times, events, strict=True):
        time.sleep(max(0.0, start + at - time.monotonic()))
        if event == BROKER_KILL:
            _kill_broker_mid_copy(broker, setup, result, rng)
        elif event == TOPIC_DELETION:
            _delete_topic_mid_copy(broker, setup, filling, result)
        else:
            setup.events[event](rng)
        progress(f"{time.monotonic() - start:6.1f} s: {event}")
    if setup.last_fault is not None:
        time.sleep(max(0.0, start + seconds - setup.last_fault_s - time.monotonic()))
        setup.last_fault()
        progress(f"{time.monotonic() - start:6.1f} s: last outage")
    time.sleep(max(0.0, start + seconds - time.monotonic()))


def _run(root: Path, setup: _Setup, *, seconds: float, partitions: int, rate: int, value_bytes: int,
         events: dict[str, int], converge_timeout_s: float, seed: int | None, progress: bool) -> RemoteFaultsResult:
    rng = random.Random(seed)
    result = RemoteFaultsResult(setup.backend)
    t0 = time.monotonic()
    data_dir = root / "data"
    broker = ChaosBroker(data_dir, {**TIERING, **setup.overrides})
    broker.start()
    producing = Producing(broker.bootstrap, TOPIC, partitions, rate, value_bytes)
    watching = Watching(data_dir, TOPIC, partitions)
    reading = Reading(broker.port, TOPIC)
    filling = Filling(broker.bootstrap, DOOMED_TOPIC, max(100, rate // 4), value_bytes)
    threads: list[Producing | Watching | Reading | Filling] = [producing, watching, reading]

    def say(what: str) -> None:
        if progress:
            print(f"{what}: {sum(map(len, producing.snapshot().values()))} acked, {watching.checks} checks, "
                  f"{len(watching.violations)} violations", flush=True)

    try:
        create_topic(broker.port, TOPIC, partitions, TOPIC_CONFIG)
        if events.get(TOPIC_DELETION):
            create_topic(broker.port, DOOMED_TOPIC, 1, TOPIC_CONFIG)
            threads.append(filling)
        setup.faults_on()
        for thread in threads:
            thread.start()
        _fault_phase(broker, setup, result, rng, seconds, [e for e, n in events.items() for _ in range(n)],
                     filling, say)

        setup.faults_off()
        faults_stopped = time.monotonic()
        reading.stop_event.set()
        producing.stop_event.set()
        producing.join(180)
        reading.join(30)
        if wait_until(lambda: _converged(data_dir, partitions), converge_timeout_s, 0.1):
            result.converge_seconds = time.monotonic() - faults_stopped
        else:
            result.problems.append(f"copying did not converge within {converge_timeout_s} s")
        watching.stop_event.set()
        watching.join(30)
        if watching.error is not None:
            result.problems.append(f"the watcher failed: {watching.error!r}")
        result.invariant_checks = watching.checks
        result.max_local_segments = watching.max_local_segments
        result.local_deletions_before_remote = watching.violations
        result.fetch_errors_during_faults = reading.errors
        result.bad_batches += reading.bad_batches
        result.segments_copied = sum(1 for m in read_remote_metadata(data_dir, TOPIC)
                                     if m.state is S.COPY_SEGMENT_FINISHED)
        _verify_reads(broker, partitions, producing.snapshot(), result)
        _audit_into(result, setup, data_dir)
        say(f"converged in {result.converge_seconds} s, {result.segments_copied} segments remote")

        # Total retention, faults back on: everything in the remote tier expires.
        setup.faults_on()
        done = threading.Event()
        chaos = None
        if setup.retention_fault is not None:
            chaos = threading.Thread(target=setup.retention_fault, args=(done,), daemon=True)
            chaos.start()
        time.sleep(0.5)  # every record is older than the retention set now
        _alter_topic(broker.bootstrap, {"retention.ms": "200"})
        wait_until(lambda: not any(m.state is S.COPY_SEGMENT_FINISHED
                                   for m in read_remote_metadata(data_dir, TOPIC)), min(seconds, 30.0), 0.1)
        done.set()
        if chaos is not None:
            chaos.join(60)
        setup.faults_off()
        if not wait_until(lambda: not read_remote_metadata(data_dir, None), converge_timeout_s, 0.1):
            result.leftover_metadata += [f"{m.topic_id_partition} [{m.start_offset}, {m.end_offset}] {m.state.name}"
                                         for m in read_remote_metadata(data_dir, None)]
        _audit_into(result, setup, data_dir)
        result.remote_objects_after_retention = sum(len(f) for f in setup.store().objects().values())
    finally:
        for thread in (producing, watching, reading, filling):
            thread.stop_event.set()
        if producing.is_alive():
            producing.join(60)
        setup.faults_off()
        if broker.alive():
            code = broker.stop()
            if code != 0:
                result.problems.append(f"the broker exited with {code}: {broker.stderr_tail()}")
    result.sent, result.delivery_failures = producing.sent, producing.failed
    result.acked = sum(len(v) for v in producing.snapshot().values())
    if producing.failed:
        result.problems.append(f"delivery failures: {dict(producing.failure_reasons)}")
    result.copy_attempts = _log_count(broker, "remote copy started")
    result.retries = _log_count(broker, "remote copy failed")
    result.dangling_uploads_cleaned = _log_count(broker, "deleting the unfinished upload")
    result.seconds = time.monotonic() - t0
    return result


# -- the two scenarios ---------------------------------------------------------------------------------


def run_flaky_plugin(root: Path, *, seconds: float = 20.0, partitions: int = 2, rate: int = 1500,
                     value_bytes: int = 100, rates: dict[str, FaultRates] | None = None, deadline_ms: int = 150,
                     broker_kills: int = 1, topic_deletion: bool = True, converge_timeout_s: float = 60.0,
                     seed: int | None = None, progress: bool = False) -> RemoteFaultsResult:
    """The fault-injecting plugin around the local-directory backend (see the module docstring)."""
    root.mkdir(parents=True, exist_ok=True)
    remote_dir, control_file, fault_log = root / "remote", root / "faults.json", root / "faults.log"
    control = FaultControl(enabled=True, rates=rates or DEFAULT_RATES, deadline_ms=deadline_ms,
                           slow_ms=max(1, deadline_ms // 3))
    write_fault_control(control_file, FaultControl())
    overrides = {
        "remote.log.storage.manager.class.name": "tierlog.testing.remote.FaultInjectingRemoteStorageManager",
        "rsm.config.dir": str(remote_dir), "rsm.config.faults.control.file": str(control_file),
        "rsm.config.faults.log.file": str(fault_log),
        "rsm.config.faults.seed": str(random.Random(seed).randrange(1 << 31)),
    }
    base = [FaultControl()]  # faults on or off, before any hold

    def set_base(new: FaultControl) -> None:
        base[0] = new
        write_fault_control(control_file, new)

    def hold(topic: str, deletes_ok: bool) -> None:
        rates = {op: r for op, r in base[0].rates.items() if not (deletes_ok and op == "delete")}
        write_fault_control(control_file, replace(base[0], hang_copies=topic, rates=rates))

    setup = _Setup("flaky-local-dir", overrides, lambda: LocalDirStore(remote_dir),
                   faults_on=lambda: set_base(control), faults_off=lambda: set_base(FaultControl()), hold_copies=hold)
    result = _run(root, setup, seconds=seconds, partitions=partitions, rate=rate, value_bytes=value_bytes,
                  events={BROKER_KILL: broker_kills, TOPIC_DELETION: int(topic_deletion)},
                  converge_timeout_s=converge_timeout_s, seed=seed, progress=progress)
    try:
        outcomes = Counter(fault_log.read_text().split("\n"))
    except FileNotFoundError:
        outcomes = Counter()
    outcomes.pop("", None)
    result.faults_injected = Counter({k: n for k, n in outcomes.items() if not k.endswith((" ok", " slow"))})
    result.copy_failures_injected = sum(result.faults_injected[f"copy {kind}"] for kind in ("error", "timeout", "partial"))
    return result


def run_s3_kills(root: Path, *, seconds: float = 20.0, partitions: int = 2, rate: int = 1500,
                 value_bytes: int = 100, s3_kills: int = 3, s3_freezes: int = 1,
                 s3_down_s: tuple[float, float] = (0.3, 2.0), final_outage_s: float = 3.0, broker_kills: int = 1,
                 converge_timeout_s: float = 60.0, seed: int | None = None,
                 progress: bool = False) -> RemoteFaultsResult:
    """The S3 backend against a journaled moto server that is SIGKILLed during copies (and during
    the deletes of total retention), or frozen (SIGSTOP: requests hang until the client's
    timeout); the last outage (``final_outage_s``, the producer going on) ends the fault phase, so
    the convergence time is that of a backlog meeting a server that is back."""
    root.mkdir(parents=True, exist_ok=True)
    server = JournaledS3Server(root / "s3-journal").start()
    broker_log = root / "data.stderr.log"

    def logged(needle: str) -> int:
        try:
            return broker_log.read_text(errors="replace").count(needle)
        except FileNotFoundError:
            return 0

    def during(needle: str, rng: random.Random, outage: Callable[[float], None], timeout_s: float = 3.0) -> None:
        before = logged(needle)
        wait_until(lambda: logged(needle) > before, timeout_s, 0.005)
        outage(rng.uniform(*s3_down_s))

    def kill_for(down_s: float) -> None:
        server.sigkill()
        time.sleep(down_s)
        server.start()

    def kill_during_deletes(done: threading.Event) -> None:
        before = logged("remote segment deleted")
        wait_until(lambda: done.is_set() or logged("remote segment deleted") > before, 30.0, 0.005)
        if not done.is_set():
            kill_for(random.Random(seed).uniform(*s3_down_s))

    def hold(topic: str, deletes_ok: bool) -> None:
        # A frozen server holds every request in flight, copies included (not only the topic's).
        if topic:
            server.freeze()
        else:
            server.thaw()

    def restart_if_down() -> None:
        server.thaw()
        if not server.alive():
            server.start()

    try:
        server.create_bucket(BUCKET)
        overrides = {
            "remote.log.storage.manager.class.name": "tierlog.tiered.backends.s3.S3RemoteStorageManager",
            "rsm.config.s3.bucket": BUCKET, "rsm.config.s3.endpoint": server.endpoint,
            "rsm.config.s3.region": "us-east-1", "rsm.config.s3.prefix": S3_PREFIX,
            "rsm.config.s3.max.retries": "1", "rsm.config.s3.retry.timeout.ms": "2000",
            "rsm.config.s3.connect.timeout.ms": "1000", "rsm.config.s3.request.timeout.ms": "3000",
        }
        setup = _Setup(
            "s3-moto-killed", overrides, lambda: S3Store(server, BUCKET), faults_on=lambda: None,
            faults_off=restart_if_down,
            events={"s3-kill": lambda rng: during("remote copy started", rng, kill_for),
                    "s3-freeze": lambda rng: during("remote copy started", rng, server.freeze_for)},
            hold_copies=hold, last_fault=server.sigkill, last_fault_s=final_outage_s,
            retention_fault=kill_during_deletes)
        env_saved = {k: os.environ.get(k) for k in S3_ENV}
        os.environ.update(S3_ENV)  # the broker subprocess inherits the (fake) credentials
        try:
            result = _run(root, setup, seconds=seconds, partitions=partitions, rate=rate, value_bytes=value_bytes,
                          events={"s3-kill": s3_kills, "s3-freeze": s3_freezes, BROKER_KILL: broker_kills},
                          converge_timeout_s=converge_timeout_s, seed=seed, progress=progress)
        finally:
            for k, v in env_saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        result.s3_kills, result.s3_freezes = server.kills, server.freezes
        result.s3_max_restart_seconds = max(server.restart_seconds[1:], default=0.0)
        result.copy_failures_injected = result.retries
        result.faults_injected = Counter({"s3 server SIGKILL": server.kills, "s3 server SIGSTOP": server.freezes})
        return result
    finally:
        server.stop()
