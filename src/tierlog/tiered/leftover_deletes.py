"""``tierlog tier retry-delete`` and ``forget-delete``: settle a remote segment whose delete the broker
gave up on (a DELETE_SEGMENT_STARTED record, e.g. a seed 002 upload whose delete kept failing).

There is no channel to a running broker, so both work on a stopped one: they take the data
directory's ``.lock`` for the whole operation (refusing while a broker holds it, and keeping one from
starting meanwhile), change the remote log metadata through the same durable store the broker
uses, and drop the segment from the broker's status file so ``tierlog tier status`` no longer lists
it. A broker started later finds the segment DELETE_SEGMENT_FINISHED (gone) or, when the retry
failed, still DELETE_SEGMENT_STARTED and retries it itself.
"""

from __future__ import annotations

from pathlib import Path

from tierlog.errors import TierlogError
from tierlog.storage.dir_lock import DirLock
from tierlog.tiered.api import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteStorageManager,
)
from tierlog.tiered.layout import METADATA_DIR_NAME, STATUS_FILE_NAME
from tierlog.tiered.metadata_store import FileRemoteLogMetadataManager
from tierlog.tiered.status import read_status_file, write_status_file

S = RemoteLogSegmentState


class LeftoverDeleteError(TierlogError):
    pass


def _find(store: FileRemoteLogMetadataManager, segment_id: str) -> RemoteLogSegmentMetadata:
    found = [m for tip in store.partitions() for m in store.list_remote_log_segments(tip)
             if m.segment_id.id_str == segment_id]
    if not found:
        raise LeftoverDeleteError(f"no remote segment {segment_id} in {store.directory} (already deleted?)")
    md = found[0]
    if md.state is not S.DELETE_SEGMENT_STARTED:
        raise LeftoverDeleteError(f"remote segment {segment_id} is {md.state.name}, not DELETE_SEGMENT_STARTED: "
                                  "its delete never failed")
    return md


def _finish(store: FileRemoteLogMetadataManager, md: RemoteLogSegmentMetadata, broker_id: int, now_ms: int,
            status_path: Path) -> None:
    store.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
        md.segment_id, now_ms, S.DELETE_SEGMENT_FINISHED, broker_id, md.custom_metadata))
    persisted = read_status_file(status_path)
    listed = None if persisted is None else persisted.get("deletes")
    if persisted is not None and isinstance(listed, list):
        deletes = [d for d in listed if not (isinstance(d, dict) and d.get("segment_id") == md.segment_id.id_str)]
        write_status_file(status_path, {**persisted, "deletes": deletes})


def settle_delete(log_dir: Path, segment_id: str, *, broker_id: int, now_ms: int,
                  rsm: RemoteStorageManager | None) -> RemoteLogSegmentMetadata:
    """With ``rsm``: one more attempt of the plugin's delete (handed the kept custom metadata, seed
    002), then DELETE_SEGMENT_FINISHED; a failure raises and leaves the record as it was. Without:
    DELETE_SEGMENT_FINISHED at once (forget: the operator removed the objects or accepts them as
    orphans). Returns the segment's metadata as it was (its kept custom metadata says where the
    objects were). Raises LogDirInUseError while a broker runs on ``log_dir``."""
    metadata_dir = Path(log_dir) / METADATA_DIR_NAME
    with DirLock(Path(log_dir)):
        store = FileRemoteLogMetadataManager(metadata_dir)
        try:
            md = _find(store, segment_id)
            if rsm is not None:
                try:
                    rsm.delete_log_segment_data(md.for_plugin_delete())
                except Exception as e:
                    raise LeftoverDeleteError(f"the plugin's delete of {segment_id} failed again: "
                                              f"{type(e).__name__}: {e}") from e
            _finish(store, md, broker_id, now_ms, metadata_dir / STATUS_FILE_NAME)
            return md
        finally:
            store.close()
