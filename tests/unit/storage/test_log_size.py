"""``UnifiedLog.size_bytes_unloaded``: the log's size for metrics without materialising the segments
a lazy startup (seed 003) left alone."""

from __future__ import annotations

from tests.helpers.storage import OpenLog, batch
from tierlog.config import LogConfig

CFG = LogConfig(segment_bytes=1200, index_interval_bytes=100)


def test_size_without_materialising_untouched_segments(open_log: OpenLog) -> None:
    log = open_log(CFG)
    for _ in range(30):
        log.append_as_leader(batch(2, value_size=40))
    expected = log.size_bytes
    bases = log.segments.base_offsets
    log.close()
    assert len(bases) >= 5

    log = open_log(CFG, clean=True, sanity_check_all=False)
    assert log.size_bytes_unloaded() == expected
    assert not any(log.segments.is_materialized(b) for b in bases[:-1])
    assert log.size_bytes_unloaded() == expected  # from the remembered sizes
    # Appends to the active segment and a roll show at once; a materialised segment reports itself.
    log.append_as_leader(batch(2, value_size=40))
    log.segments.get(bases[1])
    assert log.size_bytes_unloaded() == log.size_bytes > expected
    # A deleted segment stops counting.
    log.truncate_fully_and_start_at(1000)
    assert log.size_bytes_unloaded() == log.size_bytes == 0
