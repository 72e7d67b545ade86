"""Opening a partition's log: leftover cleanup, recovery after an unclean shutdown, and seed 003's
choice between checking every segment and checking only the active one (Kafka's LogLoader)."""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tierlog.clock import SYSTEM_CLOCK, Clock
from tierlog.config.log_config import LogConfig
from tierlog.config.settings import broker_default, broker_default_flag
from tierlog.errors import CorruptIndexError, IndexOffsetOverflowError, InvalidOffsetError
from tierlog.records.header import BatchHeader
from tierlog.scheduler import Scheduler
from tierlog.storage import files
from tierlog.storage.checkpoints import PARTITION_METADATA, PartitionMetadataFile
from tierlog.storage.cleaner.swap import next_offset_of_log_file
from tierlog.storage.epoch_rebuild import cache_disagrees, open_leader_epoch_cache, rebuild_leader_epochs
from tierlog.storage.index import looks_untrimmed
from tierlog.storage.listing_manifest import PartitionListing
from tierlog.storage.log import SYSTEM_RANDOM, UnifiedLog, random_roll_jitter_ms, segment_settings
from tierlog.storage.log_restore import RESTORE_MARKER_FILE, read_restore_marker
from tierlog.storage.producer_rebuild import rebuild_producer_state
from tierlog.storage.producer_state import ProducerStateManager
from tierlog.storage.segment import LogSegment
from tierlog.storage.segments import LogSegments
from tierlog.storage.txn_rebuild import rebuild_transaction_indexes

log = logging.getLogger(__name__)

_INDEX_SUFFIX_NAMES = frozenset(s[1:] for s in (files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX, files.TXN_INDEX_SUFFIX))
_DELETED = files.DELETED_SUFFIX
_CLEANED = files.CLEANED_SUFFIX
_SWAP = files.SWAP_SUFFIX


@dataclass(frozen=True)
class LoadOptions:
    had_clean_shutdown: bool = False
    recovery_point: int = 0
    log_start_offset: int = 0
    #: The log start offset checkpoint was damaged: ``log_start_offset`` means nothing.
    log_start_offset_unknown: bool = False
    #: Seed 003 (``sanity.check.all.logs.enabled``).
    sanity_check_all: bool = broker_default_flag("sanity.check.all.logs.enabled")
    producer_id_expiration_ms: int = broker_default("producer.id.expiration.ms")


@dataclass
class LoadStats:
    segments: int = 0
    recovered_segments: int = 0
    truncated_bytes: int = 0
    rebuilt_indexes: int = 0
    removed_files: int = 0
    #: Offsets the log once reached (a producer snapshot is named after them) but no longer has.
    lost_offsets: int = 0


def _clean_leftovers(directory: Path, names: list[str], stats: LoadStats) -> list[str]:
    """Delete ``.deleted``, ``.cleaned`` and temp files; finish or undo ``.swap`` replacements;
    delete orphan index files. Returns the surviving names.

    One pass with one split per name: with thousands of segments per partition this loop is most
    of what a lazy startup does (seed 003)."""
    keep: list[str] = []
    swaps: list[str] = []
    indexes: list[tuple[str, str]] = []
    logs: set[str] = set()
    cleaned_min: int | None = None
    for name in names:
        stem, _, suffix = name.partition(".")
        if suffix == "log":
            logs.add(stem)
            keep.append(name)
        elif suffix in _INDEX_SUFFIX_NAMES:
            indexes.append((stem, name))
        elif suffix.endswith(_DELETED) or suffix.endswith("tmp"):
            (directory / name).unlink(missing_ok=True)
            stats.removed_files += 1
        elif suffix.endswith(_CLEANED):
            if stem.isdigit():
                cleaned_min = int(stem) if cleaned_min is None else min(cleaned_min, int(stem))
            (directory / name).unlink(missing_ok=True)
            stats.removed_files += 1
        elif suffix.endswith(_SWAP):
            swaps.append(name)
        else:
            keep.append(name)
    usable: list[str] = []
    for name in swaps:
        stem = name.partition(".")[0]
        if cleaned_min is not None and (not stem.isdigit() or int(stem) >= cleaned_min):
            # An incomplete split: the swap is not usable.
            (directory / name).unlink(missing_ok=True)
            stats.removed_files += 1
            continue
        usable.append(name)
    # A cleaned segment swapped in replaces every old segment whose offsets it covers (the cleaner's
    # group of segments): those still on disk are deleted before the swap completes, so the new log
    # never holds two versions of an offset (LogLoader's swap recovery).
    covered: set[str] = set()
    for name in usable:
        if name.endswith(files.LOG_SUFFIX + files.SWAP_SUFFIX):
            stem = name.partition(".")[0]
            if not stem.isdigit():
                continue
            end = next_offset_of_log_file(directory / name)
            first = int(stem)
            for other in logs:
                if other.isdigit() and first <= int(other) and ((end is None and int(other) == first) or
                                                                (end is not None and int(other) < end)):
                    covered.add(other)
    if covered:
        log.warning("completing an interrupted swap of cleaned segments in %s: replacing segments %s", directory,
                    ", ".join(sorted(covered)))
        for name in list(keep):
            if name.partition(".")[0] in covered:
                (directory / name).unlink(missing_ok=True)
                keep.remove(name)
        for stem, name in list(indexes):
            if stem in covered:
                (directory / name).unlink(missing_ok=True)
                indexes.remove((stem, name))
        logs -= covered
    for name in usable:
        stem = name.partition(".")[0]
        target = name[: -len(files.SWAP_SUFFIX)]
        os.replace(directory / name, directory / target)
        if target.endswith(files.LOG_SUFFIX):
            logs.add(stem)
            keep.append(target)
        elif target.partition(".")[2] in _INDEX_SUFFIX_NAMES:
            indexes.append((stem, target))
        else:
            keep.append(target)
    for stem, name in indexes:
        if stem not in logs:
            log.warning("deleting orphan index file %s (no matching .log)", directory / name)
            (directory / name).unlink(missing_ok=True)
            stats.removed_files += 1
        else:
            keep.append(name)
    return keep


def _base_offsets(directory: Path, names: list[str]) -> list[int]:
    bases: list[int] = []
    for name in names:
        if name.endswith(files.LOG_SUFFIX):
            stem = name[: -len(files.LOG_SUFFIX)]
            if stem.isdigit():
                bases.append(int(stem))
            else:
                log.warning("ignoring %s: not a segment file name", directory / name)
    return bases


def load_log(
    directory: Path,
    config: LogConfig,
    options: LoadOptions,
    *,
    clock: Clock = SYSTEM_CLOCK,
    scheduler: Scheduler | None = None,
    stats: LoadStats | None = None,
    listing: PartitionListing | None = None,
    rng: random.Random = SYSTEM_RANDOM,
) -> UnifiedLog:
    """Open one partition's log. ``listing`` (clean shutdown only) replaces listing the directory."""
    stats = stats if stats is not None else LoadStats()
    directory.mkdir(parents=True, exist_ok=True)
    if listing is not None and options.had_clean_shutdown:
        names: list[str] | None = None
        bases = list(listing.base_offsets)
    else:
        listing = None
        names = _clean_leftovers(directory, os.listdir(directory), stats)
        bases = _base_offsets(directory, names)
    settings = segment_settings(config, files.parse_topic_partition_name(directory.name)[0])
    now = clock.wall_ms()

    def open_segment(base: int) -> LogSegment:
        return LogSegment(directory, base, settings, created_ms=now, roll_jitter_ms=random_roll_jitter_ms(config, rng))

    segments = LogSegments(open_segment)
    segments.add_base_offsets(bases)
    stats.segments = len(segments)
    where = partition_text(directory)
    epoch_cache, epochs_unreadable = open_leader_epoch_cache(directory, where)
    earliest_epoch = epoch_cache.earliest_entry
    epoch_start = None if earliest_epoch is None else earliest_epoch.start_offset

    def assign_epoch(h: BatchHeader) -> None:
        latest = epoch_cache.latest_epoch
        if h.partition_leader_epoch >= 0 and (latest is None or h.partition_leader_epoch > latest):
            epoch_cache.assign(h.partition_leader_epoch, h.base_offset)

    found_snapshots = listing.snapshot_offsets if listing is not None else _snapshot_offsets(names or [])
    # A clean shutdown snapshots producer state at the log end offset: where the data must end.
    clean_end = max(found_snapshots) if found_snapshots and options.had_clean_shutdown and bases else None
    if clean_end is not None and clean_end < bases[-1]:
        clean_end = None
    if not options.had_clean_shutdown and segments:
        _recover(segments, options.recovery_point, assign_epoch, stats, where)
    elif segments:
        _check_after_clean_shutdown(segments, options.sanity_check_all, stats)
        _check_active_tail(segments, clean_end, stats, where)

    if not segments:
        seg = LogSegment(directory, options.log_start_offset, settings, created_ms=now,
                         roll_jitter_ms=random_roll_jitter_ms(config, rng), create=True)
        segments.add(seg)
    active = segments.last
    assert active is not None
    active.resize_indexes(settings.max_index_size)
    next_offset = active.read_next_offset()
    if len(segments) > 1 and next_offset == active.base_offset:
        next_offset = active.base_offset
    # A producer snapshot is named after an offset the log reached (a roll, a clean shutdown) and is
    # deleted when the log is truncated below it, so a log that ends below one lost records, however
    # they went (a cut .log, a segment file removed).
    reached = max(found_snapshots) if found_snapshots else None
    if reached is not None and next_offset < reached:
        stats.lost_offsets = reached - next_offset
        log.error("log end offset below its producer snapshot %s: the data ends at offset %d, but the log reached %d "
                  "(a producer snapshot is named after it); offsets %d to %d are lost", where, next_offset, reached,
                  next_offset, reached - 1)
    elif clean_end is not None and next_offset > clean_end:
        log.warning("log end offset above the clean shutdown's %s: the data ends at offset %d, the newest producer "
                    "snapshot is at %d", where, next_offset, clean_end)
    first_base = segments.base_offsets[0]
    wanted_start = _log_start_offset(options, epoch_start, first_base, where)
    log_start_offset = max(wanted_start, first_base)
    if next_offset < wanted_start:
        if next_offset > first_base:
            # A log end below its own start offset cannot be: the checkpoint is damaged (a flipped
            # digit). Deleting the log on its word would lose every record, so the log keeps them.
            log.error("log start offset checkpoint damaged %s: it says %d, past the log end offset %d; keeping "
                      "the log from offset %d", where, wanted_start, next_offset, first_base)
            log_start_offset = first_base
        else:
            # No data here (files removed behind our back): start at the checkpointed start offset.
            log.warning("%s: log end %d is below the checkpointed log start offset %d; starting an empty log there",
                        directory, next_offset, wanted_start)
            for seg in list(segments):
                segments.remove(seg.base_offset)
                seg.delete_files()
            seg = LogSegment(directory, wanted_start, settings, created_ms=now, create=True)
            segments.add(seg)
            next_offset = log_start_offset = wanted_start
    recovery_point = next_offset if options.had_clean_shutdown else min(options.recovery_point, next_offset)
    epoch_cache.truncate_from_end(next_offset)
    epoch_cache.truncate_from_start(log_start_offset)
    reason = "its file was unreadable" if epochs_unreadable else cache_disagrees(
        epoch_cache, segments, log_start_offset, next_offset)
    if reason is not None:
        scanned = rebuild_leader_epochs(epoch_cache, segments)
        epoch_cache.truncate_from_end(next_offset)
        epoch_cache.truncate_from_start(log_start_offset)
        log.warning("leader epoch cache rebuilt %s: %s; %d entries from the batches (%d segments scanned)", where,
                    reason, len(epoch_cache.entries()), scanned)

    snapshot_offsets = listing.snapshot_offsets if listing is not None else None
    psm = ProducerStateManager(directory, options.producer_id_expiration_ms, dir_listing=names,
                               snapshot_offsets=snapshot_offsets)
    psm.remove_stray_snapshots(segments.base_offsets, dir_listing=names, snapshot_offsets=snapshot_offsets)
    topic_id: bytes | None = None
    pm = directory / PARTITION_METADATA
    if pm.exists():
        try:
            topic_id = PartitionMetadataFile(pm).read()
        except Exception as e:  # a damaged file is rewritten by the log manager from metadata
            log.warning("ignoring unreadable %s: %s", pm, e)
    ulog = UnifiedLog(
        directory, config, segments, log_start_offset=log_start_offset, recovery_point=recovery_point,
        next_offset=next_offset, producer_state=psm, leader_epoch_cache=epoch_cache, clock=clock,
        scheduler=scheduler, topic_id=topic_id, rng=rng,
    )
    # A tiered log's local start is above Kafka's log start: the snapshot there holds the producers
    # of the remote-only segments (or of a restore from the remote tier).
    rebuild_producer_state(psm, segments, log_start_offset, next_offset, clock.wall_ms(), options.had_clean_shutdown,
                           keep_start_snapshot=config.remote_storage_enable)
    # The whole log is the high watermark of a single replica: transactions completed in it are
    # stable (without this, one replayed from the log would hold the LSO at its start for good).
    psm.on_high_watermark_updated(next_offset)
    emptied = [s for s in segments.materialized() if s.txn_index_reset]
    if emptied:
        rebuild_transaction_indexes(directory, segments, emptied, log_start_offset, next_offset)
    if names is not None and RESTORE_MARKER_FILE in names:
        # Only an unclean load can find it: the restart holds the log's lock until it removes it.
        ulog.pending_restore_offset = read_restore_marker(directory)
        log.warning("%s: a restart from the remote tier was cut short; it runs again before the partition is "
                    "served", where)
    return ulog


def _recover(segments: LogSegments, recovery_point: int, assign_epoch: Callable[[BatchHeader], None],
             stats: LoadStats, where: str) -> None:
    """Unclean shutdown: re-scan every segment from the one holding the recovery point; a segment
    with invalid bytes is truncated there and every later segment is deleted (LogLoader#recoverLog)."""
    to_recover = segments.from_offset(recovery_point)
    # A partition refused for its record format keeps every file as it was: no segment's indexes
    # are rewritten (nor bytes cut) before each segment to recover is known to be of a format it reads.
    for seg in to_recover:
        seg.refuse_unsupported_format()
    for i, seg in enumerate(to_recover):
        log.info("recovering segment dir=%s base_offset=%d (unclean shutdown)", seg.dir.name, seg.base_offset)
        next_base = to_recover[i + 1].base_offset if i + 1 < len(to_recover) else None
        try:
            truncated = seg.recover(assign_epoch, upper_offset=next_base)
        except (InvalidOffsetError, IndexOffsetOverflowError, OSError) as e:
            log.warning("segment %s could not be recovered (%s); truncating it to its base offset", seg.log.path, e)
            truncated = seg.truncate_to(seg.base_offset)
        stats.recovered_segments += 1
        stats.truncated_bytes += truncated
        if i < len(to_recover) - 1:
            seg.on_become_inactive()
        if truncated > 0:
            later = to_recover[i + 1 :]
            problem = seg.recovery_problem
            lost_from = problem.offset if problem is not None else seg.base_offset
            log.error("recovery truncated %s: invalid data in %s at byte %s (%s); %d bytes cut and %d later "
                      "segments deleted, records from offset %d on are lost", where, seg.log.path,
                      "?" if problem is None else problem.position, "?" if problem is None else problem.reason,
                      truncated, len(later), lost_from)
            for dead in later:
                log.warning("deleting segment %s after the corrupt data in %s", dead.log.path, seg.log.path)
                segments.remove(dead.base_offset)
                dead.delete_files()
            break
    # Segments below the recovery point were flushed before the crash; they stay unchecked until used.


def _check_active_tail(segments: LogSegments, clean_end: int | None, stats: LoadStats, where: str) -> None:
    """After a clean shutdown the log end offset is read from the end of the active segment: check the
    batches there (CRC, offsets, ending where the clean shutdown left the log) and recover the segment
    if they fail, as recovery would after a crash. A few kilobytes per partition; the rest of the
    segment is checked when it is read."""
    active = segments.last
    assert active is not None
    if active.size_bytes == 0:
        return
    problem = active.check_tail(clean_end)
    if problem is None:
        if active.index_distrusted:
            log.warning("rebuilding the indexes of %s: an entry names no batch", active.log.path)
            active.recover(truncate=True, exact_end=clean_end)
            stats.rebuilt_indexes += 1
        return
    truncated = active.recover(truncate=True, exact_end=clean_end)
    stats.rebuilt_indexes += 1
    stats.truncated_bytes += truncated
    found = active.recovery_problem or problem
    log.error("damaged active segment %s: %s at byte %d, offset %d: %s; cut %d bytes there, records from offset %d "
              "on are lost", where, active.log.path, found.position, found.offset, found.reason, truncated,
              found.offset)


def _log_start_offset(options: LoadOptions, epoch_start: int | None, first_base: int, where: str) -> int:
    """The log start offset to open the log at. Moving the log start offset also moves the first
    entry of the leader-epoch checkpoint there (written at once), so that entry witnesses it: it
    stands in when the checkpoint is damaged, and when the two disagree the lower one wins, since
    records shown again can be deleted again but records hidden by a flipped digit are gone."""
    checkpointed = options.log_start_offset
    if options.log_start_offset_unknown:
        if epoch_start is not None and epoch_start > first_base:
            log.warning("log start offset from the leader epoch checkpoint %s: %d", where, epoch_start)
            return epoch_start
        return first_base
    if epoch_start is not None and checkpointed > max(epoch_start, first_base):
        log.error("log start offset checkpoints disagree %s: the log start offset checkpoint says %d, the leader "
                  "epoch checkpoint starts at %d; keeping the records from %d", where, checkpointed, epoch_start,
                  max(epoch_start, first_base))
        return max(epoch_start, first_base)
    return checkpointed


def _snapshot_offsets(names: list[str]) -> list[int]:
    out: list[int] = []
    for name in names:
        stem, _, suffix = name.partition(".")
        if suffix == "snapshot" and stem.isdigit():
            out.append(int(stem))
    return out


def partition_text(directory: Path) -> str:
    """How log lines name a partition: key=value and the ``<topic>-<partition>`` spelling."""
    try:
        topic, partition = files.parse_topic_partition_name(directory.name)
    except ValueError:
        return f"dir={directory}"
    return f"topic={topic} partition={partition} ({topic}-{partition})"


def _check_after_clean_shutdown(segments: LogSegments, sanity_check_all: bool, stats: LoadStats) -> None:
    """Seed 003. ``sanity_check_all``: every segment's offset and time index is checked now and rebuilt
    if it fails. Otherwise only the active segment is checked, plus one stat of the newest inactive
    segment's indexes (a preallocated index that was never trimmed, KAFKA-19200); the rest stay
    unchecked until first access or the background checker."""
    bases = segments.base_offsets
    if sanity_check_all:
        for i, base in enumerate(bases):
            seg = segments.get(base)
            next_base = bases[i + 1] if i + 1 < len(bases) else None
            _check_or_rebuild(seg, next_base, stats)
        return
    active = segments.get(bases[-1])
    _check_or_rebuild(active, None, stats)
    if len(bases) > 1:
        # One stat (and at most one entry read) per partition, without materialising the segment.
        prefix = active.dir / f"{bases[-2]:020d}"
        max_size = active.settings.max_index_size
        if looks_untrimmed(Path(f"{prefix}{files.TIME_INDEX_SUFFIX}"), 12, max_size) or looks_untrimmed(
                Path(f"{prefix}{files.INDEX_SUFFIX}"), 8, max_size):
            newest_inactive = segments.get(bases[-2])
            log.warning("the indexes of %s were never trimmed; rebuilding them", newest_inactive.log.path)
            _check_or_rebuild(newest_inactive, bases[-1], stats)


def _check_or_rebuild(seg: LogSegment, next_base: int | None, stats: LoadStats) -> None:
    try:
        seg.sanity_check(next_base, active=next_base is None)
        seg.checked = True
    except CorruptIndexError as e:
        log.warning("rebuilding the indexes of %s: %s", seg.log.path, e)
        # An inactive segment keeps its bytes: damage found on the way is marked and reported when read.
        seg.recover(upper_offset=next_base, truncate=next_base is None)
        if next_base is not None:
            seg.on_become_inactive()
        stats.rebuilt_indexes += 1
    if next_base is not None:
        seg.release_indexes()
