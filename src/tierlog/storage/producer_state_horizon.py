"""Whether a partition's producer snapshots were written from its full producer state (seed 001).

A load that finds no producer snapshot at all after a clean shutdown (a log written before producer
state existed, or every ``.snapshot`` removed by hand) does what Kafka's loader does: it scans nothing
and writes empty snapshots at the bases of the last two segments and at the log end. From then on the
producer state knows only the producers that write after that point, and so does every snapshot taken
from it at later rolls. Seed 001 forbids uploading such a snapshot as the segment's producer state: a
broker rebuilding the partition from the remote tier would take live producers for expired ones.

The loader therefore records the *horizon*: the offset below which the state knows nothing. A snapshot
at offset S is known to hold the state when no horizon is recorded, or when every producer that can
still be live at S wrote at or after the horizon (the replay window of S starts at or above it);
otherwise the tiered copy rebuilds it by replaying the window (``producer_rebuild``). The horizon lives
in ``tierlog-producer-state-horizon`` in the partition directory (a framed file: Kafka ignores it),
is read only when a snapshot is about to be trusted (never at startup), and is dropped once the log
start offset passes it or the log is restarted from a trusted state.
"""

from __future__ import annotations

import logging
import struct
from pathlib import Path

from tierlog._util.framed import FramedFileError, read_framed, write_framed

log = logging.getLogger(__name__)

HORIZON_FILE = "tierlog-producer-state-horizon"
_MAGIC = b"TLPH"
_VERSION = 1
_OFFSET = struct.Struct(">q")


def write_horizon(log_dir: Path, offset: int) -> None:
    write_framed(log_dir / HORIZON_FILE, _MAGIC, _VERSION, _OFFSET.pack(offset))


def read_horizon(log_dir: Path, log_end_offset: int) -> int | None:
    """The recorded horizon, None when the state is complete. A damaged file is taken to say the
    most cautious thing it could have said: nothing below the log end is known."""
    path = log_dir / HORIZON_FILE
    try:
        found = read_framed(path, _MAGIC, {_VERSION})
        if found is None:
            return None
        payload = found[1]
        if len(payload) != _OFFSET.size:
            raise FramedFileError(f"{path}: {len(payload)} bytes of payload, expected {_OFFSET.size}")
        return int(_OFFSET.unpack(payload)[0])
    except (FramedFileError, OSError) as e:
        log.error("unreadable producer state horizon %s (%s): every producer snapshot below offset %d is rebuilt "
                  "before it is copied to the remote tier", path, e, log_end_offset)
        return log_end_offset


def clear_horizon(log_dir: Path) -> None:
    (log_dir / HORIZON_FILE).unlink(missing_ok=True)


def snapshot_known_complete(horizon: int | None, replay_window_start: int) -> bool:
    """Whether a snapshot whose replay window starts at ``replay_window_start`` holds every producer
    that can be live at its offset, given the recorded ``horizon``."""
    return horizon is None or replay_window_start >= horizon
