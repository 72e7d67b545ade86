"""The aborted-transaction index (KAFKA-FACTS §2.5; cases after TransactionIndexTest)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tierlog.errors import CorruptIndexError
from tierlog.storage.txn_index import ABORTED_TXN_SIZE, AbortedTxn, TransactionIndex


def index(tmp_path: Path, start: int = 0) -> TransactionIndex:
    return TransactionIndex(tmp_path / "00000000000000000000.txnindex", start)


def test_aborted_txn_serde_golden_bytes() -> None:
    txn = AbortedTxn(producer_id=983493, first_offset=1, last_offset=3, last_stable_offset=4)
    data = txn.to_bytes()
    assert len(data) == ABORTED_TXN_SIZE == 34
    assert data == struct.pack(">hqqqq", 0, 983493, 1, 3, 4)
    assert data[:2] == b"\x00\x00"
    assert AbortedTxn.from_bytes(data) == txn
    assert AbortedTxn.from_bytes(b"junk" + data, 4) == txn


def test_aborted_txn_version_comes_from_first_byte() -> None:
    data = AbortedTxn(1, 2, 3, 4).to_bytes()
    with pytest.raises(ValueError, match="version 1"):
        AbortedTxn.from_bytes(b"\x01" + data[1:])
    # Kafka reads only the first byte of the int16 version, so 0x0001 still reads as version 0.
    assert AbortedTxn.from_bytes(b"\x00\x01" + data[2:]) == AbortedTxn(1, 2, 3, 4)
    with pytest.raises(ValueError):
        AbortedTxn.from_bytes(data[:33])


def test_file_is_created_lazily(tmp_path: Path) -> None:
    idx = index(tmp_path)
    idx.reset()
    idx.truncate_to(0)
    idx.flush()
    idx.sanity_check()
    assert idx.all_entries() == [] and idx.is_empty()
    assert idx.collect_aborted_txns(0, 100) == ([], False)
    assert not idx.path.exists()
    idx.append(AbortedTxn(0, 0, 10, 11))
    assert idx.path.stat().st_size == 34
    idx.close()


def test_position_set_correctly_when_opened(tmp_path: Path) -> None:
    txns = [AbortedTxn(0, 0, 10, 11), AbortedTxn(1, 5, 15, 13), AbortedTxn(2, 18, 35, 25)]
    idx = index(tmp_path)
    for t in txns:
        idx.append(t)
    idx.close()
    reopened = index(tmp_path)
    extra = AbortedTxn(3, 32, 50, 40)
    reopened.append(extra)
    assert reopened.all_entries() == [*txns, extra]


def test_last_offset_must_increase(tmp_path: Path) -> None:
    idx = index(tmp_path)
    idx.append(AbortedTxn(1, 5, 15, 13))
    with pytest.raises(ValueError, match="must increase"):
        idx.append(AbortedTxn(0, 0, 15, 11))
    with pytest.raises(ValueError):
        idx.append(AbortedTxn(0, 0, 10, 11))
    idx.close()
    # The rule holds across a reopen: the file's last entry counts.
    reopened = index(tmp_path)
    with pytest.raises(ValueError):
        reopened.append(AbortedTxn(0, 0, 15, 11))
    reopened.append(AbortedTxn(0, 16, 16, 16))


COLLECT = [AbortedTxn(0, 0, 10, 11), AbortedTxn(1, 5, 15, 13), AbortedTxn(2, 18, 35, 25), AbortedTxn(3, 32, 50, 40)]


@pytest.mark.parametrize(
    ("fetch", "upper", "expected", "complete"),
    [
        (0, 100, COLLECT, False),
        (0, 32, COLLECT[:3], True),
        (0, 35, COLLECT, True),
        (10, 35, COLLECT, True),
        (11, 35, COLLECT[1:], True),
        (20, 41, COLLECT[2:], False),
        (51, 100, [], False),
    ],
)
def test_collect_aborted_transactions(
    tmp_path: Path, fetch: int, upper: int, expected: list[AbortedTxn], complete: bool
) -> None:
    idx = index(tmp_path)
    for t in COLLECT:
        idx.append(t)
    result = idx.collect_aborted_txns(fetch, upper)
    assert result.aborted_transactions == expected
    assert result.is_complete is complete


def test_truncate(tmp_path: Path) -> None:
    txns = [AbortedTxn(0, 0, 10, 2), AbortedTxn(1, 5, 15, 16), AbortedTxn(2, 18, 35, 25), AbortedTxn(3, 32, 50, 40)]
    idx = index(tmp_path)
    for t in txns:
        idx.append(t)
    idx.truncate_to(51)
    assert idx.collect_aborted_txns(0, 100).aborted_transactions == txns
    idx.truncate_to(50)
    assert idx.collect_aborted_txns(0, 100).aborted_transactions == txns[:3]
    assert idx.path.stat().st_size == 3 * 34
    # The last offset rule now refers to the surviving last entry.
    with pytest.raises(ValueError):
        idx.append(AbortedTxn(9, 30, 35, 35))
    idx.append(AbortedTxn(9, 36, 40, 40))
    idx.reset()
    assert idx.collect_aborted_txns(0, 100).aborted_transactions == []
    assert idx.path.stat().st_size == 0
    idx.append(AbortedTxn(0, 0, 1, 1))  # anything goes after a reset
    assert idx.all_entries() == [AbortedTxn(0, 0, 1, 1)]


def test_sanity_check(tmp_path: Path) -> None:
    idx = index(tmp_path)
    for t in (AbortedTxn(0, 0, 10, 11), AbortedTxn(1, 5, 15, 13)):
        idx.append(t)
    idx.close()
    index(tmp_path, start=0).sanity_check()
    index(tmp_path, start=10).sanity_check()
    # Reopened as if the segment started at 100: the entries end before it.
    with pytest.raises(CorruptIndexError, match="less than start offset 100") as e:
        index(tmp_path, start=100).sanity_check()
    assert str(idx.path) in str(e.value)


def test_sanity_check_rejects_torn_file_and_unknown_version(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    good = AbortedTxn(0, 0, 10, 11).to_bytes()
    path.write_bytes(good + b"\x00" * 10)
    idx = TransactionIndex(path, 0)
    assert idx.all_entries() == [AbortedTxn(0, 0, 10, 11)], "a partial entry is ignored"
    with pytest.raises(CorruptIndexError, match="not a multiple of 34"):
        idx.sanity_check()
    # Appending anyway drops the torn bytes so entries stay aligned.
    idx.append(AbortedTxn(1, 11, 12, 12))
    assert path.stat().st_size == 68
    assert idx.all_entries()[-1] == AbortedTxn(1, 11, 12, 12)
    idx.close()
    path.write_bytes(b"\x07" + good[1:])
    with pytest.raises(CorruptIndexError, match="version 7"):
        TransactionIndex(path, 0).sanity_check()


def test_rename_and_delete(tmp_path: Path) -> None:
    idx = index(tmp_path)
    target = tmp_path / "00000000000000000000.txnindex.deleted"
    idx.rename_to(target)  # never created: tolerated
    assert idx.path == target and not target.exists()
    idx.append(AbortedTxn(0, 0, 10, 11))
    assert target.exists()
    back = tmp_path / "00000000000000000000.txnindex"
    idx.rename_to(back)
    idx.append(AbortedTxn(0, 11, 12, 12))  # the open descriptor follows the file
    assert TransactionIndex(back, 0).all_entries() == [AbortedTxn(0, 0, 10, 11), AbortedTxn(0, 11, 12, 12)]
    assert idx.delete_if_exists()
    assert not back.exists() and not idx.delete_if_exists()


def test_a_missing_file_is_not_looked_for_again_until_this_index_creates_or_moves_it(tmp_path: Path) -> None:
    """A read_committed fetch reads the index of a segment that has none: once found missing it is
    not opened again, yet an entry appended through the index is found at once, and after a
    rename (the cleaner's swap) or a deletion the file is looked for again."""
    idx = index(tmp_path)
    assert idx.collect_aborted_txns(0, 100).aborted_transactions == []
    assert not idx.path.exists()
    idx.append(AbortedTxn(7, 1, 5, 6))
    assert idx.collect_aborted_txns(0, 100).aborted_transactions == [AbortedTxn(7, 1, 5, 6)]
    idx.close()
    assert idx.collect_aborted_txns(0, 100).aborted_transactions == [AbortedTxn(7, 1, 5, 6)]

    (tmp_path / "sub").mkdir()
    moved = index(tmp_path / "sub")
    assert moved.collect_aborted_txns(0, 100).aborted_transactions == []  # missing: remembered
    # A file now at the path it moves to (what a swap renames into place) is read after the move.
    target = tmp_path / "sub" / "00000000000000000100.txnindex"
    target.write_bytes(AbortedTxn(8, 2, 3, 4).to_bytes())
    moved.rename_to(target)
    assert moved.collect_aborted_txns(0, 100).aborted_transactions == [AbortedTxn(8, 2, 3, 4)]
    assert moved.delete_if_exists()
    target.write_bytes(AbortedTxn(9, 2, 3, 4).to_bytes())
    assert moved.collect_aborted_txns(0, 100).aborted_transactions == [AbortedTxn(9, 2, 3, 4)]
