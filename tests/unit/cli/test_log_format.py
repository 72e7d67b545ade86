"""``tierlog --log-format json``: one JSON object per line, event lines split into their fields."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tierlog.cli.log_format import JsonFormatter, event_fields


def record(message: str, *args: object, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            exc_info = sys.exc_info()
    return logging.LogRecord("tierlog.storage.log", logging.INFO, __file__, 1, message, args, exc_info)


def test_event_fields() -> None:
    assert event_fields("segment rolled topic=t.x partition=3 base_offset=120 ratio=0.5") == (
        "segment rolled", {"topic": "t.x", "partition": 3, "base_offset": 120, "ratio": 0.5})
    assert event_fields("no fields here") == ("", {})
    # Dotted config names are not fields; reserved names never overwrite the record's own.
    assert event_fields("limit remote.log.metadata.custom.metadata.max.bytes=128 exceeded") == ("", {})
    assert event_fields("x level=DEBUG topic=a topic=b") == ("x", {"topic": "a"})


def test_json_formatter() -> None:
    line = JsonFormatter().format(record("segment deleted topic=%s partition=%d reason=%s", "t", 0, "time"))
    out = json.loads(line)
    assert out["event"] == "segment deleted" and out["reason"] == "time" and out["partition"] == 0
    assert out["level"] == "INFO" and out["logger"] == "tierlog.storage.log"
    assert out["message"] == "segment deleted topic=t partition=0 reason=time"
    assert out["ts"].endswith("Z") and "T" in out["ts"]
    plain = json.loads(JsonFormatter().format(record("broker stopped cleanly", exc=True)))
    assert "event" not in plain and "ValueError: boom" in plain["exception"]


@pytest.mark.integration
def test_serve_logs_json_lines(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "tierlog.cli.main", "--log-format", "json", "serve",
           "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={tmp_path / 'data'}"]
    with open(tmp_path / "stderr", "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                if line.startswith("tierlog listening on "):
                    break
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    lines = [json.loads(line) for line in (tmp_path / "stderr").read_text().splitlines()]
    assert lines and all({"ts", "level", "logger", "message"} <= set(obj) for obj in lines)
    loading = [obj for obj in lines if obj.get("event") == "loading logs"]
    assert loading and loading[0]["total"] == 0 and loading[0]["log_dirs"] == 1
