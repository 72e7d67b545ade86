"""Which aborted transactions a read_committed read gets: Kafka's collectAbortedTransactions walks
from the segment of the fetch offset on, because the ABORT of a transaction that began in the read
can land in a later segment, and stops once an entry's last stable offset passes the bound."""

from __future__ import annotations

from tests.helpers.storage import OpenLog, batch
from tierlog.config import LogConfig
from tierlog.records import (
    ControlRecordType,
    EndTransactionMarker,
    SimpleRecord,
    build_batch,
    build_end_txn_marker_batch,
)
from tierlog.storage.producer_state import AppendOrigin


def txn_batch(pid: int, seq: int, n: int = 1) -> bytes:
    return build_batch([SimpleRecord(b"k", b"v" * 50, timestamp=1) for _ in range(n)], producer_id=pid,
                       producer_epoch=0, base_sequence=seq, is_transactional=True)


def marker(pid: int, commit: bool) -> bytes:
    kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    return build_end_txn_marker_batch(EndTransactionMarker(kind, 0), producer_id=pid, producer_epoch=0, timestamp_ms=1)


def test_abort_in_a_later_segment_is_found_for_a_read_of_the_first(open_log: OpenLog) -> None:
    log = open_log(LogConfig(segment_bytes=400))
    log.append_as_leader(txn_batch(7, 0))  # offset 0
    for _ in range(6):
        log.append_as_leader(batch(1, value_size=100))  # rolls segments meanwhile
    log.append_as_leader(marker(7, commit=False), origin=AppendOrigin.COORDINATOR)
    assert len(log.segments.base_offsets) > 2
    info = log.read(0, 100, max_offset=log.last_stable_offset)
    upper = log.fetch_upper_bound_offset(info)
    assert upper <= 2  # the first batch only: the bound stops near it
    found = log.collect_aborted_transactions(0, upper)
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in found] == [(7, 0, 7)]
    # A read after the aborted transaction's marker gets nothing.
    assert log.collect_aborted_transactions(8, log.log_end_offset) == []


def test_committed_transactions_and_reads_past_an_abort_get_no_entries(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_leader(txn_batch(7, 0, 2))  # 0-1
    log.append_as_leader(marker(7, commit=True), origin=AppendOrigin.COORDINATOR)  # 2
    log.append_as_leader(txn_batch(8, 0))  # 3
    log.append_as_leader(marker(8, commit=False), origin=AppendOrigin.COORDINATOR)  # 4
    assert [t.producer_id for t in log.collect_aborted_transactions(0, 5)] == [8]
    assert log.collect_aborted_transactions(0, 3) == []  # the bound ends before transaction 8 began
    assert log.collect_aborted_transactions(5, 6) == []


def test_recovery_after_a_crash_rebuilds_the_transaction_index(open_log: OpenLog) -> None:
    log = open_log(LogConfig(segment_bytes=400))
    log.append_as_leader(txn_batch(7, 0))  # 0
    log.append_as_leader(txn_batch(9, 0))  # 1
    for _ in range(4):
        log.append_as_leader(batch(1, value_size=100))
    log.append_as_leader(marker(7, commit=False), origin=AppendOrigin.COORDINATOR)
    log.append_as_leader(batch(1, value_size=100))
    log.append_as_leader(marker(9, commit=False), origin=AppendOrigin.COORDINATOR)
    log.append_as_leader(txn_batch(7, 1))  # open again
    before = [e for s in log.segments for e in s.txn_index.all_entries()]
    assert len(before) == 2
    log.flush()
    # A crash: no clean shutdown, recovery from offset 0 rebuilds every index of every segment.
    again = open_log(LogConfig(segment_bytes=400), clean=False, recovery_point=0)
    after = [e for s in again.segments for e in s.txn_index.all_entries()]
    assert after == before
    assert again.last_stable_offset == log.last_stable_offset
