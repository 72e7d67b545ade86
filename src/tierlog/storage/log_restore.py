"""Restarting a partition's local log at the end of its remote copy (KIP-405's "build the auxiliary
state", for one node).

When the remote tier holds offsets the local log does not (its directory was lost, or holds less than
the remote tier), the local log must not hand those offsets out again: it starts over at the remote
tier's end offset + 1 with the leader-epoch entries and the producer state the remote tier uploaded
with its newest segment, so a retried batch of a producer that last wrote before the loss is still
recognised. Everything below is read from the remote tier.

Crash safety: a framed marker naming the restart offset is written before anything is removed and
deleted after everything is on disk. A load that finds the marker (only an unclean one can: the
restart holds the log's lock from first to last step) reports it on the log, and the remote log
manager runs the restart again before the partition is served.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterable
from pathlib import Path

from tierlog._util.files import fsync_dir
from tierlog._util.framed import FramedFileError, read_framed, write_framed
from tierlog.storage.leader_epoch import EpochEntry
from tierlog.storage.log import UnifiedLog
from tierlog.storage.producer_state_horizon import clear_horizon

log = logging.getLogger(__name__)

RESTORE_MARKER_FILE = "tierlog-restore-from-remote"
_MAGIC = b"TLRR"
_VERSION = 1
_OFFSET = struct.Struct(">q")


def read_restore_marker(log_dir: Path) -> int | None:
    """The offset of a restart that did not finish, or None. A damaged marker still means one did
    not finish: -1 then (the restart offset is computed again from the remote tier anyway)."""
    try:
        found = read_framed(log_dir / RESTORE_MARKER_FILE, _MAGIC, {_VERSION})
    except (FramedFileError, OSError) as e:
        log.error("damaged restore marker in %s (%s): the restore from the remote tier is run again", log_dir, e)
        return -1
    if found is None:
        return None
    payload = found[1]
    return int(_OFFSET.unpack(payload)[0]) if len(payload) == _OFFSET.size else -1


def restart_from_remote(ulog: UnifiedLog, next_offset: int, epochs: Iterable[EpochEntry], producer_snapshot: bytes | None,
                        ) -> int:
    """Discard the local log and start it empty at ``next_offset`` with the remote tier's leader
    epochs (those starting below it) and producer snapshot (``<next_offset>.snapshot``; None: no
    producer state). Returns the producers restored."""
    with ulog.lock:
        write_framed(ulog.dir / RESTORE_MARKER_FILE, _MAGIC, _VERSION, _OFFSET.pack(next_offset))
        ulog.truncate_fully_and_start_at(next_offset)
        ulog.leader_epoch_cache.assign_all(e for e in epochs if e.start_offset < next_offset)
        producers = 0
        if producer_snapshot is not None:
            producers = ulog.producer_state.install_snapshot(next_offset, producer_snapshot, ulog.clock.wall_ms())
        # The restored state came from the remote tier's trusted snapshot: no horizon below it.
        clear_horizon(ulog.dir)
        ulog.mark_remote_end(next_offset - 1)
        ulog.active_segment.flush()
        fsync_dir(ulog.dir)
        (ulog.dir / RESTORE_MARKER_FILE).unlink()
        fsync_dir(ulog.dir)
        ulog.pending_restore_offset = None
        return producers
