"""Topic ids printed by the CLI are spelt as Kafka spells them (URL-safe base64, no padding)."""

from __future__ import annotations

from confluent_kafka import Uuid

from tierlog.cli.topics_cmd import _kafka_uuid


def test_topic_id_uses_kafkas_url_safe_alphabet() -> None:
    # All ones but the last bits: librdkafka's str() gives '////////////////////+w'.
    assert _kafka_uuid(Uuid(-1, -5)) == "____________________-w"
    assert _kafka_uuid(Uuid(0, 1)) == "AAAAAAAAAAAAAAAAAAAAAQ"
