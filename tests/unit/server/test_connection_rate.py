"""The ip entities' connection_creation_rate decision (Kafka's ConnectionQuotas), pure: which quota
applies to an address, when a new connection is refused and for how long, and that refusals are
not counted in the rate."""

from __future__ import annotations

import pytest

from tierlog.config import BrokerConfig
from tierlog.errors import ConfigError
from tierlog.metadata.configs import stored_key
from tierlog.metadata.records import ConfigResourceType
from tierlog.server.connection_rate import (
    ConnectionCreationRate,
    IpConnectionRates,
    ListenerConnectionRate,
    canonical_ip,
)
from tierlog.server.quotas import QuotaWindow

RATE = "connection_creation_rate"


def _rates(quotas: dict, num: int = 2, size_s: int = 1) -> IpConnectionRates:
    return IpConnectionRates(lambda: quotas, QuotaWindow(num, size_s))


def test_without_an_ip_quota_every_connection_is_accepted() -> None:
    r = _rates({(("user", None),): {"producer_byte_rate": 1.0}})
    assert [r.admit("10.0.0.1", 1000) for _ in range(100)] == [0] * 100


def test_an_addresss_own_quota_wins_over_the_default() -> None:
    r = _rates({(("ip", None),): {RATE: 5.0}, (("ip", "10.0.0.2"),): {RATE: 100.0}})
    assert r.quota_for("10.0.0.1") == 5.0
    assert r.quota_for("10.0.0.2") == 100.0
    assert _rates({(("ip", "10.0.0.2"),): {RATE: 1.0}}).quota_for("10.0.0.1") is None


def test_over_the_rate_a_connection_is_refused_for_kafkas_throttle_time_and_not_counted() -> None:
    r = _rates({(("ip", None),): {RATE: 5.0}})
    # Two windows of 1 s: the rate divides by at least one window, so 5 connections at once pass.
    assert [r.admit("10.0.0.1", 1000) for _ in range(5)] == [0] * 5
    # The 6th makes 6/s: (6 - 5) / 5 x 1000 ms.
    assert r.admit("10.0.0.1", 1000) == 200
    # Refused ones are un-recorded, so the next gets the same answer, not a longer one.
    assert r.admit("10.0.0.1", 1000) == 200
    assert r.throttled_total == 2 and r.throttle_time_ms_total == 400
    # Another address has its own rate.
    assert r.admit("10.0.0.9", 1000) == 0
    # Once the samples age out the address connects again.
    assert r.admit("10.0.0.1", 3500) == 0


def test_the_throttle_time_is_capped_at_one_window() -> None:
    r = _rates({(("ip", None),): {RATE: 1.0}}, num=2, size_s=1)
    got = [r.admit("10.0.0.1", 0) for _ in range(50)]
    assert max(got) <= 1000 and got[-1] == 1000


def test_addresses_are_compared_in_one_spelling() -> None:
    assert canonical_ip("0:0:0:0:0:0:0:1") == canonical_ip("::1") == "::1"
    r = _rates({(("ip", "0:0:0:0:0:0:0:1"),): {RATE: 7.0}})
    assert r.quota_for("::1") == 7.0


def test_the_broker_wide_rate_makes_a_connection_wait_and_counts_it() -> None:
    """max.connection.creation.rate (Kafka's broker connection rate sensor): over the limit a new
    connection waits Kafka's throttle time, capped at one window; unlike an ip quota's refusal the
    connection is taken afterwards, so it stays counted. A dynamic change applies to the next one."""
    limit = [5]
    r = ConnectionCreationRate(lambda: limit[0], QuotaWindow(2, 1))
    assert [r.admit(1000) for _ in range(5)] == [0] * 5
    assert r.admit(1000) == 200  # 6/s: (6 - 5) / 5 x 1000 ms
    assert r.admit(1000) == 400  # 7/s: counted, so the next waits longer
    assert max(r.admit(1000) for _ in range(50)) == 1000  # never more than one window
    assert r.throttled_total == 52
    limit[0] = 2**31 - 1  # Kafka's default: unlimited
    assert r.admit(1000) == 0
    r.unrecord(1000)  # an ip quota's refusal is taken back out of the broker's rate


def test_without_a_broker_limit_nothing_waits() -> None:
    r = ConnectionCreationRate(lambda: 2**31 - 1, QuotaWindow(2, 1))
    assert [r.admit(1000) for _ in range(1000)] == [0] * 1000 and r.throttled_total == 0


UNLIMITED = 2**31 - 1


def test_a_listener_limit_under_the_broker_one_makes_its_connections_wait() -> None:
    """listener.name.<l>.max.connection.creation.rate: the listener's own rate beside the broker's; a
    connection waits the longer of the two throttle times and is counted in both."""
    broker = ConnectionCreationRate(lambda: 100, QuotaWindow(2, 1))
    slow = ListenerConnectionRate("SLOW", lambda: 5, QuotaWindow(2, 1), broker=broker)
    fast = ListenerConnectionRate("FAST", lambda: UNLIMITED, QuotaWindow(2, 1), broker=broker)
    assert [slow.admit(1000) for _ in range(5)] == [(0, False)] * 5
    assert slow.admit(1000) == (200, True)  # 6/s on the listener: (6 - 5) / 5 x 1000 ms
    assert [fast.admit(1000) for _ in range(50)] == [(0, False)] * 50  # the other listener is not held back
    assert (slow.throttled_total, slow.throttle_time_ms_total, fast.throttled_total) == (1, 200, 0)
    assert broker.rate.rate_per_s(1000) == 56.0  # both listeners' connections are in the broker's rate
    # Over the broker's limit the broker's (longer) throttle time is the one waited, on any listener.
    waits = [fast.admit(1000) for _ in range(50)]
    assert waits[-1][0] > 0 and not waits[-1][1] and fast.throttled_total > 0


def test_an_ip_refusal_is_taken_out_of_both_rates() -> None:
    broker = ConnectionCreationRate(lambda: UNLIMITED, QuotaWindow(2, 1))
    listener = ListenerConnectionRate("L", lambda: 5, QuotaWindow(2, 1), broker=broker)
    for _ in range(5):
        listener.admit(1000)
        listener.unrecord(1000)
    assert listener.rate.rate.rate_per_s(1000) == 0 and broker.rate.rate_per_s(1000) == 0
    assert [listener.admit(1000) for _ in range(5)] == [(0, False)] * 5


def test_the_protected_inter_broker_listener_is_left_out_of_the_broker_rate() -> None:
    """Kafka's protectedListener: neither recorded in nor throttled by the broker-wide rate; its own
    limit (by default the broker-wide value) still applies to its own connections."""
    broker = ConnectionCreationRate(lambda: 5, QuotaWindow(2, 1))
    clients = ListenerConnectionRate("CLIENTS", lambda: 5, QuotaWindow(2, 1), broker=broker)
    inter = ListenerConnectionRate("INTERNAL", lambda: 5, QuotaWindow(2, 1), broker=broker, protected=True)
    assert max(clients.admit(1000)[0] for _ in range(20)) > 0  # the broker's rate is well over 5/s
    assert [inter.admit(1000) for _ in range(5)] == [(0, False)] * 5
    assert broker.rate.rate_per_s(1000) == 20.0
    assert inter.admit(1000) == (200, True)  # its own sixth connection in the second


def test_the_per_listener_key_is_a_config_key_static_and_dynamic() -> None:
    config = BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:9092,INTERNAL://127.0.0.1:9093",
                           "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
                           "inter.broker.listener.name": "INTERNAL",
                           "max.connection.creation.rate": "50",
                           "listener.name.plaintext.max.connection.creation.rate": "7"})
    assert config.listener_value("PLAINTEXT", "max.connection.creation.rate") == 7
    assert config.listener_value("INTERNAL", "max.connection.creation.rate") == 50  # the broker-wide value
    assert config.listener_override("plaintext", "max.connection.creation.rate") == 7
    assert config.listener_override("INTERNAL", "max.connection.creation.rate") is None
    assert config.inter_broker_listener() == "INTERNAL"
    assert BrokerConfig({}).inter_broker_listener() == "PLAINTEXT"  # security.inter.broker.protocol's name
    with pytest.raises(ConfigError) as bad:
        BrokerConfig({"listener.name.plaintext.max.connection.creation.rate": "-1"})
    assert bad.value.key == "listener.name.plaintext.max.connection.creation.rate"
    name, key = stored_key(ConfigResourceType.BROKER, "listener.name.PLAINTEXT.max.connection.creation.rate")
    assert name == "listener.name.plaintext.max.connection.creation.rate" and key.name == "max.connection.creation.rate"
    with pytest.raises(ConfigError):
        stored_key(ConfigResourceType.BROKER, "listener.name.plaintext.max.connections.per.ip")
