"""The remote tier in a local directory: the embedded default (``tierlog serve`` with no config).

Layout as Kafka's LocalTieredStorage, so an operator used to it finds the same files:
``<dir>/kafka-tiered-storage/<topic>-<partition>-<topicId>/<20-digit start offset>-<segment id><suffix>``
with ``.log .index .timeindex .txnindex .leader_epoch_checkpoint .snapshot``.

Properties (``rsm.config.`` prefix removed): ``dir`` (required unless the broker fills it in),
``delete.enable`` (default true; false keeps data, to simulate an eventually consistent store),
``tierlog.read.only`` (set by readers such as the Spark pipeline: the directory is not created and
nothing is written or deleted) and
``fsync`` (default true: once a segment is here its local copy may be deleted, so it must survive a
crash like any log file).
"""

from __future__ import annotations

import fcntl
import io
import logging
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

from tierlog._util.files import fsync_dir, write_atomic
from tierlog.ids import TopicIdPartition, uuid_to_base64
from tierlog.tiered.api import (
    READ_ONLY_PROPERTY,
    IndexType,
    LogSegmentData,
    RemoteConflictError,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)

log = logging.getLogger(__name__)

ROOT_DIR_NAME = "kafka-tiered-storage"
#: The directory the broker hands every plugin (beside its first log dir): this backend keeps the
#: remote tier there when ``dir`` is not configured. Other plugins ignore it.
DEFAULT_DIR_PROPERTY = "tierlog.default.dir"
LOG_SUFFIX = ".log"
INDEX_SUFFIXES: dict[IndexType, str] = {
    IndexType.OFFSET: ".index",
    IndexType.TIMESTAMP: ".timeindex",
    IndexType.TRANSACTION: ".txnindex",
    IndexType.LEADER_EPOCH: ".leader_epoch_checkpoint",
    IndexType.PRODUCER_SNAPSHOT: ".snapshot",
}
ALL_SUFFIXES = (LOG_SUFFIX, *INDEX_SUFFIXES.values())
#: A partition's manifest of its remote segments (tiered/manifest.py), beside its segments.
MANIFEST_NAME = "_manifest.json"


def segment_objects(segment_data: LogSegmentData) -> list[tuple[str, Path | bytes]]:
    """What a copy uploads, as (suffix, file or bytes): the segment, its indexes, the producer
    snapshot, the leader-epoch checkpoint, and the transaction index when the segment has one."""
    sources: list[tuple[str, Path | bytes]] = [
        (LOG_SUFFIX, segment_data.log_segment),
        (INDEX_SUFFIXES[IndexType.OFFSET], segment_data.offset_index),
        (INDEX_SUFFIXES[IndexType.TIMESTAMP], segment_data.time_index),
        (INDEX_SUFFIXES[IndexType.PRODUCER_SNAPSHOT], segment_data.producer_snapshot_index),
        (INDEX_SUFFIXES[IndexType.LEADER_EPOCH], segment_data.leader_epoch_index),
    ]
    if segment_data.transaction_index is not None and segment_data.transaction_index.exists():
        sources.append((INDEX_SUFFIXES[IndexType.TRANSACTION], segment_data.transaction_index))
    return sources


def _bool(props: Mapping[str, str], key: str, default: bool) -> bool:
    raw = props.get(key)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise RemoteStorageError(f"{key} must be true or false, got {raw!r}")
    return value == "true"


def partition_dir_name(segment_id: RemoteLogSegmentId) -> str:
    tip = segment_id.topic_id_partition
    return f"{tip.topic}-{tip.partition}-{uuid_to_base64(tip.topic_id)}"


def fileset_prefix(metadata: RemoteLogSegmentMetadata) -> str:
    return f"{metadata.start_offset:020d}-{metadata.segment_id.id_str}"


class LocalDirectoryRemoteStorageManager:
    def __init__(self) -> None:
        self._root: Path | None = None
        self.read_only = False
        self.delete_enabled = True
        self.fsync = True

    def configure(self, props: Mapping[str, str]) -> None:
        base = props.get("dir") or props.get(DEFAULT_DIR_PROPERTY)
        if not base:
            raise RemoteStorageError("the local-directory remote storage needs rsm.config.dir")
        self._root = Path(base) / ROOT_DIR_NAME
        self.read_only = _bool(props, READ_ONLY_PROPERTY, False)
        if not self.read_only:
            self._root.mkdir(parents=True, exist_ok=True)
        self.delete_enabled = _bool(props, "delete.enable", True)
        self.fsync = _bool(props, "fsync", True)

    @property
    def root(self) -> Path:
        if self._root is None:
            raise RemoteStorageError("the remote storage manager is not configured")
        return self._root

    def _paths(self, metadata: RemoteLogSegmentMetadata) -> tuple[Path, str]:
        return self.root / partition_dir_name(metadata.segment_id), fileset_prefix(metadata)

    def _path(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> Path:
        directory, prefix = self._paths(metadata)
        return directory / f"{prefix}{suffix}"

    # -- the partition manifest (tiered/manifest.py) --------------------------------------------

    def _manifest_path(self, tip: TopicIdPartition) -> Path:
        return self.root / f"{tip.topic}-{tip.partition}-{uuid_to_base64(tip.topic_id)}" / MANIFEST_NAME

    @staticmethod
    def _version(path: Path) -> str | None:
        # Every write replaces the file by a rename, so a new inode (with its change time) is a new
        # version, as an ETag is in S3.
        try:
            st = path.stat()
        except FileNotFoundError:
            return None
        return f"{st.st_ino}-{st.st_ctime_ns}"

    def write_manifest(self, tip: TopicIdPartition, data: bytes, expected_version: str | None) -> str:
        """Replace the partition's manifest whole if it is still ``expected_version`` (None: only if
        there is none), so two writers never overwrite each other unseen; RemoteConflictError if not.
        A reader sees the old one or the new one. Returns the new version."""
        if self.read_only:
            raise RemoteStorageError(f"the remote storage at {self.root} is configured read-only")
        path = self._manifest_path(tip)
        path.parent.mkdir(parents=True, exist_ok=True)
        # The compare and the swap under an exclusive lock on the partition's directory.
        fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            found = self._version(path)
            if found != expected_version:
                raise RemoteConflictError(f"{path} is at version {found}, not {expected_version}: another writer "
                                          "changed it")
            write_atomic(path, data, sync=self.fsync)
            version = self._version(path)
            assert version is not None
            return version
        finally:
            os.close(fd)  # releases the lock

    def read_manifest(self, tip: TopicIdPartition) -> tuple[bytes, str] | None:
        """The partition's manifest and its version, None when it has none."""
        path = self._manifest_path(tip)
        for _ in range(3):
            version = self._version(path)
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                return None
            if version is not None and self._version(path) == version:
                return data, version
        raise RemoteConflictError(f"{path} kept changing while read")

    def manifests(self) -> list[bytes]:
        """Every partition's manifest in the tier (what a reader plans from without the journal)."""
        if not self.root.is_dir():
            return []
        out = []
        for path in sorted(self.root.glob(f"*/{MANIFEST_NAME}")):
            try:
                out.append(path.read_bytes())
            except FileNotFoundError:
                continue  # its partition's last segment was deleted just now
        return out

    def delete_manifest(self, tip: TopicIdPartition) -> None:
        """Remove a deleted partition's manifest, and its directory when nothing else is left."""
        if self.read_only:
            raise RemoteStorageError(f"the remote storage at {self.root} is configured read-only")
        path = self._manifest_path(tip)
        path.unlink(missing_ok=True)
        try:
            path.parent.rmdir()
        except OSError:
            pass

    # -- copy -----------------------------------------------------------------------------------

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData) -> bytes | None:
        if self.read_only:
            raise RemoteStorageError(f"the remote storage at {self.root} is configured read-only")
        directory, prefix = self._paths(metadata)
        sources = segment_objects(segment_data)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            for suffix, source in sources:
                self._write(directory / f"{prefix}{suffix}", source)
            if self.fsync:
                fsync_dir(directory)
        except OSError as e:
            # A retry uses a new segment id, so leftovers of this attempt would never be found again.
            self._delete_fileset(metadata, force=True)
            raise RemoteStorageError(f"copying {metadata.segment_id} to {directory} failed: {e}") from e
        return None

    def _write(self, target: Path, source: Path | bytes) -> None:
        # Written under a temporary name and renamed, so a reader never sees a partial file.
        tmp = target.with_name(target.name + ".tmp")
        if isinstance(source, bytes):
            with open(tmp, "wb") as out:
                out.write(source)
                if self.fsync:
                    out.flush()
                    os.fsync(out.fileno())
        else:
            # copyfile copies in the kernel (copy_file_range/sendfile): no pass through Python buffers.
            shutil.copyfile(source, tmp)
            if self.fsync:
                fd = os.open(tmp, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        os.replace(tmp, target)

    # -- fetch ----------------------------------------------------------------------------------

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> BinaryIO:
        if start_position < 0:
            raise ValueError(f"start position {start_position} is negative")
        if end_position is not None and end_position < start_position:
            raise ValueError(f"end position {end_position} is below the start position {start_position}")
        f = self._open(self._path(metadata, LOG_SUFFIX), metadata)
        try:
            f.seek(start_position)
            if end_position is None:
                return f
            return io.BytesIO(f.read(end_position - start_position + 1))
        except OSError as e:
            f.close()
            raise RemoteStorageError(f"reading {metadata.segment_id}: {e}") from e
        finally:
            if end_position is not None:
                f.close()

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        return self._open(self._path(metadata, INDEX_SUFFIXES[index_type]), metadata)

    def _open(self, path: Path, metadata: RemoteLogSegmentMetadata) -> BinaryIO:
        try:
            return open(path, "rb")
        except FileNotFoundError as e:
            raise RemoteResourceNotFoundError(f"{path.name} of {metadata.segment_id} is not in {path.parent}") from e
        except OSError as e:
            raise RemoteStorageError(f"opening {path}: {e}") from e

    # -- delete ---------------------------------------------------------------------------------

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        self._delete_fileset(metadata, force=False)

    def _delete_fileset(self, metadata: RemoteLogSegmentMetadata, *, force: bool) -> None:
        if not self.delete_enabled and not force:
            return
        directory, prefix = self._paths(metadata)
        try:
            for suffix in ALL_SUFFIXES:
                for path in (directory / f"{prefix}{suffix}", directory / f"{prefix}{suffix}.tmp"):
                    path.unlink(missing_ok=True)
            # The partition directory goes with its last segment, so deleted partitions leave nothing.
            try:
                directory.rmdir()
            except OSError:
                pass
        except OSError as e:
            raise RemoteStorageError(f"deleting {metadata.segment_id} from {directory}: {e}") from e

    def close(self) -> None:
        pass

    # -- for tests and `tier status` --------------------------------------------------------------

    def list_files(self) -> list[Path]:
        """Every file under the root (tests assert on orphans with it)."""
        return sorted(p for p in self.root.rglob("*") if p.is_file())
