"""read_committed over a data dir that holds an aborted, a committed and an open transaction,
whose batches come from independent encoders: kafka-python's record builder for the transactional
data batches and hand-built bytes (Kafka's layout, KAFKA-FACTS §1.4) for the COMMIT/ABORT control
batches. They are appended through the broker's append path (as a coordinator would write markers),
the broker is stopped, and ``tierlog serve`` on the same directory serves them to confluent-kafka
consumers: read_committed gets the committed and non-transactional records only, read_uncommitted
gets every data record, and the ``.txnindex`` file holds Kafka's 34-byte entry for the abort."""

from __future__ import annotations

import asyncio
import struct
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.util import calc_crc32c

from tests.helpers.broker import TEST_OVERRIDES, BrokerProcess
from tierlog.config import BrokerConfig
from tierlog.records import ControlRecordType, EndTransactionMarker, build_end_txn_marker_batch
from tierlog.server import Broker
from tierlog.storage.log_manager import LogManagerSettings
from tierlog.storage.producer_state import AppendOrigin

TOPIC = "txn-golden"
ABORTED_PID, COMMITTED_PID = 1000, 2000


def data_batch(pid: int, seq: int, values: list[bytes], ts: int) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True, producer_id=pid,
                                        producer_epoch=0, base_sequence=seq, batch_size=1 << 20)
    for i, v in enumerate(values):
        builder.append(i, timestamp=ts, key=None, value=v, headers=[])
    return bytes(builder.build())


def zigzag(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def marker_batch(pid: int, commit: bool, coordinator_epoch: int, ts: int) -> bytes:
    """A one-record control batch by hand: key (version 0, type 0=ABORT/1=COMMIT), value (version 0,
    coordinator epoch); attributes 0x30 (transactional + control), no sequence."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, coordinator_epoch)
    body = b"\x00" + zigzag(0) + zigzag(0) + zigzag(len(key)) + key + zigzag(len(value)) + value + zigzag(0)
    record = zigzag(len(body)) + body
    after_crc = struct.pack(">hiqqqhii", 0x30, 0, ts, ts, pid, 0, -1, 1) + record
    crc = calc_crc32c(after_crc)
    head = struct.pack(">qiibI", 0, 4 + 1 + 4 + len(after_crc), -1, 2, crc)
    return head + after_crc


def test_marker_batch_matches_golden_bytes() -> None:
    # Kafka's MemoryRecords.withEndTransactionMarker(0, ts=1, leaderEpoch=-1, pid=5, epoch=0,
    # EndTransactionMarker(COMMIT, 7)) -- the record part: length 16, key 00000001, value 000000000007.
    batch = marker_batch(5, True, 7, 1)
    assert batch[61:] == bytes.fromhex("20 00 00 00 08 00000001 0c 000000000007 00".replace(" ", ""))
    assert struct.unpack_from(">i", batch, 8)[0] == len(batch) - 12


def test_tierlogs_marker_batches_are_the_independent_encoders_bytes() -> None:
    # What the transaction coordinator writes, byte for byte against the hand-built batch above:
    # header, attributes, CRC and the record, for COMMIT and ABORT.
    for commit, pid, coordinator_epoch, ts in ((True, 5, 7, 1), (False, 123456789, 0, 1700000000123)):
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        ours = build_end_txn_marker_batch(EndTransactionMarker(kind, coordinator_epoch), producer_id=pid,
                                          producer_epoch=0, timestamp_ms=ts)
        assert ours == marker_batch(pid, commit, coordinator_epoch, ts), (ours.hex(), commit)


def write_data_dir(data_dir: Path) -> None:
    async def run() -> None:
        cfg = BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(data_dir), **TEST_OVERRIDES})
        broker = Broker(cfg, LogManagerSettings())
        await broker.start()
        ctx = broker.ctx
        assert ctx is not None
        await ctx.io.run(ctx.controller.create_topic, TOPIC, 1, 1, {})
        ts = int(time.time() * 1000)
        steps = [
            (data_batch(ABORTED_PID, 0, [b"a0", b"a1"], ts), AppendOrigin.CLIENT),      # 0-1
            (data_batch(COMMITTED_PID, 0, [b"c0", b"c1"], ts), AppendOrigin.CLIENT),    # 2-3
            (marker_batch(ABORTED_PID, False, 0, ts), AppendOrigin.COORDINATOR),         # 4
            (marker_batch(COMMITTED_PID, True, 0, ts), AppendOrigin.COORDINATOR),        # 5
            (non_txn_batch([b"p0"], ts), AppendOrigin.CLIENT),                          # 6
            (data_batch(ABORTED_PID, 2, [b"open0"], ts), AppendOrigin.CLIENT),           # 7 (left open)
        ]
        for records, origin in steps:
            [result] = await ctx.io.run(ctx.partitions.append_blocking, [(TOPIC, 0, records)], internal=True,
                                        origin=origin)
            assert result.error_code == 0, result.error_message
        ulog = ctx.log_manager.get_log(TOPIC, 0)
        assert ulog is not None
        # With durable acknowledgements (the default) the high watermark moves once the records are
        # fsynced: a flush does that now rather than the group commit some time later.
        await ctx.io.run(ulog.flush)
        assert (ulog.high_watermark, ulog.last_stable_offset) == (8, 7)
        await broker.stop()

    asyncio.run(run())


def non_txn_batch(values: list[bytes], ts: int) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    for i, v in enumerate(values):
        builder.append(i, timestamp=ts, key=None, value=v, headers=[])
    return bytes(builder.build())


def consume_all(bootstrap: str, isolation: str, end: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{isolation}", "isolation.level": isolation,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
            position = consumer.position([TopicPartition(TOPIC, 0)])[0].offset
            if position >= end:
                break
        return got
    finally:
        consumer.close()


def test_read_committed_skips_aborted_records_of_a_golden_data_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    write_data_dir(data_dir)
    [txn_index] = list((data_dir / f"{TOPIC}-0").glob("*.txnindex"))
    # Kafka's AbortedTxn entry: version 0, producer id, first offset 0, last offset (the marker) 4,
    # and the LSO when it was written: 2, where the other producer's transaction still stood open.
    assert txn_index.read_bytes() == struct.pack(">hqqqq", 0, ABORTED_PID, 0, 4, 2)
    broker = BrokerProcess(data_dir).start()
    try:
        # read_committed stops at the LSO (7: the open transaction) and skips the aborted records.
        assert consume_all(broker.bootstrap, "read_committed", 7) == [b"c0", b"c1", b"p0"]
        assert consume_all(broker.bootstrap, "read_uncommitted", 8) == [b"a0", b"a1", b"c0", b"c1", b"p0", b"open0"]
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "wm", "isolation.level": "read_committed"})
        try:
            _low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
            assert high == 7  # ListOffsets LATEST for read_committed is the LSO
        finally:
            consumer.close()
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "wm2",
                             "isolation.level": "read_uncommitted"})
        try:
            _low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
            assert high == 8
        finally:
            consumer.close()
    finally:
        assert broker.stop() == 0, broker.stderr_tail()
