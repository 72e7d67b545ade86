"""Metadata test helpers: controller settings and an environment of a controller on a manual clock."""

from __future__ import annotations

from pathlib import Path

from tierlog.metadata.controller import Controller, ControllerSettings
from tierlog.metadata.metadata_log import MetadataLogSettings
from tierlog.metadata.snapshot_generator import SnapshotSettings
from tierlog.testing import ManualClock, ManualScheduler

HOUR_MS = 3_600_000


def make_settings(*, max_bytes: int = 10**12, interval_ms: int = HOUR_MS, retention_bytes: int = -1,
                  retention_ms: int = -1, bootstrap_version: int = 21, segment_bytes: int = 64 * 1024,
                  **kw: object) -> ControllerSettings:
    return ControllerSettings(
        node_id=1,
        snapshots=SnapshotSettings(max_record_bytes_between_snapshots=max_bytes, max_snapshot_interval_ms=interval_ms,
                                   max_retention_bytes=retention_bytes, max_retention_ms=retention_ms),
        log=MetadataLogSettings(segment_bytes=segment_bytes, max_batch_bytes=segment_bytes, file_delete_delay_ms=0),
        bootstrap_metadata_version=bootstrap_version,
        **kw,  # type: ignore[arg-type]
    )


class Env:
    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path / "data" / "__cluster_metadata-0"
        self.clock = ManualClock()
        self.scheduler = ManualScheduler(self.clock)
        self.controllers: list[Controller] = []

    def open(self, settings: ControllerSettings | None = None, **kw: object) -> Controller:
        c = Controller.open(self.dir, settings or make_settings(), clock=self.clock, scheduler=self.scheduler, **kw)  # type: ignore[arg-type]
        self.controllers.append(c)
        return c

    def reopen(self, controller: Controller, settings: ControllerSettings | None = None) -> Controller:
        controller.close()
        self.scheduler.shutdown()
        self.scheduler = ManualScheduler(self.clock)
        return self.open(settings or controller.settings)

    def close_all(self) -> None:
        for c in self.controllers:
            c.close()
