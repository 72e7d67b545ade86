"""The page-cache shim's model on its own: a child Python process (whose file I/O goes through the C
library, as the broker's does) makes changes under a data dir with the shim preloaded, some synced
and some not, is SIGKILLed, and after :meth:`PageShim.power_cut` exactly the synced state is left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.reliability.pageshim import PageShim, unavailable

UNAVAILABLE = unavailable()
pytestmark = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"page-cache shim cannot run: {UNAVAILABLE}")

SCRIPT = textwrap.dedent("""
    import os, sys, time
    root = sys.argv[1]
    def dsync(path):
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    # A file appended to, fdatasynced half way; its entry made durable by a directory fsync.
    fd = os.open(f"{root}/log", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"a" * 100)
    os.fdatasync(fd)
    dsync(root)
    # Overwritten and synced: kept.
    os.pwrite(fd, b"s" * 5, 20)
    os.fsync(fd)
    # Lost: every change after the last sync of the file.
    os.pwritev(fd, [b"b" * 50, b"c" * 50], 100)
    os.pwrite(fd, b"X" * 10, 0)
    os.pwrite(fd, b"t" * 5, 20)
    # Python's buffered file objects go through write(2) too.
    with open(f"{root}/log", "ab") as f:
        f.write(b"python")
    # A truncation not synced: undone.
    with open(f"{root}/trunc", "wb") as f:
        f.write(b"0123456789")
        f.flush()  # buffered: fsync before it would sync nothing
        os.fsync(f.fileno())
    dsync(root)
    os.truncate(f"{root}/trunc", 3)
    # A directory with a file, both durable.
    os.mkdir(f"{root}/d1")
    with open(f"{root}/d1/kept", "wb") as f:
        f.write(b"k")
        f.flush()
        os.fsync(f.fileno())
    dsync(f"{root}/d1")
    dsync(root)
    # Atomic replace with the directory fsynced: kept. Without it: the old version comes back.
    for name, sync_dir in (("cp-synced", True), ("cp-unsynced", False)):
        with open(f"{root}/{name}", "wb") as f:
            f.write(b"old")
            f.flush()
            os.fsync(f.fileno())
        dsync(root)
        with open(f"{root}/{name}.tmp", "wb") as f:
            f.write(b"new")
            f.flush()
            os.fsync(f.fileno())
        os.replace(f"{root}/{name}.tmp", f"{root}/{name}")
        if sync_dir:
            dsync(root)
    # An unlink not made durable: the file comes back with its synced bytes.
    os.unlink(f"{root}/d1/kept")
    # From here on the data dir is never fsynced again.
    # A file created and fsynced whose directory is never fsynced: its entry is lost.
    with open(f"{root}/orphan", "wb") as f:
        f.write(b"o" * 10)
        f.flush()
        os.fsync(f.fileno())
    # A directory never synced in its parent.
    os.mkdir(f"{root}/d2")
    # A failed sync leaves the data unsynced (the control file says every sync fails now).
    print("ready", flush=True)
    sys.stdin.readline()
    fd2 = os.open(f"{root}/trunc", os.O_WRONLY)
    os.pwrite(fd2, b"Z", 0)
    try:
        os.fsync(fd2)
        print("fsync-ok", flush=True)
    except OSError as e:
        print(f"fsync-failed {e.errno}", flush=True)
    time.sleep(600)
""")


def test_a_power_cut_keeps_exactly_what_was_synced(tmp_path: Path) -> None:
    root = tmp_path / "data"
    root.mkdir()
    shim = PageShim(tmp_path, root)
    child = subprocess.Popen([sys.executable, "-c", SCRIPT, str(shim.root)], env={**os.environ, **shim.env()},
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready", child.stderr.read() if child.stderr else ""
        # Before the cut everything is in the "page cache": the files as the child left them.
        assert (root / "log").read_bytes().endswith(b"python")
        assert not (root / "d1" / "kept").exists() and (root / "cp-unsynced").read_bytes() == b"new"
        shim.faults(fail_fsync=True)
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == f"fsync-failed {5}"  # EIO
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    report = shim.power_cut()
    print(report)
    log = (root / "log").read_bytes()
    assert log == b"a" * 20 + b"s" * 5 + b"a" * 75, log  # synced prefix; later writes and the overwrite gone
    assert not (root / "orphan").exists()  # its directory was never fsynced after its creation
    assert (root / "d1" / "kept").read_bytes() == b"k"  # the unlink was not made durable
    assert not (root / "d2").exists()
    assert (root / "cp-synced").read_bytes() == b"new"
    assert (root / "cp-unsynced").read_bytes() == b"old"
    assert not (root / "cp-unsynced.tmp").exists() and not (root / "cp-synced.tmp").exists()
    assert (root / "trunc").read_bytes() == b"0123456789"  # the truncation and the failed-sync write undone
    assert report.bytes_lost > 0 and report.entries_lost >= 4, report
    assert sorted(p.name for p in root.iterdir()) == ["cp-synced", "cp-unsynced", "d1", "log", "trunc"]
    # A second cut with nothing journalled since changes nothing.
    assert shim.power_cut().changes_undone == 0
