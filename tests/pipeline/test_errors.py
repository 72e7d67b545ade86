"""No silent empties: what is not there is an error naming what was looked for and where; skipped
offsets are logged; ``tierlog spark`` prints one line per error; readers write nothing."""

from __future__ import annotations

import argparse
import logging
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.pipeline import scan_options
from tests.pipeline.data import Dataset
from tierlog.cli import spark_cmd
from tierlog.errors import TierlogError
from tierlog.pipeline.options import parse_options
from tierlog.pipeline.reader import ScanRange, read_index
from tierlog.pipeline.source import TierlogBatchReader
from tierlog.tiered.api import IndexType, RemoteStorageError


def cli(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tierlog")
    spark_cmd.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["spark", *argv])


def test_a_missing_topic_or_partition_is_an_error_naming_it(dataset: Dataset) -> None:
    with pytest.raises(TierlogError, match=f"topic 'nope' not found in the log directory {dataset.data}"):
        scan_options({"path": str(dataset.data), "subscribe": "orders,nope"})
    with pytest.raises(TierlogError, match=r"orders-7 not found .* \(it has partitions orders: \[0, 1\]\)"):
        scan_options({"path": str(dataset.data), "assign": '{"orders": [0, 7]}'})


def test_a_path_that_is_no_log_dir_is_an_error_naming_the_one_inside(dataset: Dataset) -> None:
    with pytest.raises(TierlogError, match=f"{dataset.root} is not a Kafka or tierlog log directory.*"
                                           f"{dataset.data} is"):
        scan_options({"path": str(dataset.root), "subscribe": "orders"})


def test_fail_on_data_loss_false_logs_each_skipped_range(dataset: Dataset, caplog: pytest.LogCaptureFixture) -> None:
    start = dataset.log_start[("trimmed", 0)]
    opts = parse_options({"path": str(dataset.data), "subscribe": "trimmed", "failOnDataLoss": "false",
                          "startingOffsets": '{"trimmed": {"0": 0}}'})
    with caplog.at_level(logging.WARNING, logger="tierlog.pipeline"):
        ranges = TierlogBatchReader(opts).plan()
    assert ranges and min(r.start_offset for r in ranges) == start
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and f"trimmed-0: offsets [0, {start}) are not available" in warned[0].getMessage()
    assert "Some data may have been lost" in warned[0].getMessage()


def test_readers_create_no_remote_dir_and_say_when_the_default_tier_is_missing(dataset: Dataset,
                                                                               tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(dataset.data, data)  # the remote tier (data-remote beside it) is not copied
    assert scan_options({"path": str(data), "subscribe": "orders"})  # local-only partitions still read
    with pytest.raises(TierlogError, match=f"the local-directory remote tier {tmp_path / 'data-remote'} does not exist"):
        scan_options({"path": str(data), "subscribe": "tiered"})
    # An explicit directory that does not exist is read as the tier, and not created.
    with pytest.raises(TierlogError):
        scan_options({"path": str(data), "subscribe": "tiered", "rsm.config.dir": str(tmp_path / "elsewhere")})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_read_index_raises_what_the_remote_tier_raises(dataset: Dataset) -> None:
    opts = parse_options({"path": str(dataset.data), "subscribe": "tiered"})
    md = opts.discover()[("tiered", 0)].remote_segments[0]
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pytest.importorskip("obstore", reason="the S3 plugin needs obstore")
    from tierlog.pipeline.reader import RemoteSpec

    spec = RemoteSpec("tierlog.tiered.backends.s3.S3RemoteStorageManager",
                      (("s3.bucket", "b"), ("s3.endpoint", f"http://127.0.0.1:{port}"), ("s3.max.retries", "0")),
                      opts.remote.metadata_dir if opts.remote else "")
    rng = ScanRange("tiered", 0, md.start_offset, md.end_offset + 1, remote=md)
    # Before, any failure read as an empty index (the scan then silently started elsewhere).
    with pytest.raises(RemoteStorageError, match="fetching s3://b/"):
        read_index(rng, IndexType.OFFSET, spec)


def test_errors_print_as_one_line_and_the_trace_with_verbose(spark: Any, dataset: Dataset,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    # Raised in Spark's Python planner process: it reaches the driver wrapped by Spark.
    argv = ["export", "--path", str(dataset.data), "--topic", "nope", "--output", "/nonexistent/x", "--mode", "mirror"]
    assert spark_cmd.run(cli(*argv)) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: option 'subscribe': topic 'nope' not found in the log directory {dataset.data} or the "
                   "remote tier (topics there: events, lat, opentxn, orders, tiered, trimmed)"]
    assert spark_cmd.run(cli(*argv, "--verbose")) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().splitlines()[-1].startswith("error: option 'subscribe'")
    assert spark_cmd.run(cli("usage", "--path", str(dataset.root))) == 1
    assert capsys.readouterr().err.strip().startswith(f"error: {dataset.root} is not a Kafka or tierlog log directory")
