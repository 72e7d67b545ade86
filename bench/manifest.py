"""What a partition's remote manifest costs the broker per upload, as its segment count grows.

For a partition of ``--segments`` remote segments, one more upload as the copier makes it: the
journal's two entries (COPY_SEGMENT_STARTED, COPY_SEGMENT_FINISHED; the baseline), then the manifest:

* before (the same run's baseline): the whole manifest rebuilt from the journal and rewritten as one
  file, as tierlog did until the append-only manifest (build, encode, temporary file, rename: what
  ``write_manifest`` of the local-directory plugin did under its lock);
* after: :class:`ManifestPublisher` publishing the change -- a LIST of the partition's ``_manifest/``
  and one small delta object, and every ``checkpoint_interval`` uploads a checkpoint of the whole
  state. Shown as the median upload (a delta) and as the mean over ``2 x checkpoint_interval``
  uploads, checkpoints included (the amortized cost: the median of three such runs), with the
  bytes written per upload.

Both without fsync, on the local-directory tier, so the figures are CPU and page-cache cost (an S3
PUT adds its request; its upload time grows with the bytes printed).

Run: .venv/bin/python bench/manifest.py [--segments 100,1000,10000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from tierlog._util.files import write_atomic
from tierlog.ids import random_uuid
from tierlog.tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tierlog.tiered.backends.local import LocalDirectoryRemoteStorageManager
from tierlog.tiered.manifest import ManifestPublisher, build_manifest, checkpoint_interval, encode
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


class _Counting(LocalDirectoryRemoteStorageManager):
    """Counts the bytes the publisher creates."""

    written_bytes = 0

    def create_manifest_object(self, location: str, name: str, data: bytes) -> None:
        self.written_bytes += len(data)
        super().create_manifest_object(location, name, data)


class _TimedJournal:
    """The journal, timing its two writes, so that a publish's own cost is the total less the journal's."""

    def __init__(self, store: FileRemoteLogMetadataManager) -> None:
        self.store = store
        self.journal_s = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def add_remote_log_segment_metadata(self, md: RemoteLogSegmentMetadata) -> None:
        t = time.perf_counter()
        self.store.add_remote_log_segment_metadata(md)
        self.journal_s += time.perf_counter() - t

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        t = time.perf_counter()
        self.store.update_remote_log_segment_metadata(update)
        self.journal_s += time.perf_counter() - t


def _upload(store: FileRemoteLogMetadataManager | Any, i: int) -> float:
    """One upload's journal entries (through ``store``: the bare journal or the publisher); seconds."""
    md = _segment(i)
    t = time.perf_counter()
    store.add_remote_log_segment_metadata(md)
    store.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
        md.segment_id, T0, S.COPY_SEGMENT_FINISHED, 1, md.custom_metadata))
    return time.perf_counter() - t


def measure(root: Path, segments: int, rounds: int) -> dict[str, float]:
    build = time.perf_counter()
    store = FileRemoteLogMetadataManager(root / "journal", sync=False)
    for i in range(segments):
        _upload(store, i)
    build_s = time.perf_counter() - build
    # Before: the whole manifest, rewritten per upload.
    journal_s, whole_s, whole_bytes = [], [], 0
    whole_file = root / "whole" / "_manifest.json"
    whole_file.parent.mkdir()
    n = segments
    for _ in range(rounds):
        journal_s.append(_upload(store, n))
        n += 1
        t = time.perf_counter()
        data = encode(build_manifest(store, TIP))
        write_atomic(whole_file, data, sync=False)
        whole_s.append(time.perf_counter() - t)
        whole_bytes = len(data)
    # After: the append-only manifest through the publisher (the journal entries inside it too).
    rsm = _Counting()
    rsm.configure({"dir": str(root / "tier"), "fsync": "false"})
    timed = _TimedJournal(store)
    publisher = ManifestPublisher(timed, rsm, broker_id=1)  # type: ignore[arg-type]
    assert publisher.sync_all() == [TIP]  # the first checkpoint
    uploads = 2 * checkpoint_interval(n)
    # Three runs of 2 x checkpoint_interval uploads each; the median run's mean is the amortized
    # cost (a run's mean is swayed by a stall of the loaded machine during one of its checkpoints).
    means, after_s = [], []
    rsm.written_bytes = 0
    for _ in range(3):
        run = []
        for _ in range(uploads):
            timed.journal_s = 0.0
            total = _upload(publisher, n)  # as the broker runs it: each journal write, then the publish
            n += 1
            journal_s.append(timed.journal_s)
            run.append(total - timed.journal_s)
        means.append(statistics.mean(run))
        after_s += run
    store.close()
    return {"build_s": build_s, "journal_ms": statistics.median(journal_s) * 1000,
            "whole_ms": statistics.median(whole_s) * 1000, "whole_bytes": whole_bytes,
            "delta_ms": statistics.median(after_s) * 1000, "amortized_ms": statistics.median(means) * 1000,
            "after_bytes": rsm.written_bytes / (3 * uploads), "uploads": uploads}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segments", default="100,1000,10000")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"{'segments':>9} {'journal ms':>11} {'before: whole ms':>17} {'bytes':>10} {'after: delta ms':>16} "
          f"{'amortized ms':>13} {'bytes/upload':>13} {'before/amortized':>17} {'build s':>8}")
    for n in (int(x) for x in args.segments.split(",")):
        with tempfile.TemporaryDirectory(prefix="tierlog-bench-manifest-") as tmp:
            m = measure(Path(tmp), n, args.rounds)
        print(f"{n:>9} {m['journal_ms']:>11.3f} {m['whole_ms']:>17.2f} {m['whole_bytes']:>10,.0f} "
              f"{m['delta_ms']:>16.3f} {m['amortized_ms']:>13.3f} {m['after_bytes']:>13,.0f} "
              f"{m['whole_ms'] / m['amortized_ms']:>17.1f} {m['build_s']:>8.1f}", flush=True)


if __name__ == "__main__":
    main()
