"""Machinery shared by the reliability scenarios and ``bench/chaos.py``: a broker process on a fixed
port (so clients reconnect to it after a SIGKILL), a partition reader that checks the CRC of every
batch the broker serves, and RSS readings from /proc. The raw protocol client, the port picker and
``wait_until`` are in tests/helpers (other test packages use them too)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers.broker import BrokerProcess
from tests.helpers.ports import free_port
from tests.helpers.raw_client import RawClient
from tierlog.errors import CorruptRecordError, ErrorCode
from tierlog.protocol import ApiKey
from tierlog.records import decode_batch, iter_headers


def _proc_status_kib(pid: int, field_name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    raise KeyError(field_name)


def rss_bytes(pid: int) -> int:
    return _proc_status_kib(pid, "VmRSS") * 1024


def peak_rss_bytes(pid: int) -> int:
    return _proc_status_kib(pid, "VmHWM") * 1024


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class ChaosBroker(BrokerProcess):
    """``tierlog serve`` on a port that stays the same across restarts."""

    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None, *, port: int | None = None,
                 env: dict[str, str] | None = None) -> None:
        super().__init__(data_dir, overrides, env)
        self.port = self.fixed_port = port or free_port()
        self.starts = 0

    def command(self) -> list[str]:
        return [f"listeners=PLAINTEXT://127.0.0.1:{self.fixed_port}" if arg == "listeners=PLAINTEXT://127.0.0.1:0"
                else arg for arg in super().command()]

    def start(self) -> ChaosBroker:
        self.starts += 1
        super().start()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def sigkill(self) -> None:
        proc = self.proc
        assert proc is not None
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if self._drainer is not None:
            self._drainer.join(10)

    def kill_while_starting(self, after_s: float) -> None:
        """Start a broker and SIGKILL it ``after_s`` seconds later, listening or not (a crash during
        log recovery or metadata replay)."""
        assert self.proc is None or self.proc.poll() is not None
        with open(self.log_path, "a") as stderr:
            proc = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL, stderr=stderr,
                                    env=None if self.env is None else {**os.environ, **self.env})
        time.sleep(after_s)
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def rss(self) -> int:
        return rss_bytes(self.pid)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


def api_versions_ok(port: int, timeout: float = 10.0) -> bool:
    """The broker answers an ApiVersions request on a new connection."""
    try:
        with RawClient(port, timeout=timeout) as c:
            return bool(c.call(ApiKey.API_VERSIONS, 3, {"client_software_name": "chaos",
                                                        "client_software_version": "1"}).error_code == ErrorCode.NONE)
    except OSError:
        return False


def create_topic(port: int, name: str, partitions: int, configs: dict[str, str] | None = None) -> None:
    with RawClient(port) as c:
        body = c.call(ApiKey.CREATE_TOPICS, 7, {"topics": [
            {"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
             "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
            "timeout": 60000, "validate_only": False})
    assert body.topics[0].error_code == ErrorCode.NONE, body


def fetch_request(topic: str, partition: int, offset: int, max_bytes: int) -> dict[str, Any]:
    return {"max_wait": 0, "min_bytes": 0, "max_bytes": max_bytes, "isolation_level": 0, "session_id": 0,
            "session_epoch": -1, "replica_id": -1, "topics": [
                {"topic": topic, "partitions": [{"partition": partition, "fetch_offset": offset,
                                                 "partition_max_bytes": max_bytes, "current_leader_epoch": -1,
                                                 "log_start_offset": -1}]}],
            "forgotten_topics_data": [], "rack_id": ""}


@dataclass
class PartitionRead:
    """What a consumer reading a partition from ``start`` to the high watermark got."""

    records: list[tuple[int, bytes | None]] = field(default_factory=list)
    batches: int = 0
    #: Base offsets of served batches that fail their CRC or do not even parse (must stay empty).
    bad_batches: list[int] = field(default_factory=list)
    #: The error the broker answered with at ``error_offset`` (0: read to the high watermark).
    error_code: int = ErrorCode.NONE
    error_offset: int | None = None
    high_watermark: int = -1
    log_start_offset: int = -1

    @property
    def next_offset(self) -> int:
        return self.records[-1][0] + 1 if self.records else 0


def read_partition(client: RawClient, topic: str, partition: int, start: int = 0, *,
                   max_bytes: int = 1 << 20) -> PartitionRead:
    """Fetch from ``start`` to the high watermark, checking the CRC of every batch served."""
    out = PartitionRead()
    offset = start
    stalled = 0
    while True:
        body = client.call(ApiKey.FETCH, 11, fetch_request(topic, partition, offset, max_bytes))
        p = body.responses[0].partitions[0]
        out.high_watermark, out.log_start_offset = p.high_watermark, p.log_start_offset
        if p.error_code != ErrorCode.NONE:
            if p.error_code == 1 and offset < p.log_start_offset:  # OFFSET_OUT_OF_RANGE below the start
                offset = p.log_start_offset
                continue
            out.error_code, out.error_offset = p.error_code, offset
            return out
        if offset >= p.high_watermark:
            return out
        data = bytes(p.records or b"")
        progressed = False
        try:
            for header in iter_headers(data):
                try:
                    header.ensure_valid()
                except CorruptRecordError:
                    out.bad_batches.append(header.base_offset)
                    offset = max(offset, header.last_offset + 1)
                    progressed = True
                    continue
                out.batches += 1
                for record in decode_batch(header):
                    if record.offset >= offset:
                        out.records.append((record.offset, record.value))
                offset = max(offset, header.last_offset + 1)
                progressed = True
        except CorruptRecordError:
            # Bytes that are not even a batch header: served garbage.
            out.bad_batches.append(offset)
            return out
        if not progressed:
            stalled += 1
            if stalled > 3:
                out.error_code, out.error_offset = -1, offset  # data below the watermark never arrives
                return out


def committed_offsets(port: int, group: str, topic: str, partitions: int) -> dict[int, int]:
    with RawClient(port) as c:
        body = c.call(ApiKey.OFFSET_FETCH, 7, {"group_id": group, "require_stable": False, "topics": [
            {"name": topic, "partition_indexes": list(range(partitions))}]})
    assert body.error_code == ErrorCode.NONE, body
    return {p.partition_index: p.committed_offset for t in body.topics for p in t.partitions
            if p.error_code == ErrorCode.NONE and p.committed_offset >= 0}
