"""Blocking calls out of the event loop.

Storage and the metadata controller are synchronous (files, fsync, per-partition locks). The loop
hands such work to a small thread pool so one slow disk operation delays only the request that
needs it, never every connection.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class StorageIO:
    def __init__(self, threads: int = 4, name: str = "tierlog-io") -> None:
        self._pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix=name)

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=False)
