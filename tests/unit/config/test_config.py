from __future__ import annotations

import pytest

from tierlog.config import BrokerConfig, LogConfig, parse_properties
from tierlog.errors import ConfigError


def test_broker_synonyms_set_topic_defaults() -> None:
    broker = BrokerConfig({"log.retention.hours": "24", "log.segment.bytes": "1000"})
    defaults = broker.topic_defaults()
    assert defaults["retention.ms"] == 24 * 3_600_000
    assert defaults["segment.bytes"] == 1000
    assert defaults["segment.ms"] == 604_800_000  # log.roll.hours = 168


def test_most_specific_synonym_wins() -> None:
    broker = BrokerConfig({"log.retention.hours": "24", "log.retention.ms": "5000"})
    assert broker.topic_defaults()["retention.ms"] == 5000


def test_unknown_key_suggests_the_right_one() -> None:
    with pytest.raises(ConfigError, match=r"log.retention.hourz: unknown config key; did you mean log.retention.hours\?"):
        BrokerConfig({"log.retention.hourz": "1"})


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("segment.bytes", "13", "below the minimum 14"),
        ("segment.bytes", "abc", "expected an integer"),
        ("preallocate", "yes", "expected true or false"),
        ("message.timestamp.type", "Now", "not one of"),
    ],
)
def test_bad_topic_values_name_the_key(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        LogConfig.from_props({key: value})
    assert info.value.key == key


def test_timestamp_floor_alias() -> None:
    assert LogConfig.from_props({"retention.min.timestamp": "123"}).retention_min_timestamp_ms == 123
    assert LogConfig.from_props({"log.retention.min.timestamp": "7"}).retention_min_timestamp_ms == 7


def test_local_retention_conflicts() -> None:
    with pytest.raises(ConfigError, match="local.retention.ms"):
        LogConfig.from_props({"retention.ms": "1000", "local.retention.ms": "2000"})
    with pytest.raises(ConfigError, match="local.retention.bytes"):
        LogConfig.from_props({"retention.bytes": "1000", "local.retention.bytes": "-1"})


def test_properties_syntax() -> None:
    text = "# comment\n! also\nlog.dirs=/a,/b\nnode.id: 3\nlong.value=a\\\n  b\n"
    assert parse_properties(text) == {"log.dirs": "/a,/b", "node.id": "3", "long.value": "ab"}
    cfg = BrokerConfig({"log.dirs": "/a,/b", "node.id": "3"})
    assert [str(p) for p in cfg.log_dirs] == ["/a", "/b"]
    assert cfg.node_id == 3
