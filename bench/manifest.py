"""What a partition's remote manifest costs the broker per state change, as its segment count grows.

The broker rewrites the partition's whole manifest (tiered/manifest.py) after each change a reader
must see (a segment finished, a deletion started, the log start moved): the cost of one upload's
manifest write is measured here for partitions of ``--segments`` remote segments, next to the same
run's baseline, the journal entry that change writes (an append of one record). Both without fsync,
on the local-directory tier, so the figures are CPU and page-cache cost (an S3 PUT adds its request,
and its upload time grows with the bytes printed).

Run: .venv/bin/python bench/manifest.py [--segments 100,1000,10000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from tierlog.ids import random_uuid
from tierlog.tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tierlog.tiered.backends.local import LocalDirectoryRemoteStorageManager
from tierlog.tiered.manifest import ManifestPublisher
from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager

S = RemoteLogSegmentState
TIP = TopicIdPartition(b"\x09" * 16, "orders", 0)
T0 = 1_700_000_000_000
PER_SEGMENT = 10_000  # offsets per segment


def _segment(i: int) -> RemoteLogSegmentMetadata:
    start = i * PER_SEGMENT
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(TIP, random_uuid()), start, start + PER_SEGMENT - 1,
                                    T0 + i * 1000 + 999, 1, T0 + i * 1000, 1 << 30, ((0, 0),), S.COPY_SEGMENT_STARTED,
                                    custom_metadata=b"\x00" * 40, max_timestamp_from_records=True,
                                    min_timestamp_ms=T0 + i * 1000)


def measure(root: Path, segments: int, rounds: int) -> dict[str, float]:
    store = FileRemoteLogMetadataManager(root / "journal", sync=False)
    rsm = LocalDirectoryRemoteStorageManager()
    rsm.configure({"dir": str(root / "tier"), "fsync": "false"})
    for i in range(segments):
        md = _segment(i)
        store.add_remote_log_segment_metadata(md)
        store.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            md.segment_id, T0, S.COPY_SEGMENT_FINISHED, 1, md.custom_metadata))
    publisher = ManifestPublisher(store, rsm, broker_id=1)
    assert publisher.publish(TIP)
    journal_s, manifest_s = [], []
    for r in range(rounds):
        # One more upload, as the copier does it: the journal's two entries, then the manifest.
        md = _segment(segments + r)
        t = time.perf_counter()
        store.add_remote_log_segment_metadata(md)
        store.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            md.segment_id, T0, S.COPY_SEGMENT_FINISHED, 1, md.custom_metadata))
        journal_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        assert publisher.publish(TIP)
        manifest_s.append(time.perf_counter() - t)
    size = next((root / "tier").rglob("_manifest.json")).stat().st_size
    store.close()
    return {"journal_ms": statistics.median(journal_s) * 1000, "manifest_ms": statistics.median(manifest_s) * 1000,
            "manifest_bytes": size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segments", default="100,1000,10000")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"{'segments':>9} {'manifest bytes':>15} {'manifest write ms':>18} {'journal entries ms':>19} {'ratio':>7}")
    for n in (int(x) for x in args.segments.split(",")):
        with tempfile.TemporaryDirectory(prefix="tierlog-bench-manifest-") as tmp:
            m = measure(Path(tmp), n, args.rounds)
        print(f"{n:>9} {m['manifest_bytes']:>15,.0f} {m['manifest_ms']:>18.2f} {m['journal_ms']:>19.3f} "
              f"{m['manifest_ms'] / m['journal_ms']:>7.0f}")


if __name__ == "__main__":
    main()
