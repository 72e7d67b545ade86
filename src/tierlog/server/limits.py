"""What keeps hostile or broken clients from taking the broker down: a broker-wide bound on the bytes
of requests held in memory, connection quotas (in total, per address, and against the process's
descriptor limit), and the descriptor limit itself.

Kafka's names are kept: ``queued.max.request.bytes`` (its memory pool), ``queued.max.requests`` (its
request channel's bound), ``max.connections``,
``max.connections.per.ip`` and ``max.connections.per.ip.overrides``.
"""

from __future__ import annotations

import logging
import os
import resource
import socket
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from tierlog.clock import SYSTEM_CLOCK, Clock, monotonic_s

log = logging.getLogger(__name__)


#: The most asyncio reads in one go from a socket (its selector transports' ``max_size``): what one
#: connection can add to the pool before it is told to stop.
READ_CHUNK_BYTES = 256 << 10


class _WaitQueue:
    """Connections told to stop reading, woken in the order they were told (both broker-wide bounds
    below keep one): ``wait`` once per owner, ``cancel`` when it no longer waits."""

    def __init__(self) -> None:
        #: Times a connection was told to stop reading.
        self.refusals = 0
        self._waiters: dict[object, Callable[[], None]] = {}

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def wait(self, owner: object, resume: Callable[[], None]) -> None:
        """Call ``resume`` (once) when there is room again; insertion order is the wake order."""
        if owner not in self._waiters:
            self.refusals += 1
            self._waiters[owner] = resume

    def cancel(self, owner: object) -> None:
        self._waiters.pop(owner, None)

    def _wake_oldest(self) -> None:
        owner = next(iter(self._waiters))
        self._waiters.pop(owner)()


class RequestMemoryPool(_WaitQueue):
    """Bytes of requests held in memory across every connection -- received, whole or in part, and
    not yet served (Kafka's memory pool behind ``queued.max.request.bytes``).

    Unlike Kafka's pool, which reserves a frame's *declared* size when its prefix arrives, this one
    counts bytes actually received: a client that declares 100 MB and sends four bytes holds four
    bytes, so a handful of such liars cannot stall everyone else. Connections report what they hold
    after every read; while the total is over capacity, a connection holding part of a request (or
    more than one request) stops reading until bytes come back (oldest waiter first). One that holds
    a single whole request keeps being read -- a well-behaved client with one small request in
    flight is served however full the pool is. The total stays below ``capacity_bytes`` plus one read
    (:data:`READ_CHUNK_BYTES`) per connection.
    """

    def __init__(self, capacity_bytes: int) -> None:
        super().__init__()
        #: -1: no bound (bytes are counted, nobody waits).
        self.capacity_bytes = capacity_bytes
        self.used_bytes = 0
        self.peak_used_bytes = 0

    @property
    def bounded(self) -> bool:
        return self.capacity_bytes >= 0

    @property
    def full(self) -> bool:
        return self.bounded and self.used_bytes >= self.capacity_bytes

    def add(self, delta_bytes: int) -> None:
        self.used_bytes += delta_bytes
        if delta_bytes > 0:
            self.peak_used_bytes = max(self.peak_used_bytes, self.used_bytes)
        elif delta_bytes < 0:
            self._wake()

    def _wake(self) -> None:
        # Each woken connection may read one more chunk before it reports; wake only as many as the
        # room left can take, so a release does not turn into a stampede over the bound.
        woken = 0
        while self._waiters and (woken == 0 or not self.bounded
                                 or self.used_bytes + woken * READ_CHUNK_BYTES < self.capacity_bytes):
            if self.full:
                return
            woken += 1
            self._wake_oldest()


class RequestSlots(_WaitQueue):
    """Requests held across every connection -- received whole and not yet answered, including durable
    produces waiting for their fsync (Kafka's request channel, bounded by ``queued.max.requests``).

    While ``capacity`` are held, a connection that holds at least one stops reading until one is
    answered somewhere (oldest waiter first); one holding none is still read, so the total stays
    below ``capacity`` plus one request per connection. A slow disk so slows producers (their
    requests wait on the socket) instead of piling requests up in the broker.
    """

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.used = 0
        self.peak_used = 0

    @property
    def full(self) -> bool:
        return self.used >= self.capacity

    def add(self, delta: int) -> None:
        self.used += delta
        self.peak_used = max(self.peak_used, self.used)
        while delta < 0 and self._waiters and not self.full:
            self._wake_oldest()


def parse_ip_overrides(value: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count`` pairs separated by commas (an IPv6
    address in brackets); host names are resolved to their addresses."""
    out: dict[str, int] = {}
    for item in (i.strip() for i in value.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(f"{item!r} is not of the form host:count")
        for address in _addresses(host):
            out[address] = int(count)
    return out


def _addresses(host: str) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except socket.gaierror as e:
        raise ValueError(f"cannot resolve {host!r}: {e}") from None
    return sorted({str(info[4][0]) for info in infos})


#: Descriptors kept free for log segments, indexes and checkpoints however many clients connect.
MIN_RESERVED_FDS = 256


def raise_open_file_limit() -> tuple[int, int]:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit (every connection and every open
    segment costs a descriptor); the (soft, hard) limits afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as e:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, hard, e)
    elif hard == resource.RLIM_INFINITY and soft == resource.RLIM_INFINITY:
        soft = hard = 1 << 20
    return soft, hard


def reserved_fds(open_file_limit: int) -> int:
    """How many descriptors connections leave to storage: a tenth of the limit, at least
    :data:`MIN_RESERVED_FDS` (but never the whole limit)."""
    return min(max(open_file_limit // 10, MIN_RESERVED_FDS), open_file_limit // 2)


@dataclass
class ConnectionQuotas:
    """Admission of new connections: ``max.connections`` in total, ``max.connections.per.ip`` (with
    its overrides) per client address, and a descriptor reserve: a socket whose descriptor number
    comes within :func:`reserved_fds` of the open-file limit is refused. Descriptors are handed out
    lowest first, so a high number means at least that many are open -- refusing then keeps
    ``accept`` and the log files from running out (EMFILE) however many clients connect."""

    max_connections: int
    max_per_ip: int
    per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    open_file_limit: int = field(default_factory=lambda: resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    per_ip: Counter[str] = field(default_factory=Counter)
    total: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    _last_report_s: float = 0.0
    clock: Clock = SYSTEM_CLOCK

    def limit_for(self, host: str) -> int:
        return self.per_ip_overrides.get(host, self.max_per_ip)

    def admit(self, host: str, fd: int) -> str | None:
        """Count the connection in and return None, or return why it is refused."""
        if self.total >= self.max_connections:
            reason = "max.connections"
        elif self.per_ip[host] >= self.limit_for(host):
            reason = "max.connections.per.ip"
        elif fd >= 0 and fd >= self.open_file_limit - reserved_fds(self.open_file_limit):
            reason = "open-file limit"
        else:
            self.total += 1
            self.per_ip[host] += 1
            return None
        self._refused(host, reason)
        return reason

    def release(self, host: str) -> None:
        self.total -= 1
        self.per_ip[host] -= 1
        if self.per_ip[host] <= 0:
            del self.per_ip[host]

    def _refused(self, host: str, reason: str) -> None:
        self.refused[reason] += 1
        # One line per refusal would let a flood of connections flood the log too.
        now = monotonic_s(self.clock)
        if now - self._last_report_s >= 10.0:
            self._last_report_s = now
            log.warning("refusing connections: %s (latest from %s; refused so far: %s)", reason, host,
                        ", ".join(f"{k}={v}" for k, v in sorted(self.refused.items())))


def socket_fd(sock: object) -> int:
    fileno = getattr(sock, "fileno", None)
    try:
        return int(fileno()) if callable(fileno) else -1
    except (OSError, ValueError):
        return -1


def open_fd_count() -> int:
    """Descriptors this process has open (for logs and tests; linear in their number)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return -1
