"""Remote deletes that fail, against a running broker (issue 20): seed 002's refused uploads whose
plugin delete fails, retried with backoff by the broker, and given up when they never succeed.

One ``tierlog serve`` whose plugin is :class:`tierlog.testing.remote.BucketedRemoteStorageManager`
(seed 002's bucket example over the real local-directory plugin: each upload goes to a bucket the
plugin picks and names in its custom metadata, padded to 200 bytes for the ``over-*`` topics; the
broker's limit is 128). Each round creates a topic ``over-<r>`` whose every partition uploads one
segment, has it refused, and must delete it; the plugin's deletes fail:

* in a *recovering* round, ``N`` times per segment (1 <= N < the attempts allowed), then succeed:
  the broker's retries must delete every upload (0 orphan objects);
* in a *never* round, always: the broker must give up on every upload after the attempts allowed,
  and say so (ERROR line, ``tierlog_remote_delete_given_up_segments``, the status file).

Every delete attempt must be handed the 200 bytes the plugin returned (the plugin could not find
its objects otherwise). Meanwhile topic ``under`` (custom metadata under the limit) keeps tiering.
At the end the broker is stopped and ``tierlog tier retry-delete`` settles each given-up segment
with the store working again; the store must then hold no object without a segment.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from confluent_kafka import Producer

from tests.helpers.waits import wait_until
from tests.reliability.harness import ChaosBroker, create_topic
from tests.reliability.remote_view import LocalDirStore, audit, read_remote_metadata
from tierlog.tiered.api import RemoteLogSegmentState

S = RemoteLogSegmentState
CUSTOM_BYTES = 200
UNDER = "under"
TIERING = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": "100",
    "log.retention.check.interval.ms": "100",
    "log.segment.delete.delay.ms": "0",
    "remote.log.manager.delete.retry.backoff.max.ms": "800",
    "metrics.listener": "http://127.0.0.1:0",
}
TOPIC_CONFIG = {"remote.storage.enable": "true", "retention.ms": "-1", "segment.bytes": str(16 << 10)}


@dataclass
class FailingDeletesResult:
    rounds: int = 0
    recovering_rounds: int = 0
    never_rounds: int = 0
    #: Uploads refused for their custom metadata (one per partition per round).
    uploads_refused: int = 0
    delete_attempts: int = 0
    #: Attempts the plugin got without the 200 bytes it returned (must be 0).
    attempts_without_custom_metadata: int = 0
    #: Recovering rounds: segments deleted after their failures, and those whose attempts were not
    #: exactly failures + 1.
    recovering_uploads: int = 0
    recovered: int = 0
    recovered_with_wrong_attempts: int = 0
    #: Never rounds: uploads that must be given up; how many the ERROR lines, the metric and the
    #: status file reported; given-up segments that got other than max_attempts attempts.
    give_ups_expected: int = 0
    give_ups_logged: int = 0
    give_ups_in_metric: int = 0
    give_ups_in_status: int = 0
    given_up_with_wrong_attempts: int = 0
    #: Waits between attempts of one segment that were shorter than the wait before them (backoff
    #: measured at the plugin; the expiration pass runs every 100 ms, so waits are rounded up to it).
    shrinking_waits: int = 0
    longest_wait_ms: int = 0
    #: Segments of "under" copied while the rounds ran (other partitions keep tiering).
    under_segments_copied: int = 0
    settled_by_retry_delete: int = 0
    orphan_objects: list[str] = field(default_factory=list)
    leftover_metadata: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return (not self.problems and not self.orphan_objects and not self.leftover_metadata
                and self.attempts_without_custom_metadata == 0 and self.recovered_with_wrong_attempts == 0
                and self.given_up_with_wrong_attempts == 0
                and self.give_ups_logged == self.give_ups_expected == self.give_ups_in_metric
                and self.give_ups_in_status == self.give_ups_expected
                and self.settled_by_retry_delete == self.give_ups_expected and self.under_segments_copied > 0
                and self.recovered == self.recovering_uploads)

    def summary(self) -> dict[str, object]:
        out = asdict(self)
        out["orphan_objects"] = len(self.orphan_objects)
        out["leftover_metadata"] = len(self.leftover_metadata)
        return out


def _produce(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5})
    for start in range(0, per_partition, 50):  # batches of 50 (~6 KiB): segments roll between them
        for p in range(partitions):
            for i in range(start, min(per_partition, start + 50)):
                producer.produce(topic, value=b"%08d:" % i + b"x" * 100, partition=p)
        if producer.flush(60) != 0:
            raise AssertionError(f"could not produce to {topic}")


def _deletes(log: Path) -> dict[str, list[tuple[str, str, int]]]:
    """Per segment id: (custom metadata hex, outcome, monotonic ms) of each delete call."""
    out: dict[str, list[tuple[str, str, int]]] = defaultdict(list)
    try:
        text = log.read_text()
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        sid, custom, outcome, at = line.split()
        out[sid].append((custom, outcome, int(at)))
    return out


def _metric(url: str, name: str, topic: str) -> int:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    pattern = re.compile(rf'^{name}\{{partition="\d+",topic="{re.escape(topic)}"\}} (\S+)$', re.M)
    return int(sum(float(v) for v in pattern.findall(text)))


def _tier(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tierlog.cli.main", "tier", *args], capture_output=True,
                          text=True, timeout=120)


def run_failing_deletes(root: Path, *, rounds: int = 4, partitions: int = 2, max_attempts: int = 4,
                        round_timeout_s: float = 60.0, seed: int | None = None,
                        progress: bool = False) -> FailingDeletesResult:
    rng = random.Random(seed)
    result = FailingDeletesResult(rounds=rounds)
    t0 = time.monotonic()
    root.mkdir(parents=True, exist_ok=True)
    data, remote = root / "data", root / "remote"
    control, deletes_log = root / "control.json", root / "deletes.log"
    control.write_text(json.dumps({"delete_failures": 0}))
    topics = [f"over-{r}" for r in range(rounds)]
    plugin = {
        "remote.log.storage.manager.class.name": "tierlog.testing.remote.BucketedRemoteStorageManager",
        "rsm.config.dir": str(remote), "rsm.config.buckets.pad.topics": ",".join(topics),
        "rsm.config.buckets.custom.metadata.bytes": str(CUSTOM_BYTES),
        "rsm.config.buckets.control.file": str(control), "rsm.config.buckets.log.file": str(deletes_log),
    }
    broker = ChaosBroker(data, {**TIERING, **plugin, "remote.log.manager.delete.retry.max.attempts": str(max_attempts)})
    broker.start()
    metrics_url = next(line.split()[-1] for line in broker.stdout_lines if line.startswith("tierlog metrics on "))
    given_up_ids: list[str] = []
    try:
        create_topic(broker.port, UNDER, 1, TOPIC_CONFIG)
        for r, topic in enumerate(topics):
            never = r % 2 == 1
            failures = -1 if never else rng.randrange(1, max_attempts)
            control.write_text(json.dumps({"delete_failures": failures}))
            before = set(_deletes(deletes_log))
            logged_before = broker.log_text().count("remote delete given up")
            create_topic(broker.port, topic, partitions, TOPIC_CONFIG)
            _produce(broker.bootstrap, topic, partitions, 300)  # ~36 KiB: two closed segments each
            _produce(broker.bootstrap, UNDER, 1, 300)

            def mine(before: set[str] = before) -> dict[str, list[tuple[str, str, int]]]:
                return {sid: calls for sid, calls in _deletes(deletes_log).items() if sid not in before}

            def done(never: bool = never, logged_before: int = logged_before, topic: str = topic) -> bool:
                calls = mine()
                if len(calls) < partitions:
                    return False
                if never:
                    return all(len(c) >= max_attempts for c in calls.values()) and \
                        broker.log_text().count("remote delete given up") >= logged_before + partitions
                return all(c[-1][1] == "ok" for c in calls.values()) and not read_remote_metadata(data, topic)

            if not wait_until(done, round_timeout_s, 0.1):
                result.problems.append(f"round {r} ({'never' if never else f'{failures} failures'}) did not end "
                                       f"within {round_timeout_s} s: {mine()}; broker log:\n{broker.stderr_tail(15)}")
                continue
            time.sleep(0.5)  # a stray extra attempt would show now
            calls = mine()
            result.uploads_refused += len(calls)
            for seq in calls.values():
                result.delete_attempts += len(seq)
                result.attempts_without_custom_metadata += sum(1 for c, _, _ in seq if len(c) != 2 * CUSTOM_BYTES)
                waits = [b[2] - a[2] for a, b in itertools.pairwise(seq)]
                result.shrinking_waits += sum(1 for a, b in itertools.pairwise(waits) if b < a)
                result.longest_wait_ms = max([result.longest_wait_ms, *waits])
            if never:
                result.never_rounds += 1
                result.give_ups_expected += len(calls)
                result.given_up_with_wrong_attempts += sum(1 for s in calls.values() if len(s) != max_attempts)
                given_up_ids += list(calls)
            else:
                result.recovering_rounds += 1
                result.recovering_uploads += len(calls)
                result.recovered += sum(1 for s in calls.values() if s[-1][1] == "ok")
                result.recovered_with_wrong_attempts += sum(1 for s in calls.values() if len(s) != failures + 1)
                orphans, _missing = audit(LocalDirStore(remote), read_remote_metadata(data, None))
                result.orphan_objects += [f"round {r}: {o}" for o in orphans]
            if progress:
                print(f"round {r}: {'never' if never else f'{failures} failures then ok'}, "
                      f"{sum(map(len, calls.values()))} attempts", flush=True)
        result.give_ups_logged = broker.log_text().count("remote delete given up")
        result.give_ups_in_metric = sum(_metric(metrics_url, "tierlog_remote_delete_given_up_segments", t)
                                        for t in topics)
        status = _tier("status", "--data-dir", str(data))
        result.give_ups_in_status = sum(1 for sid in given_up_ids if any(
            line.startswith(sid) for line in status.stdout.splitlines()))
        result.under_segments_copied = sum(1 for m in read_remote_metadata(data, UNDER)
                                           if m.state is S.COPY_SEGMENT_FINISHED)
    finally:
        if broker.alive():
            code = broker.stop()
            if code != 0:
                result.problems.append(f"the broker exited with {code}: {broker.stderr_tail()}")

    # The store works again: the operator settles each given-up delete with the broker stopped.
    control.write_text(json.dumps({"delete_failures": 0}))
    args = [f"--override={k}={v}" for k, v in plugin.items()]
    for sid in given_up_ids:
        settled = _tier("retry-delete", *args, "--data-dir", str(data), "--", sid)
        if settled.returncode == 0:
            result.settled_by_retry_delete += 1
        else:
            result.problems.append(f"retry-delete {sid}: {settled.stderr.strip()}")
    left = read_remote_metadata(data, None)
    result.leftover_metadata = [f"{m.topic_id_partition} [{m.start_offset}, {m.end_offset}] {m.state.name}"
                                for m in left if m.topic_id_partition.topic != UNDER]
    orphans, _missing = audit(LocalDirStore(remote), left)
    result.orphan_objects += orphans
    result.seconds = time.monotonic() - t0
    return result
