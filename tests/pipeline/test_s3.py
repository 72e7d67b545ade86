"""The remote tier on S3 (moto's server on loopback): segments located through the remote metadata,
the key the plugin recorded in its custom metadata first (seed 002), and their sizes as the plugin
reports them. Planning and decoding run without Spark here: the Spark path is the same code."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.pipeline import scan_options
from tests.pipeline.data import T0, Row, _fill_mixed, _Logs, expected_rows
from tierlog.config import LogConfig
from tierlog.pipeline import jobs
from tierlog.pipeline.options import parse_options
from tierlog.storage.loader import LoadOptions, load_log
from tierlog.tiered.backends.s3 import S3RemoteStorageManager
from tierlog.tiered.layout import METADATA_DIR_NAME
from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager
from tierlog.tiered.remote_log_manager import RemoteLogManager, RemoteLogManagerConfig

S3_CLASS = "tierlog.tiered.backends.s3.S3RemoteStorageManager"


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
