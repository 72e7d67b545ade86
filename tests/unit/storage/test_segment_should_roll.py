"""The roll check every append makes (``LogSegment.should_roll``, read from the segment's fields)
answers what Kafka's roll conditions as a pure function (``segment.should_roll``) answer for the same
segment: empty or not, with or without a first batch timestamp, near the size, time and offset
limits, and with its indexes full."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.storage import build_batch
from tierlog.records.header import INT32_MAX, BatchHeader
from tierlog.storage.segment import LogSegment, SegmentSettings, should_roll

T0 = 1_700_000_000_000


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([-1, T0, T0 + 5000]), max_size=3),  # batches already in the segment: their timestamps
    st.integers(0, 3000),  # messages size
    st.integers(-1, 40_000),  # max timestamp in the messages, above T0
    st.sampled_from([0, 10, INT32_MAX - 1, INT32_MAX, INT32_MAX + 1, INT32_MAX + 7]),  # max offset above the base
    st.integers(-20_000, 20_000),  # now, around the segment's creation
    st.integers(100, 2000),  # segment.bytes
    st.integers(0, 30_000),  # segment.ms
    st.integers(0, 5000),  # roll jitter
    st.sampled_from([24, 10 << 20]),  # index size: 24 bytes is full after one time entry
)
def test_the_segments_roll_check_is_should_roll(
    timestamps: list[int], messages_size: int, max_ts: int, max_offset: int, now: int, max_bytes: int,
    max_ms: int, jitter: int, index_size: int,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        seg = LogSegment(Path(tmp), 100, SegmentSettings(index_interval_bytes=1, max_index_size=index_size),
                         created_ms=T0, roll_jitter_ms=jitter, create=True)
        try:
            for i, ts in enumerate(timestamps):
                if seg.indexes_full():
                    break  # the log rolls then
                raw = build_batch(base_offset=100 + i, timestamp=ts)
                seg.append(raw, [BatchHeader(raw)])
            max_ts_in = -1 if max_ts < 0 else T0 + max_ts
            expected = should_roll(
                segment_size=seg.log.size_bytes, max_segment_bytes=max_bytes, messages_size=messages_size,
                first_batch_timestamp=seg.first_batch_timestamp, created_ms=seg.created_ms, now_ms=T0 + now,
                max_timestamp_in_messages=max_ts_in, max_segment_ms=max_ms, roll_jitter_ms=seg.roll_jitter_ms,
                indexes_full=seg.indexes_full(), base_offset=seg.base_offset,
                max_offset_in_messages=seg.base_offset + max_offset,
            )
            assert seg.should_roll(messages_size, max_ts_in, seg.base_offset + max_offset, T0 + now, max_bytes,
                                   max_ms) == expected
        finally:
            seg.close()
