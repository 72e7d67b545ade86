"""How fast producer state is rebuilt from segments, against simply reading the same files.

Writes ``--gib`` GiB of v2 segments (``--batch-kib`` batches, ``--producers`` idempotent producers
round-robin with increasing sequences), then times

  (a)  a plain sequential read of every segment: ``f.read(1 MiB)`` until EOF, bytes discarded;
  (a') the same with ``readinto`` a reused 1 MiB buffer (no allocation: the cheapest plain read);
  (b)  ``rebuild_producer_state`` from scratch (no snapshot, unclean shutdown: a full replay, including
       the three fsynced snapshots it writes),
  (b') the replay alone (``replay_segment`` over every segment, no snapshot files),

first warm (the files were just written, so all reads hit the page cache: CPU cost per byte), then
cold (each file fsynced and dropped from the page cache with posix_fadvise(DONTNEED) before each run:
what a broker restart sees), and prints rates and ratios.

    .venv/bin/python bench/producer_replay.py --gib 1
"""

from __future__ import annotations

import argparse
import os
import shlex
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tierlog._util.crc import crc32c
from tierlog._util.varint import write_varint
from tierlog.storage.producer_rebuild import rebuild_producer_state, replay_segment, segment_sources_in
from tierlog.storage.producer_state import ProducerStateManager

_HEADER = struct.Struct(">qiibIhiqqqhii")
T0 = 1_700_000_000_000
MIB = 1 << 20


def records_body(count: int, value_size: int) -> bytes:
    """``count`` real records (null key, ``value_size``-byte value, no headers). Offset and timestamp
    deltas are relative to the batch, so one body serves every batch."""
    body = bytearray()
    for i in range(count):
        rec = bytearray([0])
        write_varint(rec, i)  # timestamp delta
        write_varint(rec, i)  # offset delta
        write_varint(rec, -1)
        write_varint(rec, value_size)
        rec += bytes([97 + i % 26]) * value_size
        write_varint(rec, 0)
        write_varint(body, len(rec))
        body += rec
    return bytes(body)


def write_segments(directory: Path, total_bytes: int, segment_bytes: int, batch_bytes: int, producers: int) -> tuple[int, int]:
    """Returns (bytes written, log end offset)."""
    count = 16
    body = records_body(count, max(1, batch_bytes // count - 8))
    size = _HEADER.size + len(body)
    seqs = [0] * producers
    offset = written = 0
    segment_written = segment_bytes  # forces a first segment
    out = None
    chunk = bytearray()
    i = 0
    while written < total_bytes:
        if segment_written + size > segment_bytes:
            if out is not None:
                out.write(chunk)
                out.close()
                chunk.clear()
            out = open(directory / f"{offset:020d}.log", "wb")  # noqa: SIM115 - closed on roll / at the end
            segment_written = 0
        pid = i % producers
        ts = T0 + i
        head = bytearray(_HEADER.pack(offset, size - 12, 0, 2, 0, 0, count - 1, ts, ts + count - 1,
                                      1000 + pid, 0, seqs[pid], count))
        crc = crc32c(body, crc32c(memoryview(head)[21:]))
        struct.pack_into(">I", head, 17, crc)
        chunk += head
        chunk += body
        if len(chunk) >= 8 * MIB:
            assert out is not None
            out.write(chunk)
            chunk.clear()
        seqs[pid] += count
        offset += count
        written += size
        segment_written += size
        i += 1
    assert out is not None
    out.write(chunk)
    out.close()
    return written, offset


def plain_read(directory: Path) -> int:
    total = 0
    for seg in segment_sources_in(directory):
        with open(seg.log_path, "rb", buffering=0) as f:
            while chunk := f.read(MIB):
                total += len(chunk)
    return total


def plain_readinto(directory: Path) -> int:
    buf = bytearray(MIB)
    total = 0
    for seg in segment_sources_in(directory):
        with open(seg.log_path, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                total += n
    return total


def drop_from_page_cache(directory: Path) -> None:
    """Only this benchmark's own files: fsync (dirty pages cannot be dropped), then DONTNEED."""
    for seg in segment_sources_in(directory):
        fd = os.open(seg.log_path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def rebuild_from_scratch(directory: Path, leo: int, producers: int) -> list[int]:
    for snapshot in directory.glob("*.snapshot"):
        snapshot.unlink()
    psm = ProducerStateManager(directory)
    rebuild_producer_state(psm, segment_sources_in(directory), 0, leo, T0 + leo, reload_from_clean_shutdown=False)
    assert psm.active_producers_count == producers and psm.map_end_offset == leo
    return [s.offset for s in psm.list_snapshots()]


def replay_only(directory: Path, producers: int) -> None:
    psm = ProducerStateManager.detached()
    for segment in segment_sources_in(directory):
        replay_segment(psm, segment, segment.base_offset, None)
    assert psm.active_producers_count == producers


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, default=1.0, help="data to write and replay, in GiB (default 1)")
    parser.add_argument("--segment-mib", type=int, default=256, help="segment size in MiB (default 256)")
    parser.add_argument("--batch-kib", type=int, default=16, help="batch size in KiB (default 16)")
    parser.add_argument("--producers", type=int, default=1000, help="idempotent producers (default 1000)")
    parser.add_argument("--dir", type=Path, default=None, help="parent of the temp dir to write in (removed after)")
    parser.add_argument("--no-cold", action="store_true", help="skip the cold page cache runs")
    args = parser.parse_args(argv)
    print("command:", shlex.join([sys.executable, *sys.argv]))

    with tempfile.TemporaryDirectory(prefix="producer-replay-", dir=args.dir) as tmp:
        directory = Path(tmp)
        t = time.perf_counter()
        total, leo = write_segments(directory, int(args.gib * (1 << 30)), args.segment_mib * MIB,
                                    args.batch_kib * 1024, args.producers)
        segments = segment_sources_in(directory)
        print(f"wrote {total / 1e9:.3f} GB in {len(segments)} segments, {leo} records, "
              f"{args.producers} producers in {time.perf_counter() - t:.1f} s")

        modes = [("warm", False)] + ([] if args.no_cold else [("cold", True)])
        for mode, cold in modes:
            runs: list[tuple[str, str, Callable[[], object]]] = [
                ("a", "(a)  plain read, read(1 MiB)", lambda: plain_read(directory)),
                ("a2", "(a') plain read, readinto(1 MiB)", lambda: plain_readinto(directory)),
                ("b", "(b)  rebuild_producer_state", lambda: rebuild_from_scratch(directory, leo, args.producers)),
                ("b2", "(b') replay only, no snapshots", lambda: replay_only(directory, args.producers)),
            ]
            print(f"-- {mode} page cache")
            rates: dict[str, float] = {}
            for key, name, fn in runs:
                if cold:
                    drop_from_page_cache(directory)
                seconds = timed(fn)
                rates[key] = total / seconds / 1e6
                print(f"{name:34s} {seconds:7.3f} s {rates[key]:9,.0f} MB/s")
            print(f"replay / read(): {rates['b'] / rates['a']:.2f}x   "
                  f"replay / readinto(): {rates['b'] / rates['a2']:.2f}x")
        print("snapshots written by the rebuild at offsets", rebuild_from_scratch(directory, leo, args.producers))


if __name__ == "__main__":
    main()
