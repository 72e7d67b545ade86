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


def produce_when_queued(producer: Any, topic: str, **kwargs: Any) -> None:
    """confluent-kafka's ``produce``, serving delivery reports while its local queue is full
    (BufferError) until the record is queued."""
    while True:
        try:
            producer.produce(topic, **kwargs)
            return
        except BufferError:
            producer.poll(0.05)
