"""A crash between each step of the swap of cleaned segments (Kafka's LogCleanerTest
testRecoveryAfterCrash / testRecoveryAfterCrashDuringSplitPhase): the reopened log is the old or the
new one, no offset is held twice, every live key keeps its latest value. Crashes are an exception
raised from the step (the process goes on) and a real SIGKILL of a child process at the step."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tierlog.storage.cleaner.cleaner import Cleaner
from tierlog.storage.cleaner.manager import clean_log
from tierlog.storage.cleaner.offset_map import OffsetMap
from tierlog.storage.loader import LoadOptions, load_log
from tierlog.testing import ManualClock

from .helpers import TS, batches, compact_config, put, table

STEPS = ["cleaned-written", "swap-renamed", "old-renamed", "done"]


class Crash(Exception):
    pass


def _fill(directory: Path) -> dict[bytes, bytes | None]:
    ulog = load_log(directory, compact_config(), LoadOptions(had_clean_shutdown=True), clock=ManualClock(TS))
    for i in range(150):
        put(ulog, b"k%d" % (i % 6), b"v%d" % i)
    put(ulog, b"k2", None)
    ulog.roll()
    # A first cleaning leaves small segments, so the crashed one swaps a group of several segments
    # into one: recovery must drop every old segment the swapped one covers.
    clean_log(ulog, Cleaner(OffsetMap(1000), io_buffer_bytes=4096), None, TS)
    for i in range(40):
        put(ulog, b"n%d" % (i % 3), b"w%d" % i)  # the old keys keep their values in the group
    ulog.roll()
    model = table(ulog)
    ulog.flush()
    return model


def _check_reopened(directory: Path, model: dict[bytes, bytes | None]) -> None:
    reopened = load_log(directory, compact_config(), LoadOptions(had_clean_shutdown=False), clock=ManualClock(TS))
    offsets = [h.base_offset for h in batches(reopened)]
    assert offsets == sorted(set(offsets))  # no offset twice, none out of order
    assert table(reopened) == model
    assert not [p for p in directory.iterdir() if p.name.endswith((".cleaned", ".swap"))]


@pytest.mark.parametrize("step", STEPS)
def test_exception_at_each_swap_step_recovers(tmp_path: Path, step: str) -> None:
    directory = tmp_path / "t-0"
    model = _fill(directory)
    ulog = load_log(directory, compact_config(), LoadOptions(had_clean_shutdown=True), clock=ManualClock(TS))

    def hook(at: str) -> None:
        if at == step:
            raise Crash(at)

    segments_before = len(ulog.segments)
    with pytest.raises(Crash):
        clean_log(ulog, Cleaner(OffsetMap(1000), io_buffer_bytes=4096, swap_hook=hook), None, TS)
    if step == "done":
        assert len(ulog.segments) < segments_before - 2  # the group really held several segments
    _check_reopened(directory, model)


_CHILD = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from tierlog.storage.cleaner.cleaner import Cleaner
    from tierlog.storage.cleaner.manager import clean_log
    from tierlog.storage.cleaner.offset_map import OffsetMap
    from tierlog.storage.loader import LoadOptions, load_log
    from tierlog.testing import ManualClock
    from tests.unit.storage.cleaner.helpers import TS, compact_config
    directory, step = Path(sys.argv[1]), sys.argv[2]
    ulog = load_log(directory, compact_config(), LoadOptions(had_clean_shutdown=True), clock=ManualClock(TS))
    def hook(at):
        if at == step:
            os.kill(os.getpid(), signal.SIGKILL)
    clean_log(ulog, Cleaner(OffsetMap(1000), io_buffer_bytes=4096, swap_hook=hook), None, TS)
""")


@pytest.mark.integration  # a child process per step, SIGKILLed
@pytest.mark.parametrize("step", STEPS)
def test_sigkill_at_each_swap_step_recovers(tmp_path: Path, step: str) -> None:
    directory = tmp_path / "t-0"
    model = _fill(directory)
    root = Path(__file__).resolve().parents[4]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root / "src"), str(root)]))
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(directory), step], env=env, capture_output=True,
                          timeout=120, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    _check_reopened(directory, model)
