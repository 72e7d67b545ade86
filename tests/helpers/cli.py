"""Running the real tierlog CLI as a subprocess: succeed (ok) or fail with one line (fails)."""

from __future__ import annotations

import subprocess
import sys


def cli(*args: str, stdin: str | None = None, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tierlog.cli.main", *args], input=stdin, capture_output=True,
                          text=True, timeout=timeout)


def ok(*args: str, stdin: str | None = None) -> str:
    done = cli(*args, stdin=stdin)
    assert done.returncode == 0, f"tierlog {' '.join(args)} failed ({done.returncode}): {done.stderr}"
    return done.stdout


def fails(*args: str, stdin: str | None = None) -> str:
    """Run a command that must fail: exit 1, one line on stderr, no traceback. Returns that line."""
    done = cli(*args, stdin=stdin)
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: "), lines
    return lines[0]
