"""Client quotas as Kafka enforces them: a windowed rate per quota entity and the throttle time that
brings it back under its bound (ClientQuotaManager, ClientRequestQuotaManager), and a token bucket for
the controller mutation rate (ControllerMutationQuotaManager). Pure: every call takes ``now_ms``.

* The rate is Kafka's ``Rate`` over ``SampledStat``: ``quota.window.num`` samples, each starting at
  the first value recorded after the previous one is ``quota.window.size.seconds`` old; samples
  older than all the windows together are dropped. The rate divides the samples' sum by the time
  since the oldest sample started, but never by less than ``num - 1`` whole windows, so one burst
  right after a quiet spell is not measured as a huge rate.
* A value is recorded first, then checked: over the bound, the throttle time is the time at that
  rate the excess would take to drain, ``(rate - quota) / quota * window``, which is how long the
  client must stay quiet for its rate to fall back to the quota. The response carries it and the
  connection is not read for that long (KIP-219).
* Which quota applies and whose rate it is: the first entity in Kafka's precedence order that sets
  the key (``metadata.client_quotas.resolve``); a quota from a default entity (``<default>``) gives
  every matching user/client its own rate, as Kafka's metric tags do.
* request_percentage counts handling time as a percentage of one thread: 1 s of handling in a
  second is 100; its throttle time is capped at one window (Kafka's ClientRequestQuotaManager).
* controller_mutation_rate: a token bucket holding at most ``quota * num * window_s`` partition
  mutations; a request is refused (THROTTLING_QUOTA_EXCEEDED) only while the bucket is below zero,
  so one request may overdraw it once -- the throttle time is the time to refill to zero.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from tierlog.config.settings import setting
from tierlog.metadata.client_quotas import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    resolve,
)
from tierlog.metadata.image import QuotaEntity

#: Nanoseconds of handling time → request_percentage units (percent of one thread per second).
NANOS_TO_PERCENTAGE = 100.0 / 1e9
#: Sensors not touched for this long are forgotten (Kafka expires quota sensors after an hour).
SENSOR_EXPIRY_MS = 3_600_000


class QuotaType(enum.Enum):
    PRODUCE = PRODUCER_BYTE_RATE
    FETCH = CONSUMER_BYTE_RATE
    REQUEST = REQUEST_PERCENTAGE
    CONTROLLER_MUTATION = CONTROLLER_MUTATION_RATE


@dataclass(slots=True)
class _Sample:
    start_ms: int
    value: float = 0.0


@dataclass(slots=True)
class SampledRate:
    """Kafka's Rate over a SampledStat with ``num_windows`` samples of ``window_ms``."""

    num_windows: int
    window_ms: int
    samples: list[_Sample] = field(default_factory=list)

    def record(self, value: float, now_ms: int) -> None:
        self._purge(now_ms)
        if not self.samples or now_ms - self.samples[-1].start_ms >= self.window_ms:
            self.samples.append(_Sample(now_ms))
            if len(self.samples) > self.num_windows:
                del self.samples[0]
        self.samples[-1].value += value

    def _purge(self, now_ms: int) -> None:
        expire_ms = self.num_windows * self.window_ms
        self.samples = [s for s in self.samples if now_ms - s.start_ms < expire_ms]

    def window_size_ms(self, now_ms: int) -> int:
        """The time the rate divides by (Kafka's Rate.windowSize)."""
        elapsed = now_ms - self.samples[0].start_ms if self.samples else 0
        full = elapsed // self.window_ms
        minimum = self.num_windows - 1
        if full < minimum:
            elapsed += (minimum - full) * self.window_ms
        return max(elapsed, 1)

    def rate_per_s(self, now_ms: int) -> float:
        self._purge(now_ms)
        total = sum(s.value for s in self.samples)
        return total / (self.window_size_ms(now_ms) / 1000.0)


def throttle_time_ms(rate: float, quota: float, window_ms: int) -> int:
    """Kafka's QuotaUtils.throttleTime: how long the excess takes to drain at the quota."""
    if rate <= quota or quota <= 0:
        return 0
    return round((rate - quota) / quota * window_ms)


@dataclass(slots=True)
class TokenBucket:
    """Kafka's TokenBucket: credits refill at ``quota`` per second up to ``burst``; recording spends."""

    tokens: float
    last_ms: int

    def refill(self, quota: float, burst: float, now_ms: int) -> None:
        self.tokens = min(burst, self.tokens + quota * max(0, now_ms - self.last_ms) / 1000.0)
        self.last_ms = now_ms


@dataclass(frozen=True, slots=True)
class QuotaWindow:
    """The sample windows client quotas' rates are measured over."""

    num_windows: int = setting("quota.window.num")
    window_size_s: int = setting("quota.window.size.seconds")

    @property
    def window_ms(self) -> int:
        return self.window_size_s * 1000


QuotaLookup = Callable[[], Mapping[QuotaEntity, Mapping[str, float]]]


class QuotaManager:
    """Every quota's rates; ``quotas`` returns the current image's client quotas (so a change made
    through AlterClientQuotas applies to the next request)."""

    def __init__(self, quotas: QuotaLookup, window: QuotaWindow = QuotaWindow()) -> None:
        self._quotas = quotas
        self.window = window
        self._rates: dict[tuple[QuotaType, QuotaEntity], tuple[SampledRate, list[int]]] = {}
        self._buckets: dict[QuotaEntity, TokenBucket] = {}
        #: Throttle time given out per quota type, in ms, and how many responses were throttled.
        self.throttle_time_ms_total: dict[QuotaType, int] = {t: 0 for t in QuotaType}
        self.throttled_total: dict[QuotaType, int] = {t: 0 for t in QuotaType}

    @property
    def any_configured(self) -> bool:
        """Whether any client quota is set: without one no request is measured (nothing to resolve
        a rate against), so the per-request accounting can be skipped whole."""
        return bool(self._quotas())

    def _resolve(self, qtype: QuotaType, user: str | None, client_id: str) -> tuple[QuotaEntity, float] | None:
        quotas = self._quotas()
        if not quotas:
            return None
        found = resolve(quotas, user, client_id, qtype.value)
        if found is None:
            return None
        entity, quota = found
        # A default part measures each matching user/client on its own (Kafka's metric tags).
        names = {"user": user, "client-id": client_id}
        return tuple((t, n if n is not None else names.get(t)) for t, n in entity), quota

    def record(self, qtype: QuotaType, user: str | None, client_id: str, value: float, now_ms: int) -> int:
        """Record ``value`` (bytes, or percentage units for REQUEST) and return the throttle time."""
        found = self._resolve(qtype, user, client_id)
        if found is None:
            return 0
        sensor_key, quota = found
        entry = self._rates.get((qtype, sensor_key))
        if entry is None:
            if len(self._rates) > 10_000:
                self._expire(now_ms)
            entry = self._rates[(qtype, sensor_key)] = (
                SampledRate(self.window.num_windows, self.window.window_ms), [now_ms])
        rate, touched = entry
        touched[0] = now_ms
        rate.record(value, now_ms)
        throttle = throttle_time_ms(rate.rate_per_s(now_ms), quota, rate.window_size_ms(now_ms))
        if qtype is QuotaType.REQUEST:
            throttle = min(throttle, self.window.window_ms)
        return self._count(qtype, throttle)

    def max_value_in_window(self, qtype: QuotaType, user: str | None, client_id: str) -> float | None:
        """Kafka's getMaxValueInQuotaWindow: the most a client may take in the windows before the
        current one (``quota x (num - 1) x window_s``); None without a quota. Caps a fetch's
        max_bytes, so a consumer whose quota is far below its fetch size is not throttled for ever."""
        found = self._resolve(qtype, user, client_id)
        if found is None:
            return None
        return found[1] * (self.window.num_windows - 1) * self.window.window_size_s

    def record_request_time(self, user: str | None, client_id: str, nanos: int, now_ms: int) -> int:
        return self.record(QuotaType.REQUEST, user, client_id, nanos * NANOS_TO_PERCENTAGE, now_ms)

    def mutation_throttle_ms(self, user: str | None, client_id: str, now_ms: int) -> int:
        """Before a mutation: > 0 (the time until the bucket is back at zero) when it is overdrawn and
        the mutation must be refused with THROTTLING_QUOTA_EXCEEDED; 0 when it may go ahead."""
        found = self._bucket(user, client_id, now_ms)
        if found is None:
            return 0
        bucket, quota = found
        if bucket.tokens >= 0:
            return 0
        return round(-bucket.tokens / quota * 1000)

    def record_mutations(self, user: str | None, client_id: str, partitions: int, now_ms: int) -> int:
        """Spend ``partitions`` mutations; the throttle time this leaves (0 if still in credit)."""
        found = self._bucket(user, client_id, now_ms)
        if found is None:
            return 0
        bucket, quota = found
        bucket.tokens -= partitions
        throttle = 0 if bucket.tokens >= 0 else round(-bucket.tokens / quota * 1000)
        return self._count(QuotaType.CONTROLLER_MUTATION, throttle)

    def _bucket(self, user: str | None, client_id: str, now_ms: int) -> tuple[TokenBucket, float] | None:
        found = self._resolve(QuotaType.CONTROLLER_MUTATION, user, client_id)
        if found is None:
            return None
        key, quota = found
        burst = quota * self.window.num_windows * self.window.window_size_s
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = TokenBucket(burst, now_ms)
        bucket.refill(quota, burst, now_ms)
        return bucket, quota

    def _count(self, qtype: QuotaType, throttle_ms: int) -> int:
        if throttle_ms > 0:
            self.throttle_time_ms_total[qtype] += throttle_ms
            self.throttled_total[qtype] += 1
        return throttle_ms

    def _expire(self, now_ms: int) -> None:
        for key in [k for k, (_, touched) in self._rates.items() if now_ms - touched[0] > SENSOR_EXPIRY_MS]:
            del self._rates[key]
