"""Waiting for a condition (never a fixed sleep)."""

from __future__ import annotations

import time
from typing import Any


def wait_until(predicate: Any, timeout_s: float, interval_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())
