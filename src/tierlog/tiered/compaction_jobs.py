"""Remote compaction by a job outside the broker (``tierlog spark compact``, issue 18), beside a running
broker: the job does the reading, cleaning and uploading; the broker stays the one writer of the
remote log metadata and makes the swap (docs/architecture.md, "Compacted topics in the remote tier").

The two meet in ``compaction-requests/`` inside the remote log metadata directory, one set of files
per job and partition (``<job>`` below), each written whole (atomic rename):

1. ``<job>.intent`` (job): the segments the job may upload -- id and start offset of each, as
   COPY_SEGMENT_STARTED metadata -- written before any upload. Its mtime is the job's lease: the job
   touches it while it runs (every :func:`lease_refresh_s` of ``remote.log.compaction.job.lease.ms``).
2. ``<job>.commit`` (job): per uploaded segment, its COPY_SEGMENT_STARTED metadata (naming the segments
   it replaces) and its COPY_SEGMENT_FINISHED update (with the plugin's custom metadata).
3. The broker (:class:`CompactionRequests`, on the remote log manager's expiration pass) applies each
   commit as its own remote compaction applies a swap: COPY_SEGMENT_STARTED, then the FINISHED update,
   which the metadata store refuses unless every replaced segment is still FINISHED (the broker's own
   remote compaction or retention may have changed them since); a refused upload is deleted. It then
   writes ``<job>.result`` (JSON: one line per segment, ``swapped`` or why not) and removes the intent
   and the commit. A commit whose intent is gone, or naming a segment its intent does not, is refused.
4. An intent with no commit, untouched for ``remote.log.compaction.job.lease.ms``, is a dead job's:
   the broker deletes the
   objects it may have uploaded (none has metadata yet) and the intent, and writes a result saying so.

Crashes: the job dying before its commit leaves an intent that expires (its uploads deleted); the
broker dying between a segment's STARTED and FINISHED leaves a STARTED upload that the next copy run's
sweep deletes, and the commit, re-applied after the restart, skips segments the metadata already knows.
A swap is one metadata entry, so readers see the old segments or the new one, never both or neither.
"""

from __future__ import annotations

import json
import logging
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tierlog._util.files import write_atomic
from tierlog._util.framed import FramedFileError, decode_framed, encode_framed
from tierlog.tiered import serde
from tierlog.tiered.api import (
    InvalidStateTransitionError,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
)
from tierlog.tiered.context import TieringContext
from tierlog.tiered.segment_deleter import SegmentDeleter

log = logging.getLogger(__name__)

S = RemoteLogSegmentState
REQUESTS_DIR_NAME = "compaction-requests"
#: The longest wait between two touches of a running job's intents.
LEASE_REFRESH_MAX_S = 10.0


def lease_refresh_s(lease_ms: int) -> float:
    """How often a job touches its intents for a broker expiring them after ``lease_ms`` untouched:
    a tenth of the lease (nine touches may be missed before it expires), at most every 10 s."""
    return min(LEASE_REFRESH_MAX_S, lease_ms / 10_000)

_INTENT_MAGIC = b"TLCI"
_COMMIT_MAGIC = b"TLCC"
_VERSION = 1
_LEN = struct.Struct(">I")


def requests_dir(metadata_dir: Path) -> Path:
    return Path(metadata_dir) / REQUESTS_DIR_NAME


def _encode(records: Sequence[serde.RemoteLogMetadataRecord]) -> bytes:
    out = bytearray()
    for record in records:
        data = serde.encode(record)
        out += _LEN.pack(len(data)) + data
    return bytes(out)


def _decode(payload: bytes) -> list[serde.RemoteLogMetadataRecord]:
    out: list[serde.RemoteLogMetadataRecord] = []
    pos = 0
    while pos < len(payload):
        (n,) = _LEN.unpack_from(payload, pos)
        out.append(serde.decode(payload[pos + 4 : pos + 4 + n]))
        pos += 4 + n
    return out


# -- the job's side ------------------------------------------------------------------------------------


def write_intent(directory: Path, job: str, planned: Sequence[RemoteLogSegmentMetadata]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{job}.intent"
    write_atomic(path, encode_framed(_INTENT_MAGIC, _VERSION, _encode(planned)))
    return path


def write_commit(directory: Path, job: str,
                 pairs: Sequence[tuple[RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate]]) -> Path:
    path = directory / f"{job}.commit"
    write_atomic(path, encode_framed(_COMMIT_MAGIC, _VERSION, _encode([r for pair in pairs for r in pair])))
    return path


def read_result(directory: Path, job: str) -> list[dict[str, object]] | None:
    """The broker's answer to a commit (or to an expired intent), once written."""
    path = directory / f"{job}.result"
    try:
        rows = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    path.unlink(missing_ok=True)
    return list(rows)


def abandon(directory: Path, job: str) -> None:
    """A job that will not commit: its intent expires at the broker's next pass."""
    path = directory / f"{job}.intent"
    if path.exists():
        os.utime(path, (0, 0))


# -- the broker's side ---------------------------------------------------------------------------------


@dataclass
class AppliedCommits:
    """What this process applied, for status and tests."""

    commits: int = 0
    segments_swapped: int = 0
    segments_refused: int = 0
    intents_expired: int = 0


class CompactionRequests:
    def __init__(self, ctx: TieringContext, deleter: SegmentDeleter, directory: Path) -> None:
        self.ctx = ctx
        self.deleter = deleter
        self.directory = directory
        self.applied = AppliedCommits()

    def poll(self) -> None:
        """Apply every commit, then expire the intents of dead jobs. Never raises."""
        if not self.directory.is_dir():
            return
        try:
            for commit in sorted(self.directory.glob("*.commit")):
                self._apply(commit.name[: -len(".commit")], commit)
            now = self.ctx.now_ms()
            lease_ms = self.ctx.config.compaction_job_lease_ms
            for intent in sorted(self.directory.glob("*.intent")):
                job = intent.name[: -len(".intent")]
                if not (self.directory / f"{job}.commit").exists() and now - intent.stat().st_mtime * 1000 >= lease_ms:
                    self._expire(job, intent)
            for result in self.directory.glob("*.result"):
                if now - result.stat().st_mtime * 1000 >= lease_ms:
                    result.unlink(missing_ok=True)  # never read: the job that asked is gone
        except OSError as e:
            log.error("compaction requests in %s: %s", self.directory, e)

    def _result(self, job: str, rows: list[dict[str, object]]) -> None:
        write_atomic(self.directory / f"{job}.result", json.dumps(rows).encode())

    def _planned(self, intent: Path) -> list[RemoteLogSegmentMetadata]:
        _, payload = decode_framed(intent.read_bytes(), _INTENT_MAGIC, {_VERSION}, str(intent))
        return [r for r in _decode(payload) if isinstance(r, RemoteLogSegmentMetadata)]

    def _expire(self, job: str, intent: Path) -> None:
        try:
            planned = self._planned(intent)
        except (FramedFileError, serde.SerdeError) as e:
            log.error("compaction job %s: unreadable intent %s (%s): removed", job, intent, e)
            planned = []
        for md in planned:
            if self._known(md.segment_id) is None:
                try:
                    self.ctx.rsm.delete_log_segment_data(md)
                except Exception as e:
                    log.warning("compaction job %s: deleting the upload %s: %s", job, md.segment_id.id_str, e)
                    return  # the intent stays: retried at the next pass
        intent.unlink(missing_ok=True)
        self.applied.intents_expired += 1
        log.warning("compaction job %s stopped touching its intent for %d ms: its uploads (%d planned) deleted",
                    job, self.ctx.config.compaction_job_lease_ms, len(planned))
        self._result(job, [{"result": "expired"}])

    def _known(self, segment_id: RemoteLogSegmentId) -> RemoteLogSegmentMetadata | None:
        tip = segment_id.topic_id_partition
        return next((m for m in self.ctx.rlmm.list_remote_log_segments(tip) if m.segment_id == segment_id), None)

    def _apply(self, job: str, commit: Path) -> None:
        intent = self.directory / f"{job}.intent"
        try:
            _, payload = decode_framed(commit.read_bytes(), _COMMIT_MAGIC, {_VERSION}, str(commit))
            records = _decode(payload)
            planned = {md.segment_id for md in self._planned(intent)} if intent.exists() else set()
        except (FramedFileError, serde.SerdeError) as e:
            log.error("compaction job %s: unreadable commit or intent (%s): refused", job, e)
            records, planned = [], set()
        pairs = list(zip(records[::2], records[1::2], strict=False))
        rows: list[dict[str, object]] = []
        for md, update in pairs:
            if not (isinstance(md, RemoteLogSegmentMetadata) and isinstance(update, RemoteLogSegmentMetadataUpdate)
                    and md.segment_id == update.segment_id and md.replaces and md.segment_id in planned):
                sid = getattr(md, "segment_id", None)
                rows.append({"segment_id": sid.id_str if isinstance(sid, RemoteLogSegmentId) else None,
                             "result": "refused: not a planned replacement of this job (expired intent?)"})
                if isinstance(md, RemoteLogSegmentMetadata) and self._known(md.segment_id) is None:
                    try:
                        self.ctx.rsm.delete_log_segment_data(md)
                    except Exception as e:
                        log.warning("compaction job %s: deleting the refused upload %s: %s", job, md.segment_id.id_str, e)
                self.applied.segments_refused += 1
                continue
            rows.append({"segment_id": md.segment_id.id_str, "start_offset": md.start_offset,
                         "end_offset": md.end_offset, "result": self._swap(job, md, update)})
        self.applied.commits += 1
        self._result(job, rows)
        commit.unlink(missing_ok=True)
        intent.unlink(missing_ok=True)

    def _swap(self, job: str, md: RemoteLogSegmentMetadata, update: RemoteLogSegmentMetadataUpdate) -> str:
        """One segment's swap, as the broker's own remote compaction makes it."""
        ctx = self.ctx
        known = self._known(md.segment_id)
        if known is not None:
            # A commit re-applied after a crash: what the metadata says is what happened.
            return "swapped" if known.state is S.COPY_SEGMENT_FINISHED else f"lost: {known.state.name}"
        ctx.compaction_uploads.add(md.segment_id)
        try:
            ctx.rlmm.add_remote_log_segment_metadata(md)
            limit = ctx.config.custom_metadata_max_bytes
            custom = update.custom_metadata
            try:
                if custom is not None and len(custom) > limit:
                    raise InvalidStateTransitionError(f"custom metadata of {len(custom)} bytes exceeds "
                                                      f"remote.log.metadata.custom.metadata.max.bytes={limit}")
                ctx.rlmm.update_remote_log_segment_metadata(update)
            except InvalidStateTransitionError as e:
                oversize = custom is not None and len(custom) > limit
                self.deleter.delete(md, best_effort=True, rejected_custom_metadata=custom if oversize else None)
                self.applied.segments_refused += 1
                log.info("compaction job %s: segment [%d, %d] not swapped in: %s", job, md.start_offset,
                         md.end_offset, e)
                return f"refused: {e}"
        finally:
            ctx.compaction_uploads.discard(md.segment_id)
        self.applied.segments_swapped += 1
        log.info("compaction job %s: segment %s [%d, %d] (%d bytes) replaced %d segments", job,
                 md.segment_id.id_str, md.start_offset, md.end_offset, md.segment_size_in_bytes, len(md.replaces))
        return "swapped"
