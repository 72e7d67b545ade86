"""The one-batch path of ``UnifiedLog._append_as_leader`` (issue 22, fifth round: what a client sends
per partition, in straight lines) answers, raises and writes exactly what the general path does for
the same appends: random runs of batches with and without producer ids (next, retried, gapped
sequences, new epochs, transactional batches and markers), record timestamps in and out of
message.timestamp.before/after.max.ms, headers whose max timestamp disagrees with their records,
LogAppendTime, compacted topics with null keys, a recompressing topic, leader epochs moving, and
every origin; then the same bytes, producer state, leader epochs and index entries in both logs."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.storage import T0, build_batch
from tierlog._util.crc import crc32c
from tierlog.config import LogConfig
from tierlog.errors import TierlogError
from tierlog.records.header import CRC, CRC_START, MAX_TIMESTAMP
from tierlog.storage.loader import LoadOptions, load_log
from tierlog.storage.log import UnifiedLog
from tierlog.storage.producer_state import AppendOrigin
from tierlog.testing import ManualClock

HOUR_MS = 3_600_000

steps = st.lists(
    st.tuples(
        st.sampled_from([-1, -1, 1, 2]),  # producer id (-1: none)
        st.sampled_from([0, 0, 0, 1]),  # producer epoch
        st.sampled_from(["next"] * 6 + ["retry", "gap"]),  # base sequence
        st.integers(1, 3),  # records
        st.sampled_from([None] * 10 + [0, 1]),  # a marker: ABORT or COMMIT (coordinator)
        st.integers(0, 6).map(lambda n: n == 0),  # transactional
        st.sampled_from([0] * 8 + [-2 * HOUR_MS, 2 * HOUR_MS, None]),  # record timestamp skew from now (None: -1)
        st.integers(0, 8).map(lambda n: n == 0),  # the header's max timestamp lies
        st.sampled_from([AppendOrigin.CLIENT] * 5 + [AppendOrigin.REPLICATION]),
        st.sampled_from([3, 3, 3, 4, -1]),  # leader epoch
    ),
    min_size=1,
    max_size=30,
)


def _batch(log: UnifiedLog, step: tuple[Any, ...]) -> tuple[bytes, AppendOrigin, int]:
    producer_id, epoch, how, count, marker, transactional, skew, lies, origin, leader_epoch = step
    timestamp = -1 if skew is None else T0 + skew
    entry = log.producer_state.last_entry(producer_id) if producer_id >= 0 else None
    last = entry.last_seq if entry is not None else -1
    sequence = {"next": last + 1, "retry": max(entry.first_seq if entry is not None else 0, 0),
                "gap": last + 3}[how] if producer_id >= 0 else -1
    if marker is not None and producer_id >= 0:
        raw = build_batch(producer_id=producer_id, epoch=epoch, control=marker, timestamp=timestamp)
        return raw, AppendOrigin.COORDINATOR, leader_epoch
    raw = build_batch(producer_id=producer_id, epoch=epoch if producer_id >= 0 else -1, base_seq=sequence,
                      count=count, timestamp=timestamp, transactional=transactional and producer_id >= 0)
    if lies:
        batch = bytearray(raw)
        struct.pack_into(">q", batch, MAX_TIMESTAMP, timestamp + 7)
        struct.pack_into(">I", batch, CRC, crc32c(memoryview(batch)[CRC_START:]))
        raw = bytes(batch)
    return raw, origin, leader_epoch


def _outcome(log: UnifiedLog, raw: bytes, origin: AppendOrigin, leader_epoch: int) -> tuple[Any, ...]:
    try:
        info = log.append_as_leader(memoryview(raw), leader_epoch=leader_epoch, origin=origin)
    except TierlogError as e:
        return ("raised", type(e), str(e))
    return (info.first_offset, info.last_offset, info.max_timestamp, info.offset_of_max_timestamp,
            info.log_append_time_ms, info.log_start_offset, info.records_count, info.valid_bytes, info.duplicate,
            None if info.sync_file is None else info.sync_file.path.name, info.sync_segment_base_offset)


def _final(log: UnifiedLog) -> tuple[Any, ...]:
    read = log.read(0, 1 << 20)
    psm = log.producer_state
    indexes = [(seg.base_offset, [seg.offset_index.entry(n) for n in range(seg.offset_index.entries)],
                [seg.time_index.entry(n) for n in range(seg.time_index.entries)], seg.max_timestamp_so_far,
                seg.offset_of_max_timestamp_so_far) for seg in log.segments]
    return (None if read is None else read.read_bytes(), dict(psm.producers),
            {k: (t.producer_id, t.first_offset, t.last_offset) for k, t in psm.ongoing_txns.items()},
            psm.map_end_offset, log.leader_epoch_cache.entries(), log.log_end_offset, indexes)


@pytest.mark.parametrize("config", [
    LogConfig(),
    LogConfig(message_timestamp_type="LogAppendTime"),
    LogConfig(cleanup_policy=("compact",)),
    LogConfig(compression_type="gzip"),
    LogConfig(segment_bytes=400),  # rolls every few appends
    LogConfig(index_interval_bytes=0, segment_bytes=1200),  # index entries for every batch, a few rolls
], ids=["default", "log-append-time", "compact", "recompress", "small-segments", "every-batch-indexed"])
@settings(max_examples=60, deadline=None)
@given(steps)
def test_the_one_batch_path_is_the_general_path(tmp_path_factory: pytest.TempPathFactory, config: LogConfig,
                                                run: list[tuple[Any, ...]]) -> None:
    tmp: Path = tmp_path_factory.mktemp("logs")
    clock = ManualClock(T0)
    fast = load_log(tmp / "fast" / "t-0", config, LoadOptions(), clock=clock)  # the same name: the same messages
    general = load_log(tmp / "general" / "t-0", config, LoadOptions(), clock=clock)
    general.one_batch_path = False
    try:
        for step in run:
            raw, origin, leader_epoch = _batch(general, step)
            assert _outcome(fast, raw, origin, leader_epoch) == _outcome(general, raw, origin, leader_epoch)
        assert _final(fast) == _final(general)
    finally:
        fast.close(sync=False)
        general.close(sync=False)
