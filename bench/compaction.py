"""Log cleaner throughput against a plain read plus write of the same bytes, in the same run.

Builds a compacted log (keyed records in producer-sized batches, many updates per key), then times
(1) a baseline: every segment read in ``log.cleaner.io.buffer.size`` chunks and written to a new file,
fsynced -- what any cleaner must at least do -- and (2) one cleaning of the whole log (building the
key -> offset map over the dirty range, rewriting every segment, the swaps). Prints both in MB/s of
log bytes, the ratio (target >= 0.5), and the dedupe buffer's memory bound: the nominal
``log.cleaner.dedupe.buffer.size`` accounting (24 bytes a key) and what the map's table really takes
(measured with tracemalloc while it is filled; numpy reports its buffers there), and the bound of the
map pass's batch table beside it (48 bytes a mapped batch, at most ``log.cleaner.io.buffer.size``).

The cleaning runs as the broker runs it: the swap renames the replaced segments ``.deleted`` and the
log's scheduler unlinks them ``file.delete.delay.ms`` (Kafka's default, 60 s) later -- Kafka's
LocalLog.replaceSegments defers the delete the same way, so a reader still holding an old segment
can finish -- so the unlinks are not the cleaning's time. They are timed too (the scheduler run right
after) and printed as a second line, the cleaning with the unlinks against the same baseline. A
small log is cleaned first, untimed, so the compiled code's one-time load is not counted either, and
the page cache's dirty data is written out (``sync``) before each timed part, so that no fsync in it
waits for what an earlier step wrote.

    python bench/compaction.py --records 400000 --keys 20000

``--remote`` also times remote compaction (issue 18): the same log, uncompacted, copied to a remote
tier in a local directory (16 MiB segments), then compacted there by the broker's job
(``tiered/remote_compaction.py``: download, map, rewrite, upload, swap), against the local cleaner's
time for the same log in the same run. ``--spark`` times ``tierlog spark compact``'s path on the same
kind of copy (a local[2] session, started before the clock runs): plan, the executor task (download,
map, rewrite, upload), the broker's side applying the commit (the swap).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import command_line, report
from tierlog.config import LogConfig
from tierlog.records import SimpleRecord, build_batch
from tierlog.storage.cleaner.cleaner import Cleaner
from tierlog.storage.cleaner.manager import clean_log
from tierlog.storage.cleaner.offset_map import ENTRY_BYTES, OffsetMap
from tierlog.storage.loader import LoadOptions, load_log
from tierlog.testing import ManualClock, ManualScheduler

TS = 1_700_000_000_000
IO_BUFFER = 524288
#: file.delete.delay.ms, Kafka's default: how long the broker waits before unlinking replaced segments.
DELETE_DELAY_MS = 60_000


def build(directory: Path, records: int, keys: int, value_bytes: int, batch: int) -> int:
    config = LogConfig(cleanup_policy=("compact",), segment_bytes=16 * 2**20, file_delete_delay_ms=0)
    ulog = load_log(directory, config, LoadOptions(had_clean_shutdown=True), clock=ManualClock(TS))
    value = b"v" * value_bytes
    for start in range(0, records, batch):
        recs = [SimpleRecord(b"key-%08d" % ((i * 7919) % keys), value, timestamp=TS + i)
                for i in range(start, min(records, start + batch))]
        ulog.append_as_leader(build_batch(recs))
    ulog.roll()
    ulog.close()
    return sum(p.stat().st_size for p in directory.glob("*.log"))


def baseline(directory: Path, out: Path) -> float:
    out.mkdir()
    os.sync()  # see clean()
    started = time.perf_counter()
    for seg in sorted(directory.glob("*.log")):
        with seg.open("rb") as src, (out / seg.name).open("wb") as dst:
            while chunk := src.read(IO_BUFFER):
                dst.write(chunk)
            dst.flush()
            os.fsync(dst.fileno())
    return time.perf_counter() - started


def warm_up(root: Path) -> None:
    """Clean a small log first: the cleaner's compiled code is loaded from numba's cache on its first
    call (~50 ms), once per process -- a broker's cleaner threads pay it once for their life."""
    build(root / "t-0", 2_000, 100, 100, 100)
    clean(root / "t-0", 100)
    shutil.rmtree(root)


def print_batch_table(records: int, batch: int) -> None:
    try:
        from tierlog.storage.cleaner.fast_path import BatchTable
    except ImportError:  # a source tree from before the batch table (PYTHONPATH comparisons)
        return
    rows = Cleaner(OffsetMap(1), io_buffer_bytes=IO_BUFFER).batch_table_rows
    batches = -(-records // batch)
    print(f"batch table: {BatchTable.ROW_BYTES} B a mapped batch, at most {rows:,} rows = "
          f"{rows * BatchTable.ROW_BYTES:,} bytes (log.cleaner.io.buffer.size); this log's {batches:,} batches "
          f"take {min(rows, batches) * BatchTable.ROW_BYTES:,} bytes")


def capacity_for(slots: int) -> int:
    """The table a broker would give a map of ``slots`` keys: slots / load factor 0.9."""
    return int(slots / 0.9) + 1


def clean(directory: Path, slots: int) -> tuple[float, float, int]:
    """One cleaning as the broker runs it: the replaced segments renamed ``.deleted`` in the swap and
    unlinked ``file.delete.delay.ms`` (Kafka's default, 60 s) later by the scheduler, off the
    cleaner's clock. Returns (the cleaning's seconds, the deferred deletion's seconds, bytes kept)."""
    config = LogConfig(cleanup_policy=("compact",), segment_bytes=16 * 2**20, file_delete_delay_ms=DELETE_DELAY_MS)
    clock = ManualClock(TS)
    ulog = load_log(directory, config, LoadOptions(had_clean_shutdown=True), clock=clock,
                    scheduler=ManualScheduler(clock))
    cleaner = Cleaner(OffsetMap(slots, capacity_for(slots)), io_buffer_bytes=IO_BUFFER)
    # Earlier writes (the log built, the baseline's or a copy's) written out first: an fsync in the
    # timed part would otherwise wait for them too (ext4 commits other files' dirty data with it).
    os.sync()
    started = time.perf_counter()
    result = clean_log(ulog, cleaner, None, TS)
    elapsed = time.perf_counter() - started
    started = time.perf_counter()
    clock.advance(DELETE_DELAY_MS)  # the scheduler runs the deletions now due
    deleting = time.perf_counter() - started
    assert not list(directory.glob("*.deleted")), "the deferred deletion did not run"
    ulog.close()
    return elapsed, deleting, result.bytes_written


def remote_compact(root: Path, source: Path, slots: int, spark: object = None) -> tuple[float, int, int]:
    """Copy the log (uncompacted) to a local-directory remote tier, then time one remote compaction:
    the broker's, or with ``spark`` (a session) ``tierlog spark compact``'s -- plan, the executor task,
    and the broker applying the commit (its swap). Returns (seconds, segments replaced, bytes written)."""
    from tierlog.storage.cleaner.checkpoint import CleanerCheckpoint
    from tierlog.tiered.backends.local import LocalDirectoryRemoteStorageManager
    from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager
    from tierlog.tiered.remote_log_manager import RemoteLogManager, RemoteLogManagerConfig

    data = root / "remote-data"
    shutil.copytree(source, data / "t-0")
    config = LogConfig(cleanup_policy=("compact",), segment_bytes=16 * 2**20, file_delete_delay_ms=0,
                       remote_storage_enable=True, retention_ms=-1)
    clock = ManualClock(TS)
    ulog = load_log(data / "t-0", config, LoadOptions(had_clean_shutdown=True), clock=clock)
    ulog.write_partition_metadata(b"\x01" * 16)
    # Counted as cleaned so the copy task uploads every closed segment as it is (uncompacted).
    CleanerCheckpoint(data).write({("t", 0): ulog.log_end_offset})

    class Logs:
        def all_logs(self) -> dict[tuple[str, int], object]:
            return {("t", 0): ulog}

        def get_log(self, topic: str, partition: int) -> object:
            return ulog if (topic, partition) == ("t", 0) else None

    rsm = LocalDirectoryRemoteStorageManager()
    rsm.configure({"dir": str(root / "remote"), "fsync": "true"})
    settings = RemoteLogManagerConfig(system_enable=True, compaction_map_bytes=capacity_for(slots) * ENTRY_BYTES,
                                      compaction_io_buffer_bytes=IO_BUFFER)
    rlm = RemoteLogManager(settings, Logs(), rsm, FileRemoteLogMetadataManager(data / "remote-log-metadata"),  # type: ignore[arg-type]
                           index_cache_dir=data / "remote-log-index-cache", clock=clock)
    rlm.sync_partitions()
    rlm.copy_partition("t", 0)
    if spark is not None:
        out = spark_compact(spark, rlm, ulog, data, root / "remote", slots, clock.wall_ms())
    else:
        started = time.perf_counter()
        result = rlm.compact_partition("t", 0, force=True)
        elapsed = time.perf_counter() - started
        assert result is not None and result.abandoned is None, result
        out = (elapsed, result.sources, result.bytes_written)
    rlm.close()
    ulog.close()
    return out


def spark_compact(spark: object, rlm: object, ulog: object, data: Path, remote: Path, slots: int,
                  now_ms: int) -> tuple[float, int, int]:
    """The Spark job's path, timed from planning to the broker's answer (the session is already up)."""
    from tierlog.pipeline.catalog import PartitionLog
    from tierlog.pipeline.compact import CompactionSettings, compact_partition, plan, planned_metadata
    from tierlog.pipeline.reader import RemoteSpec
    from tierlog.tiered.api import RemoteLogSegmentState
    from tierlog.tiered.compaction_jobs import CompactionRequests, read_result, write_commit, write_intent

    finished = sorted((m for tip in rlm.rlmm.partitions() for m in rlm.rlmm.list_remote_log_segments(tip)  # type: ignore[attr-defined]
                       if m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED), key=lambda m: m.start_offset)
    spec = RemoteSpec("tierlog.tiered.backends.local.LocalDirectoryRemoteStorageManager",
                      (("dir", str(remote)), ("fsync", "true")), str(data / "remote-log-metadata"))
    settings = CompactionSettings(capacity_for(slots) * ENTRY_BYTES, IO_BUFFER, 1)
    requests = CompactionRequests(rlm._ctx, rlm.deleter, data / "remote-log-metadata" / "compaction-requests")  # type: ignore[attr-defined]
    started = time.perf_counter()
    [work] = plan({("t", 0): PartitionLog("t", 0, None, remote_segments=finished, remote_start=0)},
                  lambda _t: ulog.config, settings, now_ms, force=True)  # type: ignore[attr-defined]
    write_intent(requests.directory, work.job, planned_metadata(work))
    [row] = spark.sparkContext.parallelize([work], 1).map(lambda w: compact_partition(w, spec)).collect()  # type: ignore[attr-defined]
    assert row["error"] is None, row["error"]
    write_commit(requests.directory, work.job, row["pairs"])
    requests.poll()
    answer = read_result(requests.directory, work.job)
    elapsed = time.perf_counter() - started
    assert answer and all(a["result"] == "swapped" for a in answer), answer
    return elapsed, row["sources"], row["bytes_written"]


def repeated(root: Path, source: Path, slots: int, n: int) -> None:
    """The map pass alone and one whole cleaning, each on a fresh copy, ``n`` + 1 times."""
    import statistics

    import tierlog
    from tierlog.storage.cleaner.cleaner import CleanResult

    map_s: list[float] = []
    clean_s: list[float] = []
    for i in range(n + 1):
        d = root / f"repeat-{i}" / "t-0"
        shutil.copytree(source, d)
        config = LogConfig(cleanup_policy=("compact",), segment_bytes=16 * 2**20, file_delete_delay_ms=0)
        ulog = load_log(d, config, LoadOptions(had_clean_shutdown=True), clock=ManualClock(TS))
        cleaner = Cleaner(OffsetMap(slots, capacity_for(slots)), io_buffer_bytes=IO_BUFFER)
        os.sync()
        started = time.perf_counter()
        cleaner.build_offset_map(ulog, 0, ulog.segments.base_offsets[-1], CleanResult(0, 0))
        map_s.append(time.perf_counter() - started)
        ulog.close()
        clean_s.append(clean(d, slots)[0])
        shutil.rmtree(d.parent)
    src = Path(tierlog.__file__).resolve().parents[1]
    for name, times in (("map pass", map_s[1:]), ("cleaning", clean_s[1:])):
        print(f"{name} ({src}): min {min(times):.3f} s, median {statistics.median(times):.3f} s over {n}")


def map_memory(keys: int) -> int:
    OffsetMap(1).put(b"warm-up", 0)  # the compiled code's own allocations are not the map's
    tracemalloc.start()
    m = OffsetMap(keys, capacity_for(keys))
    for i in range(keys):
        m.put(b"key-%08d" % i, i)
    current, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(m) == keys
    return current


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--keys", type=int, default=20_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--batch", type=int, default=100, help="records per batch")
    ap.add_argument("--dir", type=Path, default=None, help="where to build the log (default: a temp dir)")
    ap.add_argument("--remote", action="store_true", help="also time remote compaction of the same log")
    ap.add_argument("--repeat", type=int, default=0, metavar="N",
                    help="also clean N fresh copies of the log and print the map pass's and the cleaning's "
                         "min and median (the first, with compiling, not counted): for before/after comparisons, "
                         "run alternately with PYTHONPATH=<tree>/src")
    ap.add_argument("--spark", action="store_true",
                    help="also time tierlog spark compact's path (local[2] Spark) on the same log")
    args = ap.parse_args()
    print(command_line())
    root = Path(tempfile.mkdtemp(prefix="tierlog-compaction-", dir=args.dir))
    try:
        log_dir = root / "t-0"
        size = build(log_dir, args.records, args.keys, args.value_bytes, args.batch)
        mb = size / 1e6
        base_s = baseline(log_dir, root / "copy")
        warm_up(root / "warm-up")
        slots = max(args.keys, 1)
        if args.remote or args.spark or args.repeat:
            shutil.copytree(log_dir, root / "pristine")  # the cleaning below rewrites log_dir
        clean_s, delete_s, written = clean(log_dir, slots)
        report("cleaning", mb / clean_s, "MB/s", "read + write + fsync of the same bytes", mb / base_s)
        report("cleaning with the unlinks", mb / (clean_s + delete_s), "MB/s", "read + write + fsync of the same bytes",
               mb / base_s)
        print(f"log {mb:.1f} MB, {args.records} records, {args.keys} keys: cleaned in {clean_s:.3f} s, replaced "
              f"segments unlinked file.delete.delay.ms later in {delete_s:.3f} s (baseline {base_s:.3f} s), "
              f"{written / 1e6:.2f} MB kept")
        if args.remote:
            remote_s, replaced, remote_written = remote_compact(root, root / "pristine", slots)
            report("remote compaction", mb / remote_s, "MB/s", "the local cleaner on the same log", mb / clean_s)
            print(f"remote compaction: {replaced} remote segments compacted in {remote_s:.2f} s (local cleaner "
                  f"{clean_s:.2f} s), {remote_written / 1e6:.2f} MB written")
        if args.repeat:
            repeated(root, root / "pristine", slots, args.repeat)
        if args.spark:
            from tierlog.pipeline import spark_session

            session = spark_session("local[2]", app_name="tierlog-bench-compact", conf={"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"})
            session.sparkContext.setLogLevel("ERROR")
            session.sparkContext.parallelize([0], 1).map(lambda x: x).collect()  # workers up: not timed
            try:
                spark_s, replaced, spark_written = remote_compact(root / "spark", root / "pristine", slots, session)
            finally:
                session.stop()
            report("spark compact", mb / spark_s, "MB/s", "the local cleaner on the same log", mb / clean_s)
            print(f"spark compact: {replaced} remote segments compacted in {spark_s:.2f} s (local cleaner "
                  f"{clean_s:.2f} s), {spark_written / 1e6:.2f} MB written")
        measured = map_memory(args.keys)
        capacity = capacity_for(slots)
        print(f"dedupe buffer: {args.keys} keys -> table of {capacity:,} entries = {capacity * ENTRY_BYTES:,} bytes "
              f"(log.cleaner.dedupe.buffer.size accounting, 24 B/entry); measured while filled {measured:,} bytes "
              f"({measured / args.keys:.0f} B/key); the map never holds more keys than its slots")
        print_batch_table(args.records, args.batch)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
