"""The Spark maintenance jobs and ``tierlog spark JOB``: usage, verify (on good and damaged data) and
export (rerunnable)."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.pipeline.data import Dataset
from tierlog.cli import spark_cmd
from tierlog.pipeline import jobs
from tierlog.pipeline.options import parse_options


def cli(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tierlog")
    spark_cmd.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["spark", *argv])


def test_usage_counts_records_and_bytes_in_both_tiers(spark: Any, dataset: Dataset,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert spark_cmd.run(cli("usage", "--path", str(dataset.data), "--json")) == 0
    rows = {(r["topic"], r["partition"]): r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert set(rows) == set(dataset.expected)
    for tp, r in rows.items():
        assert r["local_records"] + r["remote_records"] == len(dataset.expected[tp]), tp
        part_dir = dataset.data / f"{tp[0]}-{tp[1]}"
        assert r["local_bytes"] == sum(f.stat().st_size for f in part_dir.glob("*.log"))
    tiered = rows[("tiered", 0)]
    assert tiered["remote_segments"] >= 2 and tiered["local_segments"] == 1
    assert tiered["remote_bytes"] == sum(f.stat().st_size for f in dataset.remote_files if f.suffix == ".log")


def test_verify_passes_on_good_data_and_names_the_damage(spark: Any, dataset: Dataset, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    opts = parse_options({"path": str(dataset.data), "subscribePattern": ".*"})
    checks = jobs.verify(spark, opts.paths, opts.remote)
    assert checks and all(c["ok"] for c in checks), [c for c in checks if not c["ok"]]
    assert {c["tier"] for c in checks if c["topic"] == "tiered"} == {"local", "remote"}

    damaged = tmp_path / "data"
    shutil.copytree(dataset.data / "orders-0", damaged / "orders-0")
    logs = sorted((damaged / "orders-0").glob("*.log"))
    raw = bytearray(logs[0].read_bytes())
    raw[200] ^= 0x55
    logs[0].write_bytes(bytes(raw))
    index = logs[1].with_suffix(".index")
    index.write_bytes(index.read_bytes() + bytes(8))  # a zero entry after the valid ones
    assert spark_cmd.run(cli("verify", "--path", str(damaged), "--json")) == 3
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    bad = {r["base_offset"]: r["problems"] for r in rows if not r["ok"]}
    first, second = (int(p.name.split(".")[0]) for p in logs[:2])
    assert set(bad) == {first, second}
    assert any("CRC" in p for p in bad[first])
    assert any("offset index" in p for p in bad[second])


def test_export_mirror_to_parquet_by_date_is_rerunnable(spark: Any, dataset: Dataset, tmp_path: Path) -> None:
    out = tmp_path / "export"
    opts = parse_options({"path": str(dataset.data), "subscribe": "orders"})
    want = len(dataset.expected[("orders", 0)]) + len(dataset.expected[("orders", 1)])
    assert jobs.export(spark, opts.paths, opts.remote, ["orders"], str(out), mode="mirror") == want
    first = sorted(tuple(r) for r in spark.read.parquet(str(out)).select("partition", "offset", "date").collect())
    assert jobs.export(spark, opts.paths, opts.remote, ["orders"], str(out), mode="mirror") == want
    again = sorted(tuple(r) for r in spark.read.parquet(str(out)).select("partition", "offset", "date").collect())
    assert first == again and len(again) == want
    assert [p.name for p in (out / "topic=orders").iterdir() if p.is_dir()] == ["date=2023-11-14"]


def test_export_archive_keeps_rows_retention_deleted_and_appends_only_new_ones(
        spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.pipeline.data import _fill_mixed, expected_rows
    from tierlog.config import LogConfig
    from tierlog.storage.loader import LoadOptions, load_log

    data, out = tmp_path / "data", tmp_path / "archive"
    ulog = load_log(data / "arch-0", LogConfig.from_props({"segment.bytes": 1500, "retention.ms": -1}), LoadOptions())
    try:
        _fill_mixed(ulog, 0)
        first = {r[4]: r[1] for r in expected_rows(ulog.dir)}
        argv = ["export", "--path", str(data), "--topic", "arch", "--output", str(out), "--json"]
        assert spark_cmd.run(cli(*argv)) == 0
        assert json.loads(capsys.readouterr().out)["rows"] == len(first)
        # More records, then retention moves the log start past rows the first run exported.
        _fill_mixed(ulog, 1)
        later = {r[4]: r[1] for r in expected_rows(ulog.dir)}
        ulog.maybe_increment_log_start_offset(ulog.segments.base_offsets[3], "test")
        ulog.delete_old_segments()
        log_start = ulog.log_start_offset
        assert log_start > min(first)
    finally:
        ulog.close()
    assert spark_cmd.run(cli(*argv)) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == len(set(later) - set(first))
    archived = [(r.offset, r.value) for r in spark.read.parquet(str(out)).select("offset", "value").collect()]
    assert len(archived) == len({o for o, _ in archived}), "an offset was exported twice"
    assert dict(archived) == {**first, **later}
    # Nothing new: a third run appends nothing.
    assert spark_cmd.run(cli(*argv)) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == 0
    assert spark.read.parquet(str(out)).count() == len(archived)
    # Mirror mode is today's output: what the log holds now, in the dates it writes.
    assert spark_cmd.run(cli(*argv, "--mode", "mirror")) == 0
    capsys.readouterr()
    mirrored = {r.offset for r in spark.read.parquet(str(out)).select("offset").collect()}
    assert mirrored == {o for o in later if o >= log_start}


@pytest.mark.parametrize("name", ["exports[2024]", "a{b,c}*?"])
def test_export_to_a_path_with_glob_characters(spark: Any, dataset: Dataset, tmp_path: Path, name: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Spark's file readers take ``[]{}*?`` in a path as a Hadoop glob: the export's read-backs of its
    own output (its manifest, the rows it wrote) went to another path, or none ("Path does not
    exist"). Each character is escaped for them now; the output directory is the one named."""
    from tierlog.pipeline.export import hadoop_literal

    out = tmp_path / name
    want = len(dataset.expected[("orders", 0)]) + len(dataset.expected[("orders", 1)])
    argv = ["export", "--path", str(dataset.data), "--topic", "orders", "--output", str(out), "--json"]
    assert spark_cmd.run(cli(*argv)) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == want
    assert spark_cmd.run(cli(*argv)) == 0  # the second run reads the first's manifest: nothing new
    assert json.loads(capsys.readouterr().out)["rows"] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]
    assert spark.read.parquet(hadoop_literal(str(out))).count() == want
    assert spark_cmd.run(cli(*argv, "--mode", "mirror")) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == want


def _largest_timestamps(part_dir: Path) -> list[tuple[int, int]]:
    from tierlog.records import iter_headers

    out = []
    for log_file in sorted(part_dir.glob("*.log")):
        stamps = [h.max_timestamp for h in iter_headers(log_file.read_bytes())]
        out.append((int(log_file.name.split(".")[0]), max(stamps)))
    return out


def test_retention_preview_applies_the_timestamp_floor_and_time_retention(
        spark: Any, dataset: Dataset, capsys: pytest.CaptureFixture[str]) -> None:
    segments = _largest_timestamps(dataset.data / "orders-0")
    assert len(segments) >= 3
    floor = segments[1][1] + 1  # the first two segments lie wholly below it
    argv = ["retention-preview", "--path", str(dataset.data), "--topic", "orders", "--json"]
    assert spark_cmd.run(cli(*argv, "--override", f"retention.min.timestamp={floor}",
                             "--override", "retention.ms=-1")) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    got = sorted((r["partition"], r["base_offset"], r["reason"]) for r in rows)
    assert [g for g in got if g[0] == 0] == [(0, segments[0][0], "timestamp_floor"), (0, segments[1][0], "timestamp_floor")]
    # orders-1 was written later (its timestamps are all above the floor): nothing there.
    assert all(g[0] == 0 for g in got)
    # Time retention, evaluated at a chosen "now": every segment has expired, the active one too (the
    # broker rolls it first, as Kafka does).
    now = segments[-1][1] + 10_000
    assert spark_cmd.run(cli(*argv, "--override", "retention.ms=5000", "--now", str(now))) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(r["base_offset"] for r in rows if r["partition"] == 0) == [s[0] for s in segments]
    assert {r["reason"] for r in rows} == {"time"}


def test_retention_preview_covers_the_remote_tier(spark: Any, dataset: Dataset) -> None:
    opts = parse_options({"path": str(dataset.data), "subscribe": "tiered"})
    config_for = jobs.topic_configs(opts.paths, None, {"remote.storage.enable": "true", "retention.bytes": "1",
                                                       "local.retention.bytes": "1"})
    rows = jobs.retention_preview(spark, opts.paths, opts.remote, config_for, 0, ["tiered"])
    remote = [r for r in rows if r["tier"] == "remote"]
    assert remote and all(r["reason"] == "size" for r in remote)
    # Locally only the active segment is left, and it is never deleted.
    assert [r for r in rows if r["tier"] == "local"] == []


def test_rebuild_snapshots_recreates_what_the_broker_wrote(spark: Any, dataset: Dataset, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from tierlog.storage.checkpoints import CLEAN_SHUTDOWN
    from tierlog.storage.producer_snapshot import decode_snapshot

    data = tmp_path / "data"
    shutil.copytree(dataset.data / "orders-0", data / "orders-0")
    snapshots = sorted((data / "orders-0").glob("*.snapshot"))
    assert len(snapshots) >= 2
    # The snapshot at the log end offset is the one a clean shutdown writes, not a segment's.
    leo = f"{dataset.log_end[('orders', 0)]:020d}.snapshot"
    originals = {p.name: sorted(decode_snapshot(p.read_bytes())) for p in snapshots if p.name != leo}
    assert any(originals.values()), "the idempotent and transactional producers should be in some snapshot"
    for p in snapshots:
        p.unlink()
    argv = ["rebuild-snapshots", "--path", str(data), "--json"]
    assert spark_cmd.run(cli(*argv)) == 1  # no clean-shutdown marker: a broker might be running
    assert "clean-shutdown" in capsys.readouterr().err
    assert spark_cmd.run(cli(*argv, "--dry-run")) == 0
    planned = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(r["snapshot"] for r in planned) == sorted(originals) and not any(r["written"] for r in planned)
    assert not list((data / "orders-0").glob("*.snapshot"))
    (data / CLEAN_SHUTDOWN).write_bytes(b"")
    assert spark_cmd.run(cli(*argv)) == 0
    written = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert all(r["written"] for r in written) and len(written) == len(originals)
    rebuilt = {p.name: sorted(decode_snapshot(p.read_bytes())) for p in (data / "orders-0").glob("*.snapshot")}
    assert rebuilt == originals
    assert not [p for p in data.iterdir() if p.name.startswith(".tierlog-snapshot-rebuild")]


def test_verify_skips_a_segment_deleted_during_the_job(spark: Any, dataset: Dataset, tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(dataset.data / "orders-0", data / "orders-0")
    opts = parse_options({"path": str(data), "subscribe": "orders"})
    tasks = jobs.segment_tasks(opts.discover())  # planned, then retention deletes the oldest segment
    oldest = min(tasks, key=lambda t: t.scan.start_offset)
    for f in data.glob(f"orders-0/{Path(str(oldest.scan.log_path)).stem}.*"):
        f.unlink()
    rows = jobs.verify_tasks(spark, tasks, opts.paths, opts.remote)
    gone = [r for r in rows if r["base_offset"] == oldest.scan.start_offset]
    assert gone == [{**gone[0], "ok": True, "problems": [], "skipped": jobs.DELETED}]
    assert all(r["ok"] and r["skipped"] is None for r in rows if r is not gone[0]) and len(rows) == len(tasks)


def test_usage_counts_each_readable_offset_once_and_leaves_out_empty_partitions(
        spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.pipeline.data import _fill_mixed, _Logs, expected_rows
    from tierlog.config import LogConfig
    from tierlog.records import SimpleRecord, build_batch
    from tierlog.storage.checkpoints import LOG_START_OFFSET_CHECKPOINT, OffsetCheckpointFile
    from tierlog.storage.loader import LoadOptions, load_log
    from tierlog.tiered.backends.local import LocalDirectoryRemoteStorageManager
    from tierlog.tiered.layout import METADATA_DIR_NAME, default_local_remote_dir
    from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager
    from tierlog.tiered.remote_log_manager import RemoteLogManager, RemoteLogManagerConfig

    data = tmp_path / "data"
    base = {"segment.bytes": 1500, "retention.ms": -1}
    # both-0: every closed segment tiered, the newest of them still on local disk too.
    both = load_log(data / "both-0", LogConfig.from_props({**base, "remote.storage.enable": True,
                                                           "local.retention.bytes": 3000}), LoadOptions())
    both.write_partition_metadata(b"\x05" * 16)
    _fill_mixed(both, 2)
    want_both = expected_rows(both.dir)
    rsm = LocalDirectoryRemoteStorageManager()
    rsm.configure({"dir": str(default_local_remote_dir(data.resolve())), "fsync": "false"})
    rlm = RemoteLogManager(RemoteLogManagerConfig(system_enable=True), _Logs({("both", 0): both}), rsm,
                           FileRemoteLogMetadataManager(data / METADATA_DIR_NAME, sync=False),
                           index_cache_dir=data / "remote-log-index-cache")
    assert rlm.copy_all() >= 3
    both.delete_old_segments()
    local_start = both.segments.base_offsets[0]
    assert local_start > 0 and both.num_segments >= 3  # tiered segments kept locally, and some only remote
    rlm.close()
    both.close()
    # cut-0: local only, its log start moved into the middle of a batch (DeleteRecords).
    cut = load_log(data / "cut-0", LogConfig.from_props(base), LoadOptions())
    for i in range(6):
        cut.append_as_leader(build_batch([SimpleRecord(b"k", b"v%d" % j, (), 1_700_000_000_000 + i) for j in range(4)]))
    cut.close()
    OffsetCheckpointFile(data / LOG_START_OFFSET_CHECKPOINT).write({("cut", 0): 10})
    load_log(data / "empty-0", LogConfig.from_props(base), LoadOptions()).close()

    assert spark_cmd.run(cli("usage", "--path", str(data), "--json")) == 0
    rows = {(r["topic"], r["partition"]): r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert set(rows) == {("both", 0), ("cut", 0)}  # the empty partition is left out
    r = rows[("both", 0)]
    assert r["local_records"] + r["remote_records"] == len(want_both)
    assert r["remote_records"] == sum(1 for w in want_both if w[4] < local_start)
    assert r["remote_segments"] > r["local_segments"] - 1 > 0  # both tiers' objects are still counted as stored
    assert rows[("cut", 0)]["local_records"] == 24 - 10


def test_rebuild_snapshots_tasks_write_nothing_where_the_log_is(dataset: Dataset, tmp_path: Path) -> None:
    """What an executor runs returns the snapshots' bytes; only the driver writes them (on a cluster a
    task's file would land on whichever node ran it)."""
    data = tmp_path / "data"
    shutil.copytree(dataset.data / "orders-0", data / "orders-0")
    for p in (data / "orders-0").glob("*.snapshot"):
        p.unlink()
    before = sorted(p.name for p in data.rglob("*"))
    plog = parse_options({"path": str(data), "subscribe": "orders"}).discover()[("orders", 0)]
    rows = jobs.partition_rebuild_snapshots(plog, 7 * 86_400_000, dry_run=False)
    assert rows and all(isinstance(r["content"], bytes) and not r["written"] for r in rows)
    assert sorted(p.name for p in data.rglob("*")) == before and sorted(p.name for p in tmp_path.iterdir()) == ["data"]
    assert all(jobs.write_snapshot(r) for r in rows)
    assert sorted(p.name for p in (data / "orders-0").glob("*.snapshot")) == sorted(r["snapshot"] for r in rows)


def test_export_archive_after_a_run_killed_between_its_rows_and_its_manifest(spark: Any, dataset: Dataset,
                                                                           tmp_path: Path) -> None:
    out = tmp_path / "archive"
    opts = parse_options({"path": str(dataset.data), "subscribe": "events"})
    want = len(dataset.expected[("events", 0)])
    assert jobs.export(spark, opts.paths, opts.remote, ["events"], str(out)) == want

    def drop_commit_records() -> None:
        records = [f for f in (out / jobs.EXPORT_MANIFEST).glob("part-*") if b'"committed"' in f.read_bytes()]
        assert records
        for f in records:
            f.unlink()

    # Killed after Spark committed the rows, before the manifest said so: the rows are found, nothing
    # is exported twice.
    drop_commit_records()
    assert jobs.export(spark, opts.paths, opts.remote, ["events"], str(out)) == 0
    assert spark.read.parquet(str(out)).count() == want
    # Killed before the rows were committed (none written; the run is still only "started"): the next
    # run exports them.
    shutil.rmtree(out / "topic=events")
    assert jobs.export(spark, opts.paths, opts.remote, ["events"], str(out)) == want
    assert sorted(r.offset for r in spark.read.parquet(str(out)).select("offset").collect()) == [
        r[4] for r in dataset.expected[("events", 0)]]
