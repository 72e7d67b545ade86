"""The remote tier on S3 (moto's server on loopback): segments located through the remote metadata,
the key the plugin recorded in its custom metadata first (seed 002), and their sizes as the plugin
reports them. Planning and decoding run without Spark here: the Spark path is the same code."""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.pipeline import scan_options
from tests.pipeline.data import T0, Row, _fill_mixed, _Logs, expected_rows
from tierlog.cli import spark_cmd
from tierlog.config import LogConfig
from tierlog.errors import TierlogError
from tierlog.pipeline import jobs
from tierlog.pipeline.options import parse_options
from tierlog.storage.loader import LoadOptions, load_log
from tierlog.tiered.backends.s3 import S3RemoteStorageManager
from tierlog.tiered.layout import METADATA_DIR_NAME
from tierlog.tiered.manifest import ManifestPublisher
from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager
from tierlog.tiered.remote_log_manager import RemoteLogManager, RemoteLogManagerConfig

S3_CLASS = "tierlog.tiered.backends.s3.S3RemoteStorageManager"


def cli(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tierlog")
    spark_cmd.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["spark", *argv])


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    pytest.importorskip("moto.server", reason="moto[server] is needed for the S3 tests")
    from tests.helpers.tiered import S3_ENV, MotoServer

    for key, value in S3_ENV.items():
        monkeypatch.setenv(key, value)
    server = MotoServer()
    server.create_bucket("pipeline")
    yield server.endpoint
    server.stop()


def test_s3_tier_is_read_through_the_recorded_keys(s3: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    ulog = load_log(data / "s3t-0", LogConfig.from_props({"segment.bytes": 1500, "retention.ms": -1,
                                                           "remote.storage.enable": True,
                                                           "local.retention.bytes": 1}), LoadOptions())
    ulog.write_partition_metadata(b"\x09" * 16)
    _fill_mixed(ulog, 3)
    want: list[Row] = expected_rows(ulog.dir)
    rsm = S3RemoteStorageManager()
    rsm.configure({"s3.bucket": "pipeline", "s3.endpoint": s3, "s3.prefix": "cluster-a"})
    rlm = RemoteLogManager(RemoteLogManagerConfig(system_enable=True), _Logs({("s3t", 0): ulog}), rsm,
                           FileRemoteLogMetadataManager(data / METADATA_DIR_NAME, sync=False),
                           index_cache_dir=data / "remote-log-index-cache")
    assert rlm.copy_all() >= 2
    ulog.delete_old_segments()
    assert ulog.log_start_offset > 0
    rlm.close()
    ulog.close()
    assert os.path.isdir(data / "s3t-0") and want[0][5] >= T0

    # The reader is configured with another prefix: only the key base recorded in each segment's
    # custom metadata finds the objects.
    options = {"path": str(data), "subscribe": "s3t", "remote.log.storage.manager.class.name": S3_CLASS,
               "rsm.config.s3.bucket": "pipeline", "rsm.config.s3.endpoint": s3, "rsm.config.s3.prefix": "moved"}
    assert scan_options(options) == want

    opts = parse_options(options)
    tasks = jobs.segment_tasks(opts.discover())
    remote = [t for t in tasks if t.tier == "remote"]
    usage = [jobs.segment_usage(t, opts.remote) for t in remote]
    # The plugin's own figure (every object it uploaded), larger than the .log alone.
    assert all(u.size_bytes > t.size_bytes for u, t in zip(usage, remote, strict=True))
    assert sum(u.records for u in usage) + sum(jobs.segment_usage(t, opts.remote).records
                                               for t in tasks if t.tier == "local") == len(want)
    assert all(jobs.verify_segment(t, opts.remote).ok for t in tasks)


def test_without_s3_options_the_reader_names_the_missing_plugin_instead_of_a_local_dir(s3: str, tmp_path: Path) -> None:
    data = _tier_to_s3(tmp_path / "data", s3, {"s3.bucket": "pipeline"})[0]
    with pytest.raises(TierlogError, match="written by a plugin other than the local-directory one"):
        scan_options({"path": str(data), "subscribe": "s3t"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]  # no data-remote created


def test_the_reader_plans_the_remote_tier_from_the_manifests_in_s3_without_the_journal(s3: str, tmp_path: Path) -> None:
    """The broker publishes each partition's manifest beside its segments; a reader whose disk has
    no remote-log-metadata/ (a Spark driver on another host) plans the remote part from them."""
    import shutil

    import obstore

    data, want = _tier_to_s3(tmp_path / "data", s3, {"s3.bucket": "pipeline", "s3.prefix": "cluster-a"}, publish=True)
    shutil.rmtree(data / METADATA_DIR_NAME)
    options = {"path": str(data), "subscribe": "s3t", "remote.log.storage.manager.class.name": S3_CLASS,
               "rsm.config.s3.bucket": "pipeline", "rsm.config.s3.endpoint": s3, "rsm.config.s3.prefix": "cluster-a"}
    assert scan_options(options) == want
    opts = parse_options(options)
    [plog] = opts.partitions(opts.discover())
    assert plog.remote_start == 0 and len(plog.remote_segments) >= 2 and plog.local_start and plog.local_start > 0
    # The object layout of docs/operations.md: <prefix>/<topic id>-<partition>/_manifest/<sequence>.<kind>.json,
    # a checkpoint first, then a delta per change.
    store = S3RemoteStorageManager()
    store.configure({"s3.bucket": "pipeline", "s3.endpoint": s3})
    keys = [str(m["path"]) for chunk in obstore.list(store.store, prefix="cluster-a") for m in chunk]
    manifest_keys = sorted(k for k in keys if "/_manifest" in k)
    assert manifest_keys[0] == "cluster-a/CQkJCQkJCQkJCQkJCQkJCQ-0/_manifest/00000000000000000001.checkpoint.json"
    assert manifest_keys[1:] == [f"cluster-a/CQkJCQkJCQkJCQkJCQkJCQ-0/_manifest/{s:020d}.delta.json"
                                 for s in range(2, len(manifest_keys) + 1)]


def _tier_to_s3(data: Path, endpoint: str, props: dict[str, str], *, publish: bool = False) -> tuple[Path, list[Row]]:
    ulog = load_log(data / "s3t-0", LogConfig.from_props({"segment.bytes": 1500, "retention.ms": -1,
                                                           "remote.storage.enable": True,
                                                           "local.retention.bytes": 1}), LoadOptions())
    ulog.write_partition_metadata(b"\x09" * 16)
    _fill_mixed(ulog, 3)
    want: list[Row] = expected_rows(ulog.dir)
    rsm = S3RemoteStorageManager()
    rsm.configure({"s3.endpoint": endpoint, **props})
    rlmm: Any = FileRemoteLogMetadataManager(data / METADATA_DIR_NAME, sync=False)
    if publish:  # as the broker composes it
        rlmm = ManifestPublisher(rlmm, rsm, broker_id=1)
    rlm = RemoteLogManager(RemoteLogManagerConfig(system_enable=True), _Logs({("s3t", 0): ulog}), rsm, rlmm,
                           index_cache_dir=data / "remote-log-index-cache")
    assert rlm.copy_all() >= 2
    ulog.delete_old_segments()
    rlm.close()
    ulog.close()
    return data, want


def test_spark_reads_s3_with_credentials_from_spark_conf(spark: Any, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str],
                                                        caplog: pytest.LogCaptureFixture) -> None:
    """No AWS_* variable anywhere (driver or executors) and no spark.executorEnv: the credentials come
    from Spark conf (spark.tierlog.s3.*, or Hadoop's spark.hadoop.fs.s3a.*) and reach the executors
    with the scan."""
    pytest.importorskip("moto.server", reason="moto[server] is needed for the S3 tests")
    from tests.helpers.pipeline import rows
    from tests.helpers.tiered import MotoServer
    from tierlog.pipeline import read, register

    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    leaked = spark.sparkContext.parallelize([0], 1).map(
        lambda _: sorted(k for k in os.environ if k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"))).collect()
    # tests/conftest.py starts every Spark JVM without AWS_*, so nothing can have leaked into the
    # executors' Python workers.
    assert leaked == [[]], f"the Spark executors were started with {leaked[0]} in their environment"
    server = MotoServer()
    server.create_bucket("conf")
    creds = {"s3.access.key.id": "testing", "s3.secret.access.key": "testing"}
    data, want = _tier_to_s3(tmp_path / "data", server.endpoint, {"s3.bucket": "conf", **creds})
    settings = {"spark.tierlog.remote.log.storage.manager.class.name": S3_CLASS, "spark.tierlog.s3.bucket": "conf",
                "spark.tierlog.s3.max.retries": "0"}
    ways = [{"spark.tierlog.s3.endpoint": server.endpoint, "spark.tierlog.s3.access.key.id": "testing",
             "spark.tierlog.s3.secret.access.key": "testing"},
            {"spark.hadoop.fs.s3a.endpoint": server.endpoint, "spark.hadoop.fs.s3a.access.key": "testing",
             "spark.hadoop.fs.s3a.secret.key": "testing"}]
    try:
        for way in ways:
            for key, value in {**settings, **way}.items():
                spark.conf.set(key, value)
            register(spark)
            df = spark.read.format("tierlog").option("path", str(data)).option("subscribe", "s3t").option(
                "includeHeaders", "true").load()
            assert rows(df) == want, way
            # tierlog.pipeline.read plans on the driver with the same conf, and leaves S3 ranges to
            # the Python reader, saying so.
            with caplog.at_level(logging.INFO, logger="tierlog.pipeline.jvm"):
                assert rows(read(spark, str(data), subscribe="s3t", includeHeaders="true")) == want, way
            assert "reading with the Python reader: s3t-0 offsets" in caplog.text
            assert "in a remote tier the JVM reader does not read (S3RemoteStorageManager)" in caplog.text
            caplog.clear()
            assert spark_cmd.run(cli("usage", "--path", str(data), "--json")) == 0
            usage = json.loads(capsys.readouterr().out)
            assert usage["remote_records"] + usage["local_records"] == len(want) and usage["remote_segments"] >= 2
            for key in way:
                spark.conf.unset(key)
        # Without credentials the same read fails: they came from the conf.
        for key, value in {**settings, "spark.tierlog.s3.endpoint": server.endpoint}.items():
            spark.conf.set(key, value)
        register(spark)
        with pytest.raises(Exception, match="s3://conf/"):
            spark.read.format("tierlog").option("path", str(data)).option("subscribe", "s3t").load().count()
    finally:
        for key in [*settings, *ways[0], *ways[1]]:
            spark.conf.unset(key)
        register(spark)
        server.stop()
