"""``tierlog dump-log``: a real log written through UnifiedLog, dumped through the command's entry point.

The expected lines are written out in full, with the values the test put in (offsets, counts,
codecs, producer fields); only what depends on the compressor's output (sizes, positions, CRCs)
is taken from an independent parse of the file's headers.
"""

from __future__ import annotations

import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest

from tierlog.cli import dump_log
from tierlog.cli.dump import DumpOptions, DumpReport, dump_record_batches
from tierlog.cli.dump import core as dump
from tierlog.cli.main import main
from tierlog.config import LogConfig
from tierlog.records import (
    BatchHeader,
    CompressionType,
    ControlRecordType,
    EndTransactionMarker,
    Record,
    SimpleRecord,
    build_batch,
    build_end_txn_marker_batch,
    iter_headers,
)
from tierlog.storage import files
from tierlog.storage.index import OffsetIndex, TimeIndex
from tierlog.storage.loader import LoadOptions, load_log
from tierlog.storage.txn_index import AbortedTxn, TransactionIndex
from tierlog.testing import ManualClock

T0 = 1_700_000_000_000
PID = 4242


@dataclass(frozen=True)
class Written:
    dir: Path
    log0: Path  # the rolled segment: five batches
    log1: Path  # the segment rolled to, with one batch
    headers0: list[BatchHeader]
    snapshot: Path  # written by close() at the log end offset


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Written:
    """One log written once for the whole module; tests that damage files work on copies."""
    directory = tmp_path_factory.mktemp("dump") / "t-0"
    # index.interval.bytes=1: every batch after the first gets an index entry, so the indexes
    # have several entries to dump and verify.
    log = load_log(directory, LogConfig(index_interval_bytes=1), LoadOptions(), clock=ManualClock(T0))
    log.append_as_leader(build_batch([
        SimpleRecord(b"key-0", b"hello", headers=[("trace", b"abc"), ("empty", None)], timestamp=T0),
        SimpleRecord(None, b"no key", timestamp=T0 + 1),
    ]))
    log.append_as_leader(build_batch([SimpleRecord(b"g", b"gzipped " * 20, timestamp=T0 + 5)],
                                     compression=CompressionType.GZIP))
    log.append_as_leader(build_batch([SimpleRecord(b"s", b"snappy!", timestamp=T0 + 3)],
                                     compression=CompressionType.SNAPPY))
    log.append_as_leader(build_batch(
        [SimpleRecord(b"i0", b"first", timestamp=T0 + 6), SimpleRecord(b"i1", b"second", timestamp=T0 + 7)],
        compression=CompressionType.LZ4, producer_id=PID, producer_epoch=3, base_sequence=0,
    ))
    log.append_as_leader(build_batch([SimpleRecord(b"t", None, timestamp=T0 + 2)]))  # a tombstone
    log.roll()
    log.append_as_leader(build_batch([SimpleRecord(b"z", b"zstd", timestamp=T0 + 8)],
                                     compression=CompressionType.ZSTD))
    log.close()
    log0 = files.log_file(directory, 0)
    return Written(
        dir=directory,
        log0=log0,
        log1=files.log_file(directory, 7),
        headers0=list(iter_headers(log0.read_bytes())),
        snapshot=files.producer_snapshot_file(directory, 8),
    )


def run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, list[str], str]:
    rc = main(["dump-log", *(str(a) for a in args)])
    captured = capsys.readouterr()
    return rc, captured.out.splitlines(), captured.err


def copy_segment(written: Written, dest: Path, *suffixes: str) -> Path:
    """Copy segment 0's files with the given suffixes into ``dest``; return the directory."""
    dest.mkdir(exist_ok=True)
    for suffix in suffixes:
        name = files.filename_prefix_from_offset(0) + suffix
        shutil.copy(written.dir / name, dest / name)
    return dest


def batch_line(h: BatchHeader, *, base: int, last: int, count: int, codec: str, max_ts: int,
               producer: tuple[int, int, int, int] = (-1, -1, -1, -1), valid: bool = True) -> str:
    base_seq, last_seq, pid, epoch = producer
    return (
        f"baseOffset: {base} lastOffset: {last} count: {count} baseSequence: {base_seq} "
        f"lastSequence: {last_seq} producerId: {pid} producerEpoch: {epoch} partitionLeaderEpoch: 0 "
        f"isTransactional: false isControl: false deleteHorizonMs: none position: {h.position} "
        f"CreateTime: {max_ts} size: {h.size_bytes} magic: 2 compresscodec: {codec} crc: {h.crc} "
        f"isvalid: {str(valid).lower()}"
    )


def expected_batches(w: Written) -> list[str]:
    h = w.headers0
    return [
        batch_line(h[0], base=0, last=1, count=2, codec="none", max_ts=T0 + 1),
        batch_line(h[1], base=2, last=2, count=1, codec="gzip", max_ts=T0 + 5),
        batch_line(h[2], base=3, last=3, count=1, codec="snappy", max_ts=T0 + 3),
        batch_line(h[3], base=4, last=5, count=2, codec="lz4", max_ts=T0 + 7, producer=(0, 1, PID, 3)),
        batch_line(h[4], base=6, last=6, count=1, codec="none", max_ts=T0 + 2),
    ]


# ---------------------------------------------------------------------------------------------- .log


def test_log_dump_prints_every_batch_with_its_header_fields(capsys: pytest.CaptureFixture[str],
                                                            written: Written) -> None:
    rc, out, err = run(capsys, written.log0)
    assert rc == 0, err
    assert out == [f"Dumping {written.log0}", "Log starting offset: 0", *expected_batches(written)]
    # The positions are the running sum of the sizes, and each printed crc is a valid one.
    assert [h.position for h in written.headers0] == [0, *(
        sum(h.size_bytes for h in written.headers0[: i + 1]) for i in range(4))]
    assert all(h.crc == h.compute_crc() for h in written.headers0)


def test_print_data_log_shows_keys_payloads_headers_and_sequences(capsys: pytest.CaptureFixture[str],
                                                                  written: Written) -> None:
    rc, out, _ = run(capsys, "--print-data-log", written.log0, written.log1)
    assert rc == 0
    batches = expected_batches(written)
    h1 = next(iter_headers(written.log1.read_bytes()))
    assert out == [
        f"Dumping {written.log0}",
        "Log starting offset: 0",
        batches[0],
        f"| offset: 0 CreateTime: {T0} keySize: 5 valueSize: 5 sequence: -1 headerKeys: [trace,empty] "
        "key: key-0 payload: hello headers: [trace=abc,empty=null]",
        # A null key prints keySize -1 and no key.
        f"| offset: 1 CreateTime: {T0 + 1} keySize: -1 valueSize: 6 sequence: -1 headerKeys: [] payload: no key",
        batches[1],
        f"| offset: 2 CreateTime: {T0 + 5} keySize: 1 valueSize: 160 sequence: -1 headerKeys: [] "
        f"key: g payload: {'gzipped ' * 20}",
        batches[2],
        f"| offset: 3 CreateTime: {T0 + 3} keySize: 1 valueSize: 7 sequence: -1 headerKeys: [] key: s payload: snappy!",
        batches[3],
        # The idempotent batch: each record's sequence is baseSequence + its offset delta.
        f"| offset: 4 CreateTime: {T0 + 6} keySize: 2 valueSize: 5 sequence: 0 headerKeys: [] key: i0 payload: first",
        f"| offset: 5 CreateTime: {T0 + 7} keySize: 2 valueSize: 6 sequence: 1 headerKeys: [] key: i1 payload: second",
        batches[4],
        # A tombstone: valueSize -1 and no payload.
        f"| offset: 6 CreateTime: {T0 + 2} keySize: 1 valueSize: -1 sequence: -1 headerKeys: [] key: t",
        f"Dumping {written.log1}",
        "Log starting offset: 7",
        batch_line(h1, base=7, last=7, count=1, codec="zstd", max_ts=T0 + 8),
        f"| offset: 7 CreateTime: {T0 + 8} keySize: 1 valueSize: 4 sequence: -1 headerKeys: [] key: z payload: zstd",
    ]


def test_deep_iteration_prints_record_metadata_without_payloads(capsys: pytest.CaptureFixture[str],
                                                                written: Written) -> None:
    rc, out, _ = run(capsys, "--deep-iteration", written.log0)
    assert rc == 0
    records = [line for line in out if line.startswith("|")]
    assert len(records) == 7
    assert records[0] == f"| offset: 0 CreateTime: {T0} keySize: 5 valueSize: 5 sequence: -1 headerKeys: [trace,empty]"
    assert not any("payload:" in line or "key:" in line for line in records)


def test_payload_bytes_stay_on_one_line_and_invalid_utf8_is_replaced(capsys: pytest.CaptureFixture[str],
                                                                     tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(build_batch([SimpleRecord(b"a\nb", b"\xff\x00ok\r\n", timestamp=T0)]))
    rc, out, _ = run(capsys, "--print-data-log", path)
    assert rc == 0
    assert out[-1].endswith("key: a\\nb payload: \ufffd\\x00ok\\r\\n")


def test_control_batch_shows_the_end_transaction_marker(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # UnifiedLog.append_as_leader refuses control batches (client validation), so the segment is
    # written by hand: a transactional data batch, then its COMMIT marker.
    data = build_batch([SimpleRecord(b"k", b"v", timestamp=T0)], producer_id=9, producer_epoch=1,
                       base_sequence=0, is_transactional=True)
    marker = build_end_txn_marker_batch(EndTransactionMarker(ControlRecordType.COMMIT, 5), producer_id=9,
                                        producer_epoch=1, timestamp_ms=T0 + 1, base_offset=1)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data + marker)
    rc, out, _ = run(capsys, "--print-data-log", path)
    assert rc == 0
    assert out[2].startswith("baseOffset: 0 lastOffset: 0 count: 1 baseSequence: 0 lastSequence: 0 producerId: 9 "
                             "producerEpoch: 1 partitionLeaderEpoch: -1 isTransactional: true isControl: false ")
    assert out[4].startswith("baseOffset: 1 lastOffset: 1 count: 1 baseSequence: -1 lastSequence: -1 producerId: 9 "
                             "producerEpoch: 1 partitionLeaderEpoch: -1 isTransactional: true isControl: true ")
    assert out[5] == (f"| offset: 1 CreateTime: {T0 + 1} keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
                      "endTxnMarker: COMMIT coordinatorEpoch: 5")


def test_flipped_byte_marks_that_batch_invalid_and_skips_its_records(capsys: pytest.CaptureFixture[str],
                                                                     written: Written, tmp_path: Path) -> None:
    path = tmp_path / written.log0.name
    data = bytearray(written.log0.read_bytes())
    victim = written.headers0[1]  # the gzip batch
    data[victim.position + victim.size_bytes - 3] ^= 0x40
    path.write_bytes(data)
    rc, out, _ = run(capsys, "--print-data-log", path)
    assert rc == 0  # like Kafka, invalid data is reported, not an error
    batch_lines = [line for line in out if line.startswith("baseOffset:")]
    assert [line.endswith("isvalid: true") for line in batch_lines] == [True, False, True, True, True]
    # Header fields are still printed, with the stored crc.
    assert batch_lines[1] == batch_line(victim, base=2, last=2, count=1, codec="gzip", max_ts=T0 + 5, valid=False)
    after = out[out.index(batch_lines[1]) + 1]
    assert after == "| records not decoded: the batch fails its CRC check"
    assert not any("payload: gzipped" in line for line in out)
    # The batches after it are decoded as usual.
    assert any(line.endswith("key: s payload: snappy!") for line in out)
    assert run(capsys, "--strict", path)[0] == 1


def test_garbage_after_the_last_batch_is_reported_and_the_next_file_still_dumped(
        capsys: pytest.CaptureFixture[str], written: Written, tmp_path: Path) -> None:
    path = tmp_path / written.log0.name
    garbage = b"this is not a record batch at all"
    path.write_bytes(written.log0.read_bytes() + garbage)
    end = written.log0.stat().st_size
    rc, out, _ = run(capsys, path, written.log1)
    assert rc == 0
    assert out[2:7] == expected_batches(written)
    assert out[7] == f"Found {len(garbage)} invalid bytes at the end of {path.name}"
    assert out[8] == f"  at position {end}: unsupported batch magic {garbage[16]} (not a v2 record batch)"
    assert out[9:11] == [f"Dumping {written.log1}", "Log starting offset: 7"]
    assert run(capsys, "--strict", path, written.log1)[0] == 1


def test_torn_last_batch_and_zero_filled_tail(capsys: pytest.CaptureFixture[str], written: Written,
                                              tmp_path: Path) -> None:
    torn = tmp_path / "torn" / written.log0.name
    torn.parent.mkdir()
    last = written.headers0[-1]
    torn.write_bytes(written.log0.read_bytes()[:-5])
    rc, out, _ = run(capsys, torn)
    assert rc == 0
    assert len([line for line in out if line.startswith("baseOffset:")]) == 4
    assert f"Found {last.size_bytes - 5} invalid bytes at the end of {torn.name}" in out
    assert (f"  at position {last.position}: a batch declares {last.size_bytes} bytes but only "
            f"{last.size_bytes - 5} remain (a torn write)") in out

    preallocated = tmp_path / written.log0.name
    preallocated.write_bytes(written.log0.read_bytes() + bytes(4096))
    rc, out, _ = run(capsys, preallocated)
    assert f"Found 4096 invalid bytes at the end of {preallocated.name}" in out
    assert out[-1].endswith("(the rest of the file is zero bytes: preallocated space that was never trimmed)")


def test_max_bytes_limits_the_bytes_read(capsys: pytest.CaptureFixture[str], written: Written) -> None:
    h = written.headers0
    size = written.log0.stat().st_size
    # Exactly two batches fit.
    limit = h[2].position
    rc, out, _ = run(capsys, "--max-bytes", str(limit), written.log0)
    assert rc == 0
    assert out[2:] == [*expected_batches(written)[:2],
                       f"Stopped at --max-bytes {limit}: {size - limit} bytes from position {limit} not read"]
    # A limit inside the third batch stops before it, which is not invalid data.
    rc, out, _ = run(capsys, "--strict", "--max-bytes", str(limit + 10), written.log0)
    assert rc == 0
    assert out[-1] == (f"Stopped at --max-bytes {limit + 10}: the batch at position {limit} ends past it; "
                       f"{size - limit} bytes not read")


# ---------------------------------------------------------------------------------------------- indexes


def test_offset_index_dump_lists_the_entries_and_passes(capsys: pytest.CaptureFixture[str], written: Written) -> None:
    path = files.index_file(written.dir, 0)
    index = OffsetIndex(path, 0, writable=False)
    entries = [index.entry(i) for i in range(index.entries)]
    index.close()
    # Every batch but the first is indexed at its start (index.interval.bytes=1).
    assert entries == [(h.last_offset, h.position) for h in written.headers0[1:]]
    rc, out, _ = run(capsys, path)
    assert rc == 0
    assert out == [
        f"Dumping {path}",
        *(f"offset: {o} position: {p}" for o, p in entries),
        f"All 4 entries match {written.log0.name}",
        f"{path} passed sanity check.",
    ]


def test_verify_index_only_reports_swapped_positions(capsys: pytest.CaptureFixture[str], written: Written,
                                                     tmp_path: Path) -> None:
    directory = copy_segment(written, tmp_path / "t-0", ".log", ".index")
    path = files.index_file(directory, 0)
    rc, out, _ = run(capsys, "--verify-index-only", "--strict", path)
    assert rc == 0
    assert out == [f"Dumping {path}", f"All 4 entries match {written.log0.name}", f"{path} passed sanity check."]

    # Swap the positions of entries 0 and 1 (offsets 2 and 3).
    data = bytearray(path.read_bytes())
    first, second = data[4:8], data[12:16]
    data[4:8], data[12:16] = second, first
    path.write_bytes(data)
    h = written.headers0
    rc, out, _ = run(capsys, "--verify-index-only", path)
    assert rc == 0
    assert out == [
        f"Dumping {path}",
        f"Mismatches in {path} against {written.log0.name}:",
        f"  Index offset: 2, log offset: {h[2].last_offset}",
        f"  Index offset: 3, log offset: {h[1].last_offset}",
        f"{path} failed sanity check: corrupt offset index {path}: entry 1 has position {h[1].position}, "
        f"below entry 0's {h[2].position}",
    ]
    assert run(capsys, "--verify-index-only", "--strict", path)[0] == 1


def test_index_entry_off_a_batch_boundary(capsys: pytest.CaptureFixture[str], written: Written,
                                          tmp_path: Path) -> None:
    directory = copy_segment(written, tmp_path / "t-0", ".log", ".index")
    path = files.index_file(directory, 0)
    data = bytearray(path.read_bytes())
    struct.pack_into(">i", data, 4, written.headers0[1].position + 1)
    path.write_bytes(data)
    rc, out, _ = run(capsys, path)
    assert rc == 0
    assert f"  Index offset: 2, log offset: none (no batch starts at position {written.headers0[1].position + 1})" in out


def test_index_without_its_log(capsys: pytest.CaptureFixture[str], written: Written, tmp_path: Path) -> None:
    directory = copy_segment(written, tmp_path / "t-0", ".index")
    path = files.index_file(directory, 0)
    rc, out, err = run(capsys, path)
    assert rc == 0  # the entries were dumped; only the optional check could not run
    assert f"{path}: cannot check the entries against the log: {files.log_file(directory, 0)} does not exist" in out
    rc, out, err = run(capsys, "--verify-index-only", path)
    assert rc == 1  # the check was the whole job
    assert "does not exist" in err


def test_index_sanity_check_only(capsys: pytest.CaptureFixture[str], written: Written, tmp_path: Path) -> None:
    directory = copy_segment(written, tmp_path / "t-0", ".index")
    path = files.index_file(directory, 0)
    with path.open("ab") as f:
        f.write(b"\x00\x00\x00")  # not a whole entry
    rc, out, _ = run(capsys, "--index-sanity-check", path)
    assert rc == 0
    assert out == [f"Dumping {path}", f"{path} failed sanity check: offset index file {path} is corrupt: "
                                      f"found {4 * 8 + 3} bytes, which is not a multiple of 8"]


def test_time_index_dump_and_verification(capsys: pytest.CaptureFixture[str], written: Written,
                                          tmp_path: Path) -> None:
    path = files.time_index_file(written.dir, 0)
    index = TimeIndex(path, 0, writable=False)
    entries = [index.entry(i) for i in range(index.entries)]
    index.close()
    # The timestamp rises at offsets 2 (T0+5) and 5 (T0+7); the other batches stay below the maximum.
    assert entries == [(T0 + 5, 2), (T0 + 7, 5)]
    rc, out, _ = run(capsys, path)
    assert rc == 0
    assert out == [f"Dumping {path}", f"timestamp: {T0 + 5} offset: 2", f"timestamp: {T0 + 7} offset: 5",
                   f"All 2 entries match {written.log0.name}", f"{path} passed sanity check."]

    directory = copy_segment(written, tmp_path / "t-0", ".log", ".timeindex")
    bad = files.time_index_file(directory, 0)
    data = bytearray(bad.read_bytes())
    struct.pack_into(">q", data, 0, T0 + 6)  # wrong timestamp for offset 2
    struct.pack_into(">i", data, 20, 4)  # offset 4 is not a batch's last offset
    bad.write_bytes(data)
    rc, out, _ = run(capsys, "--verify-index-only", bad)
    assert rc == 0
    assert out == [
        f"Dumping {bad}",
        f"Found timestamp mismatch in {bad}:",
        f"  Index timestamp: {T0 + 6}, log timestamp: {T0 + 5}",
        f"The following indexed offsets are not found in {written.log0.name}:",
        "  Indexed offset: 4, found log offset: 5",
        f"{bad} passed sanity check.",
    ]
    assert run(capsys, "--verify-index-only", "--strict", bad)[0] == 1


# ---------------------------------------------------------------------------------------------- others


def test_producer_snapshot_dump(capsys: pytest.CaptureFixture[str], written: Written) -> None:
    rc, out, _ = run(capsys, written.snapshot)
    assert rc == 0
    assert out == [
        f"Dumping {written.snapshot}",
        "Producer snapshot end offset: 8 producers: 1",
        f"producerId: {PID} producerEpoch: 3 coordinatorEpoch: -1 currentTxnFirstOffset: none "
        f"lastTimestamp: {T0 + 7} firstSequence: 0 lastSequence: 1 lastOffset: 5 offsetDelta: 1",
    ]


def test_corrupt_producer_snapshot_is_a_finding(capsys: pytest.CaptureFixture[str], written: Written,
                                                tmp_path: Path) -> None:
    path = tmp_path / written.snapshot.name
    data = bytearray(written.snapshot.read_bytes())
    data[-1] ^= 1
    path.write_bytes(data)
    rc, out, _ = run(capsys, path)
    assert rc == 0
    assert out[1].startswith(f"{path} is not a valid producer snapshot: ") and "crc mismatch" in out[1]
    assert run(capsys, "--strict", path)[0] == 1


def test_txn_index_dump(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = files.txn_index_file(tmp_path, 100)
    index = TransactionIndex(path, 100)
    index.append(AbortedTxn(producer_id=7, first_offset=100, last_offset=110, last_stable_offset=100))
    index.append(AbortedTxn(producer_id=8, first_offset=105, last_offset=120, last_stable_offset=111))
    index.close()
    rc, out, _ = run(capsys, path)
    assert rc == 0
    assert out == [
        f"Dumping {path}",
        "version: 0 producerId: 7 firstOffset: 100 lastOffset: 110 lastStableOffset: 100",
        "version: 0 producerId: 8 firstOffset: 105 lastOffset: 120 lastStableOffset: 111",
        f"{path} passed sanity check.",
    ]
    with path.open("ab") as f:
        f.write(b"\x00" * 10)  # a torn entry
    rc, out, _ = run(capsys, "--strict", path)
    assert rc == 1
    assert f"Found 10 invalid bytes at the end of {path.name}" in out


def test_unknown_and_missing_files_fail_but_the_others_are_dumped(capsys: pytest.CaptureFixture[str],
                                                                  written: Written, tmp_path: Path) -> None:
    odd = tmp_path / "notes.txt"
    odd.write_text("hello")
    missing = tmp_path / "00000000000000000099.log"
    rc, out, err = run(capsys, odd, written.log1, missing)
    assert rc == 1
    assert f"{odd}: unknown file type '.txt'; dump-log reads .index, .log, .snapshot, .timeindex, .txnindex files" in err
    assert f"{missing}: no such file" in err
    assert out[:2] == [f"Dumping {written.log1}", "Log starting offset: 7"]


def test_marked_files_dump_by_their_underlying_type(capsys: pytest.CaptureFixture[str], written: Written,
                                                    tmp_path: Path) -> None:
    deleted = tmp_path / (written.log1.name + files.DELETED_SUFFIX)
    shutil.copy(written.log1, deleted)
    rc, out, _ = run(capsys, f"--files={deleted}")
    assert rc == 0
    assert out[:2] == [f"Dumping {deleted}", "Log starting offset: 7"]
    assert out[2].startswith("baseOffset: 7 lastOffset: 7 count: 1 ")


def test_a_registered_dumper_handles_its_suffix(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook the metadata snapshot (.checkpoint) dumper will use: register through the cli's
    EXTRA_DUMPERS and reuse dump_record_batches with its own preamble and record renderer."""

    def render_hex(header: BatchHeader, record: Record) -> str:
        return f" value: {(record.value or b'').hex()}"

    def dump_checkpoint(path: Path, options: DumpOptions, report: DumpReport) -> None:
        dump_record_batches(path, options, report, preamble="Snapshot end offset: 10, epoch: 1",
                            render_data=render_hex)

    # setitem on the registry first, so teardown removes the registration again.
    monkeypatch.setitem(dump._DUMPERS, ".checkpoint", dump_checkpoint)
    monkeypatch.setattr(dump_log, "EXTRA_DUMPERS", ((".checkpoint", dump_checkpoint),))
    path = tmp_path / "00000000000000000010-0000000001.checkpoint"
    path.write_bytes(build_batch([SimpleRecord(None, b"\x01\x02", timestamp=T0)]))
    rc, out, _ = run(capsys, "--print-data-log", path)
    assert rc == 0
    assert out[:2] == [f"Dumping {path}", "Snapshot end offset: 10, epoch: 1"]
    assert out[3] == f"| offset: 0 CreateTime: {T0} keySize: -1 valueSize: 2 sequence: -1 headerKeys: [] value: 0102"
