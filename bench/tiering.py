"""Tiering throughput: segments copied by the remote log manager to the local-directory and S3
backends, next to a plain copy of the same bytes in the same run (a file copy with the same fsyncs;
an S3 PutObject per file with boto3 against the same server), and remote fetch throughput (a consumer
reading the whole tiered range through ``RemoteLogManager.read``).

S3 is moto's server on 127.0.0.1 (started here), so absolute S3 numbers measure moto, not S3; the
ratio to boto3 on the same server is the figure that matters (target ≥ 80 %).

Run: .venv/bin/python bench/tiering.py [--segments 8] [--segment-mb 32] [--backends local,s3] [--rounds 5]
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tierlog.config import LogConfig
from tierlog.records import SimpleRecord, build_batch
from tierlog.storage.loader import LoadOptions, load_log
from tierlog.storage.log import UnifiedLog
from tierlog.tiered.api import RemoteStorageManager, load_remote_storage_manager
from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager
from tierlog.tiered.remote_log_manager import RemoteLogManager, RemoteLogManagerConfig

MIB = 1 << 20


class Logs:
    def __init__(self, ulog: UnifiedLog) -> None:
        self.ulog = ulog

    def all_logs(self) -> dict[tuple[str, int], UnifiedLog]:
        return {("bench", 0): self.ulog}

    def get_log(self, topic: str, partition: int) -> UnifiedLog | None:
        return self.ulog


def build_log(root: Path, segments: int, segment_mb: int) -> UnifiedLog:
    config = LogConfig.from_props({"segment.bytes": segment_mb * MIB, "remote.storage.enable": True,
                                   "retention.ms": -1})
    ulog = load_log(root / "bench-0", config, LoadOptions(had_clean_shutdown=True))
    ulog.write_partition_metadata(b"\x01" * 16)
    value = os.urandom(16 * 1024)
    now = int(time.time() * 1000)
    batch = build_batch([SimpleRecord(b"k%d" % i, value, timestamp=now) for i in range(60)])  # ~1 MiB
    while len(ulog.segments) <= segments:
        ulog.append_as_leader(batch)
    ulog.flush()
    return ulog


def segment_files(ulog: UnifiedLog) -> list[Path]:
    out: list[Path] = []
    bases = ulog.segments.base_offsets
    for base, next_base in itertools.pairwise(bases):
        seg = ulog.segments.get(base)
        snap = ulog.producer_state.snapshot_file_for(next_base)
        out += [seg.log_path, seg.offset_index_path, seg.time_index_path]
        if snap is not None:
            out.append(snap)
    return out


def plain_file_copy(paths: list[Path], dest: Path) -> float:
    dest.mkdir(parents=True)
    t0 = time.perf_counter()
    for p in paths:
        target = dest / p.name
        shutil.copyfile(p, target)  # the fastest plain copy: in the kernel
        fd = os.open(target, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    return time.perf_counter() - t0


def plain_s3_put(paths: list[Path], endpoint: str, bucket: str) -> float:
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    t0 = time.perf_counter()
    for p in paths:
        with open(p, "rb") as f:
            client.put_object(Bucket=bucket, Key=f"plain/{p.name}", Body=f)
    return time.perf_counter() - t0


def tier(ulog: UnifiedLog, rsm: RemoteStorageManager, work: Path) -> tuple[float, float, int, RemoteLogManager]:
    rlmm = FileRemoteLogMetadataManager(work / "remote-log-metadata")
    rlm = RemoteLogManager(RemoteLogManagerConfig(system_enable=True), Logs(ulog), rsm, rlmm,
                           index_cache_dir=work / "remote-log-index-cache")
    ulog.highest_offset_in_remote_storage = -1
    t0 = time.perf_counter()
    rlm.copy_all()
    copy_s = time.perf_counter() - t0
    end = ulog.segments.base_offsets[-1]
    offset, read_bytes = 0, 0
    t0 = time.perf_counter()
    while offset < end:
        data = rlm.read("bench", 0, offset, MIB)
        assert data, offset
        read_bytes += len(data)
        # the offset after the last whole batch in the chunk
        pos, nxt = 0, offset
        while pos + 61 <= len(data):
            base = int.from_bytes(data[pos:pos + 8], "big")
            length = int.from_bytes(data[pos + 8:pos + 12], "big", signed=True)
            if pos + 12 + length > len(data):
                break
            nxt = base + int.from_bytes(data[pos + 23:pos + 27], "big", signed=True) + 1
            pos += 12 + length
        offset = nxt
    fetch_s = time.perf_counter() - t0
    return copy_s, fetch_s, read_bytes, rlm


def mb_s(nbytes: int, seconds: float) -> str:
    return f"{nbytes / MIB / seconds:7.1f} MiB/s"


def report(name: str, plain_name: str, total: int, plains: list[float], copies: list[float], read_bytes: int,
           fetches: list[float]) -> None:
    """Medians over the rounds (plain and tiered alternate, so both see the same disk/server state)."""
    plain, copy, fetch = statistics.median(plains), statistics.median(copies), statistics.median(fetches)
    print(f"{name:6} {plain_name} {mb_s(total, plain)} | tiering {mb_s(total, copy)} "
          f"({100 * plain / copy:.0f} % of plain) | remote fetch {mb_s(read_bytes, fetch)}   "
          f"[rounds: plain {', '.join(f'{total / MIB / x:.0f}' for x in plains)}; "
          f"tiering {', '.join(f'{total / MIB / x:.0f}' for x in copies)} MiB/s]")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--segments", type=int, default=8)
    ap.add_argument("--segment-mb", type=int, default=32)
    ap.add_argument("--backends", default="local,s3")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    args = ap.parse_args()
    print("command:", " ".join([Path(sys.executable).name, *sys.argv]))
    work = Path(tempfile.mkdtemp(prefix="tierlog-bench-", dir=args.dir))
    try:
        ulog = build_log(work / "data", args.segments, args.segment_mb)
        paths = segment_files(ulog)
        total = sum(p.stat().st_size for p in paths)
        print(f"{len(ulog.segments) - 1} closed segments, {total / MIB:.1f} MiB to tier")
        backends = args.backends.split(",")
        if "local" in backends:
            plains, copies, fetches = [], [], []
            for r in range(args.rounds):
                # Alternate which goes first: the disk's writeback of one run slows the next.
                if r % 2 == 0:
                    plains.append(plain_file_copy(paths, work / f"plain-copy-{r}"))
                rsm = load_remote_storage_manager(
                    "tierlog.tiered.backends.local.LocalDirectoryRemoteStorageManager", {"dir": str(work / f"remote-{r}")})
                copy_s, fetch_s, read_bytes, rlm = tier(ulog, rsm, work / f"local-rlm-{r}")
                if r % 2 == 1:
                    plains.append(plain_file_copy(paths, work / f"plain-copy-{r}"))
                copies.append(copy_s)
                fetches.append(fetch_s)
                rlm.close()
                shutil.rmtree(work / f"plain-copy-{r}")
                shutil.rmtree(work / f"remote-{r}")
            report("local", "plain copy+fsync", total, plains, copies, read_bytes, fetches)
        if "s3" in backends:
            os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
            os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
            import logging
            import socket

            from moto.server import ThreadedMotoServer

            # werkzeug logs every request moto serves, thousands of lines per round.
            logging.getLogger("werkzeug").setLevel(logging.ERROR)

            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
            server.start()
            endpoint = f"http://127.0.0.1:{port}"
            try:
                import boto3

                boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket="bench-bucket")
                plains, copies, fetches = [], [], []
                for r in range(args.rounds):
                    if r % 2 == 0:
                        plains.append(plain_s3_put(paths, endpoint, "bench-bucket"))
                    rsm = load_remote_storage_manager("tierlog.tiered.backends.s3.S3RemoteStorageManager", {
                        "s3.bucket": "bench-bucket", "s3.endpoint": endpoint, "s3.prefix": f"tiered-{r}"})
                    copy_s, fetch_s, read_bytes, rlm = tier(ulog, rsm, work / f"s3-rlm-{r}")
                    if r % 2 == 1:
                        plains.append(plain_s3_put(paths, endpoint, "bench-bucket"))
                    copies.append(copy_s)
                    fetches.append(fetch_s)
                    rlm.close()
                report("s3", "boto3 put_object", total, plains, copies, read_bytes, fetches)
            finally:
                server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
