"""The log directory's ``.lock``: one owner at a time, released on exit, SIGKILL included."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tierlog.storage.dir_lock import DirLock, LogDirInUseError, is_locked

HOLD = "import sys, time; from tierlog.storage.dir_lock import DirLock; DirLock(sys.argv[1]).acquire(); " \
       "print('held', flush=True); time.sleep(60)"


def test_second_owner_is_refused_until_the_first_releases(tmp_path: Path) -> None:
    first = DirLock(tmp_path).acquire()
    assert is_locked(tmp_path)
    with pytest.raises(LogDirInUseError, match="in use by another process"):
        DirLock(tmp_path).acquire()
    first.release()
    assert not is_locked(tmp_path)
    with DirLock(tmp_path):
        assert is_locked(tmp_path)


@pytest.mark.integration
def test_a_killed_holder_leaves_the_directory_unlocked(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        assert is_locked(tmp_path)
    finally:
        proc.kill()
        proc.wait()
    assert not is_locked(tmp_path)


def test_a_missing_directory_is_not_locked(tmp_path: Path) -> None:
    assert not is_locked(tmp_path / "nope")
