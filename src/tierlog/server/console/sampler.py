"""The console's history: the broker's own counters sampled every few seconds, the last hour kept.

A thread of its own samples the request counters (produce bytes in, fetch bytes out), every group's
total lag, and refreshes the tiering summary (walking every partition's remote metadata is too slow
for a page render with thousands of partitions). Pages read the latest samples and never wait.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from tierlog.clock import Clock
from tierlog.tiered.status import PartitionTierStatus

log = logging.getLogger(__name__)

#: An hour of samples at the default interval.
HISTORY_S = 3600


@dataclass(frozen=True)
class TierSummary:
    taken_ms: int
    partitions: int
    remote_bytes: int
    remote_segments: int
    backlog_segments: int
    backlog_bytes: int
    stopped_tasks: int


@dataclass(frozen=True)
class LocalSizes:
    """Local bytes per log dir (with its partition count) and per topic, and the unchecked segments:
    summing them walks every
    partition, too slow for a page render with thousands of partitions, so the sampler keeps them."""

    taken_ms: int
    by_dir: dict[str, tuple[int, int]]
    by_topic: dict[str, int]
    #: Segments a lazy start left unchecked (seed 003), summed over every log for the same reason.
    unchecked_segments: int = 0


@dataclass
class Samples:
    #: (wall ms, produce bytes received, fetch bytes sent), cumulative.
    throughput: deque[tuple[int, float, float]]
    #: group id → (wall ms, total lag).
    group_lag: dict[str, deque[tuple[int, int]]] = field(default_factory=dict)
    tiers: TierSummary | None = None
    #: The partitions the remote log manager reported, in order (the tiering page pages through them).
    tier_partitions: list[tuple[str, int]] = field(default_factory=list)
    local_sizes: LocalSizes | None = None


class Sampler:
    def __init__(self, clock: Clock, interval_ms: int, *, totals: Callable[[], dict[str, tuple[float, float, float]]],
                 group_lags: Callable[[], dict[str, int]],
                 tier_status: Callable[[], list[PartitionTierStatus]] | None,
                 local_sizes: Callable[[int], LocalSizes] | None = None) -> None:
        self._clock = clock
        self.interval_ms = interval_ms
        self._totals = totals
        self._group_lags = group_lags
        self._tier_status = tier_status
        self._local_sizes = local_sizes
        self._keep = max(2, HISTORY_S * 1000 // interval_ms + 1)
        self.samples = Samples(deque(maxlen=self._keep))
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.sample()
        self._thread = threading.Thread(target=self._run, name="console-sampler", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_ms / 1000.0):
            try:
                self.sample()
            except Exception:  # the console's trouble is never the broker's
                log.exception("console sampling failed")

    def sample(self) -> None:
        now = self._clock.wall_ms()
        totals = self._totals()
        produce = totals.get("Produce", (0.0, 0.0, 0.0))[0]
        fetch = totals.get("Fetch", (0.0, 0.0, 0.0))[1]
        lags = self._group_lags()
        sizes = None if self._local_sizes is None else self._local_sizes(now)
        tiers = None
        tier_partitions: list[tuple[str, int]] = []
        if self._tier_status is not None:
            status = self._tier_status()
            tiers = TierSummary(now, len(status), sum(s.remote_bytes for s in status),
                                sum(s.remote_segments for s in status),
                                sum(s.copy_lag_segments for s in status), sum(s.copy_lag_bytes for s in status),
                                                sum(1 for s in status if s.copy_task == "stopped"))
            tier_partitions = [(s.topic, s.partition) for s in status]
        with self._lock:
            self.samples.throughput.append((now, produce, fetch))
            for group, lag in lags.items():
                self.samples.group_lag.setdefault(group, deque(maxlen=self._keep)).append((now, lag))
            for gone in set(self.samples.group_lag) - set(lags):
                del self.samples.group_lag[gone]
            if sizes is not None:
                self.samples.local_sizes = sizes
            if tiers is not None:
                self.samples.tiers = tiers
                self.samples.tier_partitions = tier_partitions

    def throughput(self) -> list[tuple[int, float, float]]:
        with self._lock:
            return list(self.samples.throughput)

    def group_lag(self, group: str) -> list[tuple[int, int]]:
        with self._lock:
            return list(self.samples.group_lag.get(group, ()))

    def tier_partitions(self) -> list[tuple[str, int]]:
        with self._lock:
            return list(self.samples.tier_partitions)

    def local_sizes(self) -> LocalSizes | None:
        with self._lock:
            return self.samples.local_sizes

    def tiers(self) -> TierSummary | None:
        with self._lock:
            return self.samples.tiers
