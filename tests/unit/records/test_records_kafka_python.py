"""Interoperability with an independent implementation: kafka-python's v2 record batch code.

kafka-python needs python-snappy, lz4 and zstandard for those codecs; a codec whose library is
missing is skipped with a message saying which package to install.
"""

from __future__ import annotations

import importlib.util
import random

import pytest

from tierlog.records import (
    BatchHeader,
    ControlRecordType,
    EndTransactionMarker,
    SimpleRecord,
    build_batch,
    build_end_txn_marker_batch,
    decode_batch,
    iter_records,
    validate_batch,
)

kafka_records = pytest.importorskip("kafka.record.default_records")
kafka_memory = pytest.importorskip("kafka.record.memory_records")

CODEC_MODULES = {0: None, 1: None, 2: "snappy", 3: "lz4", 4: "zstandard"}
CODEC_PACKAGES = {2: "python-snappy", 3: "lz4", 4: "zstandard"}


def _need_codec(codec: int) -> None:
    module = CODEC_MODULES[codec]
    if module is not None and importlib.util.find_spec(module) is None:
        pytest.skip(f"kafka-python needs the {CODEC_PACKAGES[codec]} package for codec {codec}")


def _records(n: int) -> list[SimpleRecord]:
    rng = random.Random(n)
    out = []
    for i in range(n):
        key = None if i % 5 == 2 else b"user-%d" % (i % 13)
        value = None if i % 9 == 4 else b"payload %d " % i * rng.randint(1, 60)
        headers = [(f"h{j}", None if j == 1 else b"v%d" % j) for j in range(i % 3)]
        out.append(SimpleRecord(key, value, headers=headers, timestamp=1_700_000_000_000 + i * 3 - (i % 4) * 7))
    return out


def _kafka_python_batch(records: list[SimpleRecord], codec: int, **producer: int) -> bytes:
    builder = kafka_records.DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=producer.get("producer_id", -1),
        producer_epoch=producer.get("producer_epoch", -1),
        base_sequence=producer.get("base_sequence", -1),
        batch_size=10**8,
    )
    for offset, r in enumerate(records):
        assert builder.append(offset, r.timestamp, r.key, r.value, list(r.headers)) is not None
    return bytes(builder.build())


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("n", [1, 50, 3000])
def test_we_read_kafka_python_batches(codec: int, n: int) -> None:
    _need_codec(codec)
    records = _records(n)
    batch = _kafka_python_batch(records, codec, producer_id=99, producer_epoch=2, base_sequence=1000)
    header = BatchHeader(batch)
    # kafka-python sends uncompressed when compression does not help; our data compresses well
    assert header.compression == codec
    header.ensure_valid()
    stats = validate_batch(header)
    assert stats.record_count == n
    assert stats.max_timestamp == max(r.timestamp for r in records if r.timestamp is not None)
    decoded = decode_batch(header)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded] == [
        (i, r.timestamp, r.key, r.value, tuple(r.headers)) for i, r in enumerate(records)
    ]
    assert header.last_sequence == 1000 + n - 1


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("n", [1, 50, 3000])
def test_kafka_python_reads_our_batches(codec: int, n: int) -> None:
    _need_codec(codec)
    records = _records(n)
    batch = build_batch(records, compression=codec, base_offset=500, producer_id=7, producer_epoch=1,
                        base_sequence=3, partition_leader_epoch=4)
    theirs = kafka_records.DefaultRecordBatch(batch)
    assert theirs.validate_crc()
    assert (theirs.base_offset, theirs.leader_epoch, theirs.producer_id, theirs.producer_epoch) == (500, 4, 7, 1)
    assert (theirs.base_sequence, theirs.last_offset_delta, theirs.compression_type) == (3, n - 1, codec)
    assert theirs.max_timestamp == max(r.timestamp for r in records if r.timestamp is not None)
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs]
    assert got == [(500 + i, r.timestamp, r.key, r.value, list(r.headers)) for i, r in enumerate(records)]


def test_uncompressed_batches_are_byte_identical_to_kafka_pythons() -> None:
    # kafka-python writes partitionLeaderEpoch 0; with that, an uncompressed batch has one encoding.
    records = _records(200)
    theirs = _kafka_python_batch(records, 0, producer_id=5, producer_epoch=0, base_sequence=17)
    ours = build_batch(records, producer_id=5, producer_epoch=0, base_sequence=17, partition_leader_epoch=0)
    assert ours == theirs


def test_kafka_python_iterates_several_of_our_batches_and_reads_control_markers() -> None:
    data = (
        build_batch(_records(3), base_offset=0)
        + build_batch(_records(2), base_offset=3, compression=1)
        + build_end_txn_marker_batch(EndTransactionMarker(ControlRecordType.COMMIT, 9), producer_id=1,
                                     producer_epoch=0, timestamp_ms=1_700_000_000_000, base_offset=5)
    )
    memory = kafka_memory.MemoryRecords(data)
    seen = []
    while (batch := memory.next_batch()) is not None:
        for record in batch:
            seen.append((record.offset, batch.is_control_batch))
            if batch.is_control_batch:
                assert record.commit and not record.abort
    assert seen == [(0, False), (1, False), (2, False), (3, False), (4, False), (5, True)]
    assert [r.offset for r in iter_records(data)] == [0, 1, 2, 3, 4, 5]
