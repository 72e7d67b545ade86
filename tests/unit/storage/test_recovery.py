from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.storage import OpenLog, batch, read_all
from tierlog.config import LogConfig
from tierlog.storage import files

WRITER = r"""
import sys
from pathlib import Path
from tierlog.config import LogConfig
from tierlog.records import SimpleRecord, build_batch
from tierlog.storage.loader import LoadOptions, load_log

d = Path(sys.argv[1])
log = load_log(d, LogConfig(segment_bytes=20000, index_interval_bytes=500), LoadOptions(had_clean_shutdown=False))
i = 0
while True:
    recs = [SimpleRecord(b"k", (b"v%d" % (i * 10 + j)) * 20) for j in range(10)]
    info = log.append_as_leader(build_batch(recs))
    # Only what append_as_leader returned counts as acknowledged.
    sys.stdout.write(f"{info.last_offset}\n")
    sys.stdout.flush()
    i += 1
"""


@pytest.mark.integration
def test_sigkill_mid_append_keeps_every_acknowledged_append(open_log: OpenLog, tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    rng = random.Random(7)
    acked = -1
    for _ in range(6):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(d)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        first = proc.stdout.readline()  # the writer is up and appending: now kill it at a random moment
        time.sleep(0.05 + rng.random() * 0.4)
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate()
        lines = [int(x) for x in (first + out).split("\n") if x.strip().isdigit()]
        if lines:
            acked = max(acked, lines[-1])
        log = open_log(LogConfig(segment_bytes=20000, index_interval_bytes=500))
        got = read_all(log)
        # A valid prefix holding every acknowledged offset, with no gaps or duplicates.
        assert got == list(range(len(got)))
        assert len(got) - 1 >= acked
        for seg in log.segments:
            seg.sanity_check(log.segments.next_base_offset(seg.base_offset), active=seg is log.active_segment)
        log.close()
    assert acked > 100


def test_garbage_appended_to_log_and_index_is_truncated_and_rebuilt(open_log: OpenLog, tmp_path: Path) -> None:
    log = open_log(LogConfig(segment_bytes=3000, index_interval_bytes=200))
    for _ in range(15):
        log.append_as_leader(batch(3, value_size=40))
    end = log.log_end_offset
    active_base = log.active_segment.base_offset
    log.close()
    d = tmp_path / "t-0"
    with open(files.log_file(d, active_base), "ab") as f:
        f.write(os.urandom(300))
    with open(files.index_file(d, active_base), "ab") as f:
        f.write(os.urandom(24))
    log2 = open_log(LogConfig(segment_bytes=3000, index_interval_bytes=200), clean=False)
    assert log2.log_end_offset == end
    assert read_all(log2) == list(range(end))
    log2.active_segment.offset_index.sanity_check()


def test_torn_write_in_the_middle_truncates_later_segments(open_log: OpenLog, tmp_path: Path) -> None:
    log = open_log(LogConfig(segment_bytes=1500))
    for _ in range(20):
        log.append_as_leader(batch(2, value_size=50))
    bases = log.segments.base_offsets
    assert len(bases) >= 3
    log.close()
    d = tmp_path / "t-0"
    victim = files.log_file(d, bases[1])
    raw = bytearray(victim.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    victim.write_bytes(bytes(raw))
    log2 = open_log(LogConfig(segment_bytes=1500), clean=False, recovery_point=bases[1])
    got = read_all(log2)
    assert got == list(range(len(got)))
    assert bases[1] <= len(got) < bases[2]  # everything before the damage survives
    assert log2.segments.base_offsets == bases[:2]


def test_missing_index_is_rebuilt(open_log: OpenLog, tmp_path: Path) -> None:
    log = open_log(LogConfig(segment_bytes=2000, index_interval_bytes=100))
    for _ in range(10):
        log.append_as_leader(batch(3, value_size=40))
    bases = log.segments.base_offsets
    log.close()
    d = tmp_path / "t-0"
    files.index_file(d, bases[0]).unlink()
    files.time_index_file(d, bases[-1]).unlink()
    log2 = open_log(LogConfig(segment_bytes=2000, index_interval_bytes=100), clean=True)
    assert log2.segments.get(bases[0]).offset_index.entries > 0
    assert read_all(log2) == list(range(30))
