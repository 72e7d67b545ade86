from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tierlog.config import LogConfig
from tierlog.records import SimpleRecord, build_batch
from tierlog.storage.loader import LoadOptions, load_log
from tierlog.storage.log import UnifiedLog
from tierlog.testing import ManualClock, ManualScheduler

OpenLog = Callable[..., UnifiedLog]


def batch(n: int = 1, *, value_size: int = 10, ts: int = 1_700_000_000_000, key: bytes | None = b"k",
          compression: int = 0, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    records = [SimpleRecord(key, bytes([65 + i % 26]) * value_size, timestamp=ts + i) for i in range(n)]
    return build_batch(records, compression=compression, producer_id=producer_id,
                       producer_epoch=producer_epoch, base_sequence=base_sequence)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_700_000_000_000)


@pytest.fixture
def open_log(tmp_path: Path, clock: ManualClock) -> OpenLog:
    def _open(config: LogConfig | None = None, *, clean: bool = False, recovery_point: int = 0,
              log_start_offset: int = 0, sanity_check_all: bool = True, scheduler: ManualScheduler | None = None,
              name: str = "t-0") -> UnifiedLog:
        opts = LoadOptions(had_clean_shutdown=clean, recovery_point=recovery_point,
                           log_start_offset=log_start_offset, sanity_check_all=sanity_check_all)
        return load_log(tmp_path / name, config or LogConfig(), opts, clock=clock, scheduler=scheduler)

    return _open
