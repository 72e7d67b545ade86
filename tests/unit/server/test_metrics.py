"""The metrics endpoint and what it reports: request metrics through a connection, broker state read
at scrape time (logs, retention per reason, metadata snapshots, connections), the remote tier's rows,
the endpoint over HTTP, and ``metrics.listener`` validation through ``tierlog serve``."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tests.helpers.server import Router, api_versions, append_durably, settle
from tierlog.config import BrokerConfig
from tierlog.config.definition import HostPort
from tierlog.errors import ConfigError
from tierlog.metadata.snapshot_generator import SnapshotMetrics
from tierlog.records import SimpleRecord, build_batch
from tierlog.server import Broker, serve
from tierlog.server.connection import KafkaConnection
from tierlog.server.metrics import BrokerCollector, RequestMetrics, api_name
from tierlog.storage.log_manager import LogManager, LogManagerSettings
from tierlog.testing import FakeTransport
from tierlog.tiered.status import PartitionTierStatus


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


# -- request metrics ------------------------------------------------------------------------------


def test_request_metrics_count_bytes_requests_and_latency_per_api() -> None:
    registry = CollectorRegistry()
    metrics = RequestMetrics(registry)
    metrics.request_done(0, 120, 40, 0.003)
    metrics.request_done(0, 80, 0, 0.2)  # acks=0: no response
    metrics.request_done(18, 30, 300, 0.0001)
    assert value(registry, "tierlog_network_received_bytes_total", api="Produce") == 200
    assert value(registry, "tierlog_network_sent_bytes_total", api="Produce") == 40
    assert value(registry, "tierlog_requests_total", api="Produce") == 2
    assert value(registry, "tierlog_requests_total", api="ApiVersions") == 1
    assert value(registry, "tierlog_request_duration_seconds_count", api="Produce") == 2
    assert value(registry, "tierlog_request_duration_seconds_bucket", api="Produce", le="0.005") == 1
    assert value(registry, "tierlog_request_duration_seconds_bucket", api="ApiVersions", le="0.0005") == 1
    assert value(registry, "tierlog_requests_total", api="Fetch") is None
    assert api_name(1) == "Fetch" and api_name(9999) == "9999"


def test_a_connection_reports_each_request_to_its_observer() -> None:
    calls: list[tuple[int, int, int, float]] = []

    class Observer:
        def request_done(self, api_key: int, bytes_in: int, bytes_out: int, seconds: float) -> None:
            calls.append((api_key, bytes_in, bytes_out, seconds))

    async def run() -> None:
        conn = KafkaConnection(Router({1: 0.02}), max_frame_bytes=1 << 20, observer=Observer())
        transport = FakeTransport()
        conn.connection_made(transport)
        request = api_versions(1)
        conn.data_received(request + api_versions(98))  # 98: the router answers nothing
        await settle(conn)
        assert len(calls) == 2
        (key1, in1, out1, s1), (key2, in2, out2, _) = calls
        assert (key1, in1, out1) == (18, len(request), len(transport.written))
        assert s1 >= 0.015  # the router's delay is part of the latency
        assert (key2, in2, out2) == (18, len(api_versions(98)), 0)

    asyncio.run(run())


# -- broker state ---------------------------------------------------------------------------------


def _config(tmp_path: Path, **overrides: str) -> BrokerConfig:
    return BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "data"),
                         "offsets.topic.num.partitions": "1", "log.retention.check.interval.ms": "3600000",
                         **overrides})


def test_collector_reads_logs_retention_metadata_and_connections_and_the_endpoint_serves_them(
        tmp_path: Path) -> None:
    async def run() -> None:
        broker = Broker(_config(tmp_path, **{"metrics.listener": "http://127.0.0.1:0"}), LogManagerSettings())
        await broker.start()
        try:
            ctx = broker.ctx
            assert ctx is not None
            registry = broker.metrics.registry
            url = broker.metrics.url
            assert url is not None and url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
            await ctx.io.run(ctx.controller.create_topic, "m", 2, 1,
                             {"segment.bytes": "1024", "retention.ms": "-1", "log.retention.min.timestamp": "5000"})
            now = int(time.time() * 1000)
            for i in range(40):
                ts = 1000 if i < 20 else now  # the first half lies below the timestamp floor
                batch = build_batch([SimpleRecord(b"k", b"v" * 100, timestamp=ts)])
                results = await append_durably(ctx, [("m", 0, batch)])
                assert results[0].error_code == 0
            ulog = ctx.log_manager.get_log("m", 0)
            assert ulog is not None and ulog.num_segments > 3
            size_before, segments_before = ulog.size_bytes, ulog.num_segments
            assert value(registry, "tierlog_log_size_bytes", topic="m", partition="0") == size_before
            assert value(registry, "tierlog_log_segments", topic="m", partition="0") == segments_before
            assert value(registry, "tierlog_log_segments", topic="m", partition="1") == 1
            assert value(registry, "tierlog_log_size_bytes", topic="m", partition="1") == 0
            assert value(registry, "tierlog_log_end_offset", topic="m", partition="0") == 40
            assert value(registry, "tierlog_log_high_watermark", topic="m", partition="0") == 40  # appends synced
            assert value(registry, "tierlog_log_unchecked_segments") == 0
            assert value(registry, "tierlog_log_segment_deletions_total", reason="timestamp_floor") == 0

            deleted = await ctx.io.run(ctx.log_manager.cleanup_logs)
            assert deleted > 0
            assert value(registry, "tierlog_log_segment_deletions_total", reason="timestamp_floor") == deleted
            assert value(registry, "tierlog_log_segment_deletions_total", reason="time") == 0
            assert value(registry, "tierlog_log_segments", topic="m", partition="0") == segments_before - deleted
            assert value(registry, "tierlog_log_start_offset", topic="m", partition="0") == ulog.log_start_offset > 0

            snaps_before = value(registry, "tierlog_metadata_snapshots_total", reason="requested")
            await ctx.io.run(ctx.controller.snapshot_now)
            assert value(registry, "tierlog_metadata_snapshots_total", reason="requested") == (snaps_before or 0) + 1
            size = value(registry, "tierlog_metadata_snapshot_size_bytes")
            age = value(registry, "tierlog_metadata_snapshot_age_seconds")
            assert size is not None and size > 0 and age is not None and 0 <= age < 60
            log_size = value(registry, "tierlog_metadata_log_size_bytes")
            assert log_size is not None and log_size >= size
            assert value(registry, "tierlog_connections", listener="PLAINTEXT") == 0
            # Remote storage is off: no remote families at all.
            assert value(registry, "tierlog_remote_copy_lag_segments", topic="m", partition="0") is None

            def scrape() -> str:
                with urllib.request.urlopen(url, timeout=10) as response:
                    assert response.status == 200
                    return str(response.read().decode())

            text = await asyncio.to_thread(scrape)
            assert 'tierlog_log_size_bytes{partition="0",topic="m"}' in text \
                or 'tierlog_log_size_bytes{topic="m",partition="0"}' in text
            assert 'tierlog_log_segment_deletions_total{reason="timestamp_floor"}' in text
            assert "process_resident_memory_bytes" in text
        finally:
            await broker.stop()
        # The endpoint is gone with the broker.
        with pytest.raises(OSError):
            urllib.request.urlopen(url, timeout=2)

    asyncio.run(run())


def test_remote_tier_rows_become_per_partition_metrics(tmp_path: Path) -> None:
    manager = LogManager([tmp_path / "data"], lambda t: None, LogManagerSettings())  # type: ignore[arg-type,return-value]
    manager.startup_logs()
    rows = [
        PartitionTierStatus(topic="t", partition=0, topic_id="", copy_task="active", highest_tiered_offset=99,
                            remote_log_start_offset=0, local_log_start_offset=50, log_end_offset=180,
                            local_bytes=4000, remote_bytes=9000, remote_segments=4, copy_lag_segments=3,
                            copy_lag_bytes=3000, segments_copied=4, bytes_copied=8000, copy_errors=1,
                            compaction_runs=3, compaction_errors=1, compaction_bytes_read=9000,
                            compaction_bytes_written=2500, compaction_last_run_ms=1_700_000_000_500),
        PartitionTierStatus(topic="t", partition=1, topic_id="", copy_task="stopped", highest_tiered_offset=-1,
                            remote_log_start_offset=None, local_log_start_offset=0, log_end_offset=10,
                            local_bytes=100, remote_bytes=0, remote_segments=0, copy_lag_segments=1,
                            copy_lag_bytes=100, copy_errors=1, last_error="custom metadata of 256 bytes"),
    ]
    ctx: Any = SimpleNamespace(
        log_manager=manager, remote_log_manager=SimpleNamespace(status=lambda: rows), listeners=[], transactions=None,
        log_cleaner=None,
        controller=SimpleNamespace(metrics=SnapshotMetrics(), latest_snapshot_age_ms=-1,
                                   metadata_log=SimpleNamespace(dir=tmp_path / "missing")))
    registry = CollectorRegistry()
    registry.register(BrokerCollector(ctx, lambda: ["PLAINTEXT", "PLAINTEXT", "INTERNAL"]))
    p0, p1 = {"topic": "t", "partition": "0"}, {"topic": "t", "partition": "1"}
    assert registry.get_sample_value("tierlog_remote_copy_lag_segments", p0) == 3
    assert registry.get_sample_value("tierlog_remote_copy_lag_bytes", p0) == 3000
    assert registry.get_sample_value("tierlog_remote_copied_bytes_total", p0) == 8000
    assert registry.get_sample_value("tierlog_remote_compaction_runs_total", p0) == 3
    assert registry.get_sample_value("tierlog_remote_compaction_errors_total", p0) == 1
    assert registry.get_sample_value("tierlog_remote_compaction_read_bytes_total", p0) == 9000
    assert registry.get_sample_value("tierlog_remote_compaction_written_bytes_total", p0) == 2500
    assert registry.get_sample_value("tierlog_remote_compaction_last_run_timestamp_seconds", p0) == 1_700_000_000.5
    assert registry.get_sample_value("tierlog_remote_compaction_last_run_timestamp_seconds", p1) is None
    assert registry.get_sample_value("tierlog_remote_compaction_runs_total", p1) == 0
    assert registry.get_sample_value("tierlog_remote_copied_segments_total", p0) == 4
    assert registry.get_sample_value("tierlog_remote_copy_errors_total", p0) == 1
    assert registry.get_sample_value("tierlog_remote_copy_task_stopped", p0) == 0
    assert registry.get_sample_value("tierlog_remote_copy_task_stopped", p1) == 1
    assert registry.get_sample_value("tierlog_remote_copy_errors_total", p1) == 1
    assert registry.get_sample_value("tierlog_remote_log_size_bytes", p0) == 9000
    assert registry.get_sample_value("tierlog_remote_log_segments", p0) == 4
    # No snapshot yet: no age or size, but the counters and the (missing) directory read as zero.
    assert registry.get_sample_value("tierlog_metadata_snapshot_age_seconds") is None
    assert registry.get_sample_value("tierlog_metadata_log_size_bytes") == 0
    assert registry.get_sample_value("tierlog_metadata_snapshots_total", {"reason": "max_interval"}) == 0
    assert registry.get_sample_value("tierlog_connections", {"listener": "PLAINTEXT"}) == 2
    assert registry.get_sample_value("tierlog_connections", {"listener": "INTERNAL"}) == 1


def test_tiering_through_the_broker_counts_copied_bytes_and_the_backlog(tmp_path: Path) -> None:
    async def run() -> None:
        broker = Broker(_config(tmp_path, **{"remote.log.storage.system.enable": "true",
                                             "remote.log.manager.task.interval.ms": "3600000",
                                             "rsm.config.dir": str(tmp_path / "remote")}), LogManagerSettings())
        await broker.start()
        try:
            ctx = broker.ctx
            assert ctx is not None and ctx.remote_log_manager is not None
            registry = broker.metrics.registry
            await ctx.io.run(ctx.controller.create_topic, "r", 1, 1,
                             {"segment.bytes": "1024", "retention.ms": "-1", "remote.storage.enable": "true"})
            now = int(time.time() * 1000)
            for _ in range(30):
                batch = build_batch([SimpleRecord(b"k", b"v" * 100, timestamp=now)])
                assert (await append_durably(ctx, [("r", 0, batch)]))[0].error_code == 0
            tp = {"topic": "r", "partition": "0"}
            # The copy task runs at once when tiering starts; whatever it has not copied yet is the backlog.
            ulog = ctx.log_manager.get_log("r", 0)
            assert ulog is not None
            await ctx.io.run(ctx.remote_log_manager.copy_all)
            closed = ulog.num_segments - 1
            assert value(registry, "tierlog_remote_copy_lag_segments", **tp) == 0
            assert value(registry, "tierlog_remote_log_segments", **tp) == closed
            copied = value(registry, "tierlog_remote_copied_bytes_total", **tp)
            assert copied is not None and copied > 0
            assert value(registry, "tierlog_remote_copy_errors_total", **tp) == 0
        finally:
            await broker.stop()

    asyncio.run(run())


# -- configuration --------------------------------------------------------------------------------


@pytest.mark.parametrize("address", ["127.0.0.1:9404", "http://127.0.0.1:0", "HTTP://[::1]:9404", ":9404", ""])
def test_metrics_listener_accepts(address: str) -> None:
    config = BrokerConfig({"metrics.listener": address})
    assert config.get("metrics.listener") == address
    if address:
        host, port = HostPort.split(address)
        assert host in ("127.0.0.1", "::1", "") and port in (0, 9404)


@pytest.mark.parametrize(("address", "words"), [
    ("https://127.0.0.1:9404", "only http://"),
    ("127.0.0.1", "is not of the form HOST:PORT or http://HOST:PORT"),
    ("http://127.0.0.1:9404/metrics", "is not of the form"),
    ("127.0.0.1:70000", "outside [0,...,65535]"),
])
def test_metrics_listener_rejects(address: str, words: str) -> None:
    with pytest.raises(ConfigError) as e:
        BrokerConfig({"metrics.listener": address})
    assert e.value.key == "metrics.listener" and words in str(e.value)


@pytest.mark.integration
@pytest.mark.parametrize("overrides", [
    ["metrics.listener=https://127.0.0.1:9404"],
    ["metrics.listener=localhost"],
    ["listeners=PLAINTEXT://127.0.0.1:19092", "metrics.listener=http://127.0.0.1:19092"],
])
def test_serve_refuses_a_bad_metrics_listener_with_one_line(tmp_path: Path, overrides: list[str]) -> None:
    cmd = [sys.executable, "-m", "tierlog.cli.main", "serve", "--override", f"log.dirs={tmp_path / 'data'}"]
    for item in overrides:
        cmd += ["--override", item]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "metrics.listener" in lines[0], done.stderr
    assert not (tmp_path / "data").exists()


def test_a_metrics_port_in_use_stops_the_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = _config(tmp_path, **{"metrics.listener": f"127.0.0.1:{port}"})
        assert asyncio.run(serve(config, LogManagerSettings())) == 1
    err = capsys.readouterr().err
    assert "cannot listen" in err
    # The broker that had started shut down cleanly: the next start finds the clean-shutdown marker.
    assert (tmp_path / "data" / ".kafka_cleanshutdown").exists()
