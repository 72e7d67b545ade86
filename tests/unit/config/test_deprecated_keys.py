"""A key renamed to Kafka's name (#23): Kafka's name acts, the former tierlog name still works with a
WARNING naming Kafka's, and both together are refused (which value was meant cannot be known).

``transaction.remove.expired.transaction.cleanup.interval.ms`` is Kafka's name (TransactionStateManagerConfigs);
tierlog spelt it ``transactions.remove.…`` and accepted Kafka's name as one it does not act on."""

from __future__ import annotations

import logging

import pytest

from tierlog.config import BrokerConfig
from tierlog.config.keys import BROKER_DEF, UNMODELLED_GROUP
from tierlog.errors import ConfigError
from tierlog.server.settings import txn_settings

KAFKA_NAME = "transaction.remove.expired.transaction.cleanup.interval.ms"
OLD_NAME = "transactions.remove.expired.transaction.cleanup.interval.ms"


def test_kafkas_name_is_the_key_that_acts() -> None:
    key = BROKER_DEF.require(KAFKA_NAME)
    assert key.name == KAFKA_NAME and key.group != UNMODELLED_GROUP
    assert txn_settings(BrokerConfig({KAFKA_NAME: "5"})).remove_expired_interval_ms == 5


def test_the_old_name_still_acts_with_a_warning_naming_kafkas(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tierlog.config.broker_config"):
        config = BrokerConfig({OLD_NAME: "7"}, origins={OLD_NAME: "server.properties:3"})
    assert txn_settings(config).remove_expired_interval_ms == 7
    assert config.explicit == {KAFKA_NAME: 7}
    [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert OLD_NAME in record.getMessage() and KAFKA_NAME in record.getMessage()
    assert "server.properties:3" in record.getMessage()


def test_kafkas_name_logs_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tierlog.config.broker_config"):
        BrokerConfig({KAFKA_NAME: "7"})
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.parametrize("order", [(OLD_NAME, KAFKA_NAME), (KAFKA_NAME, OLD_NAME)])
def test_both_names_set_is_one_error_naming_kafkas(order: tuple[str, str]) -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig(dict.fromkeys(order, "1000"))
    message = str(info.value)
    assert info.value.key == KAFKA_NAME
    assert "\n" not in message
    assert message == (f"{KAFKA_NAME}: given twice, as {KAFKA_NAME} and {OLD_NAME} (its deprecated name); "
                       f"set only {KAFKA_NAME}")


def test_a_deprecated_name_is_no_unknown_kafka_key() -> None:
    # Kafka never had the old name: it must not come back as a key "accepted and ignored".
    assert BROKER_DEF.find(OLD_NAME) is BROKER_DEF.keys[KAFKA_NAME]
    assert OLD_NAME not in BROKER_DEF.keys
