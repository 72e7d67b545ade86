"""How long writing and loading a metadata snapshot of a large cluster takes, against plain file I/O.

Builds an image of ``--topics`` topics × ``--partitions`` partitions (default 10,000 × 10 = 100,000
partitions) with ``--configs`` topic configs each, then times, best and median of ``--runs``:

  write    ``write_snapshot``: encode every record, frame the batches, write ``.part``, fsync, rename
  load     ``load_snapshot``: read, check every CRC, decode every record, replay into a new image
  plain    the same number of bytes written as one plain file (write, fsync, rename), and read back

and prints the snapshot size and the ratios. Target: write and load ≤ 2 s each.

    .venv/bin/python bench/metadata.py
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tierlog.ids import random_uuid
from tierlog.metadata.delta import MetadataDelta
from tierlog.metadata.image import EMPTY_IMAGE, MetadataImage, MetadataProvenance
from tierlog.metadata.records import (
    ConfigRecord,
    ConfigResourceType,
    FeatureLevelRecord,
    PartitionRecord,
    ProducerIdsRecord,
    TopicRecord,
)
from tierlog.metadata.snapshot import load_snapshot, write_snapshot

NOW_MS = 1_700_000_000_000
_CONFIGS = [("retention.ms", "604800000"), ("cleanup.policy", "delete"), ("segment.bytes", "536870912"),
            ("remote.storage.enable", "true"), ("local.retention.ms", "3600000")]


def build_image(topics: int, partitions: int, configs: int) -> MetadataImage:
    delta = MetadataDelta(EMPTY_IMAGE)
    delta.replay(FeatureLevelRecord("metadata.version", 21))
    delta.replay(ProducerIdsRecord(1, 1, 5000))
    count = 2
    topic_type = int(ConfigResourceType.TOPIC)
    for t in range(topics):
        name = f"topic-{t:05d}"
        tid = random_uuid()
        delta.replay(TopicRecord(name, tid))
        for key, value in _CONFIGS[:configs]:
            delta.replay(ConfigRecord(topic_type, name, key, value))
        for p in range(partitions):
            delta.replay(PartitionRecord(p, tid, (1,), (1,), 1, 0, 0))
        count += 1 + configs + partitions
    delta.set_provenance(MetadataProvenance(count - 1, 1, NOW_MS))
    return delta.apply()


def timed(fn: Callable[[], object], runs: int) -> tuple[float, float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=10, help="partitions per topic")
    parser.add_argument("--configs", type=int, default=2, choices=range(len(_CONFIGS) + 1), help="configs per topic")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", type=Path, help="where to write (default: a temporary directory)")
    args = parser.parse_args(argv)

    print("command:", shlex.join([sys.executable, *sys.argv]))
    start = time.perf_counter()
    image = build_image(args.topics, args.partitions, args.configs)
    build_s = time.perf_counter() - start
    print(f"image: {len(image.topics_by_id):,} topics, {image.num_partitions:,} partitions, "
          f"{args.configs} configs per topic (built by replay in {build_s:.2f} s)")

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        directory = Path(tmp)

        def write() -> None:
            for p in directory.iterdir():
                p.unlink()
            write_snapshot(directory, image, NOW_MS)

        write_best, write_median = timed(write, args.runs)
        (snap_path,) = list(directory.iterdir())
        size = snap_path.stat().st_size

        loaded_images: list[MetadataImage] = []

        def load() -> None:
            loaded_images.append(load_snapshot(snap_path).image)

        load_best, load_median = timed(load, args.runs)
        assert loaded_images[-1] == image, "the loaded image differs from the written one"

        payload = os.urandom(size)
        plain = directory / "plain.bin"

        def plain_write() -> None:
            tmp_file = directory / "plain.bin.tmp"
            with open(tmp_file, "wb") as f:
                f.write(payload)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp_file, plain)

        plain_write_best, _ = timed(plain_write, args.runs)
        plain_read_best, _ = timed(plain.read_bytes, args.runs)

    print(f"snapshot size: {size:,} bytes ({size / image.num_partitions:.1f} bytes per partition)")
    print(f"{'':8}{'best s':>10}{'median s':>10}{'plain best s':>14}{'ratio':>10}  target")
    for label, best, median, base in (("write", write_best, write_median, plain_write_best),
                                      ("load", load_best, load_median, plain_read_best)):
        verdict = "ok (≤ 2 s)" if best <= 2.0 else "MISSED (> 2 s)"
        print(f"{label:8}{best:10.3f}{median:10.3f}{base:14.4f}{best / base:9.0f}x  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
