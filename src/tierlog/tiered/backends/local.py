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

import io
import logging
import os
import shutil
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

from tierlog._util.files import fsync_dir
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
from tierlog.tiered.manifest_format import LEGACY_NAME as LEGACY_MANIFEST_NAME
from tierlog.tiered.manifest_format import MANIFEST_DIR

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

    def segment_path(self, metadata: RemoteLogSegmentMetadata, suffix: str = LOG_SUFFIX) -> Path:
        """The file of one of a segment's objects (the Spark pipeline's JVM reader opens it directly)."""
        return self._path(metadata, suffix)

    # -- the partition manifest's objects (tiered/manifest.py) ---------------------------------

    def manifest_location(self, tip: TopicIdPartition) -> str:
        """Where a partition's manifest objects go: its directory's name under the root."""
        return f"{tip.topic}-{tip.partition}-{uuid_to_base64(tip.topic_id)}"

    def manifest_locations(self) -> list[str]:
        """Every partition directory holding a manifest (versioned objects or a legacy file)."""
        if not self.root.is_dir():
            return []
        return sorted(d.name for d in self.root.iterdir()
                      if (d / MANIFEST_DIR).is_dir() or (d / LEGACY_MANIFEST_NAME).is_file())

    def list_manifest_objects(self, location: str) -> list[str]:
        """The names (``_manifest/<name>``) of the partition's versioned manifest objects."""
        try:
            names = os.listdir(self.root / location / MANIFEST_DIR)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as e:
            raise RemoteStorageError(f"listing {self.root / location / MANIFEST_DIR}: {e}") from e
        return sorted(f"{MANIFEST_DIR}/{n}" for n in names if not n.startswith("."))

    def read_manifest_object(self, location: str, name: str) -> bytes | None:
        """An object's bytes, None when it does not exist."""
        path = self.root / location / name
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise RemoteStorageError(f"reading {path}: {e}") from e

    def create_manifest_object(self, location: str, name: str, data: bytes) -> None:
        """Create the object whole, only if no object has that name (RemoteConflictError if one does):
        written under a temporary name of this writer's, then hard-linked to its name, which the
        kernel refuses atomically when the name exists, as S3 refuses a PUT with If-None-Match."""
        if self.read_only:
            raise RemoteStorageError(f"the remote storage at {self.root} is configured read-only")
        path = self.root / location / name
        tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(data)
                if self.fsync:
                    f.flush()
                    os.fsync(f.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise RemoteConflictError(f"{path} exists: another writer created it") from None
            if self.fsync:
                fsync_dir(path.parent)
        except OSError as e:
            raise RemoteStorageError(f"writing {path}: {e}") from e
        finally:
            tmp.unlink(missing_ok=True)

    def delete_manifest_objects(self, location: str, names: list[str]) -> None:
        """Delete the objects (missing ones are no error); the manifest's folder and the partition's
        directory go when nothing is left in them."""
        if self.read_only:
            raise RemoteStorageError(f"the remote storage at {self.root} is configured read-only")
        directory = self.root / location
        try:
            for name in names:
                (directory / name).unlink(missing_ok=True)
        except OSError as e:
            raise RemoteStorageError(f"deleting manifest objects in {directory}: {e}") from e
        folder = directory / MANIFEST_DIR
        try:
            left = os.listdir(folder)
            # A writer that died between its temporary file and the link leaves the temporary file;
            # once no object is left (the partition's deletion) nothing can be writing there.
            if all(n.startswith(".") and n.endswith(".tmp") for n in left):
                for n in left:
                    (folder / n).unlink(missing_ok=True)
        except OSError:
            pass
        for empty in (folder, directory):
            try:
                empty.rmdir()
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
