"""The remote tier of a running broker as seen from outside it: its durable remote log metadata, its
local segments, the objects in its store, and an audit of the two against each other."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.s3_server import JournaledS3Server
from tierlog.tiered.api import RemoteLogSegmentMetadata, RemoteLogSegmentState
from tierlog.tiered.manifest import is_manifest_object
from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager

S = RemoteLogSegmentState
#: Files every uploaded segment has (the scenarios write no transactions, so no .txnindex).
REQUIRED_SUFFIXES = (".log", ".index", ".timeindex", ".snapshot", ".leader_epoch_checkpoint")
_SEGMENT_ID_CHARS = 22  # Kafka's Uuid in URL-safe base64 without padding


def read_remote_metadata(data_dir: Path, topic: str | None) -> list[RemoteLogSegmentMetadata]:
    """Every segment of ``topic`` (None: of every topic) in the broker's durable remote log
    metadata, read beside the running broker (a read-only load starts over by itself when the
    broker replaces the snapshot under it)."""
    store = FileRemoteLogMetadataManager(data_dir / "remote-log-metadata", read_only=True)
    return [m for tip in store.partitions() if topic in (None, tip.topic) for m in store.list_remote_log_segments(tip)]


def finished_coverage(segments: list[RemoteLogSegmentMetadata], partition: int, start: int = 0) -> int:
    """The first offset at or above ``start`` that the partition's FINISHED segments do not hold."""
    covered = start
    for md in sorted((m for m in segments if m.state is S.COPY_SEGMENT_FINISHED
                      and m.topic_id_partition.partition == partition), key=lambda m: m.start_offset):
        if md.start_offset > covered:
            break
        covered = max(covered, md.end_offset + 1)
    return covered


def local_base_offsets(data_dir: Path, topic: str, partition: int) -> list[int]:
    try:
        return sorted(int(p.name[:-4]) for p in (data_dir / f"{topic}-{partition}").iterdir()
                      if p.name.endswith(".log") and p.name[:-4].isdigit())
    except FileNotFoundError:
        return []


def split_object_name(name: str) -> tuple[str, str] | None:
    """(segment id, suffix) of ``<20-digit start offset>-<segment id><suffix>``."""
    if len(name) < 21 + _SEGMENT_ID_CHARS or not name[:20].isdigit() or name[20] != "-":
        return None
    return name[21:21 + _SEGMENT_ID_CHARS], name[21 + _SEGMENT_ID_CHARS:]


def _add(out: dict[str, dict[str, int]], name: str, size: int) -> None:
    if is_manifest_object(name):
        return  # a partition's manifest (tiered/manifest.py): the broker's, not a segment's object
    parts = split_object_name(name.rsplit("/", 1)[-1])
    sid, suffix = parts if parts is not None else (f"?{name}", "")
    out.setdefault(sid, {})[suffix] = size


class RemoteStore:
    """What is in a store: segment id -> {suffix: size}."""

    def objects(self) -> dict[str, dict[str, int]]:
        raise NotImplementedError


class LocalDirStore(RemoteStore):
    def __init__(self, root: Path) -> None:
        self.root = root

    def objects(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for path in self.root.rglob("*"):
            try:
                if path.is_file():
                    _add(out, path.name, path.stat().st_size)
            except FileNotFoundError:
                continue  # deleted while listed
        return out


class S3Store(RemoteStore):
    def __init__(self, server: JournaledS3Server, bucket: str) -> None:
        self.server = server
        self.bucket = bucket

    def objects(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for key, size in self.server.objects(self.bucket).items():
            _add(out, key, size)
        return out


def audit(store: RemoteStore, segments: list[RemoteLogSegmentMetadata]) -> tuple[list[str], list[str]]:
    """(orphan objects: no segment refers to them; FINISHED segments whose objects are missing or
    short). Objects of segments still STARTED or DELETE_STARTED are neither: the broker knows them
    and cleans them up."""
    objects = store.objects()
    known = {m.segment_id.id_str for m in segments}
    orphans = [f"{sid}{suffix}" for sid, files in objects.items() if sid not in known for suffix in files]
    missing = []
    for md in segments:
        if md.state is not S.COPY_SEGMENT_FINISHED:
            continue
        files = objects.get(md.segment_id.id_str, {})
        absent = [s for s in REQUIRED_SUFFIXES if s not in files]
        if absent or files.get(".log") != md.segment_size_in_bytes:
            missing.append(f"{md.topic_id_partition} [{md.start_offset}, {md.end_offset}] {md.segment_id.id_str}: "
                           f"missing {absent}, .log {files.get('.log')} of {md.segment_size_in_bytes} bytes")
    return orphans, missing
