"""A broker with thousands of partitions: creating one costs the same whatever the count, and an
idle partition holds one descriptor (its active segment's .log)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tierlog.config.log_config import LogConfig
from tierlog.storage.log_manager import LogManager

CFG = LogConfig.from_props({})


class _NoWalking(dict[Any, Any]):
    """The logs map of a manager that must not walk it to create a log."""

    def values(self) -> Any:
        raise AssertionError("creating a log walked every existing log")


def test_with_one_log_dir_creating_a_log_does_not_walk_the_others(tmp_path: Path) -> None:
    manager = LogManager([tmp_path], lambda t: CFG)
    manager.get_or_create_log("t", 0)
    walled = _NoWalking(manager._logs)
    manager._logs = walled
    for p in range(1, 4):
        manager.get_or_create_log("t", p)
    assert sorted(walled) == [("t", 0), ("t", 1), ("t", 2), ("t", 3)]
    manager._logs = dict(walled)
    manager.shutdown()


def test_an_idle_partition_holds_one_descriptor(tmp_path: Path) -> None:
    manager = LogManager([tmp_path], lambda t: CFG)
    before = len(os.listdir("/proc/self/fd"))
    for p in range(300):
        manager.get_or_create_log("many", p)
    assert len(os.listdir("/proc/self/fd")) - before == 300
    manager.shutdown()
    assert len(os.listdir("/proc/self/fd")) == before
