"""A periodic task on the event loop, for the coordinators' housekeeping (session expiry, rebalance
deadlines, transaction timeouts): started with the coordinator, cancelled and awaited when it stops.
A tick that fails is logged and the next one still runs, so one bad group or transaction does not
stop the housekeeping of all the others."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


class Ticker:
    def __init__(self, interval_s: float, tick: Callable[[], Awaitable[None] | None], what: str) -> None:
        self.interval_s = interval_s
        self._tick = tick
        self._what = what
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                result = self._tick()
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("%s tick failed", self._what)
