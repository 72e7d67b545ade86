"""Deleting one remote segment, and retrying a delete that failed (seed 002's failing deletes).

A delete is DELETE_SEGMENT_STARTED, the plugin's delete, DELETE_SEGMENT_FINISHED. A failed plugin
delete leaves DELETE_SEGMENT_STARTED -- never an orphan -- and the expiration pass retries it with
capped exponential backoff (:func:`~tierlog.tiered.policy.next_delete_attempt_ms`) up to
``remote.log.manager.delete.retry.max.attempts`` attempts in this process, then gives up: an ERROR
line, the status file (``tierlog tier status``) and the metrics report the leftover until ``tierlog
tier retry-delete`` / ``forget-delete`` settle it or a restart starts the attempts afresh.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from tierlog.config.settings import RemoteLogManagerSettings
from tierlog.tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
)
from tierlog.tiered.context import TieringContext
from tierlog.tiered.policy import DeleteRetryPolicy, next_delete_attempt_ms

log = logging.getLogger(__name__)

S = RemoteLogSegmentState


@dataclass
class FailedRemoteDelete:
    """A remote segment whose delete failed: what is retried when, or that it was given up."""

    segment_id: str
    topic: str
    partition: int
    start_offset: int
    end_offset: int
    attempts: int
    last_attempt_ms: int
    last_error: str
    #: When the expiration pass tries again; None once given up.
    next_attempt_ms: int | None

    @property
    def given_up(self) -> bool:
        return self.next_attempt_ms is None


def delete_retry_policy(config: RemoteLogManagerSettings) -> DeleteRetryPolicy:
    """The first wait is the task interval: the expiration pass that retries runs that often."""
    return DeleteRetryPolicy(config.delete_retry_max_attempts, config.task_interval_ms,
                             config.delete_retry_backoff_max_ms)


class SegmentDeleter:
    def __init__(self, ctx: TieringContext) -> None:
        self.ctx = ctx
        self._lock = threading.Lock()
        #: Remote deletes that failed in this process, by segment id (see _delete_failed).
        self._failed: dict[RemoteLogSegmentId, FailedRemoteDelete] = {}

    def delete(self, md: RemoteLogSegmentMetadata, *, best_effort: bool,
               rejected_custom_metadata: bytes | None = None) -> bool:
        """DELETE_SEGMENT_STARTED, plugin delete, DELETE_SEGMENT_FINISHED. A failed plugin delete
        leaves DELETE_SEGMENT_STARTED for the expiration pass to retry: never an orphan.
        ``rejected_custom_metadata`` (seed 002) is recorded with DELETE_SEGMENT_STARTED, so this
        attempt and every retry hand it to the plugin."""
        ctx = self.ctx
        broker = ctx.config.broker_id
        if md.state is not S.DELETE_SEGMENT_STARTED:
            update = RemoteLogSegmentMetadataUpdate(md.segment_id, ctx.now_ms(), S.DELETE_SEGMENT_STARTED, broker,
                                                    md.custom_metadata, rejected_custom_metadata)
            ctx.rlmm.update_remote_log_segment_metadata(update)
            md = md.create_with_updates(update)
        ctx.index_cache.remove(md.segment_id)
        # With a published manifest (tiered/manifest.py), readers learn of the deletion before the
        # data goes: a manifest that could not be written holds the delete back like a failed one.
        flush_manifest = getattr(ctx.rlmm, "flush_manifest", None)
        try:
            if callable(flush_manifest):
                flush_manifest(md.topic_id_partition)
            ctx.rsm.delete_log_segment_data(md.for_plugin_delete())
        except Exception as e:
            self._delete_failed(md, e)
            if not best_effort:
                raise
            return False
        ctx.rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            md.segment_id, ctx.now_ms(), S.DELETE_SEGMENT_FINISHED, broker, md.custom_metadata))
        self._delete_succeeded(md)
        return True

    def _delete_failed(self, md: RemoteLogSegmentMetadata, error: Exception) -> None:
        """Count the failed attempt and decide the next (policy.next_delete_attempt_ms); the last
        allowed attempt gives up with an ERROR line and a status file naming the leftover."""
        now = self.ctx.now_ms()
        tip = md.topic_id_partition
        with self._lock:
            previous = self._failed.get(md.segment_id)
            attempts = 1 if previous is None else previous.attempts + 1
            next_ms = next_delete_attempt_ms(attempts, now, delete_retry_policy(self.ctx.config))
            entry = FailedRemoteDelete(md.segment_id.id_str, tip.topic, tip.partition, md.start_offset,
                                       md.end_offset, attempts, now, f"{type(error).__name__}: {error}", next_ms)
            self._failed[md.segment_id] = entry
        if next_ms is not None:
            log.warning("remote delete failed segment_id=%s topic=%s partition=%d start_offset=%d end_offset=%d "
                        "attempt=%d next_attempt_in_ms=%d error=%s", entry.segment_id, tip.topic, tip.partition,
                        md.start_offset, md.end_offset, attempts, next_ms - now, entry.last_error)
            return
        if previous is not None and previous.given_up:
            return  # reported already (a topic deletion retrying it)
        log.error("remote delete given up segment_id=%s topic=%s partition=%d start_offset=%d end_offset=%d "
                  "after %d attempts: its objects stay in the remote tier (tierlog tier retry-delete or "
                  "forget-delete %s, docs/operations.md); last error: %s", entry.segment_id, tip.topic,
                  tip.partition, md.start_offset, md.end_offset, attempts, entry.segment_id, entry.last_error)
        self.ctx.write_status()

    def _delete_succeeded(self, md: RemoteLogSegmentMetadata) -> None:
        with self._lock:
            previous = self._failed.pop(md.segment_id, None)
        if previous is not None:
            log.info("remote delete succeeded segment_id=%s topic=%s partition=%d after %d failed attempts",
                     previous.segment_id, previous.topic, previous.partition, previous.attempts)
            if previous.given_up:
                self.ctx.write_status()

    def due(self, md: RemoteLogSegmentMetadata, now_ms: int) -> bool:
        """Whether the expiration pass retries this DELETE_SEGMENT_STARTED segment now: at once when
        this process never tried it (a crash or restart left it), never once given up."""
        with self._lock:
            entry = self._failed.get(md.segment_id)
        return entry is None or (entry.next_attempt_ms is not None and now_ms >= entry.next_attempt_ms)

    def given_up(self, segment_id: RemoteLogSegmentId) -> bool:
        with self._lock:
            entry = self._failed.get(segment_id)
        return entry is not None and entry.given_up

    def failed_deletes(self) -> list[FailedRemoteDelete]:
        """The remote deletes that failed in this process and are not done, oldest segment first."""
        with self._lock:
            entries = list(self._failed.values())
        return sorted(entries, key=lambda e: (e.topic, e.partition, e.start_offset, e.segment_id))
