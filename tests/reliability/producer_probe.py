"""The idempotent producer's state checked directly through power cuts.

librdkafka hides what the broker answers a retried batch; this probe speaks the protocol itself
(one producer id, batches of ``RECORDS`` records whose values name the producer id and sequence) on a
topic of its own with 16 KiB segments, so that it rolls -- and the broker writes a producer
snapshot (``.snapshot``, fsynced later, not at the roll) -- on every start. Around each cut:

* **before the kill** (``before_kill``) it notes the ``.snapshot`` files there are, and on two cuts
  of three sends one more batch without waiting for the answer -- the SIGKILL follows at once, or
  20 ms later -- so the cut finds it not yet read, appended but not synced, or synced;
* **after the cut, before the restart** (``after_cut``) it counts the snapshot files the cut took
  (written at a roll, not yet fsynced) and reads every one left as the disk now has it: every
  readable entry of the probe's producer must name a batch it sent, at the offset it was
  acknowledged at;
* **after the restart** (``after_start``) the partition must hold every acknowledged batch once at
  its offset, in sequence order; the batch in flight at the cut is retried with the same producer
  id, epoch and sequence and must be stored exactly once: answered with the offset it already has
  when the cut kept it, appended when the cut took it; without one in flight, the last acknowledged
  batch is sent again and must be answered as a duplicate with its original offset; then a new
  batch must be accepted as the next in sequence. A broker whose producer state came back wrong
  (a lost or stale snapshot read as current, a rebuild that missed a batch) fails one of these
  with OUT_OF_ORDER_SEQUENCE_NUMBER, a new offset for a duplicate, or a record twice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers.raw_client import RawClient
from tests.reliability.harness import ChaosBroker, create_topic, read_partition
from tierlog.errors import CorruptSnapshotError
from tierlog.protocol import ApiKey
from tierlog.records import SimpleRecord, build_batch
from tierlog.storage.producer_snapshot import list_snapshot_files, read_snapshot_entries

TOPIC = "producer-probe"
RECORDS = 4
BATCHES_PER_START = 8
VALUE_PAD = b"." * 600  # ~2.5 KiB a batch: 8 batches roll a 16 KiB segment on every start
#: The batch in flight at a cut is ~14 KiB: it rolls the segment, so the cut comes right after a
#: producer snapshot was written (at the roll) and maybe before it was fsynced (by the scheduler).
IN_FLIGHT_PAD = b"." * 3500


@dataclass
class ProbeResult:
    batches_acknowledged: int = 0
    #: Batches in flight at a cut and retried after it: kept by the cut (answered as a
    #: duplicate at their offset) or taken by it (appended anew).
    retried_kept: int = 0
    retried_appended: int = 0
    #: The last acknowledged batch sent again after a cut and answered with its original offset.
    duplicates_answered: int = 0
    snapshot_files_after_cuts: int = 0
    #: Snapshot files there before a kill and gone after the cut (not yet fsynced, or their entry not).
    snapshot_files_removed_by_cuts: int = 0
    #: Snapshot files a cut left unreadable (torn or emptied: they were not yet fsynced).
    snapshot_files_unreadable: int = 0
    snapshot_entries_checked: int = 0
    problems: list[str] = field(default_factory=list)


def _batch(producer_id: int, epoch: int, base_sequence: int, pad: bytes = VALUE_PAD) -> bytes:
    now_ms = int(time.time() * 1000)
    return build_batch([SimpleRecord(None, b"%d:%d" % (producer_id, base_sequence + i) + pad, timestamp=now_ms)
                        for i in range(RECORDS)], producer_id=producer_id, producer_epoch=epoch,
                       base_sequence=base_sequence)


def _produce_request(batch: bytes) -> dict[str, object]:
    return {"acks": -1, "timeout": 30000, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}]}


class ProducerProbe:
    def __init__(self, data_dir: Path) -> None:
        self.partition_dir = data_dir / f"{TOPIC}-0"
        self.result = ProbeResult()
        self.producer_id = -1
        self.epoch = -1
        self.next_sequence = 0
        #: base sequence -> base offset, of every acknowledged batch of the current producer id
        self.acked: dict[int, int] = {}
        self.last_acked: tuple[int, bytes] | None = None  # (base sequence, batch bytes)
        self.in_flight: tuple[int, bytes] | None = None
        self._in_flight_client: RawClient | None = None
        self._snapshots_before_kill: set[str] = set()
        self._kills = 0

    def _problem(self, what: str) -> None:
        self.result.problems.append(what)

    def _produce(self, client: RawClient, batch: bytes) -> tuple[int, int]:
        body = client.call(ApiKey.PRODUCE, 9, _produce_request(batch))
        p = body.responses[0].partition_responses[0]
        return int(p.error_code), int(p.base_offset)

    def _new_producer_id(self, client: RawClient) -> None:
        init = client.call(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                                        "producer_id": -1, "producer_epoch": -1})
        self.producer_id, self.epoch, self.next_sequence = init.producer_id, init.producer_epoch, 0
        self.acked, self.last_acked = {}, None

    # -- the three moments ------------------------------------------------------------------------

    def before_kill(self, broker: ChaosBroker) -> None:
        self._kills += 1
        if self.producer_id >= 0 and self._kills % 3 != 0:  # else: after the restart the last acknowledged
            batch = _batch(self.producer_id, self.epoch, self.next_sequence, IN_FLIGHT_PAD)  # is sent again
            client = RawClient(broker.port)
            client.send(ApiKey.PRODUCE, 9, _produce_request(batch))
            self.in_flight = (self.next_sequence, batch)
            self.next_sequence += RECORDS
            self._in_flight_client = client  # closed after the kill: the answer, if any, is never read
            if self._kills % 3 == 2:
                time.sleep(0.02)  # a fixed delay is the point here: appended, maybe synced, not answered
        if self.partition_dir.is_dir():
            self._snapshots_before_kill = {p.name for p in list_snapshot_files(self.partition_dir).values()}

    def after_cut(self) -> None:
        if self._in_flight_client is not None:
            self._in_flight_client.close()
            self._in_flight_client = None
        if not self.partition_dir.is_dir():
            return
        sent_last = {base + RECORDS - 1: base for base in self.acked}
        if self.in_flight is not None:
            sent_last[self.in_flight[0] + RECORDS - 1] = self.in_flight[0]
        left = list_snapshot_files(self.partition_dir)
        self.result.snapshot_files_removed_by_cuts += len(self._snapshots_before_kill - {p.name for p in left.values()})
        for offset, path in sorted(left.items()):
            self.result.snapshot_files_after_cuts += 1
            try:
                entries = read_snapshot_entries(path)
            except CorruptSnapshotError:
                self.result.snapshot_files_unreadable += 1
                continue
            for e in entries:
                if e.producer_id != self.producer_id:
                    continue
                self.result.snapshot_entries_checked += 1
                base = sent_last.get(e.last_sequence)
                if base is None:
                    self._problem(f"snapshot {path.name}: last sequence {e.last_sequence} was never sent")
                elif base in self.acked and e.last_offset != self.acked[base] + RECORDS - 1:
                    self._problem(f"snapshot {path.name}: sequence {e.last_sequence} at offset {e.last_offset}, "
                                  f"acknowledged at {self.acked[base] + RECORDS - 1}")
                elif e.last_offset >= offset:
                    self._problem(f"snapshot {path.name}: names offset {e.last_offset} at or past its own {offset}")

    def after_start(self, broker: ChaosBroker) -> bool:
        before = len(self.result.problems)
        with RawClient(broker.port) as client:
            if self.producer_id < 0:
                create_topic(broker.port, TOPIC, 1, {"segment.bytes": str(16 << 10)})
                self._new_producer_id(client)
            else:
                self._check_log(client)
                self._check_state(client)
            for _ in range(BATCHES_PER_START):
                if not self._append(client, _batch(self.producer_id, self.epoch, self.next_sequence),
                                    self.next_sequence, "a new batch"):
                    break
        return len(self.result.problems) == before

    # -- checks -----------------------------------------------------------------------------------

    def _stored(self, client: RawClient) -> tuple[dict[int, list[int]], int]:
        """base sequence -> offsets holding it (of this producer id), and the log end offset."""
        read = read_partition(client, TOPIC, 0)
        if read.error_code or read.bad_batches:
            self._problem(f"reading {TOPIC}: error {read.error_code}, bad batches {read.bad_batches}")
        found: dict[int, list[int]] = {}
        for offset, value in read.records:
            producer_id, seq = (int(x) for x in (value or b"-1:-1").split(b".", 1)[0].split(b":"))
            if producer_id == self.producer_id and seq % RECORDS == 0:
                found.setdefault(seq, []).append(offset)
        return found, read.high_watermark

    def _check_log(self, client: RawClient) -> None:
        found, _end = self._stored(client)
        for base, offset in self.acked.items():
            if found.get(base) != [offset]:
                self._problem(f"acknowledged batch at sequence {base} (offset {offset}) stored at {found.get(base)}")
        twice = {seq: offsets for seq, offsets in found.items() if len(offsets) > 1}
        if twice:
            self._problem(f"batches stored twice (sequence: offsets): {twice}")

    def _check_state(self, client: RawClient) -> None:
        found, end = self._stored(client)
        if self.in_flight is not None:
            base, batch = self.in_flight
            self.in_flight = None
            kept = found.get(base)
            if not self._append(client, batch, base, "the batch in flight at the cut", expect=kept[0] if kept else end):
                return
            if kept:
                self.result.retried_kept += 1
            else:
                self.result.retried_appended += 1
            if self._stored(client)[1] != (end if kept else end + RECORDS):
                self._problem(f"retrying the batch in flight at sequence {base} moved the log end wrongly")
        elif self.last_acked is not None:
            base, batch = self.last_acked
            error, offset = self._produce(client, batch)
            if error != 0 or offset != self.acked[base]:
                self._problem(f"the last acknowledged batch (sequence {base}, offset {self.acked[base]}) sent again "
                              f"after the cut: error {error}, offset {offset} (a duplicate must get its offset back)")
            else:
                self.result.duplicates_answered += 1
            if self._stored(client)[1] != end:
                self._problem(f"the duplicate of sequence {base} was appended again")

    def _append(self, client: RawClient, batch: bytes, base: int, what: str, *, expect: int | None = None) -> bool:
        error, offset = self._produce(client, batch)
        if error != 0 or (expect is not None and offset != expect):
            self._problem(f"{what} (producer {self.producer_id}, sequence {base}): error {error}, offset {offset}"
                          + (f", expected offset {expect}" if expect is not None else ""))
            # Go on with a new producer id, so the loop keeps probing (Kafka's behaviour loses state).
            self._new_producer_id(client)
            return False
        self.acked[base] = offset
        self.last_acked = (base, batch)
        if base == self.next_sequence:
            self.next_sequence += RECORDS
        self.result.batches_acknowledged += 1
        return True
