"""Client quotas (server/quotas.py, metadata/client_quotas.py): Kafka's windowed rate, throttle time,
precedence of entities, the mutation token bucket and AlterClientQuotas' validation rules."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from tierlog.metadata.client_quotas import (
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    InvalidQuotaRequest,
    QuotaFilter,
    describe,
    resolve,
    validate_entity,
    validate_filter,
    validate_op,
)
from tierlog.metadata.image import QuotaEntity
from tierlog.server.quotas import QuotaManager, QuotaType, QuotaWindow, SampledRate, throttle_time_ms
from tierlog.testing import ManualClock

U = "user"
C = "client-id"


def _manager(quotas: dict[QuotaEntity, Mapping[str, float]], window: QuotaWindow | None = None) -> QuotaManager:
    return QuotaManager(lambda: quotas, window or QuotaWindow())


def _now(clock: ManualClock) -> int:
    return clock.monotonic_ns() // 1_000_000


def test_rate_divides_by_at_least_num_minus_one_windows() -> None:
    rate = SampledRate(11, 1000)
    rate.record(10_000, 0)
    # One burst right away: measured over 10 windows (Kafka's Rate), not over 0 ms.
    assert rate.window_size_ms(0) == 10_000
    assert rate.rate_per_s(0) == pytest.approx(1000.0)


def test_samples_expire_after_all_windows() -> None:
    rate = SampledRate(3, 1000)
    rate.record(3000, 0)
    assert rate.rate_per_s(2999) > 0
    assert rate.rate_per_s(3000) == 0


def test_throttle_time_is_time_for_excess_to_drain() -> None:
    # 2000 B/s measured over 10 s against 1000 B/s: 10 s of excess at the quota.
    assert throttle_time_ms(2000.0, 1000.0, 10_000) == 10_000
    assert throttle_time_ms(900.0, 1000.0, 10_000) == 0


def test_producer_under_quota_is_not_throttled_and_over_quota_is() -> None:
    clock = ManualClock()
    m = _manager({((C, "greedy"),): {"producer_byte_rate": 1000.0}})
    # 1000 B/s for the first 10 s (11 windows of 1 s): never throttled.
    for _ in range(10):
        assert m.record(QuotaType.PRODUCE, "ANONYMOUS", "greedy", 1000, _now(clock)) == 0
        clock.advance(1000)
    throttle = m.record(QuotaType.PRODUCE, "ANONYMOUS", "greedy", 10_000, _now(clock))
    assert throttle > 0
    # Staying quiet for the throttle time brings the rate back to the quota.
    clock.advance(throttle)
    assert m.record(QuotaType.PRODUCE, "ANONYMOUS", "greedy", 0, _now(clock)) == 0
    assert m.throttled_total[QuotaType.PRODUCE] == 1
    assert m.throttle_time_ms_total[QuotaType.PRODUCE] == throttle


def test_other_clients_are_not_measured() -> None:
    clock = ManualClock()
    m = _manager({((C, "greedy"),): {"producer_byte_rate": 10.0}})
    assert m.record(QuotaType.PRODUCE, "ANONYMOUS", "polite", 10**9, _now(clock)) == 0
    assert m.record(QuotaType.PRODUCE, "ANONYMOUS", "greedy", 10**6, _now(clock)) > 0


def test_default_quota_gives_each_client_its_own_rate() -> None:
    clock = ManualClock()
    m = _manager({((C, None),): {"producer_byte_rate": 1000.0}})
    # Each client may send 10 windows' worth at once; sharing one rate would throttle the second.
    assert m.record(QuotaType.PRODUCE, "ANONYMOUS", "a", 10_000, _now(clock)) == 0
    assert m.record(QuotaType.PRODUCE, "ANONYMOUS", "b", 10_000, _now(clock)) == 0
    assert m.record(QuotaType.PRODUCE, "ANONYMOUS", "a", 1000, _now(clock)) > 0


def test_request_percentage_throttle_is_capped_at_one_window() -> None:
    clock = ManualClock()
    m = _manager({((U, None),): {"request_percentage": 1.0}})
    assert m.record_request_time("alice", "c", 60 * 10**9, _now(clock)) == 1000


def test_precedence_order() -> None:
    quotas: dict[QuotaEntity, Mapping[str, float]] = {
        ((C, None),): {"producer_byte_rate": 1.0},
        ((C, "c"),): {"producer_byte_rate": 2.0},
        ((U, None),): {"producer_byte_rate": 3.0},
        ((C, "c"), (U, None)): {"producer_byte_rate": 4.0},
        ((U, "u"),): {"producer_byte_rate": 5.0},
        ((C, None), (U, "u")): {"producer_byte_rate": 6.0},
        ((C, "c"), (U, "u")): {"producer_byte_rate": 7.0},
    }
    expected = [7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0]
    order = [((C, "c"), (U, "u")), ((C, None), (U, "u")), ((U, "u"),), ((C, "c"), (U, None)), ((U, None),),
             ((C, "c"),), ((C, None),)]
    for value, entity in zip(expected, order, strict=True):
        found = resolve(quotas, "u", "c", "producer_byte_rate")
        assert found == (entity, value)
        del quotas[entity]
    assert resolve(quotas, "u", "c", "producer_byte_rate") is None


def test_precedence_is_per_key() -> None:
    quotas: dict[QuotaEntity, Mapping[str, float]] = {((U, "u"),): {"consumer_byte_rate": 1.0},
                                                      ((C, "c"),): {"producer_byte_rate": 2.0}}
    assert resolve(quotas, "u", "c", "producer_byte_rate") == (((C, "c"),), 2.0)


def test_mutation_bucket_allows_burst_then_refuses_until_refilled() -> None:
    clock = ManualClock()
    m = _manager({((C, "admin"),): {"controller_mutation_rate": 2.0}}, QuotaWindow(2, 1))
    # Burst = 2/s * 2 windows * 1 s = 4 credits; one request may overdraw it once.
    assert m.mutation_throttle_ms("ANONYMOUS", "admin", _now(clock)) == 0
    assert m.record_mutations("ANONYMOUS", "admin", 10, _now(clock)) == 3000
    assert m.mutation_throttle_ms("ANONYMOUS", "admin", _now(clock)) == 3000
    clock.advance(3000)
    assert m.mutation_throttle_ms("ANONYMOUS", "admin", _now(clock)) == 0


@pytest.mark.parametrize("parts", [[], [("group", "g")], [(U, "a"), (U, "b")], [(U, "")], [("ip", "1.2.3.4"), (U, "a")]])
def test_invalid_entities(parts: list[tuple[str, str | None]]) -> None:
    with pytest.raises(InvalidQuotaRequest):
        validate_entity(parts)


@pytest.mark.parametrize(("key", "value"), [("nope", 1.0), ("producer_byte_rate", 1.5), ("producer_byte_rate", -1.0),
                                            ("connection_creation_rate", 1.0)])
def test_invalid_ops(key: str, value: float) -> None:
    with pytest.raises(InvalidQuotaRequest):
        validate_op(validate_entity([(U, "a")]), key, value, False)


def test_valid_ops() -> None:
    validate_op(validate_entity([(U, None), (C, "c")]), "request_percentage", 12.5, False)
    validate_op(validate_entity([("ip", None)]), "connection_creation_rate", 10.0, False)
    # Removing needs a known key but no valid value.
    validate_op(validate_entity([(U, "a")]), "producer_byte_rate", 0.0, True)


def test_describe_filters() -> None:
    quotas: dict[QuotaEntity, Mapping[str, float]] = {
        ((U, "u"),): {"a": 1.0}, ((U, None),): {"a": 2.0}, ((C, "c"), (U, "u")): {"a": 3.0}}
    def got(components: list[QuotaFilter], strict: bool) -> set[QuotaEntity]:
        return {e for e, _ in describe(quotas, validate_filter(components), strict)}
    assert got([QuotaFilter(U, MATCH_EXACT, "u")], False) == {((U, "u"),), ((C, "c"), (U, "u"))}
    assert got([QuotaFilter(U, MATCH_EXACT, "u")], True) == {((U, "u"),)}
    assert got([QuotaFilter(U, MATCH_DEFAULT, None)], False) == {((U, None),)}
    assert got([QuotaFilter(U, MATCH_SPECIFIED, None)], True) == {((U, "u"),)}
    assert got([], False) == set(quotas)
    with pytest.raises(InvalidQuotaRequest):
        validate_filter([QuotaFilter(U, MATCH_EXACT, None)])
    with pytest.raises(InvalidQuotaRequest):
        validate_filter([QuotaFilter(U, MATCH_DEFAULT, "x")])
    with pytest.raises(InvalidQuotaRequest):
        validate_filter([QuotaFilter(U, MATCH_DEFAULT, None), QuotaFilter(U, MATCH_SPECIFIED, None)])


def test_fetch_cap_is_quota_times_all_but_the_current_window() -> None:
    m = _manager({((C, "r"),): {"consumer_byte_rate": 1000.0}}, QuotaWindow(11, 2))
    assert m.max_value_in_window(QuotaType.FETCH, "ANONYMOUS", "r") == 1000.0 * 10 * 2
    assert m.max_value_in_window(QuotaType.FETCH, "ANONYMOUS", "other") is None
