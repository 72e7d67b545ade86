"""The Prometheus endpoint (``metrics.listener``) and what it reports.

Two kinds of metric live here. Request metrics (bytes, counts, latency per API) are counted as
requests are served, through :class:`RequestMetrics`, which connections call once per request.
Everything else is read from the broker's state when Prometheus scrapes, by :class:`BrokerCollector`:
the lower layers keep plain counters (``LogManager.deletions``, the controller's snapshot metrics,
the remote log manager's status) and never import ``prometheus_client``.

The endpoint is ``prometheus_client``'s threaded HTTP server, so a scrape runs off the event loop;
the collector takes each log's lock only for the few reads it makes.
"""

from __future__ import annotations

import logging
import os
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import start_http_server
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from tierlog.config.definition import HostPort
from tierlog.metadata.policy import SnapshotReason
from tierlog.protocol import api_spec
from tierlog.protocol.apis import ANSWERED_APIS
from tierlog.server.cleaner_metrics import cleaner_metrics
from tierlog.server.metric_families import Figure, families
from tierlog.server.throttling import quota_metrics
from tierlog.storage.group_commit import GroupCommitStats
from tierlog.storage.retention import DeletionReason

if TYPE_CHECKING:
    from tierlog.server.context import BrokerContext

log = logging.getLogger(__name__)

#: Request latency buckets, in seconds: sub-millisecond produce acks up to long-polling fetches and
#: joins that wait for a rebalance.
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                     60.0)


def api_name(api_key: int) -> str:
    spec = api_spec(api_key) or ANSWERED_APIS.get(api_key)  # an answered API counts under its Kafka name
    return spec.name if spec is not None else str(api_key)


class RequestMetrics(Collector):
    """Per-API request counters; the connection calls :meth:`request_done` once per request.

    Kept as plain numbers per API key and turned into Prometheus families only when scraped: three
    ``prometheus_client`` counter increments and a histogram observation (each under its own lock)
    cost ~5 µs per request, which every request paid whether or not anything ever scraped. Only the
    event loop's connections call :meth:`request_done`; a scrape reads from another thread and may
    see one request counted in some families and not yet in others, as with separate counters."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        #: api key -> [bytes received, bytes sent, requests, latency sum, then one count per
        #: latency bucket and the +Inf one (not cumulative)].
        self._stats: dict[int, list[float]] = {}
        self._lock = threading.Lock()
        if registry is not None:
            registry.register(self)

    def request_done(self, api_key: int, bytes_in: int, bytes_out: int, seconds: float) -> None:
        stats = self._stats.get(api_key)
        if stats is None:
            with self._lock:
                stats = self._stats.setdefault(api_key, [0.0] * (5 + len(LATENCY_BUCKETS_S)))
        stats[0] += bytes_in
        stats[1] += bytes_out
        stats[2] += 1
        stats[3] += seconds
        stats[4 + bisect_left(LATENCY_BUCKETS_S, seconds)] += 1  # buckets are "≤ le"

    def totals(self) -> dict[str, tuple[float, float, float]]:
        """(bytes received, bytes sent, requests) so far per API name, for the console's sparklines."""
        return {api_name(key): (v[0], v[1], v[2]) for key, v in list(self._stats.items())}

    def describe(self) -> Iterable[Metric]:
        return self._families({})

    def collect(self) -> Iterable[Metric]:
        return self._families({key: list(v) for key, v in list(self._stats.items())})

    def _families(self, stats: dict[int, list[float]]) -> list[Metric]:
        received = CounterMetricFamily("tierlog_network_received_bytes", "Bytes of request frames received, "
                                       "size prefix included, by API.", labels=["api"])
        sent = CounterMetricFamily("tierlog_network_sent_bytes", "Bytes of responses sent, size prefix "
                                   "included, by API (a request answered with nothing, acks=0, sends 0).",
                                   labels=["api"])
        requests = CounterMetricFamily("tierlog_requests", "Requests served, by API.", labels=["api"])
        latency = HistogramMetricFamily("tierlog_request_duration_seconds", "Time from taking a request off "
                                        "the connection's queue until its response was handed to the socket, "
                                        "by API.", labels=["api"])
        bounds = [floatToGoString(b) for b in LATENCY_BUCKETS_S] + ["+Inf"]  # type: ignore[no-untyped-call]
        for key, v in stats.items():
            name = [api_name(key)]
            received.add_metric(name, v[0])
            sent.add_metric(name, v[1])
            requests.add_metric(name, v[2])
            cumulative = list(accumulate(v[4:]))
            latency.add_metric(name, list(zip(bounds, cumulative, strict=True)), sum_value=v[3])
        return [received, sent, requests, latency]


@dataclass(frozen=True)
class _PartitionReading:
    topic: str
    partition: int
    size_bytes: int
    segments: int
    log_start_offset: int
    log_end_offset: int
    unchecked_segments: int
    high_watermark: int


def _labels(topic: str, partition: int) -> list[str]:
    return [topic, str(partition)]


def directory_size_bytes(directory: Path) -> int:
    """Sum of the sizes of the regular files directly in ``directory`` (0 if it is gone)."""
    total = 0
    try:
        with os.scandir(directory) as it:
            for entry in it:
                try:
                    if entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
                except FileNotFoundError:
                    continue  # deleted while listing (retention, snapshot cleaning)
    except FileNotFoundError:
        return 0
    return total


#: Group commit, by log dir (the figures of each dir's GroupCommitStats).
_GROUP_COMMIT_FIGURES: list[Figure[GroupCommitStats]] = [
    Figure(CounterMetricFamily, "tierlog_group_commit_syncs", "Group commit syncs: fdatasyncs of a segment file "
           "that answered the produces waiting on it, by log dir.", lambda s: s.rounds),
    Figure(CounterMetricFamily, "tierlog_group_commit_requests", "Produce requests (and offset commits) that waited "
           "for a group commit, by log dir.", lambda s: s.requests),
    Figure(CounterMetricFamily, "tierlog_group_commit_sync_seconds", "Time spent in group commit syncs, by log dir.",
           lambda s: s.sync_seconds),
    Figure(CounterMetricFamily, "tierlog_group_commit_fdatasyncs", "Segment files synced by group commit (each "
           "sync covers every request on its file that came before it began; an fdatasync each, or several files "
           "by one syncfs), by log dir.", lambda s: s.files_synced),
    Figure(CounterMetricFamily, "tierlog_group_commit_syncfs", "syncfs calls of group commit, each standing in for "
           "the fdatasyncs of the files of a produce of many partitions, by log dir.", lambda s: s.syncfs_calls),
    Figure(GaugeMetricFamily, "tierlog_group_commit_pending_bytes", "Bytes appended by requests waiting for their "
           "group commit, by log dir (bounded by log.dir.unflushed.max.bytes).", lambda s: s.pending_bytes),
    Figure(GaugeMetricFamily, "tierlog_group_commit_pending_bytes_peak", "The most bytes that ever waited for a "
           "group commit, by log dir.", lambda s: s.peak_pending_bytes),
    Figure(CounterMetricFamily, "tierlog_group_commit_room_waits", "Durable produces that waited before appending "
           "because log.dir.unflushed.max.bytes was reached, by log dir.", lambda s: s.room_waits),
]


class BrokerCollector(Collector):
    """Reads the broker's state at scrape time: logs, retention, seed 003's checker, the remote tier,
    metadata snapshots and connections."""

    def __init__(self, ctx: BrokerContext, connection_listeners: Callable[[], Iterable[str]]) -> None:
        self._ctx = ctx
        self._connection_listeners = connection_listeners

    def describe(self) -> Iterable[Metric]:
        # Families depend on the state (the remote tier may be off); describing none keeps the
        # registry from calling collect() at registration.
        return []

    def collect(self) -> Iterable[Metric]:
        yield from self._logs()
        yield from self._log_dirs()
        yield from self._remote()
        yield from self._metadata()
        yield self._connections()
        yield from self._transactions()
        yield from cleaner_metrics(self._ctx.log_cleaner)
        yield from quota_metrics(getattr(self._ctx, "quotas", None), getattr(self._ctx, "connection_rates", None),
                                 getattr(self._ctx, "broker_connection_rate", None),
                                 getattr(self._ctx, "listener_connection_rates", ()))

    # -- transactions ---------------------------------------------------------------------------

    def _transactions(self) -> Iterator[Metric]:
        lag = GaugeMetricFamily("tierlog_log_lso_lag_offsets", "High watermark minus last stable offset: "
                                "offsets read_committed consumers cannot read yet (open transactions).",
                                labels=["topic", "partition"])
        for (topic, partition), ulog in sorted(self._ctx.log_manager.all_logs().items()):
            if ulog.deleted:
                continue
            with ulog.lock:
                lag.add_metric(_labels(topic, partition), ulog.high_watermark - ulog.last_stable_offset)
        yield lag
        txn = self._ctx.transactions
        if txn is None:
            return
        from tierlog.server.txn.records import TxnState  # the coordinator's module is optional here

        # Read from the scrape thread while the event loop may change the map: a copy of the values.
        states = [m.state for m in list(txn.txns.values())]
        yield GaugeMetricFamily("tierlog_transactions_ongoing", "Transactions open now.",
                                value=sum(1 for s in states if s is TxnState.ONGOING))
        yield GaugeMetricFamily("tierlog_transactional_ids", "Transactional ids the coordinator knows.",
                                value=len(states))
        yield CounterMetricFamily("tierlog_transactions_committed", "Transactions committed since the start.",
                                  value=txn.committed)
        yield CounterMetricFamily("tierlog_transactions_aborted", "Transactions aborted since the start (by "
                                  "their producer or the coordinator).", value=txn.aborted)
        yield CounterMetricFamily("tierlog_transactions_timed_out", "Transactions the coordinator aborted "
                                  "because they outlived transaction.timeout.ms.", value=txn.timed_out)

    # -- local logs -----------------------------------------------------------------------------

    def _readings(self) -> Iterator[_PartitionReading]:
        for (topic, partition), ulog in sorted(self._ctx.log_manager.all_logs().items()):
            if ulog.deleted:
                continue
            # Seed 003: a scrape must not materialise the segments a lazy startup left alone.
            size = ulog.size_bytes_unloaded()
            with ulog.lock:
                yield _PartitionReading(topic, partition, size, ulog.num_segments, ulog.log_start_offset,
                                        ulog.log_end_offset, ulog.unchecked_segments(), ulog.high_watermark)

    def _logs(self) -> Iterator[Metric]:
        labels = ["topic", "partition"]
        size = GaugeMetricFamily("tierlog_log_size_bytes", "Bytes of a partition's local log segments.",
                                 labels=labels)
        segments = GaugeMetricFamily("tierlog_log_segments", "Local segments of a partition, the active one "
                                     "included.", labels=labels)
        start = GaugeMetricFamily("tierlog_log_start_offset", "A partition's log start offset.", labels=labels)
        end = GaugeMetricFamily("tierlog_log_end_offset", "A partition's log end offset.", labels=labels)
        high = GaugeMetricFamily("tierlog_log_high_watermark", "A partition's high watermark: what consumers "
                                 "read up to. Below the log end offset by what waits for its fsync under "
                                 "log.durable.acks all or 1.", labels=labels)
        unchecked = 0
        for r in self._readings():
            tp = _labels(r.topic, r.partition)
            size.add_metric(tp, r.size_bytes)
            segments.add_metric(tp, r.segments)
            start.add_metric(tp, r.log_start_offset)
            end.add_metric(tp, r.log_end_offset)
            high.add_metric(tp, r.high_watermark)
            unchecked += r.unchecked_segments
        yield from (size, segments, start, end, high)
        yield GaugeMetricFamily(
            "tierlog_log_unchecked_segments", "Segments whose indexes are not sanity-checked yet (seed 003: "
            "sanity.check.all.logs.enabled=false leaves them to first access and the background checker).",
            value=unchecked)
        manager = self._ctx.log_manager
        deletions = CounterMetricFamily("tierlog_log_segment_deletions", "Local segments deleted by retention, "
                                        "by reason (time, size, log_start_offset, and seed 004's timestamp_floor).",
                                        labels=["reason"])
        counts = dict(manager.deletions)
        for reason in DeletionReason:
            deletions.add_metric([reason.value], counts.get(reason.value, 0))
        yield deletions
        report = manager.startup
        yield GaugeMetricFamily("tierlog_log_startup_duration_seconds", "How long loading (and recovering) the "
                                "logs took at startup.", value=report.seconds)
        yield GaugeMetricFamily("tierlog_log_startup_recovered_segments", "Segments recovered at startup after "
                                "an unclean shutdown.", value=report.recovered_segments)

    # -- remote tier ----------------------------------------------------------------------------

    def _remote(self) -> Iterator[Metric]:
        rlm = self._ctx.remote_log_manager
        if rlm is None:
            return
        labels = ["topic", "partition"]
        lag_segments = GaugeMetricFamily(
            "tierlog_remote_copy_lag_segments", "Closed segments waiting to be copied to the remote tier "
            "(the tiering backlog).", labels=labels)
        lag_bytes = GaugeMetricFamily("tierlog_remote_copy_lag_bytes", "Bytes of the segments waiting to be "
                                      "copied to the remote tier.", labels=labels)
        copied_bytes = CounterMetricFamily("tierlog_remote_copied_bytes", "Segment bytes this process copied "
                                           "to the remote tier.", labels=labels)
        copied_segments = CounterMetricFamily("tierlog_remote_copied_segments", "Segments this process copied "
                                              "to the remote tier.", labels=labels)
        errors = CounterMetricFamily("tierlog_remote_copy_errors", "Failed runs of a partition's copy task "
                                     "(seed 002's custom metadata limit included).", labels=labels)
        stopped = GaugeMetricFamily("tierlog_remote_copy_task_stopped", "1 while a partition's copy task is "
                                    "stopped (seed 002: custom metadata over the limit).", labels=labels)
        remote_bytes = GaugeMetricFamily("tierlog_remote_log_size_bytes", "Bytes of a partition's segments in "
                                         "the remote tier.", labels=labels)
        remote_segments = GaugeMetricFamily("tierlog_remote_log_segments", "Segments of a partition in the "
                                            "remote tier.", labels=labels)
        deletes_pending = GaugeMetricFamily(
            "tierlog_remote_delete_pending_segments", "Remote segments whose delete failed and is retried with "
            "backoff (DELETE_SEGMENT_STARTED).", labels=labels)
        deletes_given_up = GaugeMetricFamily(
            "tierlog_remote_delete_given_up_segments", "Remote segments whose delete this process gave up on "
            "after remote.log.manager.delete.retry.max.attempts: their objects stay in the remote tier until "
            "tierlog tier retry-delete or forget-delete.", labels=labels)
        c_runs = CounterMetricFamily("tierlog_remote_compaction_runs", "Remote compaction runs of a compacted "
                                     "partition this process finished (issue 18).", labels=labels)
        c_errors = CounterMetricFamily("tierlog_remote_compaction_errors", "Remote compaction runs that failed "
                                       "(damaged remote data among them); each backs off before the next.",
                                       labels=labels)
        c_read = CounterMetricFamily("tierlog_remote_compaction_read_bytes", "Remote segment bytes remote "
                                     "compaction read.", labels=labels)
        c_written = CounterMetricFamily("tierlog_remote_compaction_written_bytes", "Bytes of the segments remote "
                                        "compaction wrote.", labels=labels)
        c_last = GaugeMetricFamily("tierlog_remote_compaction_last_run_timestamp_seconds", "When a partition's "
                                   "last remote compaction run ended, Unix time (partitions with a run only; "
                                   "time() minus it is the time since).", labels=labels)
        for s in rlm.status():
            tp = _labels(s.topic, s.partition)
            c_runs.add_metric(tp, s.compaction_runs)
            c_errors.add_metric(tp, s.compaction_errors)
            c_read.add_metric(tp, s.compaction_bytes_read)
            c_written.add_metric(tp, s.compaction_bytes_written)
            if s.compaction_last_run_ms is not None:
                c_last.add_metric(tp, s.compaction_last_run_ms / 1000.0)
            deletes_pending.add_metric(tp, s.deletes_pending)
            deletes_given_up.add_metric(tp, s.deletes_given_up)
            lag_segments.add_metric(tp, s.copy_lag_segments)
            lag_bytes.add_metric(tp, s.copy_lag_bytes)
            copied_bytes.add_metric(tp, s.bytes_copied)
            copied_segments.add_metric(tp, s.segments_copied)
            errors.add_metric(tp, s.copy_errors)
            stopped.add_metric(tp, 1 if s.copy_task == "stopped" else 0)
            remote_bytes.add_metric(tp, s.remote_bytes)
            remote_segments.add_metric(tp, s.remote_segments)
        yield from (lag_segments, lag_bytes, copied_bytes, copied_segments, errors, stopped, remote_bytes,
                    remote_segments, deletes_pending, deletes_given_up, c_runs, c_errors, c_read, c_written, c_last)

    # -- metadata -------------------------------------------------------------------------------

    def _metadata(self) -> Iterator[Metric]:
        controller = self._ctx.controller
        m = controller.metrics
        age_ms = controller.latest_snapshot_age_ms
        if age_ms >= 0:
            yield GaugeMetricFamily("tierlog_metadata_snapshot_age_seconds", "Time since the latest metadata "
                                    "snapshot was written (seed 000).", value=age_ms / 1000.0)
            yield GaugeMetricFamily("tierlog_metadata_snapshot_size_bytes", "Size of the latest metadata "
                                    "snapshot.", value=m.latest_snapshot_size_bytes)
        snapshots = CounterMetricFamily("tierlog_metadata_snapshots", "Metadata snapshots written by this "
                                        "process, by reason.", labels=["reason"])
        for reason in SnapshotReason:
            snapshots.add_metric([reason.value], m.snapshots_generated.get(reason, 0))
        yield snapshots
        yield CounterMetricFamily("tierlog_metadata_snapshot_failures", "Metadata snapshots that could not be "
                                  "written.", value=m.snapshot_failures)
        yield GaugeMetricFamily("tierlog_metadata_unsnapshotted_bytes", "Bytes appended to the metadata log "
                                "since the latest snapshot (compared with "
                                "metadata.log.max.record.bytes.between.snapshots).",
                                value=m.bytes_since_last_snapshot)
        yield GaugeMetricFamily("tierlog_metadata_log_size_bytes", "Bytes of the metadata log directory: "
                                "segments, indexes and snapshots.",
                                value=directory_size_bytes(controller.metadata_log.dir))

    # -- log dirs: offline (disk errors) and group commit -----------------------------------------

    def _log_dirs(self) -> Iterator[Metric]:
        manager = self._ctx.log_manager
        offline = GaugeMetricFamily("tierlog_log_dir_offline", "1 for a log dir taken offline by a disk error "
                                    "(the ERROR line 'log dir offline' says why), else 0.", labels=["dir"])
        offline_dirs = manager.failure_channel.offline_dirs
        for d in manager.log_dirs:
            offline.add_metric([str(d)], 1 if d in offline_dirs else 0)
        yield offline
        yield from families(_GROUP_COMMIT_FIGURES, ["dir"],
                            [([str(d)], commit.stats) for d, commit in manager.group_commits.items()])

    # -- connections ----------------------------------------------------------------------------

    def _connections(self) -> Metric:
        family = GaugeMetricFamily("tierlog_connections", "Open client connections, by listener.",
                                   labels=["listener"])
        counts: dict[str, int] = {bound.spec.name: 0 for bound in self._ctx.listeners}
        for name in self._connection_listeners():
            counts[name] = counts.get(name, 0) + 1
        for name, n in sorted(counts.items()):
            family.add_metric([name], n)
        return family


def metrics_url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/metrics"


class BrokerMetrics:
    """The broker's registry, its request metrics and, when ``metrics.listener`` is set, the endpoint."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = RequestMetrics(self.registry)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        #: ``http://HOST:PORT/metrics`` once the endpoint listens (the port the OS gave for port 0).
        self.url: str | None = None

    def observe(self, ctx: BrokerContext, connection_listeners: Callable[[], Iterable[str]]) -> None:
        self.registry.register(BrokerCollector(ctx, connection_listeners))

    def start_endpoint(self, address: str) -> str:
        """Listen on ``address`` (``metrics.listener``: ``HOST:PORT`` or ``http://HOST:PORT``); the URL.
        Raises OSError when the address cannot be bound."""
        host, port = HostPort.split(address)
        bind = host or "0.0.0.0"
        self._server, self._thread = start_http_server(port, addr=bind, registry=self.registry)
        bound_port = int(self._server.server_port)
        self.url = metrics_url(host or "0.0.0.0", bound_port)
        log.info("metrics endpoint listening url=%s", self.url)
        return self.url

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
