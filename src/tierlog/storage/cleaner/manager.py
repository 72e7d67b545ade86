"""The log cleaner's threads and bookkeeping (Kafka's LogCleaner + LogCleanerManager): pick the
dirtiest compacted log, clean it, checkpoint how far it got; keep per-partition figures for
``tierlog cleaner status`` and the metrics; mark a partition whose data is damaged as uncleanable."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

from tierlog.clock import SYSTEM_CLOCK, Clock, monotonic_s
from tierlog.config.settings import setting
from tierlog.errors import TierlogError, UnsupportedRecordFormatError
from tierlog.ids import TopicPartition
from tierlog.storage import files
from tierlog.storage.cleaner.batches import CorruptDirtyBatchError
from tierlog.storage.cleaner.checkpoint import CleanerCheckpoint
from tierlog.storage.cleaner.cleaner import Cleaner, CleanResult, Throttle, segment_views, with_timestamps
from tierlog.storage.cleaner.decisions import (
    Candidate,
    CleanableRange,
    DirtyStats,
    cleanable_range,
    dirty_stats,
    max_compaction_delay_ms,
    offset_map_slots,
    select_filthiest,
)
from tierlog.storage.cleaner.offset_map import ENTRY_BYTES, OffsetMap
from tierlog.storage.cleaner.status_file import PartitionCleanerState, write_status
from tierlog.storage.cleaner.swap import SwapHook
from tierlog.storage.log import UnifiedLog
from tierlog.storage.log_manager import LogManager, Progress

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CleanerSettings:
    """The cleaner's settings (built from the broker config in ``tierlog.server.settings``)."""

    enable: bool = setting("log.cleaner.enable")
    threads: int = setting("log.cleaner.threads")
    backoff_ms: int = setting("log.cleaner.backoff.ms")
    io_max_bytes_per_second: float = setting("log.cleaner.io.max.bytes.per.second")
    io_buffer_size: int = setting("log.cleaner.io.buffer.size")
    dedupe_buffer_size: int = setting("log.cleaner.dedupe.buffer.size")
    io_buffer_load_factor: float = setting("log.cleaner.io.buffer.load.factor")
    progress_interval_ms: int = 5000


@dataclass
class CleanerMetrics:
    """Kafka's LogCleaner / LogCleanerManager gauges."""

    max_dirty_percent: int = 0
    #: Kafka's max-clean-time-secs: the longest of each thread's last cleaning.
    max_clean_time_secs: float = 0.0
    max_buffer_utilization_percent: int = 0
    cleaner_recopy_percent: int = 0
    last_run_end_ms: int | None = None
    uncleanable_partitions_count: int = 0
    uncleanable_bytes: int = 0
    max_compaction_delay_secs: int = 0
    #: Cleaner threads that ended while the cleaner was running (Kafka's DeadThreadCount).
    dead_thread_count: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    #: Per log dir (Kafka tags both with logDirectory): uncleanable partitions and their dirty bytes.
    uncleanable_partitions_by_dir: dict[str, int] = field(default_factory=dict)
    uncleanable_bytes_by_dir: dict[str, int] = field(default_factory=dict)
    #: Each thread's last cleaning time, for max_clean_time_secs.
    last_clean_secs_by_thread: dict[str, float] = field(default_factory=dict)


@dataclass
class _Plan:
    tp: TopicPartition
    ulog: UnifiedLog
    rng: CleanableRange
    stats: DirtyStats


class LogCleaner:
    def __init__(self, manager: LogManager, settings: CleanerSettings = CleanerSettings(), *,
                 clock: Clock = SYSTEM_CLOCK, swap_hook: SwapHook | None = None) -> None:
        self.manager = manager
        self.settings = settings
        self.clock = clock
        self.swap_hook = swap_hook
        self.states: dict[TopicPartition, PartitionCleanerState] = {}
        self.metrics = CleanerMetrics()
        self._lock = threading.Lock()
        self._in_progress: set[TopicPartition] = set()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._wake = threading.Event()
        self._progress = Progress(settings.progress_interval_ms, clock)
        self._checkpoints: dict[str, dict[TopicPartition, int]] = {}
        for d in manager.log_dirs:
            self._checkpoints[str(d)] = CleanerCheckpoint(d).read()

    # -- threads ------------------------------------------------------------------------------------

    def start(self) -> None:
        if not self.settings.enable:
            return
        self.metrics.dead_thread_count = 0
        self.metrics.last_clean_secs_by_thread.clear()
        for i in range(self.settings.threads):
            t = threading.Thread(target=self._run, name=f"kafka-log-cleaner-thread-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        log.info("log cleaner started threads=%d dedupe_buffer_bytes=%d", self.settings.threads,
                 self.settings.dedupe_buffer_size)

    def shutdown(self) -> None:
        self._stop.set()
        self._wake.set()
        for t in self._threads:
            t.join(timeout=60)
        self._threads.clear()

    def reconfigure(self, settings: CleanerSettings) -> None:
        """Kafka's LogCleaner.reconfigure: the threads stop (a cleaning in progress stops between
        groups and resumes from its checkpoint) and start again with ``settings``."""
        if settings == self.settings:
            return
        log.info("log cleaner reconfiguring threads=%d dedupe_buffer_bytes=%d io_buffer_bytes=%d load_factor=%s "
                 "io_max_bytes_per_second=%s backoff_ms=%d", settings.threads, settings.dedupe_buffer_size,
                 settings.io_buffer_size, settings.io_buffer_load_factor, settings.io_max_bytes_per_second,
                 settings.backoff_ms)
        running = bool(self._threads)
        self.shutdown()
        self.settings = settings
        self._stop.clear()
        if running:
            self.start()

    def wake(self) -> None:
        """Look for work now (tests, a config change) instead of after the backoff."""
        self._wake.set()

    def _run(self) -> None:
        try:
            s = self.settings
            cleaner = self.new_cleaner()
            while not self._stop.is_set():
                try:
                    worked = self.clean_one(cleaner)
                except Exception:  # a cleaner thread must not die of one log
                    log.exception("log cleaner thread error")
                    worked = False
                if not worked:
                    self._wake.wait(s.backoff_ms / 1000.0)
                    self._wake.clear()
        except BaseException:
            log.exception("log cleaner thread %s died", threading.current_thread().name)
            raise
        finally:
            if not self._stop.is_set():
                with self._lock:
                    self.metrics.dead_thread_count += 1

    def new_cleaner(self) -> Cleaner:
        s = self.settings
        slots = offset_map_slots(s.dedupe_buffer_size, max(1, s.threads), s.io_buffer_load_factor)
        throttle = Throttle(s.io_max_bytes_per_second, self._stop.wait, lambda: monotonic_s(self.clock))
        # The table takes the thread's whole share of the buffer (24 bytes an entry), full at the load factor.
        capacity = max(2, s.dedupe_buffer_size // max(1, s.threads) // ENTRY_BYTES)
        cleaner = Cleaner(OffsetMap(slots, capacity), io_buffer_bytes=s.io_buffer_size, clock=self.clock,
                          throttle=throttle, swap_hook=self.swap_hook, progress=self._progress_line)
        cleaner.stop_requested = self._stop.is_set
        cleaner.progress_due = self._progress.due
        return cleaner

    def _progress_line(self, text: str) -> None:
        log.info("%s", text)

    # -- selection ----------------------------------------------------------------------------------

    def _checkpoint_of(self, ulog: UnifiedLog, tp: TopicPartition) -> int | None:
        return self._checkpoints.get(str(ulog.dir.parent), {}).get(tp)

    def _plan(self, tp: TopicPartition, ulog: UnifiedLog, now_ms: int) -> tuple[_Plan, Candidate]:
        checkpoint = self._checkpoint_of(ulog, tp)
        rng, stats, delay = plan_log(ulog, checkpoint, now_ms)
        if rng.reset_reason is not None:
            log.warning("cleaner checkpoint of %s-%d reset: %s", tp[0], tp[1], rng.reset_reason)
        config = ulog.config
        state = self.states.setdefault(tp, PartitionCleanerState())
        state.checkpoint, state.dirty_ratio = checkpoint, stats.ratio
        state.dirty_bytes, state.clean_bytes = stats.dirty_bytes, stats.clean_bytes
        candidate = Candidate(f"{tp[0]}-{tp[1]}", stats, config.min_cleanable_dirty_ratio, delay,
                              state.next_delete_horizon_ms)
        return _Plan(tp, ulog, rng, stats), candidate

    def grab_filthiest(self, now_ms: int) -> _Plan | None:
        """Choose (and mark in progress) the log to clean next, updating every compacted partition's
        figures on the way (Kafka's grabFilthiestCompactedLog)."""
        plans: dict[str, _Plan] = {}
        candidates: list[Candidate] = []
        max_ratio = 0.0
        max_delay = 0
        uncleanable: dict[str, int] = {}
        uncleanable_bytes: dict[str, int] = {}
        live = self.manager.all_logs()
        for tp in [tp for tp in self.states if tp not in live]:
            del self.states[tp]  # deleted: no longer uncleanable either
        for tp, ulog in live.items():
            if not ulog.config.compact or ulog.deleted:
                self.states.pop(tp, None)
                continue
            state = self.states.get(tp)
            if state is not None and state.uncleanable_reason is not None:
                try:  # Kafka recomputes them at each pass: they follow what was appended since
                    _, stats, _ = plan_log(ulog, self._checkpoint_of(ulog, tp), now_ms)
                    state.dirty_bytes = stats.dirty_bytes
                except (OSError, TierlogError):
                    pass
                d = str(ulog.dir.parent)
                uncleanable[d] = uncleanable.get(d, 0) + 1
                uncleanable_bytes[d] = uncleanable_bytes.get(d, 0) + state.dirty_bytes
                continue
            with self._lock:
                if tp in self._in_progress:
                    continue
            if ulog.offline_reason is not None:
                continue
            try:
                plan, candidate = self._plan(tp, ulog, now_ms)
            except (OSError, TierlogError) as e:
                log.warning("could not judge the cleanable range of %s-%d: %s", tp[0], tp[1], e)
                continue
            max_ratio = max(max_ratio, candidate.stats.ratio)
            max_delay = max(max_delay, candidate.compaction_delay_ms)
            plans[candidate.name] = plan
            candidates.append(candidate)
        self.metrics.max_dirty_percent = int(100 * max_ratio)
        self.metrics.max_compaction_delay_secs = max_delay // 1000
        self._set_uncleanable(uncleanable, uncleanable_bytes)
        chosen = select_filthiest(candidates, now_ms)
        if chosen is None:
            return None
        plan = plans[chosen.name]
        with self._lock:
            if plan.tp in self._in_progress:
                return None
            self._in_progress.add(plan.tp)
        return plan

    # -- one cleaning -------------------------------------------------------------------------------

    def write_status_files(self) -> None:
        """Each log dir's ``cleaner-status`` for ``tierlog cleaner status``."""
        by_dir: dict[str, dict[TopicPartition, PartitionCleanerState]] = {str(d): {} for d in self.manager.log_dirs}
        for tp, ulog in self.manager.all_logs().items():
            state = self.states.get(tp)
            if state is not None:
                by_dir.setdefault(str(ulog.dir.parent), {})[tp] = state
        now_ms = self.clock.wall_ms()
        for d, states in by_dir.items():
            try:
                write_status(Path(d), states, now_ms)
            except OSError as e:
                log.warning("could not write the cleaner status in %s: %s", d, e)

    def clean_one(self, cleaner: Cleaner) -> bool:
        """Clean the dirtiest log, if any is dirty enough. Returns whether it cleaned one."""
        try:
            return self._clean_one(cleaner)
        finally:
            self.write_status_files()

    def _clean_one(self, cleaner: Cleaner) -> bool:
        now_ms = self.clock.wall_ms()
        plan = self.grab_filthiest(now_ms)
        self.metrics.last_run_end_ms = self.clock.wall_ms() if plan is None else self.metrics.last_run_end_ms
        if plan is None:
            return False
        tp, ulog = plan.tp, plan.ulog
        state = self.states.setdefault(tp, PartitionCleanerState())
        try:
            log.info("cleaning log %s-%d from offset %d to %d (dirty ratio %.3f, %d dirty bytes)", tp[0], tp[1],
                     plan.rng.first_dirty_offset, plan.rng.first_uncleanable_offset, plan.stats.ratio,
                     plan.stats.dirty_bytes)
            views = segment_views(ulog)
            result = cleaner.clean(ulog, plan.rng.first_dirty_offset, plan.rng.first_uncleanable_offset, views, now_ms)
        except Exception as e:
            if isinstance(e, CorruptDirtyBatchError) and _refused_by(ulog, e):
                # Data of a format tierlog does not read, not damage: the partition is refused as
                # every other path refuses it (refusal.py), with its one ERROR; nothing to clean.
                self.states.pop(tp, None)
                log.info("log cleaner skips the refused partition %s-%d", tp[0], tp[1])
                return True
            # Kafka's LogCleaningException: whatever failed, this partition is marked uncleanable
            # (the thread goes on with the others); damaged data gets its own words.
            state.uncleanable_reason = str(e) if isinstance(e, CorruptDirtyBatchError) else f"{type(e).__name__}: {e}"
            state.dirty_bytes = plan.stats.dirty_bytes
            d = str(ulog.dir.parent)
            m = self.metrics
            self._set_uncleanable({**m.uncleanable_partitions_by_dir, d: m.uncleanable_partitions_by_dir.get(d, 0) + 1},
                                  {**m.uncleanable_bytes_by_dir, d: m.uncleanable_bytes_by_dir.get(d, 0)
                                   + plan.stats.dirty_bytes})
            log.error("log cleaner stopped cleaning %s-%d: %s; the partition keeps serving, nothing was deleted, "
                      "and it is not cleaned again until the broker restarts", tp[0], tp[1], state.uncleanable_reason,
                      exc_info=not isinstance(e, CorruptDirtyBatchError))
            return True
        finally:
            with self._lock:
                self._in_progress.discard(tp)
        self._record(tp, ulog, state, result)
        return True

    def _record(self, tp: TopicPartition, ulog: UnifiedLog, state: PartitionCleanerState,
                result: CleanResult) -> None:
        m = self.metrics
        m.bytes_read += result.bytes_read
        m.bytes_written += result.bytes_written
        state.last_clean_ms = self.clock.wall_ms()
        state.bytes_cleaned += result.bytes_read
        state.bytes_written += result.bytes_written
        state.cleanings += 1
        state.next_delete_horizon_ms = result.next_delete_horizon_ms
        m.last_clean_secs_by_thread[threading.current_thread().name] = result.elapsed_s
        m.max_clean_time_secs = max(m.last_clean_secs_by_thread.values())
        m.last_run_end_ms = state.last_clean_ms
        slots = max(1, self._map_slots())
        m.max_buffer_utilization_percent = min(100, int(100 * result.map_records / slots))
        if result.bytes_read:
            m.cleaner_recopy_percent = int(100 * result.bytes_written / result.bytes_read)
        if result.aborted and result.groups == 0:
            return
        if not result.aborted:
            self._write_checkpoint(ulog, tp, result.end_offset)
            state.checkpoint = result.end_offset
        log.info("cleaned log %s-%d up to offset %d: %d groups, %d bytes read, %d written, %d of %d records kept, "
                 "%.3f s", tp[0], tp[1], result.end_offset, result.groups, result.bytes_read, result.bytes_written,
                 result.records_written, result.records_read, result.elapsed_s)

    def _set_uncleanable(self, partitions_by_dir: dict[str, int], bytes_by_dir: dict[str, int]) -> None:
        m = self.metrics
        m.uncleanable_partitions_by_dir = partitions_by_dir
        m.uncleanable_bytes_by_dir = bytes_by_dir
        m.uncleanable_partitions_count = sum(partitions_by_dir.values())
        m.uncleanable_bytes = sum(bytes_by_dir.values())

    def _map_slots(self) -> int:
        s = self.settings
        return offset_map_slots(s.dedupe_buffer_size, max(1, s.threads), s.io_buffer_load_factor)

    def _write_checkpoint(self, ulog: UnifiedLog, tp: TopicPartition, offset: int) -> None:
        d = ulog.dir.parent
        with self._lock:
            entries = self._checkpoints.setdefault(str(d), {})
            entries[tp] = offset
            live = self.manager.all_logs()
            for stale in [k for k in entries if k not in live]:
                del entries[stale]
            CleanerCheckpoint(d).write(dict(entries))

    # -- status -------------------------------------------------------------------------------------

    def status(self, now_ms: int | None = None) -> dict[TopicPartition, PartitionCleanerState]:
        """Every compacted partition's figures, refreshed now (without cleaning anything)."""
        now_ms = self.clock.wall_ms() if now_ms is None else now_ms
        for tp, ulog in self.manager.all_logs().items():
            if ulog.config.compact and not ulog.deleted and ulog.offline_reason is None:
                state = self.states.get(tp)
                if state is not None and state.uncleanable_reason is not None:
                    continue
                try:
                    self._plan(tp, ulog, now_ms)
                except (OSError, TierlogError):
                    continue
        return dict(self.states)

    def time_since_last_run_ms(self, now_ms: int) -> int:
        last = self.metrics.last_run_end_ms
        return 0 if last is None else max(0, now_ms - last)


def _refused_by(ulog: UnifiedLog, e: CorruptDirtyBatchError) -> bool:
    """Whether the batch the cleaner found bad is data of a record format tierlog does not read (an
    intact batch of magic > 2 with no v2 batch after it): the cleaner's walk only sees a wrong magic,
    so the log's own check of that segment decides -- and refuses the partition when it is."""
    base_text, _, suffix = e.path.name.partition(".")
    if suffix != files.LOG_SUFFIX.lstrip(".") or not base_text.isdigit():
        return False
    base = int(base_text)
    with ulog.lock:
        if e.path.parent != ulog.dir or base not in ulog.segments.base_offsets:
            return False
        segment = ulog.segments.get(base)
    try:
        ulog.check_all_batches(segment)
    except UnsupportedRecordFormatError:
        return True
    except (OSError, TierlogError):
        return False
    return False


def plan_log(ulog: UnifiedLog, checkpoint: int | None, now_ms: int) -> tuple[CleanableRange, DirtyStats, int]:
    """A log's cleanable range, dirty figures and compaction delay (reading segment timestamps only
    when a compaction lag needs them)."""
    views = segment_views(ulog)
    with ulog.lock:
        start, leo, lso = ulog.log_start_offset, ulog.log_end_offset, ulog.last_stable_offset
        config = ulog.config
    rng = cleanable_range(views, checkpoint=checkpoint, log_start_offset=start, log_end_offset=leo,
                          last_stable_offset=lso, min_compaction_lag_ms=0, now_ms=now_ms)
    if config.min_compaction_lag_ms > 0 or config.max_compaction_lag_ms < 2**62:
        views = with_timestamps(ulog, views, rng.first_dirty_offset, rng.first_uncleanable_offset,
                                min_compaction_lag_ms=config.min_compaction_lag_ms, now_ms=now_ms)
        rng = cleanable_range(views, checkpoint=checkpoint, log_start_offset=start, log_end_offset=leo,
                              last_stable_offset=lso, min_compaction_lag_ms=config.min_compaction_lag_ms,
                              now_ms=now_ms)
    stats = dirty_stats(views, rng, start)
    delay = max_compaction_delay_ms(views, rng, config.max_compaction_lag_ms, now_ms)
    return rng, stats, delay


def clean_log(ulog: UnifiedLog, cleaner: Cleaner, checkpoint: int | None, now_ms: int) -> CleanResult:
    """Clean one log once, whatever its ratio (tests, ``tierlog cleaner`` tools, the benchmark)."""
    rng, _, _ = plan_log(ulog, checkpoint, now_ms)
    return cleaner.clean(ulog, rng.first_dirty_offset, rng.first_uncleanable_offset, segment_views(ulog), now_ms)


__all__ = ["CleanerMetrics", "CleanerSettings", "LogCleaner", "PartitionCleanerState"]

