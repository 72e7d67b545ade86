"""Every key tierlog defines under Kafka's name has Kafka's default (the pinned Kafka's ConfigDefs, in
src/tierlog/config/kafka_keys.py), unless it is listed below with the reason it differs: a Kafka user
who sets nothing gets Kafka's behaviour."""

from __future__ import annotations

import math

from tierlog.config.kafka_keys import KAFKA_KEYS
from tierlog.config.keys import BROKER_KEYS, SECURITY_KEYS, TOPIC_KEYS

#: Deliberate differences, each with its reason (docs/configuration.md shows both defaults' effect).
DIFFERENT_ON_PURPOSE = {
    "remote.log.storage.manager.class.name": "tiering to a local directory works out of the box",
    "broker.id": "tierlog is always one KRaft-mode node; node.id names it",
    "node.id": "one command starts a working broker: node 1, no config needed",
    "listeners": "loopback by default: the one-command broker is not exposed on the network",
    "queued.max.request.bytes": "bounds the memory of requests waiting for a Python worker (Kafka: unbounded)",
    "log.dir": "a data dir under the working directory rather than /tmp",
    "ssl.keystore.type": "Python's ssl reads PEM; JKS and PKCS12 stores are converted by the operator",
    "ssl.truststore.type": "Python's ssl reads PEM; JKS and PKCS12 stores are converted by the operator",
}


def _same(kafka_default: str | None, ours: object) -> bool:
    if kafka_default in (None, "null"):
        return ours in (None, "", [], ())
    if isinstance(ours, bool):
        return kafka_default == str(ours).lower()
    if isinstance(ours, float):
        return math.isclose(float(kafka_default), ours)
    if isinstance(ours, (list, tuple)):
        return kafka_default == ",".join(map(str, ours))
    return kafka_default == str(ours)


def test_every_kafka_key_tierlog_defines_has_kafkas_default_or_a_stated_reason() -> None:
    ours = {key.name: key for key in (*TOPIC_KEYS, *BROKER_KEYS, *SECURITY_KEYS)}
    differing = {name: (kafka_default, ours[name].default)
                 for _scope, name, _type, kafka_default, _importance in KAFKA_KEYS
                 if name in ours and not _same(kafka_default, ours[name].default)}
    unexplained = {name: pair for name, pair in differing.items() if name not in DIFFERENT_ON_PURPOSE}
    assert not unexplained, f"(Kafka's default, tierlog's) differ with no stated reason: {unexplained}"
    stale = set(DIFFERENT_ON_PURPOSE) - set(differing)
    assert not stale, f"listed as different but now equal to Kafka's: {stale}"


def test_kafka_4_defaults_that_changed_from_3() -> None:
    # KIP-1030 (Kafka 4.0) changed these; a user upgrading from 3.x reads them in Kafka's docs.
    ours = {key.name: key.default for key in (*TOPIC_KEYS, *BROKER_KEYS)}
    assert ours["message.timestamp.after.max.ms"] == 3_600_000
    assert ours["num.recovery.threads.per.data.dir"] == 2
