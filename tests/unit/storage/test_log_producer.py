"""Producer state through the log: duplicates, sequence errors, and state surviving reopen."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.storage import OpenLog, batch, read_all
from tierlog.config import LogConfig
from tierlog.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from tierlog.storage import files


def idem(seq: int, n: int = 2, epoch: int = 0, pid: int = 42) -> bytes:
    return batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_retried_batch_returns_original_offsets_and_is_stored_once(open_log: OpenLog) -> None:
    log = open_log()
    first = log.append_as_leader(idem(0))
    log.append_as_leader(batch(3))  # someone else's data in between
    retry = log.append_as_leader(idem(0))
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset)
    assert log.log_end_offset == 5
    assert read_all(log) == [0, 1, 2, 3, 4]


def test_gap_and_old_epoch_are_rejected_and_write_nothing(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_leader(idem(0, epoch=1))
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(idem(5, epoch=1))
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(idem(2, epoch=0))
    assert log.log_end_offset == 2


@pytest.mark.parametrize("clean", [True, False])
def test_duplicate_detected_after_reopen(open_log: OpenLog, clean: bool) -> None:
    cfg = LogConfig(segment_bytes=600)
    log = open_log(cfg)
    infos = [log.append_as_leader(idem(s * 2)) for s in range(10)]
    assert log.num_segments > 1
    if clean:
        log.close()
    else:
        # An unclean stop: nothing flushed or snapshotted beyond what rolls wrote.
        for seg in log.segments.materialized():
            seg.log.close()
    log2 = open_log(cfg, clean=clean)
    retry = log2.append_as_leader(idem(18))
    assert retry.duplicate and retry.first_offset == infos[-1].first_offset
    assert log2.append_as_leader(idem(20)).first_offset == log2.log_end_offset - 2


def test_roll_writes_a_segment_aligned_snapshot(open_log: OpenLog, tmp_path: Path) -> None:
    log = open_log(LogConfig(segment_bytes=600))
    for s in range(10):
        log.append_as_leader(idem(s * 2))
    d = tmp_path / "t-0"
    for base in log.segments.base_offsets[1:]:
        assert files.producer_snapshot_file(d, base).exists()


def test_coordinator_writes_an_abort_marker_into_the_txn_index(open_log: OpenLog) -> None:
    from tierlog.records import (
        ControlRecordType,
        EndTransactionMarker,
        SimpleRecord,
        build_batch,
        build_end_txn_marker_batch,
    )
    from tierlog.storage.producer_state import AppendOrigin

    log = open_log()
    txn = build_batch([SimpleRecord(b"k", b"v")], producer_id=7, producer_epoch=0, base_sequence=0,
                      is_transactional=True)
    log.append_as_leader(txn)
    with pytest.raises(Exception, match="control"):
        log.append_as_leader(build_end_txn_marker_batch(
            EndTransactionMarker(ControlRecordType.ABORT, 0), producer_id=7, producer_epoch=0, timestamp_ms=1))
    log.append_as_leader(build_end_txn_marker_batch(
        EndTransactionMarker(ControlRecordType.ABORT, 0), producer_id=7, producer_epoch=0, timestamp_ms=1),
        origin=AppendOrigin.COORDINATOR)
    entries = log.active_segment.txn_index.all_entries()
    assert [(e.producer_id, e.first_offset, e.last_offset) for e in entries] == [(7, 0, 1)]


def test_appends_without_producer_ids_move_the_producer_state_to_the_log_end(open_log: OpenLog) -> None:
    """Such appends skip producer-state staging (the append's fast path): the map end offset still
    follows the log end, so a snapshot taken now is named after it, and a later idempotent batch is
    staged and deduplicated as before."""
    log = open_log()
    log.append_as_leader(batch(3))
    log.append_as_leader(batch(2))
    assert log.producer_state.map_end_offset == log.log_end_offset == 5
    snapshot = log.producer_state.take_snapshot(sync=False)
    assert snapshot is not None and files.offset_from_file_name(snapshot.name) == 5
    first = log.append_as_leader(idem(0))
    assert log.append_as_leader(idem(0)).duplicate
    assert log.producer_state.map_end_offset == first.last_offset + 1 == 7
