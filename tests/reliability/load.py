"""Load: many connections on a broker with many partitions (issue 10, part 5).

``topics`` × ``partitions_per_topic`` partitions are created, then ``connections`` connections are
opened and held. Each round, every connection asks Metadata for its topics, produces one batch to
each of its share of the partitions (between them the connections write every partition), and
fetches each batch back from the offset its acknowledgement gave, checking the value. Figures: the
time to create the partitions, a full Metadata of all of them, request latencies, descriptors, and
RSS at each step against a stated bound.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from tests.helpers.aio_client import AsyncClient, ensure_open_files
from tests.helpers.raw_client import RawClient
from tests.reliability.harness import ChaosBroker, fetch_request, open_fds
from tests.reliability.hostile_clients import MIB, LogWatch, RssWatch, _mib
from tierlog.protocol import ApiKey
from tierlog.records import SimpleRecord, build_batch, decode_batch, iter_headers

#: The stated memory bound: what the broker may hold on top of its RSS with no topics, per
#: partition and per connection (measured: about 6 KiB and 10 KiB; the bound leaves room for the
#: allocator and for the page tables of the indexes' maps).
RSS_PER_PARTITION_BOUND_BYTES = 16 * 1024
RSS_PER_CONNECTION_BOUND_BYTES = 48 * 1024
RSS_BASE_SLACK_BYTES = 96 * MIB


@dataclass
class LoadResult:
    topics: int = 0
    partitions_per_topic: int = 0
    connections: int = 0
    rounds: int = 0
    create_seconds: float = 0.0
    #: One Metadata request for every topic (what an admin listing costs).
    full_metadata_seconds: float = 0.0
    connect_seconds: float = 0.0
    load_seconds: float = 0.0
    requests: int = 0
    #: Seconds per request, by API name.
    latencies_s: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    partitions_written: int = 0
    records_checked: int = 0
    errors: list[str] = field(default_factory=list)
    rss_idle_bytes: int = 0
    rss_after_create_bytes: int = 0
    rss_peak_bytes: int = 0
    rss_end_bytes: int = 0
    rss_bound_bytes: int = 0
    fds_after_create: int = 0
    fds_peak: int = 0
    #: A clean shutdown (every log's producer snapshot and checkpoints), then a start on the same data.
    shutdown_seconds: float | None = None
    restart_seconds: float | None = None
    rss_after_restart_bytes: int = 0
    tracebacks: list[str] = field(default_factory=list)
    crashed: bool = False

    @property
    def partitions(self) -> int:
        return self.topics * self.partitions_per_topic

    @property
    def ok(self) -> bool:
        return (not self.crashed and not self.errors and not self.tracebacks
                and self.partitions_written == self.partitions
                and self.records_checked == self.partitions * self.rounds
                and self.rss_peak_bytes <= self.rss_bound_bytes)

    def _percentile(self, api: str, q: float) -> float:
        values = sorted(self.latencies_s.get(api, []))
        return round(values[min(int(q * len(values)), len(values) - 1)] * 1000, 1) if values else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "topics": self.topics, "partitions": self.partitions, "connections": self.connections,
            "rounds": self.rounds, "create_seconds": round(self.create_seconds, 1),
            "full_metadata_seconds": round(self.full_metadata_seconds, 2),
            "connect_seconds": round(self.connect_seconds, 1), "load_seconds": round(self.load_seconds, 1),
            "requests": self.requests, "requests_per_s": round(self.requests / self.load_seconds) if self.load_seconds else 0,
            **{f"{api}_ms_p50": self._percentile(api, 0.5) for api in sorted(self.latencies_s)},
            **{f"{api}_ms_p99": self._percentile(api, 0.99) for api in sorted(self.latencies_s)},
            "partitions_written": self.partitions_written, "records_checked": self.records_checked,
            "errors": len(self.errors), "tracebacks": len(self.tracebacks), "crashed": self.crashed,
            "rss_idle_mib": _mib(self.rss_idle_bytes), "rss_after_create_mib": _mib(self.rss_after_create_bytes),
            "rss_peak_mib": _mib(self.rss_peak_bytes), "rss_end_mib": _mib(self.rss_end_bytes),
            "rss_bound_mib": _mib(self.rss_bound_bytes),
            "rss_per_partition_kib": round((self.rss_after_create_bytes - self.rss_idle_bytes) / max(self.partitions, 1)
                                           / 1024, 1),
            "fds_after_create": self.fds_after_create, "fds_peak": self.fds_peak,
            "shutdown_seconds": None if self.shutdown_seconds is None else round(self.shutdown_seconds, 1),
            "restart_seconds": None if self.restart_seconds is None else round(self.restart_seconds, 1),
            "rss_after_restart_mib": _mib(self.rss_after_restart_bytes), "ok": self.ok,
        }


def rss_bound(idle_bytes: int, partitions: int, connections: int) -> int:
    return (idle_bytes + RSS_BASE_SLACK_BYTES + partitions * RSS_PER_PARTITION_BOUND_BYTES
            + connections * RSS_PER_CONNECTION_BOUND_BYTES)


def _create_topics(port: int, names: list[str], partitions: int, per_request: int = 20) -> None:
    with RawClient(port, timeout=600) as c:
        for start in range(0, len(names), per_request):
            body = c.call(ApiKey.CREATE_TOPICS, 7, {"topics": [
                {"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [], "configs": []}
                for name in names[start:start + per_request]], "timeout": 600000, "validate_only": False})
            bad = [(t.name, t.error_code, t.error_message) for t in body.topics if t.error_code != 0]
            assert not bad, bad


def _fetch_values(body: Any) -> dict[tuple[str, int], dict[int, bytes | None]]:
    out: dict[tuple[str, int], dict[int, bytes | None]] = {}
    for topic in body.responses:
        for p in topic.partitions:
            out[(topic.topic, p.partition_index)] = {
                r.offset: r.value for h in iter_headers(bytes(p.records or b"")) for r in decode_batch(h)}
    return out


class _Worker:
    """One connection and its share of the partitions."""

    def __init__(self, index: int, share: list[tuple[str, int]], result: LoadResult) -> None:
        self.index = index
        self.share = share
        self.result = result
        self.by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, p in share:
            self.by_topic[topic].append(p)
        self.client: AsyncClient | None = None

    async def _timed(self, api: str, coro: Any) -> Any:
        started = time.perf_counter()
        body = await coro
        self.result.latencies_s[api].append(time.perf_counter() - started)
        self.result.requests += 1
        return body

    async def round(self, number: int) -> None:
        client = self.client
        assert client is not None
        result = self.result
        meta = await self._timed("metadata", client.call(ApiKey.METADATA, 12, {
            "topics": [{"name": t, "topic_id": None} for t in self.by_topic], "allow_auto_topic_creation": False}))
        for t in meta.topics:
            if t.error_code != 0:
                result.errors.append(f"metadata {t.name}: error {t.error_code}")
        now = int(time.time() * 1000)
        values = {tp: f"{tp[0]}/{tp[1]}/{number}/{uuid.uuid4().hex[:8]}".encode() for tp in self.share}
        produced = await self._timed("produce", client.call(ApiKey.PRODUCE, 9, {"acks": -1, "timeout": 30000, "topic_data": [
            {"name": t, "partition_data": [{"index": p, "records": build_batch([SimpleRecord(None, values[(t, p)],
                                                                                              timestamp=now)])}
                                           for p in ps]} for t, ps in self.by_topic.items()]}))
        offsets: dict[tuple[str, int], int] = {}
        for t in produced.responses:
            for p in t.partition_responses:
                if p.error_code != 0:
                    result.errors.append(f"produce {t.name}-{p.index}: error {p.error_code}")
                else:
                    offsets[(t.name, p.index)] = p.base_offset
        fetch = fetch_request("", 0, 0, 1 << 20)
        fetch["topics"] = [{"topic": t, "partitions": [
            {"partition": p, "fetch_offset": offsets.get((t, p), 0), "partition_max_bytes": 1 << 16,
             "current_leader_epoch": -1, "log_start_offset": -1} for p in ps]} for t, ps in self.by_topic.items()]
        fetched = _fetch_values(await self._timed("fetch", client.call(ApiKey.FETCH, 11, fetch)))
        for tp, offset in offsets.items():
            got = fetched.get(tp, {}).get(offset)
            if got != values[tp]:
                result.errors.append(f"fetch {tp[0]}-{tp[1]}@{offset}: {got!r}, produced {values[tp]!r}")
            else:
                result.records_checked += 1


def load(broker: ChaosBroker, *, topics: int = 100, partitions_per_topic: int = 100, connections: int = 1000,
         rounds: int = 3, restart: bool = False) -> LoadResult:
    ensure_open_files(connections + 512, "load")
    result = LoadResult(topics=topics, partitions_per_topic=partitions_per_topic, connections=connections,
                        rounds=rounds)
    logs = LogWatch(broker)
    result.rss_idle_bytes = broker.rss()
    result.rss_bound_bytes = rss_bound(result.rss_idle_bytes, result.partitions, connections)
    rss = RssWatch(broker, interval_s=0.25)
    names = [f"load-{i:04d}" for i in range(topics)]
    started = time.monotonic()
    try:
        _create_topics(broker.port, names, partitions_per_topic)
        result.create_seconds = time.monotonic() - started
        time.sleep(0.5)
        result.rss_after_create_bytes = rss.sample()
        result.fds_after_create = open_fds(broker.pid)
        with RawClient(broker.port, timeout=120) as c:
            t0 = time.monotonic()
            body = c.call(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False})
            result.full_metadata_seconds = time.monotonic() - t0
            listed = sum(len(t.partitions) for t in body.topics if t.name in set(names))
            if listed != result.partitions:
                result.errors.append(f"full metadata lists {listed} partitions, not {result.partitions}")
        every = [(name, p) for p in range(partitions_per_topic) for name in names]
        workers = [_Worker(i, every[i::connections], result) for i in range(connections)]
        result.partitions_written = sum(len(w.share) for w in workers)
        asyncio.run(_drive(broker, workers, rounds, result))
        result.fds_peak = max(result.fds_peak, open_fds(broker.pid))
    finally:
        result.crashed = not broker.alive()
        result.rss_end_bytes = rss.stop() if broker.alive() else 0
        result.rss_peak_bytes = rss.peak_bytes
        result.tracebacks = logs.tracebacks()
    if restart and broker.alive():
        t0 = time.monotonic()
        code = broker.stop(timeout=900)
        result.shutdown_seconds = time.monotonic() - t0
        if code != 0:
            result.errors.append(f"the broker stopped with exit code {code}")
        t0 = time.monotonic()
        broker.start()
        result.restart_seconds = time.monotonic() - t0
        result.rss_after_restart_bytes = broker.rss()
    return result


async def _drive(broker: ChaosBroker, workers: list[_Worker], rounds: int, result: LoadResult) -> None:
    t0 = time.monotonic()
    wave = 200
    for start in range(0, len(workers), wave):
        batch = workers[start:start + wave]
        clients = await asyncio.gather(*(AsyncClient.connect(broker.port, client_id=f"load-{w.index}", timeout_s=60)
                                         for w in batch))
        for w, c in zip(batch, clients, strict=True):
            w.client = c
    result.connect_seconds = time.monotonic() - t0
    result.fds_peak = open_fds(broker.pid)
    t0 = time.monotonic()
    try:
        for number in range(rounds):
            outcomes = await asyncio.gather(*(w.round(number) for w in workers), return_exceptions=True)
            for w, outcome in zip(workers, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    result.errors.append(f"connection {w.index}, round {number}: {type(outcome).__name__}: {outcome}")
            result.fds_peak = max(result.fds_peak, open_fds(broker.pid))
    finally:
        result.load_seconds = time.monotonic() - t0
        for w in workers:
            if w.client is not None:
                w.client.abort()
