from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.storage import OpenLog
from tierlog.config import LogConfig
from tierlog.storage.loader import LoadOptions, load_log
from tierlog.storage.log import UnifiedLog
from tierlog.testing import ManualClock, ManualScheduler


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
