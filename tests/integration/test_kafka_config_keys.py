"""Every Kafka 4.x topic and broker config key is known by name (issue 27 point 5): tierlog's own act,
the others are accepted, stored and described with Kafka's default; a misspelt key still fails."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from confluent_kafka.error import KafkaException

from tests.helpers.broker import BrokerProcess


def describe(admin: AdminClient, resource: ConfigResource) -> dict[str, str | None]:
    got = admin.describe_configs([resource], request_timeout=30)[resource].result(30)
    return {name: entry.value for name, entry in got.items()}


def test_unmodelled_topic_and_broker_keys(broker: BrokerProcess, topic_name: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1, config={
        "compression.zstd.level": "7", "unclean.leader.election.enable": "true"})])[topic_name].result(30)
    topic = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
    values = describe(admin, topic)
    assert values["compression.zstd.level"] == "7"
    assert values["unclean.leader.election.enable"] == "true"
    assert values["follower.replication.throttled.replicas"] == ""  # Kafka's default, an empty list

    node = ConfigResource(ConfigResource.Type.BROKER, "1")
    admin.incremental_alter_configs([ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
        ConfigEntry("sasl.kerberos.min.time.before.relogin", "61000",
                    incremental_operation=AlterConfigOpType.SET)])])[node].result(30)
    assert describe(admin, node)["sasl.kerberos.min.time.before.relogin"] == "61000"

    misspelt = ConfigResource(ConfigResource.Type.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("compression.zstd.levle", "3", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException, match="compression.zstd.level"):
        admin.incremental_alter_configs([misspelt])[misspelt].result(30)
