"""The broker's wiring: a remote log manager built from broker config next to a LogManager, with
the embedded default backend, driven by the scheduler; the log manager's own retention then keeps
only what is not yet remote."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.tiered import T0, batch
from tierlog.config import BrokerConfig, LogConfig
from tierlog.server.remote_tier import create_remote_log_manager
from tierlog.storage.log_manager import LogManager, LogManagerSettings
from tierlog.testing.clock import ManualClock, ManualScheduler
from tierlog.tiered.backends.local import LocalDirectoryRemoteStorageManager


def test_broker_config_builds_a_working_remote_log_manager(tmp_path: Path) -> None:
    data = tmp_path / "tierlog-data"
    config = BrokerConfig({"log.dirs": str(data), "remote.log.storage.system.enable": "true",
                           "remote.log.manager.task.interval.ms": "1000", "rsm.config.fsync": "false"})
    topic_config = LogConfig.from_props({"segment.bytes": 2048, "remote.storage.enable": True,
                                         "local.retention.bytes": 1, "retention.ms": -1,
                                         "file.delete.delay.ms": 0})
    clock = ManualClock(T0 + 60_000)
    scheduler = ManualScheduler(clock)
    manager = LogManager([data], lambda topic: topic_config,
                         LogManagerSettings(retention_check_interval_ms=5000), clock=clock, scheduler=scheduler)
    manager.startup_logs()
    ulog = manager.get_or_create_log("orders", 0, topic_id=b"\x03" * 16)
    for i in range(20):
        ulog.append_as_leader(batch(3, ts=T0 + i * 1000, seed=i))
    bases = ulog.segments.base_offsets
    rlm = create_remote_log_manager(config, manager, clock=clock, scheduler=scheduler)
    assert rlm is not None and isinstance(rlm.rsm, LocalDirectoryRemoteStorageManager)
    rlm.start()  # before the log manager's retention, as the broker does
    manager.start_background_tasks()
    clock.advance(1)
    assert rlm.rsm.root == tmp_path / "tierlog-data-remote" / "kafka-tiered-storage"
    assert ulog.highest_offset_in_remote_storage == bases[-1] - 1
    clock.advance(5000)  # the log manager's retention pass: local copies of tiered segments go
    assert ulog.segments.base_offsets == bases[-1:]
    assert rlm.read("orders", 0, 0, 10**6) is not None
    assert {p.name for p in data.iterdir()} >= {"orders-0", "remote-log-metadata", "remote-log-index-cache"}
    rlm.close()
    manager.shutdown()
    # a restart takes the metadata directory for what it is, not for a partition
    again = LogManager([data], lambda topic: topic_config, clock=clock)
    assert again.startup_logs().errors == []
    assert set(again.all_logs()) == {("orders", 0)}
    assert create_remote_log_manager(BrokerConfig({"log.dirs": str(data)}), again) is None
