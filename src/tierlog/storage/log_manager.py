"""All logs of a broker across its log directories: load at startup, create/get/delete, the
background tasks (flush, checkpoints, seed 003's lazy checker, producer expiry), clean shutdown.

Longer than most modules (about 650 lines) because loading, creation, deletion, refusal of a
partition whose data tierlog does not read, and shutdown all change the one map of logs (and of
refused partitions) under one lock, and each must see the others' effects (a refused partition is
never created again; shutdown writes no clean-shutdown marker for a dir that held one)."""

from __future__ import annotations

import logging
import os
import random
import shutil
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from tierlog._util.files import fsync_dir, sync_filesystem
from tierlog.clock import SYSTEM_CLOCK, Clock, monotonic_s
from tierlog.config.log_config import LogConfig
from tierlog.config.settings import setting
from tierlog.errors import KafkaStorageError, TierlogError, UnsupportedRecordFormatError
from tierlog.ids import TopicPartition, random_uuid, uuid_to_base64
from tierlog.scheduler import Scheduler, TaskHandle
from tierlog.storage import files
from tierlog.storage.checkpoints import (
    CLEAN_SHUTDOWN,
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES,
    RECOVERY_POINT_CHECKPOINT,
    CleanShutdownFile,
    CorruptCheckpointError,
    MetaProperties,
    OffsetCheckpointFile,
    salvage_meta_properties,
    well_formed_cluster_id,
)
from tierlog.storage.group_commit import GroupCommit, all_done
from tierlog.storage.high_watermark import follows_durable_offset
from tierlog.storage.io_errors import disk_errors
from tierlog.storage.listing_manifest import (
    PartitionListing,
    delete_manifest,
    read_manifest,
    trusted_listing,
    write_manifest,
)
from tierlog.storage.loader import LoadOptions, LoadStats, load_log
from tierlog.storage.log import SYSTEM_RANDOM, LogAppendInfo, UnifiedLog
from tierlog.storage.log_dir_failure import LogDirFailureChannel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LogManagerSettings:
    sanity_check_all_logs: bool = setting("sanity.check.all.logs.enabled")
    flush_check_interval_ms: int = setting("log.flush.scheduler.interval.ms")
    recovery_point_checkpoint_interval_ms: int = setting("log.flush.offset.checkpoint.interval.ms")
    log_start_offset_checkpoint_interval_ms: int = setting("log.flush.start.offset.checkpoint.interval.ms")
    lazy_check_interval_ms: int = setting("log.lazy.check.interval.ms")
    retention_check_interval_ms: int = setting("log.retention.check.interval.ms")
    lazy_check_batch: int = 64
    producer_id_expiration_ms: int = setting("producer.id.expiration.ms")
    producer_id_expiration_check_interval_ms: int = setting("producer.id.expiration.check.interval.ms")
    recovery_threads_per_data_dir: int = setting("num.recovery.threads.per.data.dir")
    unflushed_max_bytes: int = setting("log.dir.unflushed.max.bytes")
    syncfs_min_files: int = setting("log.dir.syncfs.min.files")
    #: Anything but none: the high watermark of every log follows its fsyncs (high_watermark.py).
    durable_acks: str = setting("log.durable.acks")
    node_id: int = 1
    cluster_id: str = ""
    #: Startup and the lazy checker log a progress line at most this often.
    progress_interval_ms: int = 5000


class Progress:
    """Rate limit of the progress lines of long work: :meth:`due` is true at most once per interval
    (thread-safe, for the recovery threads)."""

    def __init__(self, interval_ms: int, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._interval_s = interval_ms / 1000.0
        self._next = monotonic_s(clock) + self._interval_s
        self._lock = threading.Lock()

    def due(self) -> bool:
        now = monotonic_s(self._clock)
        with self._lock:
            if now < self._next:
                return False
            self._next = now + self._interval_s
            return True


@dataclass
class _DirPlan:
    """What startup read from one log dir before loading its logs."""

    path: Path
    clean: bool
    manifest: dict[str, tuple[int, PartitionListing]]
    recovery_points: dict[TopicPartition, int]
    #: None: the log start offset checkpoint was unreadable.
    start_offsets: dict[TopicPartition, int] | None
    partition_dirs: list[tuple[Path, TopicPartition]]


@dataclass
class StartupReport:
    logs: int = 0
    segments: int = 0
    recovered_segments: int = 0
    rebuilt_indexes: int = 0
    truncated_bytes: int = 0
    clean_shutdown_dirs: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)


class LogManager:
    def __init__(
        self,
        log_dirs: list[Path],
        config_for_topic: Callable[[str], LogConfig],
        settings: LogManagerSettings = LogManagerSettings(),
        *,
        clock: Clock = SYSTEM_CLOCK,
        scheduler: Scheduler | None = None,
        rng: random.Random = SYSTEM_RANDOM,
    ) -> None:
        self.rng = rng  # segment roll jitter of every log (seeded in tests)
        if not log_dirs:
            raise ValueError("at least one log directory is needed")
        self.log_dirs = [d.resolve() for d in log_dirs]
        self.config_for_topic = config_for_topic
        self.settings = settings
        self.clock = clock
        self.scheduler = scheduler
        self._logs: dict[TopicPartition, UnifiedLog] = {}
        #: Partitions whose files hold a record format tierlog does not read, and why: not loaded,
        #: never recreated, their files untouched.
        self.refused: dict[TopicPartition, str] = {}
        #: Logs refused after they were loaded (:meth:`_refuse_loaded`), their files closed at shutdown.
        self._refused_logs: list[UnifiedLog] = []
        self._lock = threading.RLock()
        self._tasks: list[TaskHandle] = []
        self.startup = StartupReport()
        self._started = False
        #: Segments deleted by retention, per reason (time, size, log_start_offset, timestamp_floor).
        self.deletions: Counter[str] = Counter()
        #: Seed 003's background checker: segments it checked, and whether it has said it is done.
        self.lazy_checked_segments = 0
        self._lazy_started = 0.0
        self._lazy_done_logged = False
        self._lazy_progress = Progress(settings.progress_interval_ms, clock)
        #: Disk errors take a log dir offline (log_dir_failure); durable acknowledgements wait on
        #: their dir's group commit.
        self.failure_channel = LogDirFailureChannel(self.log_dirs)
        self._unflushed_max_bytes = settings.unflushed_max_bytes
        self._syncfs_min_files = settings.syncfs_min_files
        self.group_commits = {d: GroupCommit(d, self.failure_channel, settings.unflushed_max_bytes, self.clock,
                                             settings.syncfs_min_files)
                              for d in self.log_dirs}
        #: Whether the high watermark waits for the fsync (``log.durable.acks`` not none): then every
        #: append asks its group commit for a sync, acknowledged after it or not.
        self.hw_follows_durable = follows_durable_offset(settings.durable_acks)
        #: Each log's ``on_high_watermark_advanced`` (set_high_watermark_listener).
        self.on_high_watermark_advanced: Callable[[UnifiedLog], None] | None = None

    # -- startup --------------------------------------------------------------------------------------

    def startup_logs(self) -> StartupReport:
        """Load every log in every log dir (KAFKA-FACTS §2.9, §2.12)."""
        t0 = monotonic_s(self.clock)
        report = self.startup
        plans = [self._plan_dir(d, report) for d in self.log_dirs]
        total = sum(len(p.partition_dirs) for p in plans)
        log.info("loading logs total=%d log_dirs=%d clean_shutdown_dirs=%d", total, len(plans),
                 sum(1 for p in plans if p.clean))
        progress = Progress(self.settings.progress_interval_ms, self.clock)
        counts_lock = threading.Lock()
        done = [0, 0, 0]  # logs, segments, recovered segments

        def load_one(item: tuple[Path, TopicPartition],
                     plan: _DirPlan) -> tuple[TopicPartition, UnifiedLog | str, LoadStats]:
            path, tp = item
            stats = LoadStats()
            options = LoadOptions(
                had_clean_shutdown=plan.clean,
                recovery_point=plan.recovery_points.get(tp, 0),
                log_start_offset=0 if plan.start_offsets is None else plan.start_offsets.get(tp, 0),
                log_start_offset_unknown=plan.start_offsets is None,
                sanity_check_all=self.settings.sanity_check_all_logs,
                producer_id_expiration_ms=self.settings.producer_id_expiration_ms,
            )
            started = monotonic_s(self.clock)
            try:
                ulog = load_log(path, self.config_for_topic(tp[0]), options, clock=self.clock, rng=self.rng,
                                scheduler=self.scheduler, stats=stats, listing=trusted_listing(path, plan.manifest))
            except UnsupportedRecordFormatError as e:
                return tp, str(e), stats
            if self.hw_follows_durable and ulog.recovery_point < ulog.log_end_offset:
                # What recovery kept above the recovery point may still be only in the page cache (a
                # process crash): fsynced before it is served, so the high watermark starts at the log
                # end and no consumer reads a record a power cut could still take.
                ulog.flush()
            if stats.recovered_segments:
                log.info("log recovered topic=%s partition=%d recovered_segments=%d truncated_bytes=%d "
                         "segments=%d seconds=%.3f", tp[0], tp[1], stats.recovered_segments, stats.truncated_bytes,
                         stats.segments, monotonic_s(self.clock) - started)
            with counts_lock:
                done[0] += 1
                done[1] += stats.segments
                done[2] += stats.recovered_segments
                logs_done, segments_done, recovered = done
            if progress.due():
                log.info("loading logs progress done=%d total=%d percent=%.0f segments=%d recovered_segments=%d "
                         "elapsed_s=%.1f", logs_done, total, 100.0 * logs_done / max(total, 1), segments_done,
                         recovered, monotonic_s(self.clock) - t0)
            return tp, ulog, stats

        for plan in plans:
            threads = max(1, self.settings.recovery_threads_per_data_dir)
            if threads == 1:
                results = [load_one(p, plan) for p in plan.partition_dirs]
            else:
                with ThreadPoolExecutor(threads) as pool:
                    results = list(pool.map(lambda item, plan=plan: load_one(item, plan), plan.partition_dirs))
            for tp, loaded, stats in results:
                if isinstance(loaded, str):
                    # One partition's data tierlog cannot read: that partition is refused, the rest load.
                    log.error("partition refused topic=%s partition=%d: %s", tp[0], tp[1], loaded)
                    self.refused[tp] = loaded
                    report.errors.append(loaded)
                    continue
                ulog = loaded
                self._adopt(ulog)
                self._logs[tp] = ulog
                report.logs += 1
                report.segments += stats.segments
                report.recovered_segments += stats.recovered_segments
                report.rebuilt_indexes += stats.rebuilt_indexes
                report.truncated_bytes += stats.truncated_bytes
        report.seconds = monotonic_s(self.clock) - t0
        log.info("loaded %d logs with %d segments in %.3f s (%d recovered, %d indexes rebuilt, %d unchecked)",
                 report.logs, report.segments, report.seconds, report.recovered_segments,
                 report.rebuilt_indexes, self.unchecked_segments())
        self._started = True
        return report

    def _plan_dir(self, d: Path, report: StartupReport) -> _DirPlan:
        d.mkdir(parents=True, exist_ok=True)
        self._ensure_meta_properties(d)
        marker = CleanShutdownFile(d / CLEAN_SHUTDOWN)
        clean = marker.exists()
        # Delete the marker at once: a crash while loading must count as unclean (KAFKA-10471).
        if clean:
            marker.delete()
            report.clean_shutdown_dirs += 1
        # The listing manifest is trusted only with the clean-shutdown marker, and used only once.
        manifest = read_manifest(d) if clean else {}
        delete_manifest(d)
        recovery_points = self._read_checkpoint(
            d / RECOVERY_POINT_CHECKPOINT, report,
            # A damaged recovery point only costs a longer recovery.
            "recovering every log of the directory from its start after an unclean shutdown" if not clean
            else "not needed after this clean shutdown")
        start_offsets = self._read_checkpoint(
            d / LOG_START_OFFSET_CHECKPOINT, report,
            # The first segment's base offset would bring back records deleted inside it; the
            # leader-epoch checkpoint also moves to the log start offset, so it stands in.
            "each log starts where its leader-epoch checkpoint starts")
        partition_dirs: list[tuple[Path, TopicPartition]] = []
        with os.scandir(d) as it:
            for entry in it:
                if not entry.is_dir():
                    continue
                if entry.name.endswith(files.DELETE_DIR_SUFFIX):
                    shutil.rmtree(entry.path, ignore_errors=True)
                    continue
                if entry.name.endswith(files.STRAY_DIR_SUFFIX):
                    # Kept for the operator, never loaded or served (see stray_log).
                    log.warning("stray log directory kept dir=%s: its topic was not in the metadata; not served, "
                                "delete it once it is not needed", entry.path)
                    continue
                if entry.name in ("remote-log-index-cache", "remote-log-metadata", "__cluster_metadata-0"):
                    continue
                try:
                    tp = files.parse_topic_partition_name(entry.name)
                except ValueError:
                    log.warning("ignoring %s: not a <topic>-<partition> directory", entry.path)
                    continue
                partition_dirs.append((Path(entry.path), tp))
        return _DirPlan(d, clean, manifest, recovery_points or {}, start_offsets, partition_dirs)

    def _read_checkpoint(self, path: Path, report: StartupReport, fallback: str) -> dict[TopicPartition, int] | None:
        """The checkpoint's offsets; None (after an ERROR saying what stands in) if it is damaged."""
        try:
            return OffsetCheckpointFile(path).read()
        except FileNotFoundError:
            return {}
        except TierlogError as e:
            log.error("checkpoint unreadable %s: %s", fallback, e)
            report.errors.append(str(e))
            return None

    def _ensure_meta_properties(self, d: Path) -> None:
        path = d / META_PROPERTIES
        directory_id: bytes | None = None
        if path.exists():
            try:
                meta = MetaProperties.read(path)
                if well_formed_cluster_id(meta.cluster_id):
                    return
                # Every meta.properties Kafka or tierlog writes names the cluster with a Uuid.
                raise CorruptCheckpointError(f"{path} has no cluster.id" if meta.cluster_id is None
                                             else f"{path}: cluster.id {meta.cluster_id!r} is not a Uuid")
            except TierlogError as e:
                legible, directory_id = salvage_meta_properties(path)
                if legible is not None and legible == self.settings.cluster_id:
                    log.error("meta.properties unreadable %s: %s; writing it again with its cluster id %s", d, e,
                              legible)
                else:
                    # Its only copy is gone (another log dir's meta.properties would have given it).
                    log.error("meta.properties unreadable %s: %s; its cluster id is lost: the cluster id is now %s",
                              d, e, self.settings.cluster_id or "a new one")
        cluster_id = self.settings.cluster_id or uuid_to_base64(uuid.uuid4().bytes)
        MetaProperties(node_id=self.settings.node_id, cluster_id=cluster_id,
                       directory_id=directory_id or random_uuid()).write(path, self.clock.wall_ms())

    def start_background_tasks(self) -> None:
        if self.scheduler is None:
            return
        s = self.settings
        sched = self.scheduler
        self._tasks += [
            sched.schedule("kafka-recovery-point-checkpoint", self.checkpoint_recovery_points,
                           s.recovery_point_checkpoint_interval_ms, s.recovery_point_checkpoint_interval_ms),
            sched.schedule("kafka-log-start-offset-checkpoint", self.checkpoint_log_start_offsets,
                           s.log_start_offset_checkpoint_interval_ms, s.log_start_offset_checkpoint_interval_ms),
            sched.schedule("kafka-producer-expiration", self.remove_expired_producers,
                           s.producer_id_expiration_check_interval_ms, s.producer_id_expiration_check_interval_ms),
        ]
        self._tasks.append(sched.schedule("kafka-log-retention", self.cleanup_logs,
                                          s.retention_check_interval_ms, s.retention_check_interval_ms))
        if s.flush_check_interval_ms < 2**62:
            self._tasks.append(sched.schedule("kafka-log-flusher", self.flush_dirty_logs,
                                              s.flush_check_interval_ms, s.flush_check_interval_ms))
        if self.unchecked_segments() > 0:
            self._tasks.append(sched.schedule("tierlog-lazy-segment-checker", self.check_unchecked_segments,
                                              s.lazy_check_interval_ms, s.lazy_check_interval_ms))

    # -- access ---------------------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> UnifiedLog | None:
        return self._logs.get((topic, partition))

    def refused_reason(self, topic: str, partition: int) -> str | None:
        """Why the partition was refused (data in a format tierlog does not read), if it was."""
        return self.refused.get((topic, partition))

    def _refuse_loaded(self, ulog: UnifiedLog, reason: str) -> None:
        """A loaded log's read found data of a format tierlog does not read (after a clean shutdown
        startup does not walk the segments): the partition is refused from now on as if startup had
        found it. Its log is dropped, not closed, so nothing more is written to its files (no trim,
        final time index entry or producer snapshot; the startup refusal never opens them) and only
        closed at shutdown, when no read can be using them."""
        tp = (ulog.topic, ulog.partition)
        with self._lock:
            if self._logs.get(tp) is not ulog:
                return
            del self._logs[tp]
            self.refused[tp] = reason
            self._refused_logs.append(ulog)
        log.error("partition refused topic=%s partition=%d: %s", tp[0], tp[1], reason)

    def all_logs(self) -> dict[TopicPartition, UnifiedLog]:
        # Without the lock: creating a log holds it across its files' fsyncs, and a metrics scrape or
        # a background task must not wait on a slow disk for that. Copying a dict (tuple keys of
        # str and int) is one C call that runs no Python code, so it sees the map before or after
        # any change, never in between (as get_log's lookup does).
        return dict(self._logs)

    def _adopt(self, ulog: UnifiedLog) -> None:
        """What a log served by this manager is given: the failure channel, refusal, and whether its
        high watermark follows its fsyncs."""
        ulog.failure_channel = self.failure_channel
        ulog.on_refused = self._refuse_loaded
        ulog.hw_follows_durable = self.hw_follows_durable
        ulog.on_high_watermark_advanced = self.on_high_watermark_advanced

    def set_high_watermark_listener(self, listener: Callable[[UnifiedLog], None] | None) -> None:
        """Called (from any thread, maybe holding the log's lock: it must not block) when a log's high
        watermark moves at an fsync or flush; given to every log, those loaded and those to come."""
        with self._lock:
            self.on_high_watermark_advanced = listener
            for ulog in self._logs.values():
                ulog.on_high_watermark_advanced = listener

    def sync_future(self, ulog: UnifiedLog, info: LogAppendInfo, *, answered: bool = True) -> Future[None]:
        """A future completed once the appended batches of ``info`` are on disk (group commit); the
        log's durable offset (and so its high watermark) moves first. ``answered``: a produce waits for
        it, and its bytes count against ``log.dir.unflushed.max.bytes``; otherwise the sync only moves
        the high watermark (an append acknowledged before its fsync)."""
        log_dir = ulog.dir.parent
        commit = self.group_commits.get(log_dir)
        if commit is None:
            commit = self.group_commits.setdefault(
                log_dir, GroupCommit(log_dir, self.failure_channel, self._unflushed_max_bytes, self.clock,
                                     self._syncfs_min_files))
        if info.sync_file is None:
            done: Future[None] = Future()
            done.set_result(None)  # a retried batch already in a closed (synced or deleted) segment
            return done
        base = info.sync_segment_base_offset
        synced = commit.request(info.sync_file, info.valid_bytes if answered else 0,
                                partial(ulog.durable_synced, base, info.last_offset + 1))
        if not ulog.hw_follows_durable or ulog.durable.offset >= base:
            return synced
        # Right after a roll the closed segment's last records may not be synced yet (its own syncs
        # and the roll's flush run apart): they are synced too before this answer, so that what a
        # produce was acknowledged for is below the high watermark -- readable -- as in Kafka.
        earlier = [commit.request(records, 0, partial(ulog.durable_synced, seg_base, seg_end))
                   for seg_base, seg_end, records in ulog.segments_awaiting_sync(base)]
        return all_done([synced, *earlier])

    @contextmanager
    def deferred_syncs(self) -> Iterator[None]:
        """The syncs asked for meanwhile start together at the end (GroupCommit.deferred): the
        partitions of one produce request then share a syncfs instead of an fdatasync each."""
        with ExitStack() as stack:
            for commit in list(self.group_commits.values()):
                stack.enter_context(commit.deferred())
            yield

    def syncs_have_room(self) -> bool:
        """Whether no log dir has ``log.dir.unflushed.max.bytes`` waiting for a sync: then no durable
        append needs to ask :meth:`sync_room` (a check per request, not per partition)."""
        return all(commit.has_room() for commit in list(self.group_commits.values()))

    def sync_room(self, topic: str, partition: int) -> Future[None] | None:
        """None when a durable append to the partition may go ahead, else a future completed once
        its log dir's bytes waiting for an fsync are under ``log.dir.unflushed.max.bytes``."""
        ulog = self._logs.get((topic, partition))
        commit = self.group_commits.get(ulog.dir.parent) if ulog is not None else None
        return commit.room() if commit is not None else None

    def _pick_log_dir(self) -> Path:
        online = [d for d in self.log_dirs if self.failure_channel.offline_reason(d) is None]
        if not online:
            raise KafkaStorageError("every log dir is offline: " + "; ".join(
                f"{d}: {r}" for d, r in self.failure_channel.offline_dirs.items()))
        if len(online) == 1:
            # Counting every log per creation made creating N partitions cost O(N^2): 10,000 took minutes.
            return online[0]
        counts = {d: 0 for d in online}
        for ulog in self._logs.values():
            parent = ulog.dir.parent
            if parent in counts:
                counts[parent] += 1
        return min(online, key=lambda d: counts[d])

    @disk_errors
    def get_or_create_log(self, topic: str, partition: int, topic_id: bytes | None = None) -> UnifiedLog:
        with self._lock:
            refused = self.refused.get((topic, partition))
            if refused is not None:
                # Never a fresh log over files tierlog could not read: every request gets the reason.
                raise UnsupportedRecordFormatError(refused)
            existing = self._logs.get((topic, partition))
            if existing is not None:
                if topic_id is not None and existing.topic_id != topic_id:
                    existing.write_partition_metadata(topic_id)
                return existing
            path = self._pick_log_dir() / files.topic_partition_dir_name(topic, partition)
            try:
                path.mkdir(parents=True, exist_ok=True)
                ulog = load_log(path, self.config_for_topic(topic),
                                LoadOptions(had_clean_shutdown=True,
                                            producer_id_expiration_ms=self.settings.producer_id_expiration_ms),
                                clock=self.clock, scheduler=self.scheduler, rng=self.rng)
                if topic_id is not None:
                    ulog.write_partition_metadata(topic_id)
            except OSError as e:
                raise self.failure_channel.raise_offline(path.parent, e, f"creating the log {path.name}") from e
            self._adopt(ulog)
            self._logs[(topic, partition)] = ulog
            log.info("created log for %s-%d in %s", topic, partition, path.parent)
            return ulog

    def delete_log(self, topic: str, partition: int) -> bool:
        """Rename the partition dir to ``<topic>-<partition>.<uuid>-delete`` and remove it (async in Kafka)."""
        with self._lock:
            ulog = self._logs.pop((topic, partition), None)
        if ulog is None:
            return False
        with ulog.lock:
            for seg in ulog.segments.materialized():
                seg.close()
            ulog.deleted = True
            target = ulog.dir.parent / files.delete_dir_name(topic, partition)
            os.replace(ulog.dir, target)
        shutil.rmtree(target, ignore_errors=True)
        log.info("deleted log %s-%d", topic, partition)
        return True

    def stray_log(self, topic: str, partition: int) -> Path | None:
        """Take a log out of service without deleting its data: the partition dir is renamed to
        ``<topic>-<partition>.<uuid>-stray`` (Kafka's stray logs), which is never loaded again.
        Returns the new directory."""
        with self._lock:
            ulog = self._logs.pop((topic, partition), None)
        if ulog is None:
            return None
        with ulog.lock:
            ulog.close()
            ulog.deleted = True
            target = ulog.dir.parent / files.stray_dir_name(topic, partition)
            os.replace(ulog.dir, target)
        fsync_dir(target.parent)
        return target

    def update_topic_config(self, topic: str) -> None:
        config = self.config_for_topic(topic)
        for (t, _), ulog in self.all_logs().items():
            if t == topic:
                ulog.update_config(config)

    # -- background work ------------------------------------------------------------------------------

    def unchecked_segments(self) -> int:
        return sum(ulog.unchecked_segments() for ulog in self._logs.values())

    def max_producer_id(self) -> int:
        """The largest producer id any log's producer state holds (-1 for none)."""
        return max((max(ulog.producer_state.producers, default=-1) for ulog in self.all_logs().values()), default=-1)

    def check_unchecked_segments(self) -> int:
        """Seed 003's background checker: a bounded batch per run, so it never hogs a log's lock."""
        budget = self.settings.lazy_check_batch
        done = 0
        for ulog in self.all_logs().values():
            if done >= budget:
                break
            try:
                done += ulog.check_some_segments(budget - done)
            except UnsupportedRecordFormatError:
                continue  # the partition is refused (refusal.py), its ERROR already logged
        if done:
            if not self.lazy_checked_segments:
                self._lazy_started = monotonic_s(self.clock)
            self.lazy_checked_segments += done
            self._lazy_done_logged = False
            if self._lazy_progress.due():
                log.info("lazy segment check progress checked_segments=%d remaining_segments=%d",
                         self.lazy_checked_segments, self.unchecked_segments())
        elif self.lazy_checked_segments and not self._lazy_done_logged:
            self._lazy_done_logged = True
            log.info("lazy segment check finished checked_segments=%d seconds=%.1f", self.lazy_checked_segments,
                     monotonic_s(self.clock) - self._lazy_started)
        return done

    def cleanup_logs(self) -> int:
        """One retention pass over every log (LogManager.cleanupLogs); returns segments deleted."""
        now = self.clock.wall_ms()
        deleted = 0
        for (topic, partition), ulog in self.all_logs().items():
            try:
                plan = ulog.delete_old_segments(now)
            except UnsupportedRecordFormatError:
                continue  # the partition is refused (refusal.py), its ERROR already logged
            except (OSError, TierlogError) as e:
                if not self.failure_channel.maybe_fail(ulog.dir.parent, e, f"retention of {topic}-{partition}"):
                    log.error("retention of %s-%d failed: %s", topic, partition, e)
                continue
            for d in plan:
                self.deletions[d.reason.value] += 1
            deleted += len(plan)
        if deleted:
            self.checkpoint_log_start_offsets()
        return deleted

    def flush_dirty_logs(self) -> None:
        now = self.clock.wall_ms()
        for ulog in self.all_logs().values():
            if self.failure_channel.offline_reason(ulog.dir.parent) is not None:
                continue
            try:
                ulog.maybe_flush_by_time(now)
            except (OSError, TierlogError) as e:
                log.error("flush of %s failed: %s", ulog.dir, e)

    def remove_expired_producers(self) -> None:
        now = self.clock.wall_ms()
        for ulog in self.all_logs().values():
            with ulog.lock:
                ulog.producer_state.remove_expired_producers(now)

    def _by_dir(self) -> dict[Path, dict[TopicPartition, UnifiedLog]]:
        """The logs of each online log dir (an offline dir gets no checkpoint, flush or marker)."""
        out: dict[Path, dict[TopicPartition, UnifiedLog]] = {d: {} for d in self.log_dirs}
        for tp, ulog in self.all_logs().items():
            out.setdefault(ulog.dir.parent, {})[tp] = ulog
        return {d: logs for d, logs in out.items() if self.failure_channel.offline_reason(d) is None}

    def checkpoint_recovery_points(self) -> None:
        for d, logs in self._by_dir().items():
            try:
                OffsetCheckpointFile(d / RECOVERY_POINT_CHECKPOINT).write(
                    {tp: ulog.recovery_point for tp, ulog in logs.items()})
            except OSError as e:
                raise self.failure_channel.raise_offline(d, e, "writing the recovery point checkpoint") from e

    def checkpoint_log_start_offsets(self) -> None:
        for d, logs in self._by_dir().items():
            entries: dict[TopicPartition, int] = {}
            for tp, ulog in logs.items():
                first = ulog.segments.base_offsets[:1]
                if ulog.config.remote_storage_enable or (first and ulog.log_start_offset > first[0]):
                    entries[tp] = ulog.log_start_offset
            try:
                OffsetCheckpointFile(d / LOG_START_OFFSET_CHECKPOINT).write(entries)
            except OSError as e:
                raise self.failure_channel.raise_offline(d, e, "writing the log start offset checkpoint") from e

    # -- shutdown -------------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Clean shutdown: close every log (trims, producer snapshot), sync each dir's filesystem,
        write the checkpoints, and then the clean-shutdown marker in each dir whose sync worked."""
        for t in self._tasks:
            t.cancel()
        self._tasks.clear()
        for commit in self.group_commits.values():
            commit.close()
        # An offline dir is left as the disk error left it: no sync is trusted, no marker written.
        failed_dirs: set[Path] = set(self.failure_channel.offline_dirs)
        # Every log is closed without an fsync of its own, then each directory's filesystem is
        # synced once: thousands of fsyncs, each a journal commit, made shutdown take minutes.
        for ulog in self.all_logs().values():
            if ulog.dir.parent in failed_dirs:
                continue
            try:
                ulog.close(sync=False)
            except (OSError, TierlogError) as e:
                log.error("closing %s failed: %s", ulog.dir, e)
                failed_dirs.add(ulog.dir.parent)
        by_dir = self._by_dir()
        for d, logs in by_dir.items():
            try:
                sync_filesystem(d)
            except OSError as e:
                # No marker for this directory: the next start recovers it from its recovery points.
                log.error("syncing %s failed: %s", d, e)
                self.failure_channel.maybe_fail(d, e, "syncfs at shutdown")
                failed_dirs.add(d)
                continue
            for ulog in logs.values():
                ulog.mark_synced()
        for refused in self._refused_logs:
            try:
                with refused.lock:
                    for seg in refused.segments.materialized():
                        seg.close_unchanged()
            except (OSError, TierlogError) as e:
                log.error("closing the refused %s failed: %s", refused.dir, e)
            # No marker for its dir: the next start recovers the dir, walks the partition from
            # offset 0 (it has no recovery point any more) and refuses it at startup; with a marker
            # it would load unwalked and take appends until a read found the batch again.
            failed_dirs.add(refused.dir.parent)
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        for d, logs in by_dir.items():
            if d not in failed_dirs:
                write_manifest(d, [ulog.dir for ulog in logs.values()])
                CleanShutdownFile(d / CLEAN_SHUTDOWN).write(broker_epoch=0)
        log.info("log manager shut down cleanly")
