"""Producer state validation and bookkeeping (KAFKA-FACTS §4.1-4.3; cases from Kafka's
ProducerStateManagerTest and UnifiedLogTest listed in §7.4)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tests.helpers.storage import T0, build_batch
from tierlog.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from tierlog.records.header import INT32_MAX, BatchHeader
from tierlog.storage.producer_state import (
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    AppendOrigin,
    BatchMetadata,
    EndTxnMarker,
    ProducerStateEntry,
    ProducerStateManager,
    TxnCompletion,
    expired_producers,
    read_end_txn_marker,
)
from tierlog.testing import ManualClock

CLIENT = AppendOrigin.CLIENT
COORDINATOR = AppendOrigin.COORDINATOR
REPLICATION = AppendOrigin.REPLICATION


def header(**kwargs: object) -> BatchHeader:
    return BatchHeader(build_batch(**kwargs))  # type: ignore[arg-type]


class Producer:
    """Drives a manager the way the log does: stage, write (nothing here), commit, next offset."""

    def __init__(self, psm: ProducerStateManager) -> None:
        self.psm = psm
        self.next_offset = 0

    def append(self, origin: AppendOrigin = CLIENT, **kwargs: object) -> tuple[BatchHeader, list[TxnCompletion]]:
        h = header(base_offset=self.next_offset, **kwargs)
        staged = self.psm.validate_and_stage([h], origin)
        assert staged.duplicate is None, "unexpected duplicate"
        completions = self.psm.commit_staged(staged, h.last_offset)
        self.next_offset = h.last_offset + 1
        return h, completions

    def marker(self, pid: int, epoch: int, control: int, coordinator_epoch: int = 0,
               origin: AppendOrigin = COORDINATOR, timestamp: int = T0) -> list[TxnCompletion]:
        return self.append(origin, producer_id=pid, epoch=epoch, control=control,
                           coordinator_epoch=coordinator_epoch, timestamp=timestamp)[1]


@pytest.fixture
def psm(tmp_path: Path) -> ProducerStateManager:
    return ProducerStateManager(tmp_path)


@pytest.fixture
def log(psm: ProducerStateManager) -> Producer:
    return Producer(psm)


# -- duplicates -----------------------------------------------------------------------------------------


def test_duplicate_returns_original_metadata(log: Producer) -> None:
    log.append(producer_id=1, epoch=0, base_seq=0, count=5, timestamp=T0)
    log.append(producer_id=1, epoch=0, base_seq=5, count=5, timestamp=T0 + 1)
    retry = header(base_offset=log.next_offset, producer_id=1, epoch=0, base_seq=0, count=5, timestamp=T0 + 99)
    staged = log.psm.validate_and_stage([retry], CLIENT)
    assert staged.duplicate == BatchMetadata(last_seq=4, last_offset=4, offset_delta=4, timestamp=T0)
    assert (staged.duplicate.first_offset, staged.duplicate.first_seq) == (0, 0)
    assert log.psm.check_duplicate(retry) == staged.duplicate
    assert not staged.append_infos
    with pytest.raises(ValueError, match="duplicate"):
        log.psm.commit_staged(staged, retry.last_offset)
    # the replica path never deduplicates: it writes whatever the leader wrote
    assert log.psm.validate_and_stage([retry], REPLICATION).duplicate is None


def test_duplicate_needs_the_same_epoch_and_exact_range(log: Producer) -> None:
    log.append(producer_id=1, epoch=0, base_seq=0, count=5)
    assert log.psm.check_duplicate(header(producer_id=1, epoch=1, base_seq=0, count=5)) is None
    assert log.psm.check_duplicate(header(producer_id=1, epoch=0, base_seq=0, count=4)) is None
    with pytest.raises(OutOfOrderSequenceError):  # a partial overlap is not a duplicate
        log.psm.validate_and_stage([header(base_offset=9, producer_id=1, epoch=0, base_seq=1, count=4)], CLIENT)


def test_only_the_last_five_batches_are_deduplicated(log: Producer) -> None:
    for i in range(6):
        log.append(producer_id=1, epoch=0, base_seq=2 * i, count=2)
    entry = log.psm.producers[1]
    assert [b.first_seq for b in entry.batch_metadata] == [2, 4, 6, 8, 10]
    # the 2nd batch is still cached: original offsets come back
    dup = log.psm.validate_and_stage([header(base_offset=50, producer_id=1, epoch=0, base_seq=2, count=2)], CLIENT)
    assert dup.duplicate is not None and (dup.duplicate.first_offset, dup.duplicate.last_offset) == (2, 3)
    # the oldest one fell out of the window: it is now simply out of order
    with pytest.raises(OutOfOrderSequenceError):
        log.psm.validate_and_stage([header(base_offset=50, producer_id=1, epoch=0, base_seq=0, count=2)], CLIENT)


def test_duplicate_in_a_multi_batch_append_skips_the_whole_append(log: Producer) -> None:
    log.append(producer_id=1, epoch=0, base_seq=0, count=1)
    fresh = header(base_offset=1, producer_id=2, epoch=0, base_seq=0)
    retry = header(base_offset=2, producer_id=1, epoch=0, base_seq=0)
    staged = log.psm.validate_and_stage([fresh, retry], CLIENT)
    assert staged.duplicate is not None and staged.duplicate.last_offset == 0
    assert 2 not in log.psm.producers


# -- sequence and epoch checks ----------------------------------------------------------------------------


def test_sequence_gap_is_out_of_order(log: Producer) -> None:
    log.append(producer_id=1, epoch=0, base_seq=0, count=3)
    with pytest.raises(OutOfOrderSequenceError):
        log.psm.validate_and_stage([header(base_offset=3, producer_id=1, epoch=0, base_seq=4)], CLIENT)
    log.append(producer_id=1, epoch=0, base_seq=3)
    assert log.psm.producers[1].last_seq == 3


def test_old_epoch_is_rejected_except_on_replication(log: Producer) -> None:
    log.append(producer_id=1, epoch=5, base_seq=0)
    old = header(base_offset=1, producer_id=1, epoch=4, base_seq=1)
    for origin in (CLIENT, COORDINATOR):
        with pytest.raises(InvalidProducerEpochError):
            log.psm.validate_and_stage([old], origin)
    staged = log.psm.validate_and_stage([old], REPLICATION)
    log.psm.commit_staged(staged, old.last_offset)
    assert log.psm.producers[1].producer_epoch == 4


def test_new_epoch_must_start_at_zero(log: Producer) -> None:
    log.append(producer_id=1, epoch=0, base_seq=0, count=10)
    with pytest.raises(OutOfOrderSequenceError, match="new epoch"):
        log.psm.validate_and_stage([header(base_offset=10, producer_id=1, epoch=1, base_seq=10)], CLIENT)
    log.append(producer_id=1, epoch=1, base_seq=0)
    entry = log.psm.producers[1]
    # the bump cleared the window: the old epoch's batches can no longer match
    assert entry.producer_epoch == 1 and [b.last_seq for b in entry.batch_metadata] == [0]


def test_unknown_producer_accepts_any_sequence_and_epoch(log: Producer) -> None:
    # KIP-360: the broker no longer answers UNKNOWN_PRODUCER_ID; the state is simply recreated
    log.append(producer_id=7, epoch=3, base_seq=1234, count=2)
    assert log.psm.producers[7].last_seq == 1235
    with pytest.raises(OutOfOrderSequenceError):
        log.psm.validate_and_stage([header(base_offset=9, producer_id=7, epoch=3, base_seq=1237)], CLIENT)


def test_entry_with_unknown_epoch_skips_the_sequence_check(psm: ProducerStateManager) -> None:
    # e.g. loaded from a snapshot written for a producer whose data was all removed
    psm._producers[1] = ProducerStateEntry(1, producer_epoch=-1, last_timestamp=T0)
    info = psm.prepare_update(1, CLIENT)
    info.append(header(producer_id=1, epoch=-1, base_seq=77))
    info2 = psm.prepare_update(1, CLIENT)
    info2.append(header(producer_id=1, epoch=0, base_seq=55))  # a new epoch too: -1 is "unknown"


def test_sequence_wraps_at_int32_max(log: Producer) -> None:
    log.append(producer_id=1, epoch=0, base_seq=INT32_MAX - 1, count=2)
    assert log.psm.producers[1].last_seq == INT32_MAX
    log.append(producer_id=1, epoch=0, base_seq=0, count=1)
    log.append(producer_id=1, epoch=0, base_seq=1, count=1)
    # a batch spanning the wrap: sequences MAX, 0, 1
    log.append(producer_id=2, epoch=0, base_seq=INT32_MAX, count=3)
    spanning = log.psm.producers[2].batch_metadata[-1]
    assert (spanning.first_seq, spanning.last_seq) == (INT32_MAX, 1)
    retry = header(base_offset=99, producer_id=2, epoch=0, base_seq=INT32_MAX, count=3)
    assert log.psm.check_duplicate(retry) == spanning


def test_wrap_is_only_allowed_from_int32_max(log: Producer) -> None:
    log.append(producer_id=1, epoch=0, base_seq=10, count=7)
    with pytest.raises(OutOfOrderSequenceError):
        log.psm.validate_and_stage([header(base_offset=7, producer_id=1, epoch=0, base_seq=0)], CLIENT)


def test_failed_validation_changes_nothing(log: Producer) -> None:
    log.append(producer_id=1, epoch=0, base_seq=0)
    good = header(base_offset=1, producer_id=1, epoch=0, base_seq=1)
    bad = header(base_offset=2, producer_id=1, epoch=0, base_seq=5)
    with pytest.raises(OutOfOrderSequenceError):
        log.psm.validate_and_stage([good, bad], CLIENT)
    assert log.psm.producers[1].last_seq == 0
    assert log.psm.map_end_offset == 1


def test_batches_of_one_append_build_on_each_other(log: Producer) -> None:
    a = header(base_offset=0, producer_id=1, epoch=0, base_seq=0, count=2)
    b = header(base_offset=2, producer_id=1, epoch=0, base_seq=2, count=2)
    staged = log.psm.validate_and_stage([a, b], CLIENT)
    log.psm.commit_staged(staged, b.last_offset)
    assert [m.last_offset for m in log.psm.producers[1].batch_metadata] == [1, 3]


def test_batches_without_producer_id_still_move_the_map_end(log: Producer) -> None:
    log.append(count=4)
    assert log.psm.map_end_offset == 4 and log.psm.active_producers_count == 0
    assert log.psm.take_snapshot() is not None


# -- transactions -------------------------------------------------------------------------------------------


def test_non_transactional_batch_during_open_txn(log: Producer) -> None:
    log.append(producer_id=1, epoch=0, base_seq=0, transactional=True)
    plain = header(base_offset=1, producer_id=1, epoch=0, base_seq=1)
    with pytest.raises(InvalidTxnStateError):
        log.psm.validate_and_stage([plain], CLIENT)
    log.psm.validate_and_stage([plain], REPLICATION)  # the replica takes what the leader wrote


def test_commit_and_abort_markers_complete_transactions(log: Producer) -> None:
    log.append(producer_id=1, epoch=0, base_seq=0, count=2, transactional=True)  # 0-1
    log.append(producer_id=2, epoch=0, base_seq=0, transactional=True)  # 2
    assert log.psm.first_unstable_offset() == 0 and log.psm.first_undecided_offset() == 0
    (done,) = log.marker(1, 0, CONTROL_TYPE_ABORT, coordinator_epoch=3)  # 3
    # the LSO after the abort is held back by producer 2's open transaction
    assert (done.txn.producer_id, done.txn.first_offset, done.txn.last_offset) == (1, 0, 3)
    assert done.is_aborted and done.last_stable_offset == 2
    assert log.psm.first_undecided_offset() == 2
    assert log.psm.first_unstable_offset() == 0  # the aborted txn is not below the HW yet
    log.psm.on_high_watermark_updated(4)
    assert log.psm.first_unstable_offset() == 2
    (done2,) = log.marker(2, 0, CONTROL_TYPE_COMMIT, coordinator_epoch=3)  # 4
    assert not done2.is_aborted and done2.last_stable_offset == 5
    entry = log.psm.producers[1]
    assert entry.current_txn_first_offset is None and entry.coordinator_epoch == 3
    log.psm.on_high_watermark_updated(5)
    assert log.psm.first_unstable_offset() is None


def test_marker_without_open_txn_completes_nothing(log: Producer) -> None:
    log.append(producer_id=1, epoch=0, base_seq=0)
    assert log.marker(1, 0, CONTROL_TYPE_COMMIT) == []
    assert log.psm.map_end_offset == 2


def test_coordinator_fencing(log: Producer) -> None:
    log.append(producer_id=1, epoch=0, base_seq=0, transactional=True)
    log.marker(1, 0, CONTROL_TYPE_COMMIT, coordinator_epoch=5)
    log.append(producer_id=1, epoch=0, base_seq=1, transactional=True)
    stale = header(base_offset=log.next_offset, producer_id=1, epoch=0, control=CONTROL_TYPE_COMMIT,
                   coordinator_epoch=4)
    with pytest.raises(TransactionCoordinatorFencedError):
        log.psm.validate_and_stage([stale], COORDINATOR)
    staged = log.psm.validate_and_stage([stale], REPLICATION)
    assert len(staged.completed_txns) == 1


def test_old_epoch_marker_is_rejected(log: Producer) -> None:
    log.append(producer_id=1, epoch=2, base_seq=0, transactional=True)
    with pytest.raises(InvalidProducerEpochError):
        log.psm.validate_and_stage(
            [header(base_offset=1, producer_id=1, epoch=1, control=CONTROL_TYPE_ABORT)], COORDINATOR
        )


def test_marker_bumps_epoch_and_resets_sequences(log: Producer) -> None:
    log.append(producer_id=1, epoch=0, base_seq=0, count=3, transactional=True)
    log.marker(1, 1, CONTROL_TYPE_ABORT)  # the coordinator aborts with a bumped epoch
    entry = log.psm.producers[1]
    assert entry.producer_epoch == 1 and entry.is_empty
    with pytest.raises(OutOfOrderSequenceError):
        log.psm.validate_and_stage([header(base_offset=9, producer_id=1, epoch=1, base_seq=3)], CLIENT)
    log.append(producer_id=1, epoch=1, base_seq=0)


def test_empty_control_batch_is_ignored(log: Producer) -> None:
    log.append(producer_id=1, epoch=0, base_seq=0, transactional=True)
    raw = bytearray(build_batch(base_offset=1, producer_id=1, epoch=0, control=CONTROL_TYPE_COMMIT))
    empty = raw[:61]  # the cleaner may keep only the header of a fully cleaned control batch
    struct.pack_into(">i", empty, 8, 49)
    struct.pack_into(">i", empty, 57, 0)
    h = BatchHeader(empty)
    assert read_end_txn_marker(h) is None
    staged = log.psm.validate_and_stage([h], COORDINATOR)
    assert staged.completed_txns == []


def test_marker_is_read_from_the_control_record() -> None:
    h = header(base_offset=10, producer_id=1, epoch=0, control=CONTROL_TYPE_ABORT, coordinator_epoch=42,
               timestamp=T0 + 5)
    assert read_end_txn_marker(h) == EndTxnMarker(CONTROL_TYPE_ABORT, 42, T0 + 5)
    truncated = BatchHeader(build_batch(producer_id=1, epoch=0, control=CONTROL_TYPE_ABORT)[:-3] + bytes(3))
    object.__setattr__(truncated, "buf", truncated.buf[:-3])
    with pytest.raises(CorruptRecordError):
        read_end_txn_marker(truncated)


def test_decoded_marker_can_be_passed_in(log: Producer) -> None:
    log.append(producer_id=1, epoch=0, base_seq=0, transactional=True)
    h = header(base_offset=1, producer_id=1, epoch=0, control=CONTROL_TYPE_COMMIT)
    staged = log.psm.validate_and_stage([h], COORDINATOR, markers={1: EndTxnMarker(CONTROL_TYPE_ABORT, 9, T0)})
    assert staged.completed_txns[0].is_aborted


# -- expiration --------------------------------------------------------------------------------------------


def test_producer_expiration_with_manual_clock(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    psm = ProducerStateManager(tmp_path, producer_id_expiration_ms=1000)
    log = Producer(psm)
    log.append(producer_id=1, epoch=0, base_seq=0, timestamp=clock.wall_ms())
    log.append(producer_id=2, epoch=0, base_seq=0, transactional=True, timestamp=clock.wall_ms())
    clock.advance(999)
    assert psm.remove_expired_producers(clock.wall_ms()) == []
    clock.advance(1)
    assert psm.remove_expired_producers(clock.wall_ms()) == [1]  # at exactly the timeout
    # an open transaction pins its producer however old
    clock.advance(10_000_000)
    assert psm.remove_expired_producers(clock.wall_ms()) == []
    log.marker(2, 0, CONTROL_TYPE_COMMIT, timestamp=clock.wall_ms())
    psm.producer_id_expiration_ms = 50  # dynamic config
    clock.advance(49)
    assert psm.remove_expired_producers(clock.wall_ms()) == []
    clock.advance(1)
    assert psm.remove_expired_producers(clock.wall_ms()) == [2]
    assert psm.active_producers_count == 0
    with pytest.raises(ValueError):
        psm.producer_id_expiration_ms = 0


def test_expired_producers_is_pure() -> None:
    entries = [
        ProducerStateEntry(1, 0, last_timestamp=100),
        ProducerStateEntry(2, 0, last_timestamp=150),
        ProducerStateEntry(3, 0, last_timestamp=0, current_txn_first_offset=7),
    ]
    assert expired_producers(entries, now_ms=200, expiration_ms=100) == [1]
    assert expired_producers(entries, now_ms=250, expiration_ms=100) == [1, 2]


def test_expired_producer_comes_back_with_any_sequence(log: Producer) -> None:
    log.append(producer_id=1, epoch=0, base_seq=0, count=5, timestamp=T0)
    log.psm.producer_id_expiration_ms = 10
    log.psm.remove_expired_producers(T0 + 10)
    log.append(producer_id=1, epoch=0, base_seq=42, timestamp=T0 + 20)


def test_producers_view_is_read_only(psm: ProducerStateManager) -> None:
    with pytest.raises(TypeError):
        psm.producers[1] = ProducerStateEntry(1)  # type: ignore[index]
