"""The maintenance jobs beside a running broker: ``tierlog spark verify`` while a producer writes and
retention deletes segments reports no damage (the active segment's preallocated index tail, the
batch being written and segments deleted during the job are what a live log looks like)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.broker import BrokerProcess
from tierlog.pipeline import jobs
from tierlog.pipeline.options import parse_options

kafka = pytest.importorskip("confluent_kafka")
admin_mod = pytest.importorskip("confluent_kafka.admin")

pytestmark = pytest.mark.integration
TOPIC = "live"


def _wait(condition: Any, what: str, broker: BrokerProcess, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; broker log:\n{broker.stderr_tail()}")


def test_verify_beside_a_running_broker_reports_no_damage(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data).start()
    stop = threading.Event()
    slow = threading.Event()
    produced = [0]

    def produce() -> None:
        producer = kafka.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        while not stop.is_set():
            # Fast until retention has run, then slowly enough that a job on a loaded machine still
            # finds most of the segments it planned (the broker still rolls and deletes meanwhile).
            for _ in range(2 if slow.is_set() else 40):
                producer.produce(TOPIC, value=b"v" * 120, partition=produced[0] % 2)
                produced[0] += 1
            producer.poll(0)
            time.sleep(0.1)
        producer.flush(30)

    writer = threading.Thread(target=produce, daemon=True)
    try:
        admin = admin_mod.AdminClient({"bootstrap.servers": broker.bootstrap})
        # Small segments and a byte limit: the broker rolls and retention deletes segments while
        # the job runs.
        admin.create_topics([admin_mod.NewTopic(TOPIC, num_partitions=2, replication_factor=1, config={
            "segment.bytes": "8192", "retention.bytes": "200000", "retention.ms": "-1"})])[TOPIC].result(30)
        writer.start()
        part = data / f"{TOPIC}-0"

        def rolled() -> bool:
            logs = sorted(part.glob("*.log"))
            return len(logs) >= 3 and int(logs[0].name.split(".")[0]) > 0  # rolled, and retention ran

        _wait(rolled, "segments rolled and deleted by retention", broker)
        slow.set()
        active = sorted(part.glob("*.index"))[-1]
        raw = active.read_bytes()
        assert len(raw) >= 8 and not any(raw[-8:]), "the active segment's index should be preallocated"
        opts = parse_options({"path": str(data), "subscribe": TOPIC})
        for _ in range(2):
            rows = jobs.verify(spark, opts.paths, opts.remote, [TOPIC])
            assert rows, "verify found no segments"
            damaged = [r for r in rows if not r["ok"]]
            assert not damaged, f"{damaged}\nbroker log:\n{broker.stderr_tail()}"
            assert sum(1 for r in rows if r["skipped"] is None) >= 4, [(r["base_offset"], r["skipped"], r["batches"]) for r in rows]
        assert produced[0] > 0 and writer.is_alive()
    finally:
        stop.set()
        writer.join(60)
        broker.stop()


def test_verify_reads_an_active_index_without_entries_as_empty(tmp_path: Path) -> None:
    """A broker's active segment before its first index entry: the index is all zeros, and its first
    slot reads as an entry (base offset, position 0). Seen beside a live broker on every partition
    whose newest segment was just rolled; it is no damage."""
    from tierlog.config import LogConfig
    from tierlog.records import SimpleRecord, build_batch
    from tierlog.storage.loader import LoadOptions, load_log

    ulog = load_log(tmp_path / "data" / f"{TOPIC}-0", LogConfig.from_props({"retention.ms": -1}), LoadOptions())
    try:
        for i in range(3):
            ulog.append_as_leader(build_batch([SimpleRecord(b"k", b"v" * 10, (), 1_700_000_000_000 + i)] * 5))
        raw = (ulog.dir / "00000000000000000000.index").read_bytes()
        assert len(raw) >= 8 and not any(raw), "the active index should be preallocated and hold no entry yet"
        opts = parse_options({"path": str(tmp_path / "data"), "subscribe": TOPIC})
        [task] = jobs.segment_tasks(opts.discover())
        assert task.last
        check = jobs.verify_segment(task, opts.remote)
        assert check.ok, check.problems
    finally:
        ulog.close()
