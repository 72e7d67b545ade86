"""Blocking calls out of the event loop -- and the few short enough to make on it.

Storage and the metadata controller are synchronous (files, fsync, per-partition locks). The loop
hands such work to a small thread pool so one slow disk operation delays only the request that
needs it, never every connection.

A produce's append is the exception when it is only a write into the page cache: handing it to a
thread and waking the loop again when it is done costs more CPU than the append itself for anything
up to a megabyte (on this project's 2-core VM the hand-off was ~12 % of the broker's CPU per 1 MiB
produce request, more for small ones). :meth:`StorageIO.try_inline` runs such a call on the loop
when the :class:`InlineGate` lets it; the call itself declines (returns None) when it would wait for
a lock or do more than write, and the caller then uses the pool. An inline call that turns out slow
(the kernel throttling writers, a segment roll) sends the next ones to the pool for a while, so a
slow disk stalls one request at a time again rather than the loop. Slow means it waited in the
kernel (a voluntary context switch), not only that the scheduler ran other processes meanwhile: on
a loaded machine a preempted call is as slow, and moving it to a thread would only add the hand-off.
"""

from __future__ import annotations

import asyncio
import functools
import resource
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

from tierlog.clock import SYSTEM_CLOCK, Clock

P = ParamSpec("P")
T = TypeVar("T")

#: Appends of at most this many bytes may run on the event loop.
INLINE_MAX_BYTES = 2 << 20
#: An inline call that took longer than this ...
INLINE_SLOW_NS = 10_000_000
#: ... keeps the next ones off the loop for this long.
INLINE_PAUSE_NS = 5_000_000_000


@dataclass(slots=True)
class InlineGate:
    """Whether a blocking call of ``size_bytes`` may run on the event loop now (pure: the caller
    passes the monotonic time)."""

    max_bytes: int = INLINE_MAX_BYTES
    slow_ns: int = INLINE_SLOW_NS
    pause_ns: int = INLINE_PAUSE_NS
    paused_until_ns: int = 0

    def allows(self, size_bytes: int, now_ns: int) -> bool:
        return size_bytes <= self.max_bytes and now_ns >= self.paused_until_ns

    def took(self, elapsed_ns: int, now_ns: int, *, waited: bool) -> None:
        """A call took ``elapsed_ns``; ``waited``: it slept in the kernel (disk, lock) meanwhile."""
        if elapsed_ns > self.slow_ns and waited:
            self.paused_until_ns = now_ns + self.pause_ns


class StorageIO:
    def __init__(self, threads: int = 4, name: str = "tierlog-io", clock: Clock = SYSTEM_CLOCK,
                 gate: InlineGate | None = None) -> None:
        self._pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix=name)
        self._clock = clock
        self.gate = gate if gate is not None else InlineGate()
        #: Fetch reads have their own gate: an append slowed by the disk's writeback says nothing
        #: about reads of cached index pages, and a read that waited for a cold page nothing about appends.
        self.read_gate = InlineGate()

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    def try_inline(self, size_bytes: int, fn: Callable[P, T | None], /, *args: P.args, **kwargs: P.kwargs) -> T | None:
        """``fn(...)`` on the calling (event loop) thread if the gate allows a call of ``size_bytes``;
        None when it does not, or when ``fn`` itself declined by returning None."""
        return self._inline(self.gate, size_bytes, fn, *args, **kwargs)

    def try_inline_read(self, fn: Callable[P, T | None], /, *args: P.args, **kwargs: P.kwargs) -> T | None:
        """As :meth:`try_inline`, for a fetch's read, behind :attr:`read_gate`."""
        return self._inline(self.read_gate, 0, fn, *args, **kwargs)

    def _inline(self, gate: InlineGate, size_bytes: int, fn: Callable[P, T | None], /, *args: P.args,
                **kwargs: P.kwargs) -> T | None:
        started_ns = self._clock.monotonic_ns()
        if not gate.allows(size_bytes, started_ns):
            return None
        switches = _voluntary_switches()
        try:
            return fn(*args, **kwargs)
        finally:
            ended_ns = self._clock.monotonic_ns()
            elapsed_ns = ended_ns - started_ns
            if elapsed_ns > gate.slow_ns:
                gate.took(elapsed_ns, ended_ns, waited=_voluntary_switches() > switches)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=False)


def _voluntary_switches() -> int:
    """How often this thread has slept in the kernel (getrusage's ru_nvcsw for the thread)."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw
