"""The log cleaner's broker settings are dynamic as Kafka's: IncrementalAlterConfigs on the broker
resource (cluster-wide or this broker's) reconfigures the running cleaner -- its threads restart with
the new thread count, dedupe buffer, io buffer, load factor, rate and backoff -- and a restarted
broker starts its cleaner with them. ``log.cleaner.enable`` stays static."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.helpers.server import call, with_broker
from tierlog.protocol import ApiKey
from tierlog.server.context import BrokerContext
from tierlog.storage.cleaner.manager import CleanerSettings, LogCleaner


def _alter(resource: str, **values: str) -> dict[str, object]:
    return {"resources": [{"resource_type": 4, "resource_name": resource, "configs": [
        {"name": k.replace("_", "."), "config_operation": 0, "value": v} for k, v in values.items()]}],
        "validate_only": False}


async def _wait_for(cleaner: LogCleaner, check: object, what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if callable(check) and check(cleaner.settings):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}; settings {cleaner.settings}")


def _threads(cleaner: LogCleaner) -> int:
    return sum(1 for t in cleaner._threads if t.is_alive())


def test_cleaner_settings_change_with_alter_configs_on_the_broker(tmp_path: Path) -> None:
    async def first(ctx: BrokerContext) -> None:
        cleaner = ctx.log_cleaner
        assert cleaner is not None
        assert cleaner.settings.threads == 1 and _threads(cleaner) == 1
        response = await call(ctx, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, _alter(
            "", log_cleaner_threads="2", log_cleaner_dedupe_buffer_size="4194304", log_cleaner_io_buffer_size="65536",
            log_cleaner_io_buffer_load_factor="0.5", log_cleaner_io_max_bytes_per_second="1048576",
            log_cleaner_backoff_ms="250"))
        assert [r.error_code for r in response.responses] == [0]

        def applied(s: CleanerSettings) -> bool:
            return (s.threads, s.dedupe_buffer_size, s.io_buffer_size, s.io_buffer_load_factor,
                    s.io_max_bytes_per_second, s.backoff_ms) == (2, 4194304, 65536, 0.5, 1048576.0, 250)

        await _wait_for(cleaner, applied, "the cluster-wide values")
        deadline = time.monotonic() + 30
        while _threads(cleaner) != 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert _threads(cleaner) == 2
        # This broker's own value wins over the cluster-wide one.
        response = await call(ctx, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, _alter("1", log_cleaner_backoff_ms="100"))
        assert [r.error_code for r in response.responses] == [0]
        await _wait_for(cleaner, lambda s: s.backoff_ms == 100, "this broker's value")
        # log.cleaner.enable is not dynamic (as in Kafka).
        response = await call(ctx, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, _alter("", log_cleaner_enable="false"))
        assert [r.error_code for r in response.responses] != [0]

    async def second(ctx: BrokerContext) -> None:
        cleaner = ctx.log_cleaner
        assert cleaner is not None
        s = cleaner.settings
        assert (s.threads, s.dedupe_buffer_size, s.backoff_ms) == (2, 4194304, 100)
        assert _threads(cleaner) == 2

    with_broker(tmp_path, first)
    with_broker(tmp_path, second)
