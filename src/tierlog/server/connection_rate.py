"""The ``connection_creation_rate`` quota of ``ip`` entities, as Kafka's ConnectionQuotas enforces it.

* The quota of an address is the one set for that IP (``--ip 10.0.0.7``), else the default IP
  entity's (``--ip-defaults``), else none (Kafka's default is Int.MaxValue: unlimited).
* Each new connection is recorded in the address's rate (Kafka's Rate over ``quota.window.num``
  windows of ``quota.window.size.seconds``, :class:`~tierlog.server.quotas.SampledRate`). When the
  rate then exceeds the quota the connection is refused: it is un-recorded (so a client that keeps
  trying is not locked out for ever), and the throttle time is Kafka's ``(rate - quota) / quota x
  window``, capped at one window (``quota.window.size.seconds``).
* A refused connection is not served: the broker does not read from it and closes it when the
  throttle time has passed (Kafka's Acceptor keeps such sockets in ``throttledSockets`` and closes
  them then), so a client that reconnects at once cannot exceed the rate by looping.

:class:`IpConnectionRates` is the pure decision (every call takes ``now_ms``); :class:`ConnectionRateGate`
puts it in front of each listener's protocol factory, before TLS and before the connection counts.

The broker-wide ``max.connection.creation.rate`` (static, or dynamic per broker or cluster-wide) is
enforced as Kafka's acceptor does (ConnectionQuotas.waitForConnectionSlot), before the ip quota:

* Each listener takes its new connections one at a time, in arrival order. Each is recorded in the
  broker's rate (:class:`ConnectionCreationRate`); when the rate then exceeds the limit, that
  connection waits out the throttle time (the same formula, capped at one window) before it is
  served, and the listener takes no newer connection meanwhile (Kafka's acceptor thread blocks,
  leaving them in the TCP backlog): accepting slows to the limit, and no connection is closed for it.
* A connection then refused by its address's ip quota is un-recorded from the broker's rate too.

Each listener also has its own rate and limit (Kafka's ListenerConnectionQuota),
``listener.name.<listener>.max.connection.creation.rate``, else the broker-wide value (Kafka reads
the listener's configs with the prefixed keys overriding the others):

* A connection is recorded in both rates; it waits the longer of the two throttle times (Kafka's
  recordConnectionAndGetThrottleTimeMs), and an ip quota's refusal un-records it from both.
* The inter-broker listener, when the broker has more than one listener, is protected: its
  connections are neither recorded in nor held back by the broker-wide rate, only by its own (so
  clients flooding the other listeners cannot lock the brokers out of each other).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tierlog.clock import Clock
from tierlog.config.definition import INT32_MAX
from tierlog.metadata.client_quotas import CONNECTION_CREATION_RATE, IP
from tierlog.metadata.image import QuotaEntity
from tierlog.server.quotas import QuotaWindow, SampledRate, throttle_time_ms

log = logging.getLogger(__name__)

#: Rates not touched for this long are forgotten (Kafka's connection quota sensors expire too).
SENSOR_EXPIRY_MS = 3_600_000
#: How many addresses' rates are kept before idle ones are dropped.
MAX_TRACKED = 10_000

QuotaLookup = Callable[[], Mapping[QuotaEntity, Mapping[str, float]]]


def canonical_ip(host: str) -> str:
    """The address as one spelling (``::ffff:1.2.3.4`` and ``1.2.3.4`` stay distinct, as in Java)."""
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return host


@dataclass(slots=True)
class _Entry:
    rate: SampledRate
    touched_ms: int


class IpConnectionRates:
    def __init__(self, quotas: QuotaLookup, window: QuotaWindow) -> None:
        self._quotas = quotas
        self.window = window
        self._rates: dict[str, _Entry] = {}
        #: Connections refused, and the throttle time they were given, in total.
        self.throttled_total = 0
        self.throttle_time_ms_total = 0

    def quota_for(self, host: str) -> float | None:
        quotas = self._quotas()
        if not quotas:
            return None
        ip = canonical_ip(host)
        default: float | None = None
        for entity, values in quotas.items():
            if len(entity) != 1 or entity[0][0] != IP or CONNECTION_CREATION_RATE not in values:
                continue
            name = entity[0][1]
            if name is None:
                default = values[CONNECTION_CREATION_RATE]
            elif canonical_ip(name) == ip:
                return values[CONNECTION_CREATION_RATE]
        return default

    def admit(self, host: str, now_ms: int) -> int:
        """Record a new connection from ``host``: 0 to accept it, else the ms to hold it before closing it."""
        quota = self.quota_for(host)
        if quota is None:
            return 0
        ip = canonical_ip(host)
        entry = self._rates.get(ip)
        if entry is None:
            if len(self._rates) >= MAX_TRACKED:
                self._expire(now_ms)
            entry = self._rates[ip] = _Entry(SampledRate(self.window.num_windows, self.window.window_ms), now_ms)
        entry.touched_ms = now_ms
        entry.rate.record(1.0, now_ms)
        throttle = throttle_time_ms(entry.rate.rate_per_s(now_ms), quota, entry.rate.window_size_ms(now_ms))
        throttle = min(throttle, self.window.window_ms)
        if throttle <= 0:
            return 0
        # Not accepted, so not counted: the rate measures the connections the broker took.
        entry.rate.record(-1.0, now_ms)
        self.throttled_total += 1
        self.throttle_time_ms_total += throttle
        return throttle

    def _expire(self, now_ms: int) -> None:
        for ip in [ip for ip, e in self._rates.items() if now_ms - e.touched_ms > SENSOR_EXPIRY_MS]:
            del self._rates[ip]


class ConnectionCreationRate:
    """A connection creation rate and its limit: the broker-wide ``max.connection.creation.rate``, or
    a listener's (``limit`` is read at each connection: a dynamic change applies to the next one)."""

    def __init__(self, limit: Callable[[], int], window: QuotaWindow) -> None:
        self._limit = limit
        self.window = window
        self.rate = SampledRate(window.num_windows, window.window_ms)
        #: Connections made to wait, and the wait they were given, in total.
        self.throttled_total = 0
        self.throttle_time_ms_total = 0

    def admit(self, now_ms: int) -> int:
        """Record a new connection: 0 to serve it now, else the ms it waits first (and the listener with it)."""
        self.rate.record(1.0, now_ms)
        limit = self._limit()
        if limit >= INT32_MAX:
            return 0  # Kafka's default: unlimited
        throttle = throttle_time_ms(self.rate.rate_per_s(now_ms), limit, self.rate.window_size_ms(now_ms))
        throttle = min(throttle, self.window.window_ms)
        if throttle > 0:
            self.throttled_total += 1
            self.throttle_time_ms_total += throttle
        return max(throttle, 0)

    def unrecord(self, now_ms: int) -> None:
        """A connection the ip quota refused: not taken, so not counted (Kafka's updateListenerMetrics)."""
        self.rate.record(-1.0, now_ms)


class ListenerConnectionRate:
    """One listener's own rate (``listener.name.<listener>.max.connection.creation.rate``) beside the
    broker's, and the waits this listener's connections were given for either (Kafka's per-listener
    connection-accept-throttle-time)."""

    def __init__(self, listener: str, limit: Callable[[], int], window: QuotaWindow, *,
                 broker: ConnectionCreationRate | None, protected: bool = False) -> None:
        self.listener = listener
        self.rate = ConnectionCreationRate(limit, window)
        #: The broker-wide rate, None for the protected inter-broker listener (not counted in it).
        self.broker = None if protected else broker
        self.protected = protected
        self.throttled_total = 0
        self.throttle_time_ms_total = 0

    def admit(self, now_ms: int) -> tuple[int, bool]:
        """Record a new connection in both rates: the ms it waits before it is served (0: now), and
        whether the listener's own limit is what makes it wait that long."""
        broker_ms = self.broker.admit(now_ms) if self.broker is not None else 0
        listener_ms = self.rate.admit(now_ms)
        throttle_ms = max(broker_ms, listener_ms)
        if throttle_ms > 0:
            self.throttled_total += 1
            self.throttle_time_ms_total += throttle_ms
        return throttle_ms, listener_ms > broker_ms

    def unrecord(self, now_ms: int) -> None:
        """A connection the ip quota refused: out of the listener's rate and the broker's."""
        if self.broker is not None:
            self.broker.unrecord(now_ms)
        self.rate.unrecord(now_ms)


@dataclass(slots=True)
class _Waiting:
    gate: _Gate
    transport: asyncio.Transport
    host: str


class _Acceptor:
    """One listener's new connections, taken one at a time in arrival order (Kafka's Acceptor): while
    a connection waits out the broker's throttle, the ones after it wait too."""

    def __init__(self, owner: ConnectionRateGate, rate: ListenerConnectionRate | None) -> None:
        self._owner = owner
        self.rate = rate
        self._queue: deque[_Waiting] = deque()
        self._busy_until_ms = 0
        self._wakeup: asyncio.TimerHandle | None = None
        #: A throttled connection is waiting to be served: the ones after it wait for it.
        self._serving = False

    def arrive(self, waiting: _Waiting) -> None:
        if self._queue or self._serving or self._owner.now_ms() < self._busy_until_ms:
            waiting.transport.pause_reading()  # not served yet: nothing of it is read
            self._queue.append(waiting)
            self._schedule()
            return
        self._take(waiting)

    def _take(self, waiting: _Waiting) -> None:
        owner = self._owner
        now_ms = owner.now_ms()
        if self.rate is not None:
            throttle_ms, by_listener = self.rate.admit(now_ms)
        else:
            throttle_ms, by_listener = owner.broker_rate.admit(now_ms) if owner.broker_rate is not None else 0, False
        if throttle_ms <= 0:
            owner.admit_ip(waiting, self.rate)
            return
        self._busy_until_ms = now_ms + throttle_ms
        self._serving = True
        waiting.transport.pause_reading()
        key = (f"listener.name.{self.rate.listener.lower()}.max.connection.creation.rate"
               if by_listener and self.rate is not None else "max.connection.creation.rate")
        owner.report("accepting new connections slowly: the one from %s waits %d ms, and newer ones behind it "
                     "(%s; %d waited on this listener so far)", waiting.host, throttle_ms, key,
                     self.rate.throttled_total if self.rate is not None else
                     owner.broker_rate.throttled_total if owner.broker_rate is not None else 0)

        def served() -> None:
            self._serving = False
            owner.admit_ip(waiting, self.rate)
            self._drain()

        asyncio.get_running_loop().call_later(throttle_ms / 1000.0, served)

    def _schedule(self) -> None:
        if self._wakeup is None and not self._serving:  # (served() drains when it is done)
            delay_ms = max(self._busy_until_ms - self._owner.now_ms(), 0)
            self._wakeup = asyncio.get_running_loop().call_later(delay_ms / 1000.0, self._drain)

    def close(self) -> None:
        """Shutdown: the connections still waiting are closed unserved."""
        if self._wakeup is not None:
            self._wakeup.cancel()
            self._wakeup = None
        while self._queue:
            self._queue.popleft().transport.abort()

    def _drain(self) -> None:
        self._wakeup = None
        while self._queue and not self._serving:
            if self._owner.now_ms() < self._busy_until_ms:
                self._schedule()
                return
            waiting = self._queue.popleft()
            if waiting.transport.is_closing():
                continue  # the client gave up while it waited: never taken, never counted
            self._take(waiting)


class ConnectionRateGate:
    """Wraps a listener's protocol factory: a connection over its address's rate is held unread and
    closed after its throttle time; the others go on to the listener's own protocol."""

    def __init__(self, rates: IpConnectionRates, clock: Clock, broker_rate: ConnectionCreationRate | None = None) -> None:
        self.rates = rates
        self.broker_rate = broker_rate
        self._clock = clock
        self._held: set[asyncio.Transport] = set()
        self._acceptors: list[_Acceptor] = []
        self._last_report_ms = -10_000_000

    def wrap(self, factory: Callable[[], asyncio.BaseProtocol],
             rate: ListenerConnectionRate | None = None) -> Callable[[], asyncio.BaseProtocol]:
        """One listener's factory behind its own acceptor (call once per listener), with the listener's
        own rate (None: the broker-wide rate alone)."""
        acceptor = _Acceptor(self, rate)
        self._acceptors.append(acceptor)

        def make() -> asyncio.BaseProtocol:
            return _Gate(self, factory, acceptor)

        return make

    def now_ms(self) -> int:
        return self._clock.monotonic_ns() // 1_000_000

    def admit_ip(self, waiting: _Waiting, listener_rate: ListenerConnectionRate | None = None) -> None:
        """The ip quota's turn, then the listener's own protocol (or the connection held and closed)."""
        transport, host = waiting.transport, waiting.host
        if transport.is_closing():
            return
        now_ms = self.now_ms()
        throttle_ms = self.rates.admit(host, now_ms) if host else 0
        if throttle_ms > 0:
            if listener_rate is not None:
                listener_rate.unrecord(now_ms)
            elif self.broker_rate is not None:
                self.broker_rate.unrecord(now_ms)
            self._throttled(transport, host, throttle_ms)
            return
        waiting.gate.serve(transport)

    def report(self, message: str, *args: object) -> None:
        """Log ``message`` at WARNING -- at most one line per 10 s: a flood of throttled connections
        must not flood the log."""
        now_ms = self.now_ms()
        if now_ms - self._last_report_ms >= 10_000:
            self._last_report_ms = now_ms
            log.warning(message, *args)

    def close(self) -> None:
        for transport in list(self._held):
            transport.abort()
        self._held.clear()
        for acceptor in self._acceptors:
            acceptor.close()

    def _throttled(self, transport: asyncio.Transport, host: str, throttle_ms: int) -> None:
        transport.pause_reading()
        self._held.add(transport)

        def close() -> None:
            self._held.discard(transport)
            transport.abort()

        asyncio.get_running_loop().call_later(throttle_ms / 1000.0, close)
        self.report("throttling new connections from %s for %d ms (connection_creation_rate; %d throttled so far)",
                    host, throttle_ms, self.rates.throttled_total)


class _Gate(asyncio.Protocol):
    def __init__(self, owner: ConnectionRateGate, factory: Callable[[], asyncio.BaseProtocol],
                 acceptor: _Acceptor) -> None:
        self._owner = owner
        self._factory = factory
        self._acceptor = acceptor

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        peer = transport.get_extra_info("peername")
        host = str(peer[0]) if isinstance(peer, tuple) else ""
        self._acceptor.arrive(_Waiting(self, transport, host))

    def serve(self, transport: asyncio.Transport) -> None:
        inner = self._factory()
        transport.resume_reading()  # (paused if it waited; nothing is delivered before this returns)
        transport.set_protocol(inner)
        inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:  # pragma: no cover - a held connection is not read
        pass

    def connection_lost(self, exc: Exception | None) -> None:
        pass
