"""A SIGKILL in the middle of writing a snapshot leaves no partial ``.checkpoint`` and startup works."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.helpers.metadata import Env
from tierlog.metadata.snapshot import PARTIAL_SUFFIX, list_snapshots

_SCRIPT = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    import tierlog.metadata.snapshot as snapshot
    from tierlog.metadata.controller import Controller, ControllerSettings
    from tierlog.metadata.snapshot_generator import SnapshotSettings

    directory = Path(sys.argv[1])
    stop_after = int(sys.argv[2])
    # No time trigger: the parent's manual clock stamped the records years ago, and a snapshot taken
    # while opening would leave nothing for the one below.
    settings = ControllerSettings(snapshots=SnapshotSettings(max_snapshot_interval_ms=0))
    c = Controller.open(directory, settings, bootstrap=False)

    def hang():
        print("WRITING", flush=True)
        time.sleep(120)

    real = snapshot.snapshot_batches

    def slow_batches(*args, **kwargs):
        # Small batches, so the snapshot has many and the kill lands between two of them.
        for i, batch in enumerate(real(*args, **{**kwargs, "max_batch_bytes": 2048})):
            if i == stop_after:
                hang()
            yield batch

    snapshot.snapshot_batches = slow_batches
    if stop_after < 0:
        # Every byte written, not yet fsynced nor renamed.
        os.fsync = lambda fd: hang()
    c.snapshot_now()
""")


@pytest.mark.integration
@pytest.mark.parametrize("stop_after", [20, -1], ids=["mid-data", "before-rename"])
def test_sigkill_during_snapshot_write(env: Env, stop_after: int) -> None:
    c = env.open()
    for i in range(40):
        c.create_topic(f"topic-{i}", 50, configs={"retention.ms": str(1000 + i)})
    first = c.snapshot_now()
    assert first is not None
    c.create_topic("after-first-snapshot", 2)
    image = c.image
    c.close()
    env_vars = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, "-c", _SCRIPT, str(env.dir), str(stop_after)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env_vars)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == b"WRITING", proc.stderr.read() if proc.stderr else b""
        time.sleep(0.05)
        parts = [p for p in env.dir.iterdir() if p.name.endswith(PARTIAL_SUFFIX)]
        assert len(parts) == 1 and parts[0].stat().st_size > 0
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # No partial .checkpoint is visible: only the first snapshot is a finished one.
    assert [s.path for s in list_snapshots(env.dir)] == [first.path]
    c2 = env.open()
    assert c2.image == image
    assert not [p for p in env.dir.iterdir() if p.name.endswith(PARTIAL_SUFFIX)]
    snap = c2.snapshot_now()
    assert snap is not None and snap.snapshot_id.end_offset == image.provenance.end_offset
