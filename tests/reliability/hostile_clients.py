"""Hostile clients against a running broker, each scenario returning figures for the test (short) and
``bench/chaos.py`` (long) to judge:

* :func:`fuzz` -- random frames, size prefixes that lie, and valid requests of every advertised
  API/version (hypothesis) mutated by a seeded mutator, on many connections; after every batch a
  well-behaved client produces and fetches, and the broker must not crash, log a traceback or grow;
* :func:`slow_clients` -- half a frame then a stall, a byte a second (slowloris), clients that
  pipeline fetches and never read, and many clients each holding part of a large request;
* :func:`connection_flood` -- thousands of connections, all served; :func:`connection_limits` --
  ``max.connections`` and ``max.connections.per.ip`` refuse the excess while the rest are served;
* :func:`load` (in :mod:`tests.reliability.load`) -- 1,000 connections on 10,000 partitions.

Every scenario runs a :class:`HealthProbe` (one produce and one fetch of a record it checks, on a
connection of its own) while the hostile clients do their worst.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import struct
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers.aio_client import AsyncClient, ensure_open_files
from tests.helpers.raw_client import RawClient
from tests.reliability.fuzz_inputs import FuzzInput, FuzzInputs, FuzzTarget
from tests.reliability.harness import ChaosBroker, create_topic, fetch_request, open_fds
from tierlog.protocol import ApiKey, MalformedResponseError, build_request, encode_request, parse_response
from tierlog.records import SimpleRecord, build_batch, decode_batch, iter_headers

MIB = 1 << 20
TRACEBACK = "Traceback (most recent call last)"


# --- what every scenario watches ---------------------------------------------------------------------


class HealthError(Exception):
    pass


class HealthProbe:
    """A well-behaved client: produces one record (acks=all) and fetches it back from its offset.
    It reconnects once if the broker closed its connection (an idle timeout between checks)."""

    def __init__(self, port: int, topic: str | None = None, timeout_s: float = 10.0) -> None:
        self.port = port
        self.timeout_s = timeout_s
        self.topic = topic or f"health-{uuid.uuid4().hex[:8]}"
        create_topic(port, self.topic, 1)
        self.client: RawClient | None = None
        self.checks = 0
        self.latencies_s: list[float] = []

    def _connection(self) -> RawClient:
        if self.client is None:
            self.client = RawClient(self.port, timeout=self.timeout_s, client_id="health")
        return self.client

    def check(self) -> float:
        """Seconds one produce and one fetch took; HealthError if either failed or took too long."""
        started = time.monotonic()
        for attempt in (1, 2):
            try:
                self._round_trip()
                break
            except (ConnectionError, TimeoutError, OSError) as e:
                if self.client is not None:
                    self.client.close()
                    self.client = None
                if attempt == 2 or isinstance(e, TimeoutError):
                    raise HealthError(f"health check failed: {type(e).__name__}: {e}") from None
        elapsed = time.monotonic() - started
        self.checks += 1
        self.latencies_s.append(elapsed)
        return elapsed

    def _round_trip(self) -> None:
        client = self._connection()
        value = uuid.uuid4().bytes
        batch = build_batch([SimpleRecord(None, value, timestamp=int(time.time() * 1000))])
        produced = client.call(ApiKey.PRODUCE, 9, {"acks": -1, "timeout": 10000, "topic_data": [
            {"name": self.topic, "partition_data": [{"index": 0, "records": batch}]}]})
        p = produced.responses[0].partition_responses[0]
        if p.error_code != 0:
            raise HealthError(f"produce answered error {p.error_code}")
        fetched = client.call(ApiKey.FETCH, 11, fetch_request(self.topic, 0, p.base_offset, 1 << 16))
        records = fetched.responses[0].partitions[0]
        if records.error_code != 0:
            raise HealthError(f"fetch answered error {records.error_code}")
        values = [r.value for h in iter_headers(bytes(records.records or b"")) for r in decode_batch(h)
                  if r.offset == p.base_offset]
        if values != [value]:
            raise HealthError(f"fetch at {p.base_offset} returned {values!r}, not the record just produced")

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None

    @property
    def max_latency_s(self) -> float:
        return max(self.latencies_s, default=0.0)


class RssWatch:
    """Samples the broker's RSS in a thread (every ``interval_s``) for its peak between two points."""

    def __init__(self, broker: ChaosBroker, interval_s: float = 0.2) -> None:
        self.broker = broker
        self.interval_s = interval_s
        self.start_bytes = broker.rss()
        self.peak_bytes = self.start_bytes
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="rss-watch")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> int:
        try:
            rss = self.broker.rss()
        except (FileNotFoundError, ProcessLookupError, AssertionError):
            return 0
        self.samples.append(rss)
        self.peak_bytes = max(self.peak_bytes, rss)
        return rss

    def peak_since(self, mark: int, floor: int = 0) -> int:
        """The highest sample taken since ``len(samples)`` was ``mark``."""
        return max([*self.samples[mark:], floor])

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.sample()


class LogWatch:
    """Tracebacks the broker logged since this watch was made."""

    def __init__(self, broker: ChaosBroker) -> None:
        self.broker = broker
        self.offset = len(broker.log_text())

    def new_text(self) -> str:
        return self.broker.log_text()[self.offset:]

    def tracebacks(self) -> list[str]:
        """Each traceback in the new text, from the log line before it to the exception line."""
        lines = self.new_text().splitlines()
        out = []
        for i, line in enumerate(lines):
            if line.startswith(TRACEBACK):
                end = next((j for j in range(i + 1, len(lines)) if not lines[j].startswith(" ")), i)
                out.append("\n".join(lines[max(i - 1, 0):end + 1]))
        return out


def _mib(n: int) -> float:
    return round(n / MIB, 1)


# --- fuzz ------------------------------------------------------------------------------------------


@dataclass
class FuzzResult:
    inputs_sent: int = 0
    inputs_by_kind: Counter[str] = field(default_factory=Counter)
    connections: int = 0
    #: Connections the broker closed (a bad frame, a request it refused, the receive timeout).
    closed_by_broker: int = 0
    #: Connections still open at the deadline (a long-polling fetch, a join waiting for a rebalance).
    unfinished_connections: int = 0
    connect_failures: int = 0
    responses: int = 0
    #: Responses carrying a non-zero error code somewhere (the answer to a bad but parseable request).
    error_responses: int = 0
    #: Responses whose correlation id matched no request sent (a mutated header) -- not parsed.
    unmatched_responses: int = 0
    #: Responses that did not parse as the answer to their request: a broker bug.
    unparseable_responses: list[str] = field(default_factory=list)
    health_checks: int = 0
    health_failures: list[str] = field(default_factory=list)
    health_max_latency_s: float = 0.0
    crashes: int = 0
    hangs: int = 0
    tracebacks: list[str] = field(default_factory=list)
    rss_start_bytes: int = 0
    rss_peak_bytes: int = 0
    rss_end_bytes: int = 0
    #: How much RSS may grow over the run (the stated bound the result is judged by).
    rss_growth_bound_bytes: int = 0
    #: RSS after each batch: a leak shows as growth that goes on through the second half.
    rss_by_batch: list[int] = field(default_factory=list)
    fds_start: int = 0
    fds_end: int = 0
    seconds: float = 0.0
    saved_inputs: list[str] = field(default_factory=list)

    @property
    def rss_growth_second_half_bytes(self) -> int:
        half = self.rss_by_batch[len(self.rss_by_batch) // 2:]
        return max(half) - half[0] if half else 0

    @property
    def ok(self) -> bool:
        return (self.crashes == 0 and self.hangs == 0 and not self.tracebacks and not self.health_failures
                and not self.unparseable_responses and self.inputs_sent > 0
                and self.rss_peak_bytes - self.rss_start_bytes <= self.rss_growth_bound_bytes
                and self.rss_growth_second_half_bytes <= self.rss_growth_bound_bytes // 2)

    def summary(self) -> dict[str, Any]:
        return {
            "inputs_sent": self.inputs_sent, "inputs_by_kind": dict(self.inputs_by_kind),
            "inputs_per_s": round(self.inputs_sent / self.seconds) if self.seconds else 0,
            "connections": self.connections, "closed_by_broker": self.closed_by_broker,
            "unfinished_connections": self.unfinished_connections, "connect_failures": self.connect_failures,
            "responses": self.responses, "error_responses": self.error_responses,
            "unmatched_responses": self.unmatched_responses, "unparseable_responses": len(self.unparseable_responses),
            "health_checks": self.health_checks, "health_failures": len(self.health_failures),
            "health_max_latency_s": round(self.health_max_latency_s, 3),
            "crashes": self.crashes, "hangs": self.hangs, "tracebacks": len(self.tracebacks),
            "rss_start_mib": _mib(self.rss_start_bytes), "rss_peak_mib": _mib(self.rss_peak_bytes),
            "rss_end_mib": _mib(self.rss_end_bytes), "rss_growth_bound_mib": _mib(self.rss_growth_bound_bytes),
            "rss_growth_second_half_mib": _mib(self.rss_growth_second_half_bytes),
            "fds_start": self.fds_start, "fds_end": self.fds_end, "seconds": round(self.seconds, 1), "ok": self.ok,
        }


def fuzz_target(port: int, topic: str = "fuzz-target", partitions: int = 4) -> FuzzTarget:
    """Create the topic the seed requests name (with some records in it) and a producer id."""
    create_topic(port, topic, partitions)
    with RawClient(port) as c:
        meta = c.call(ApiKey.METADATA, 12, {"topics": [{"name": topic, "topic_id": None}],
                                            "allow_auto_topic_creation": False})
        init = c.call(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                                   "producer_id": -1, "producer_epoch": -1})
        for p in range(partitions):
            batch = build_batch([SimpleRecord(None, b"seed", timestamp=int(time.time() * 1000))])
            c.call(ApiKey.PRODUCE, 9, {"acks": -1, "timeout": 5000, "topic_data": [
                {"name": topic, "partition_data": [{"index": p, "records": batch}]}]})
    return FuzzTarget(topic, meta.topics[0].topic_id, partitions, producer_id=init.producer_id)


def _has_error(body: Any) -> bool:
    if dataclasses.is_dataclass(body):
        for f in dataclasses.fields(body):
            value = getattr(body, f.name)
            if f.name == "error_code" and int(value) != 0:
                return True
            if (dataclasses.is_dataclass(value) or isinstance(value, tuple)) and _has_error(value):
                return True
    elif isinstance(body, tuple):
        return any(_has_error(item) for item in body if dataclasses.is_dataclass(item) or isinstance(item, tuple))
    return False


_SENTINEL_VALUES = {"client_software_name": "fuzz", "client_software_version": "1"}


async def _fuzz_connection(port: int, items: list[FuzzInput], sentinel_corr: int, deadline_s: float,
                           result: FuzzResult) -> None:
    """Send ``items`` pipelined, then an ApiVersions whose answer means every earlier request has
    been answered (responses come in order); read until then, until the broker closes, or until the
    deadline."""
    try:
        client = await AsyncClient.connect(port, client_id="fuzz", timeout_s=10.0)
    except (OSError, TimeoutError):
        result.connect_failures += 1
        return
    result.connections += 1
    expected = {i.correlation_id: (i.api_key, i.api_version) for i in items if i.correlation_id is not None}
    data = b"".join(i.data for i in items)
    if not items[-1].desync:
        data += encode_request(ApiKey.API_VERSIONS, 3, sentinel_corr, "fuzz",
                               build_request(ApiKey.API_VERSIONS, 3, _SENTINEL_VALUES))
    try:
        client.writer.write(data)
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline_s
        while True:
            left = end - loop.time()
            if left <= 0:
                result.unfinished_connections += 1
                return
            try:
                frame = await client.read_frame(left)
            except TimeoutError:
                result.unfinished_connections += 1
                return
            if frame is None:
                result.closed_by_broker += 1
                return
            result.responses += 1
            corr = struct.unpack_from(">i", frame)[0] if len(frame) >= 4 else None
            if corr == sentinel_corr:
                return
            if corr not in expected:
                result.unmatched_responses += 1
                continue
            api_key, version = expected.pop(corr)
            assert api_key is not None and version is not None
            try:
                _, body = parse_response(api_key, version, frame)
            except MalformedResponseError as e:
                result.unparseable_responses.append(f"API {api_key} v{version}: {e}")
                continue
            if _has_error(body):
                result.error_responses += 1
    finally:
        client.abort()


def fuzz(broker: ChaosBroker, inputs: int, *, seed: int = 0, concurrency: int = 24, batch_inputs: int = 1000,
         max_per_connection: int = 6, connection_deadline_s: float = 4.0,
         rss_growth_bound_bytes: int = 128 * MIB, failures_dir: Path | None = None,
         per_version: int = 6) -> FuzzResult:
    """Send ``inputs`` hostile inputs to ``broker`` on ``concurrency`` connections at a time; a health
    check after every ``batch_inputs``."""
    result = FuzzResult(rss_growth_bound_bytes=rss_growth_bound_bytes)
    max_frame = int(broker.overrides.get("socket.request.max.bytes", 104857600))
    target = fuzz_target(broker.port)
    source = FuzzInputs(target, seed=seed, per_version=per_version, max_frame_bytes=max_frame)
    probe = HealthProbe(broker.port)
    logs = LogWatch(broker)
    probe.check()  # warm: the probe's own topic and connection exist before the baseline is taken
    rss = RssWatch(broker)
    result.rss_start_bytes, result.fds_start = rss.start_bytes, open_fds(broker.pid)
    started = time.monotonic()
    recent: list[FuzzInput] = []
    seen_tracebacks = 0

    async def run() -> None:
        nonlocal seen_tracebacks
        sentinel = iter(range(0x7F000000, 0x7FFFFFFF))
        next_check = batch_inputs
        pending: set[asyncio.Task[None]] = set()
        while result.inputs_sent < inputs or pending:
            while result.inputs_sent < inputs and len(pending) < concurrency:
                count = min(source.rng.randrange(1, max_per_connection + 1), inputs - result.inputs_sent)
                items = source.connection_inputs(count)
                result.inputs_sent += len(items)
                result.inputs_by_kind.update(i.kind for i in items)
                recent.extend(items)
                pending.add(asyncio.create_task(
                    _fuzz_connection(broker.port, items, next(sentinel), connection_deadline_s, result)))
            done, pending_left = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            pending.clear()
            pending.update(pending_left)
            for task in done:
                task.result()
            if result.inputs_sent >= next_check or (result.inputs_sent >= inputs and not pending):
                next_check += batch_inputs
                if not broker.alive():
                    result.crashes += 1
                    _save(failures_dir, "crash", recent, result)
                    return
                try:
                    await asyncio.to_thread(probe.check)
                except HealthError as e:
                    result.health_failures.append(str(e))
                    if "TimeoutError" in str(e):
                        result.hangs += 1  # the broker did not answer a well-behaved client in time
                result.rss_by_batch.append(rss.sample())
                tracebacks = logs.tracebacks()
                if len(tracebacks) > seen_tracebacks:
                    seen_tracebacks = len(tracebacks)
                    _save(failures_dir, "traceback", recent, result)
                recent.clear()

    try:
        asyncio.run(run())
    finally:
        probe.close()
        result.seconds = time.monotonic() - started
        result.rss_end_bytes = rss.stop() if broker.alive() else 0
        result.rss_peak_bytes = rss.peak_bytes
        result.fds_end = open_fds(broker.pid) if broker.alive() else 0
        result.health_checks = probe.checks
        result.health_max_latency_s = probe.max_latency_s
        result.tracebacks = logs.tracebacks()
    return result


def _save(failures_dir: Path | None, why: str, items: list[FuzzInput], result: FuzzResult) -> None:
    """Keep the inputs of the batch in which something went wrong (hex, one per line) to replay."""
    if failures_dir is None:
        return
    failures_dir.mkdir(parents=True, exist_ok=True)
    path = failures_dir / f"{why}-{result.inputs_sent}.txt"
    path.write_text("".join(f"{i.kind} {i.data.hex()}\n" for i in items))
    result.saved_inputs.append(str(path))


# --- slow clients ----------------------------------------------------------------------------------


@dataclass
class SlowClientsResult:
    receive_timeout_s: float = 0.0
    idle_timeout_s: float = 0.0
    #: Half a frame, then nothing: seconds until the broker closed each (None: never).
    half_frame_close_s: list[float | None] = field(default_factory=list)
    #: A byte a second: seconds until closed, and bytes it got in.
    slowloris_close_s: list[float | None] = field(default_factory=list)
    slowloris_bytes_sent: list[int] = field(default_factory=list)
    #: Clients that pipeline fetches and never read: requests the broker took before it stopped
    #: reading, seconds until it closed each, and the RSS they cost.
    never_reading_requests_taken: list[int] = field(default_factory=list)
    never_reading_requests_offered: int = 0
    never_reading_close_s: list[float | None] = field(default_factory=list)
    never_reading_rss_growth_bytes: int = 0
    never_reading_rss_bound_bytes: int = 0
    #: Many clients each sending most of a large request, then stalling (queued.max.request.bytes).
    partial_clients: int = 0
    partial_declared_bytes: int = 0
    partial_sent_bytes: int = 0
    partial_rss_growth_bytes: int = 0
    partial_rss_bound_bytes: int = 0
    partial_close_s: list[float | None] = field(default_factory=list)
    health_checks: int = 0
    health_failures: list[str] = field(default_factory=list)
    health_max_latency_s: float = 0.0
    #: The stated bound on a health check's latency while the clients above misbehave.
    health_latency_bound_s: float = 0.0
    tracebacks: list[str] = field(default_factory=list)
    crashed: bool = False
    rss_start_bytes: int = 0
    rss_peak_bytes: int = 0
    rss_end_bytes: int = 0
    seconds: float = 0.0

    def _closed_in_time(self, closes: list[float | None], bound_s: float) -> bool:
        return all(c is not None and c <= bound_s for c in closes)

    @property
    def ok(self) -> bool:
        slack = 5.0
        return (not self.crashed and not self.health_failures and not self.tracebacks
                and self.health_max_latency_s <= self.health_latency_bound_s
                and self._closed_in_time(self.half_frame_close_s, self.receive_timeout_s + slack)
                and self._closed_in_time(self.slowloris_close_s, self.receive_timeout_s + slack)
                and self._closed_in_time(self.never_reading_close_s, self.idle_timeout_s + slack)
                and self._closed_in_time(self.partial_close_s, self.receive_timeout_s + slack)
                and all(t < self.never_reading_requests_offered for t in self.never_reading_requests_taken)
                and self.never_reading_rss_growth_bytes <= self.never_reading_rss_bound_bytes
                and self.partial_rss_growth_bytes <= self.partial_rss_bound_bytes)

    def summary(self) -> dict[str, Any]:
        def worst(closes: list[float | None]) -> float | None:
            done = [c for c in closes if c is not None]
            return None if len(done) < len(closes) else round(max(done, default=0.0), 2)

        return {
            "receive_timeout_s": self.receive_timeout_s, "idle_timeout_s": self.idle_timeout_s,
            "half_frame_clients": len(self.half_frame_close_s), "half_frame_slowest_close_s": worst(self.half_frame_close_s),
            "slowloris_clients": len(self.slowloris_close_s), "slowloris_slowest_close_s": worst(self.slowloris_close_s),
            "slowloris_max_bytes_sent": max(self.slowloris_bytes_sent, default=0),
            "never_reading_clients": len(self.never_reading_close_s),
            "never_reading_requests_offered": self.never_reading_requests_offered,
            "never_reading_max_requests_taken": max(self.never_reading_requests_taken, default=0),
            "never_reading_slowest_close_s": worst(self.never_reading_close_s),
            "never_reading_rss_growth_mib": _mib(self.never_reading_rss_growth_bytes),
            "never_reading_rss_bound_mib": _mib(self.never_reading_rss_bound_bytes),
            "partial_clients": self.partial_clients, "partial_declared_mib": _mib(self.partial_declared_bytes),
            "partial_sent_mib_each": _mib(self.partial_sent_bytes),
            "partial_rss_growth_mib": _mib(self.partial_rss_growth_bytes),
            "partial_rss_bound_mib": _mib(self.partial_rss_bound_bytes),
            "partial_slowest_close_s": worst(self.partial_close_s),
            "health_checks": self.health_checks, "health_failures": len(self.health_failures),
            "health_max_latency_s": round(self.health_max_latency_s, 3),
            "health_latency_bound_s": self.health_latency_bound_s,
            "tracebacks": len(self.tracebacks), "crashed": self.crashed,
            "rss_start_mib": _mib(self.rss_start_bytes), "rss_peak_mib": _mib(self.rss_peak_bytes),
            "rss_end_mib": _mib(self.rss_end_bytes), "seconds": round(self.seconds, 1), "ok": self.ok,
        }


def _broker_setting_s(broker: ChaosBroker, key: str, default_ms: int) -> float:
    return int(broker.overrides.get(key, default_ms)) / 1000.0


async def _watch_close(client: AsyncClient, started: float, timeout_s: float) -> float | None:
    """Seconds from ``started`` until the broker closed ``client`` (None: not within ``timeout_s``)."""
    loop = asyncio.get_running_loop()
    closed = await client.closed_by_peer(max(timeout_s - (loop.time() - started), 0.1))
    return loop.time() - started if closed else None


async def _health_loop(probe: HealthProbe, stop: asyncio.Event, failures: list[str], interval_s: float = 0.5) -> None:
    while not stop.is_set():
        try:
            await asyncio.to_thread(probe.check)
        except HealthError as e:
            failures.append(str(e))
        try:
            await asyncio.wait_for(stop.wait(), interval_s)
        except TimeoutError:
            pass


def _half_frame() -> bytes:
    frame = encode_request(ApiKey.METADATA, 12, 1, "stall", build_request(ApiKey.METADATA, 12, {
        "topics": None, "allow_auto_topic_creation": False}))
    return frame[:len(frame) // 2]


async def _half_frame_clients(port: int, count: int, bound_s: float) -> list[float | None]:
    loop = asyncio.get_running_loop()
    clients = [await AsyncClient.connect(port, client_id="stall") for _ in range(count)]
    started = loop.time()
    for c in clients:
        c.writer.write(_half_frame())
    closes = await asyncio.gather(*(_watch_close(c, started, bound_s) for c in clients))
    for c in clients:
        c.abort()
    return list(closes)


async def _slowloris(port: int, interval_s: float, bound_s: float) -> tuple[float | None, int]:
    loop = asyncio.get_running_loop()
    client = await AsyncClient.connect(port, client_id="slowloris")
    frame = encode_request(ApiKey.API_VERSIONS, 3, 1, "slowloris", build_request(
        ApiKey.API_VERSIONS, 3, {"client_software_name": "slowloris", "client_software_version": "1"}))
    frame = frame + bytes(1000)  # long enough never to finish within the bound at a byte a second
    started = loop.time()
    sent = 0
    closer = asyncio.create_task(_watch_close(client, started, bound_s))
    try:
        while not closer.done() and sent < len(frame) and loop.time() - started < bound_s:
            try:
                client.writer.write(frame[sent:sent + 1])
                await client.writer.drain()
            except ConnectionError:
                break
            sent += 1
            await asyncio.sleep(interval_s)
        return await closer, sent
    finally:
        client.abort()


def _never_reading_clients(port: int, topic: str, count: int, fetches: int) -> list[tuple[socket.socket, int, float]]:
    """``count`` connections with a tiny receive window, each pushing ``fetches`` fetch requests
    (without blocking) and never reading an answer. For each: the socket, how many requests went
    out before the broker stopped taking bytes (nothing moved for half a second), and when it
    connected (monotonic seconds)."""
    one = encode_request(ApiKey.FETCH, 11, 1, "never-reads", build_request(
        ApiKey.FETCH, 11, fetch_request(topic, 0, 0, 4 * MIB)))
    clients: list[tuple[socket.socket, bytearray, list[int], float]] = []
    for _ in range(count):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        sock.connect(("127.0.0.1", port))
        sock.setblocking(False)
        data = bytearray(b"".join(one[:8] + struct.pack(">i", corr) + one[12:] for corr in range(1, fetches + 1)))
        clients.append((sock, data, [0], time.monotonic()))
    stalled_since: dict[int, float] = {}
    while len(stalled_since) < len(clients):
        for i, (sock, data, sent, _) in enumerate(clients):
            if i in stalled_since and time.monotonic() - stalled_since[i] > 0.5:
                continue
            try:
                n = sock.send(data[sent[0]:sent[0] + (1 << 16)]) if sent[0] < len(data) else 0
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError:
                n, stalled_since[i] = 0, 0.0  # already closed: nothing more goes in
            sent[0] += n
            if n:
                stalled_since.pop(i, None)
            else:
                stalled_since.setdefault(i, time.monotonic())
        time.sleep(0.01)
    return [(sock, sent[0] // len(one), connected) for sock, _, sent, connected in clients]


def _wait_resets(clients: list[tuple[socket.socket, int, float]], timeout_s: float) -> list[float | None]:
    """For each connection we never read from: seconds from its connection until the broker reset
    it (None: not within ``timeout_s``)."""
    closed: list[float | None] = [None] * len(clients)
    while True:
        for i, (sock, _, connected) in enumerate(clients):
            if closed[i] is not None:
                continue
            failed = bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
            if not failed:
                try:
                    sock.send(b"\x00")  # only fails once the broker has reset the connection
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    failed = True
            if failed:
                closed[i] = time.monotonic() - connected
        if all(c is not None for c in closed) or all(time.monotonic() - c[2] > timeout_s for c in clients):
            return closed
        time.sleep(0.1)


def _fill_topic(port: int, topic: str, megabytes: int) -> None:
    create_topic(port, topic, 1)
    with RawClient(port) as c:
        for _ in range(megabytes):
            batch = build_batch([SimpleRecord(None, bytes(1000), timestamp=int(time.time() * 1000))
                                 for _ in range(1000)])
            body = c.call(ApiKey.PRODUCE, 9, {"acks": 1, "timeout": 10000, "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
            assert body.responses[0].partition_responses[0].error_code == 0, body


async def _partial_clients(port: int, count: int, declared: int, send: int, bound_s: float) -> list[float | None]:
    """``count`` clients each declaring a ``declared``-byte request and sending ``send`` bytes of it."""
    loop = asyncio.get_running_loop()
    clients = [await AsyncClient.connect(port, client_id="partial") for _ in range(count)]
    started = loop.time()
    head = encode_request(ApiKey.PRODUCE, 9, 1, "partial", build_request(ApiKey.PRODUCE, 9, {
        "acks": 1, "timeout": 1000, "topic_data": []}))[4:]
    for c in clients:
        c.writer.write(struct.pack(">i", declared) + head + bytes(send - len(head)))
    closes = await asyncio.gather(*(_watch_close(c, started, bound_s) for c in clients))
    for c in clients:
        c.abort()
    return list(closes)


def slow_clients(broker: ChaosBroker, *, half_frame: int = 20, slowloris: int = 5, slowloris_interval_s: float = 1.0,
                 never_reading: int = 4, fetches_per_reader: int = 5000, partial: int = 40,
                 partial_declared_bytes: int = 64 * MIB, partial_sent_bytes: int = 8 * MIB,
                 health_latency_bound_s: float | None = None) -> SlowClientsResult:
    """Every kind of slow client at once, with a health probe going; the broker's timeouts are read
    from its overrides (``socket.request.receive.timeout.ms``, ``connections.max.idle.ms``)."""
    result = SlowClientsResult(
        receive_timeout_s=_broker_setting_s(broker, "socket.request.receive.timeout.ms", 30000),
        idle_timeout_s=_broker_setting_s(broker, "connections.max.idle.ms", 600000),
        partial_clients=partial, partial_declared_bytes=partial_declared_bytes, partial_sent_bytes=partial_sent_bytes)
    queued_max = int(broker.overrides.get("queued.max.request.bytes", 536870912))
    # While many clients hold the memory bound, a health check may wait for one of them to time out.
    result.health_latency_bound_s = health_latency_bound_s or result.receive_timeout_s + 5.0
    topic = f"never-read-{uuid.uuid4().hex[:6]}"
    _fill_topic(broker.port, topic, 8)
    probe = HealthProbe(broker.port)
    logs = LogWatch(broker)
    probe.check()
    rss = RssWatch(broker, interval_s=0.1)
    result.rss_start_bytes = rss.start_bytes
    started = time.monotonic()
    close_bound_s = max(result.receive_timeout_s, result.idle_timeout_s) + 10.0

    async def run() -> None:
        stop = asyncio.Event()
        health = asyncio.create_task(_health_loop(probe, stop, result.health_failures))
        try:
            # 1: half a frame, then a stall; 2: a byte a second -- both at once.
            halves = asyncio.create_task(_half_frame_clients(broker.port, half_frame, close_bound_s))
            loris = [asyncio.create_task(_slowloris(broker.port, slowloris_interval_s, close_bound_s))
                     for _ in range(slowloris)]
            result.half_frame_close_s = await halves
            for task in loris:
                closed, sent = await task
                result.slowloris_close_s.append(closed)
                result.slowloris_bytes_sent.append(sent)
            # 3: clients that pipeline fetches of 4 MiB answers and never read one.
            before, mark = rss.sample(), len(rss.samples)
            result.never_reading_requests_offered = fetches_per_reader
            readers = await asyncio.to_thread(_never_reading_clients, broker.port, topic, never_reading,
                                              fetches_per_reader)
            result.never_reading_requests_taken = [taken for _, taken, _ in readers]
            # From its connection: the broker reads its first requests at once, then nothing moves.
            result.never_reading_close_s = await asyncio.to_thread(_wait_resets, readers, close_bound_s)
            result.never_reading_rss_growth_bytes = rss.peak_since(mark, before) - before
            # At most one 4 MiB answer in flight per client plus 64 queued requests: 8 MiB each, and
            # 32 MiB for the allocator's slack.
            result.never_reading_rss_bound_bytes = never_reading * 8 * MIB + 32 * MIB
            for sock, _, _ in readers:
                sock.close()
            # 4: many clients each sending most of a large request, then stalling.
            before, mark = rss.sample(), len(rss.samples)
            result.partial_close_s = await _partial_clients(broker.port, partial, partial_declared_bytes,
                                                            partial_sent_bytes, close_bound_s)
            result.partial_rss_growth_bytes = rss.peak_since(mark, before) - before
            # The pool's bound, plus one 256 KiB read per client, plus 64 MiB of allocator slack.
            result.partial_rss_bound_bytes = queued_max + partial * 256 * 1024 + 64 * MIB
        finally:
            stop.set()
            await health

    try:
        asyncio.run(run())
    finally:
        probe.close()
        result.seconds = time.monotonic() - started
        result.crashed = not broker.alive()
        result.rss_end_bytes = rss.stop() if broker.alive() else 0
        result.rss_peak_bytes = rss.peak_bytes
        result.health_checks = probe.checks
        result.health_max_latency_s = probe.max_latency_s
        result.tracebacks = logs.tracebacks()
    return result


# --- connections -----------------------------------------------------------------------------------


@dataclass
class ConnectionFloodResult:
    connections: int = 0
    #: Connections that got their ApiVersions and Metadata answered, first and once all were open.
    served: int = 0
    served_again: int = 0
    refused: int = 0
    open_seconds: float = 0.0
    broker_fds_start: int = 0
    broker_fds_peak: int = 0
    broker_fds_end: int = 0
    rss_start_bytes: int = 0
    rss_peak_bytes: int = 0
    rss_end_bytes: int = 0
    #: Stated bound: RSS per open connection.
    rss_per_connection_bound_bytes: int = 0
    health_failures: list[str] = field(default_factory=list)
    health_max_latency_s: float = 0.0
    tracebacks: list[str] = field(default_factory=list)
    crashed: bool = False
    seconds: float = 0.0

    @property
    def rss_per_connection_bytes(self) -> float:
        return (self.rss_peak_bytes - self.rss_start_bytes) / max(self.connections, 1)

    @property
    def ok(self) -> bool:
        return (not self.crashed and not self.health_failures and not self.tracebacks
                and self.served == self.served_again == self.connections
                # every descriptor comes back once the clients are gone
                and self.broker_fds_end <= self.broker_fds_start + 2
                and self.rss_per_connection_bytes <= self.rss_per_connection_bound_bytes)

    def summary(self) -> dict[str, Any]:
        return {
            "connections": self.connections, "served": self.served, "served_again": self.served_again,
            "refused": self.refused, "open_seconds": round(self.open_seconds, 2),
            "broker_fds_start": self.broker_fds_start, "broker_fds_peak": self.broker_fds_peak,
            "broker_fds_end": self.broker_fds_end,
            "rss_start_mib": _mib(self.rss_start_bytes), "rss_peak_mib": _mib(self.rss_peak_bytes),
            "rss_end_mib": _mib(self.rss_end_bytes),
            "rss_per_connection_kib": round(self.rss_per_connection_bytes / 1024, 1),
            "rss_per_connection_bound_kib": round(self.rss_per_connection_bound_bytes / 1024, 1),
            "health_failures": len(self.health_failures), "health_max_latency_s": round(self.health_max_latency_s, 3),
            "tracebacks": len(self.tracebacks), "crashed": self.crashed, "seconds": round(self.seconds, 1),
            "ok": self.ok,
        }


async def _open_served(port: int, local_host: str | None, topic: str) -> AsyncClient | None:
    """A connection that got ApiVersions and Metadata answered (None: refused or not answered)."""
    try:
        client = await AsyncClient.connect(port, local_host=local_host, client_id="flood")
    except (OSError, TimeoutError):
        return None
    try:
        await client.call(ApiKey.API_VERSIONS, 3, {"client_software_name": "flood", "client_software_version": "1"},
                          timeout_s=30)
        await client.call(ApiKey.METADATA, 12, {"topics": [{"name": topic, "topic_id": None}],
                                                "allow_auto_topic_creation": False}, timeout_s=30)
        return client
    except (ConnectionError, OSError, TimeoutError, asyncio.IncompleteReadError):
        client.abort()
        return None


async def _open_many(port: int, count: int, topic: str, local_host: str | None = None,
                     wave: int = 200) -> list[AsyncClient | None]:
    # In waves: the listen backlog (512) would drop SYNs of a single burst of thousands.
    out: list[AsyncClient | None] = []
    for start in range(0, count, wave):
        out += await asyncio.gather(*(_open_served(port, local_host, topic) for _ in range(min(wave, count - start))))
    return out


def connection_flood(broker: ChaosBroker, connections: int, *,
                     rss_per_connection_bound_bytes: int = 64 * 1024) -> ConnectionFloodResult:
    """Open ``connections`` connections, each served; with all of them open, each is served again and
    a health check passes; then all close and the broker's descriptors come back."""
    ensure_open_files(connections + 256, "connection_flood")
    result = ConnectionFloodResult(connections=connections,
                                   rss_per_connection_bound_bytes=rss_per_connection_bound_bytes)
    probe = HealthProbe(broker.port)
    logs = LogWatch(broker)
    probe.check()
    result.broker_fds_start = open_fds(broker.pid)
    rss = RssWatch(broker)
    result.rss_start_bytes = rss.start_bytes
    started = time.monotonic()

    async def run() -> None:
        clients = await _open_many(broker.port, connections, probe.topic)
        result.open_seconds = time.monotonic() - started
        live = [c for c in clients if c is not None]
        result.served = len(live)
        result.refused = connections - len(live)
        result.broker_fds_peak = open_fds(broker.pid)
        try:
            probe.check()
        except HealthError as e:
            result.health_failures.append(str(e))

        async def again(c: AsyncClient) -> bool:
            try:
                await c.call(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False}, timeout_s=30)
                return True
            except (ConnectionError, OSError, TimeoutError):
                return False

        result.served_again = sum(await asyncio.gather(*(again(c) for c in live)))
        rss.sample()
        for c in live:
            c.abort()

    try:
        asyncio.run(run())
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and open_fds(broker.pid) > result.broker_fds_start + 2:
            time.sleep(0.1)
    finally:
        probe.close()
        result.seconds = time.monotonic() - started
        result.crashed = not broker.alive()
        result.rss_end_bytes = rss.stop() if broker.alive() else 0
        result.rss_peak_bytes = rss.peak_bytes
        result.broker_fds_end = open_fds(broker.pid) if broker.alive() else 0
        result.health_max_latency_s = probe.max_latency_s
        result.tracebacks = logs.tracebacks()
    return result


@dataclass
class ConnectionLimitsResult:
    #: (address, limit, attempted, served, refused) per client address with a per-address limit.
    per_address: list[tuple[str, int, int, int, int]] = field(default_factory=list)
    max_connections: int = 0
    #: Connections opened from an address without a small limit until max.connections refused them.
    total_attempted: int = 0
    total_served: int = 0
    total_refused: int = 0
    #: Connections open at the broker when max.connections refused (the scenario's own, the probe's).
    open_when_refused: int = 0
    #: After closing some, that many new connections are served again.
    reopened_served: int = 0
    reopened_expected: int = 0
    health_failures: list[str] = field(default_factory=list)
    tracebacks: list[str] = field(default_factory=list)
    refusal_log_lines: int = 0
    crashed: bool = False

    @property
    def ok(self) -> bool:
        return (not self.crashed and not self.health_failures and not self.tracebacks
                and all(served == min(limit, tried) and refused == tried - served
                        for _, limit, tried, served, refused in self.per_address)
                and self.total_refused > 0 and self.open_when_refused <= self.max_connections
                and self.reopened_served == self.reopened_expected
                # a flood of refusals is not a flood of log lines
                and self.refusal_log_lines <= 3)

    def summary(self) -> dict[str, Any]:
        return {
            "per_address": [dict(zip(("address", "limit", "attempted", "served", "refused"), row, strict=True))
                            for row in self.per_address],
            "max_connections": self.max_connections, "total_attempted": self.total_attempted,
            "total_served": self.total_served, "total_refused": self.total_refused,
            "open_when_refused": self.open_when_refused,
            "reopened_served": self.reopened_served, "reopened_expected": self.reopened_expected,
            "refusal_log_lines": self.refusal_log_lines,
            "health_failures": len(self.health_failures), "tracebacks": len(self.tracebacks),
            "crashed": self.crashed, "ok": self.ok,
        }


def connection_limits(broker: ChaosBroker, per_address: dict[str, int], *, extra: int = 10,
                      total_from: str = "127.0.0.1") -> ConnectionLimitsResult:
    """``broker`` runs with ``max.connections`` and ``max.connections.per.ip`` (and overrides) such
    that each address in ``per_address`` (loopback addresses no other client uses) may open the given
    number of connections, and ``total_from`` (where the health probe connects from) more than
    ``max.connections``. Each address opens ``extra`` more than its limit: exactly those are refused,
    while the probe is served. Then ``total_from`` opens connections until ``max.connections``
    refuses; finally some close and as many new ones are served."""
    max_connections = int(broker.overrides.get("max.connections", 2**31 - 1))
    result = ConnectionLimitsResult(max_connections=max_connections)
    ensure_open_files(max_connections + extra * (len(per_address) + 1) + 256, "connection_limits")
    probe = HealthProbe(broker.port)
    logs = LogWatch(broker)
    probe.check()

    async def run() -> None:
        held: list[AsyncClient] = []
        for address, limit in per_address.items():
            tried = limit + extra
            clients = await _open_many(broker.port, tried, probe.topic, address, wave=50)
            served = [c for c in clients if c is not None]
            held += served
            result.per_address.append((address, limit, tried, len(served), tried - len(served)))
            try:
                probe.check()  # others are still served while this address is refused
            except HealthError as e:
                result.health_failures.append(str(e))
        # The broker-wide limit: everything still allowed, and ``extra`` more.
        tried = max(max_connections - len(held) - 1, 0) + extra
        clients = await _open_many(broker.port, tried, probe.topic, total_from, wave=50)
        served = [c for c in clients if c is not None]
        held += served
        result.total_attempted, result.total_served = tried, len(served)
        result.total_refused = tried - len(served)
        result.open_when_refused = len(held) + 1  # the probe's connection counts too
        # Closing some gives their slots back.
        result.reopened_expected = min(5, len(served))
        for c in served[:result.reopened_expected]:
            c.abort()
            held.remove(c)
        await asyncio.sleep(0.5)
        again = await _open_many(broker.port, result.reopened_expected, probe.topic, total_from)
        result.reopened_served = sum(c is not None for c in again)
        for c in held + [c for c in again if c is not None]:
            c.abort()

    try:
        asyncio.run(run())
        probe.check()
    except HealthError as e:
        result.health_failures.append(str(e))
    finally:
        probe.close()
        result.crashed = not broker.alive()
        result.tracebacks = logs.tracebacks()
        result.refusal_log_lines = logs.new_text().count("refusing connections")
    return result
