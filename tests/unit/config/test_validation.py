"""BrokerConfig refuses bad configurations with one error naming the key, what it accepts, and where
the value came from; configurations that only look odd (both log.dir and log.dirs, both
log.retention.ms and log.retention.hours) are fine."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tierlog.config import BrokerConfig, LogConfig
from tierlog.config.broker_config import parse_overrides
from tierlog.errors import ConfigError


def refused(props: dict[str, object]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        BrokerConfig(props)
    return info.value


@pytest.mark.parametrize(
    ("props", "key", "message"),
    [
        # unknown keys
        ({"BAD": "1"}, "BAD", "unknown config key"),
        ({"log.retention.hourz": "1"}, "log.retention.hourz", "did you mean log.retention.hours?"),
        ({"retention.ms": "1000"}, "retention.ms",
         "is a topic config, not a broker config; set its broker-wide default log.retention.ms instead"),
        ({"remote.storage.enable": "true"}, "remote.storage.enable", "it can only be set per topic"),
        # wrong type
        ({"node.id": "abc"}, "node.id", r"expected an integer, got 'abc'; valid values: \[0,...\]"),
        ({"auto.create.topics.enable": "yes"}, "auto.create.topics.enable", "expected true or false"),
        ({"listeners": "localhost:9092"}, "listeners", "is not of the form NAME://HOST:PORT"),
        ({"listeners": ""}, "listeners", "at least one listener is needed"),
        ({"metrics.listener": "9100"}, "metrics.listener", "is not of the form HOST:PORT"),
        ({"remote.log.storage.manager.class.name": "Local"}, "remote.log.storage.manager.class.name",
         "not a dotted Python path"),
        # out of range
        ({"log.segment.bytes": "13"}, "log.segment.bytes", "below the minimum 14"),
        ({"log.roll.hours": "0"}, "log.roll.hours", "below the minimum 1"),
        ({"log.retention.hours": "-2"}, "log.retention.hours", r"below the minimum -1"),
        ({"offsets.topic.num.partitions": "0"}, "offsets.topic.num.partitions", r"outside the range \[1,...,10000\]"),
        ({"num.partitions": str(2**31)}, "num.partitions", "does not fit an int"),
        ({"log.dir": ""}, "log.dir", "must not be empty"),
        # conflicting keys
        ({"broker.id": "2", "node.id": "1"}, "broker.id",
         "value 2 conflicts with node.id 1; broker.id is the old name of node.id"),
        ({"log.retention.ms": "1000", "log.local.retention.ms": "2000"}, "log.local.retention.ms",
         r"value 2000 is larger than the total retention 1000 \(retention.ms, from log.retention.ms=1000\); "
         r"allowed: -2 \(same as the total retention\) or \[0,...,1000\]"),
        ({"log.retention.hours": "1", "log.local.retention.ms": "3600001"}, "log.local.retention.ms",
         r"total retention 3600000 \(retention.ms, from log.retention.hours=1\)"),
        ({"log.local.retention.ms": "700000000"}, "log.local.retention.ms",
         r"from the default log.retention.hours=168"),
        ({"log.retention.bytes": "100", "log.local.retention.bytes": "-1"}, "log.local.retention.bytes",
         "value -1 \\(unbounded\\) is not allowed while the total retention is 100"),
        ({"group.min.session.timeout.ms": "10", "group.max.session.timeout.ms": "5"},
         "group.min.session.timeout.ms", "larger than group.max.session.timeout.ms 5"),
        ({"group.max.session.timeout.ms": "5"}, "group.max.session.timeout.ms",
         "smaller than group.min.session.timeout.ms 6000"),
        ({"advertised.listeners": "EXTERNAL://h:9092"}, "advertised.listeners",
         "listener name EXTERNAL is not one of listeners \\(PLAINTEXT\\)"),
        ({"listeners": "PLAINTEXT://:9092", "metrics.listener": "127.0.0.1:9092"}, "metrics.listener",
         "port 9092 is already taken by listener PLAINTEXT"),
        ({"log.dirs": "/a,/b,/a/"}, "log.dirs", "directory /a/ is listed twice"),
    ],
)
def test_bad_configs_are_refused_naming_the_key(props: dict[str, object], key: str, message: str) -> None:
    error = refused(props)
    assert error.key == key
    assert str(error).startswith(f"{key}: ")
    assert "\n" not in str(error)
    assert re.search(message, str(error)), str(error)


@pytest.mark.parametrize(
    "props",
    [
        {"log.dirs": "/a,/b", "log.dir": "/c"},  # log.dirs wins
        {"log.retention.ms": "5000", "log.retention.hours": "1"},  # most specific wins
        {"broker.id": "3", "node.id": "3"},
        {"broker.id": "3"},
        {"log.retention.ms": "-1", "log.local.retention.ms": "-1"},  # unbounded both
        {"log.retention.hours": "1", "log.local.retention.ms": "3600000"},
        {"listeners": "PLAINTEXT://127.0.0.1:9092", "metrics.listener": "127.0.0.1:9100"},
        {"listeners": "PLAINTEXT://127.0.0.1:0", "metrics.listener": "127.0.0.1:0"},  # port 0: any free port
        {"listeners": "PLAINTEXT://10.0.0.1:9092", "metrics.listener": "10.0.0.2:9092"},
        {"listeners": "PLAINTEXT://:9092", "advertised.listeners": "PLAINTEXT://broker.example:9092"},
        {"metrics.listener": ""},
        {"rsm.config.dir": "/remote", "rlmm.config.anything": "x"},
    ],
)
def test_configs_that_only_look_odd_are_fine(props: dict[str, object]) -> None:
    BrokerConfig(props)


def test_odd_but_fine_configs_resolve_as_documented() -> None:
    cfg = BrokerConfig({"log.dirs": "/a,/b", "log.dir": "/c", "log.retention.ms": "5000",
                        "log.retention.hours": "1", "broker.id": "3"})
    assert [str(p) for p in cfg.log_dirs] == ["/a", "/b"]
    assert cfg.topic_defaults()["retention.ms"] == 5000
    assert cfg.topic_default_sources()["retention.ms"] == (5000, "log.retention.ms", 1)
    assert cfg.node_id == 3


def test_a_kafka_server_properties_is_accepted(tmp_path: Path) -> None:
    """The keys of Kafka's shipped KRaft config validate; the ones that mean nothing here are ignored."""
    path = tmp_path / "server.properties"
    path.write_text(
        "process.roles=broker,controller\n"
        "node.id=1\n"
        "controller.quorum.bootstrap.servers=localhost:9093\n"
        "listeners=PLAINTEXT://:9092,CONTROLLER://:9093\n"
        "inter.broker.listener.name=PLAINTEXT\n"
        "advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093\n"
        "controller.listener.names=CONTROLLER\n"
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\n"
        "num.network.threads=3\nnum.io.threads=8\n"
        "socket.send.buffer.bytes=102400\nsocket.receive.buffer.bytes=102400\nsocket.request.max.bytes=104857600\n"
        f"log.dirs={tmp_path / 'kraft-combined-logs'}\n"
        "num.partitions=1\nnum.recovery.threads.per.data.dir=1\n"
        "offsets.topic.replication.factor=1\nshare.coordinator.state.topic.replication.factor=1\n"
        "share.coordinator.state.topic.min.isr=1\ntransaction.state.log.replication.factor=1\n"
        "transaction.state.log.min.isr=1\n"
        "log.retention.hours=168\nlog.segment.bytes=1073741824\nlog.retention.check.interval.ms=300000\n",
        encoding="utf-8")
    cfg = BrokerConfig.from_file(path)
    assert cfg.node_id == 1
    assert cfg.get_list("listeners") == ("PLAINTEXT://:9092", "CONTROLLER://:9093")


def test_errors_from_a_file_say_where(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("# tierlog\nnode.id=1\n\nlog.segment.bytes=13\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_file(path)
    assert str(info.value) == f"log.segment.bytes: value 13 is below the minimum 14 (from {path}:4)"


def test_an_override_wins_over_the_file_and_errors_say_so(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("node.id=1\nlog.segment.bytes=13\n", encoding="utf-8")
    assert BrokerConfig.from_file(path, {"log.segment.bytes": "1000"}).get_int("log.segment.bytes") == 1000
    with pytest.raises(ConfigError, match=r"^node.id: expected an integer, got 'x'.* \(from --override\)$"):
        BrokerConfig.from_sources(path, ["node.id=x"])


def test_a_bad_line_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("node.id=1\nthis line has no separator\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_file(path)
    assert info.value.key == f"{path}:2"
    assert str(info.value) == f"{path}:2: expected KEY=VALUE, got 'this line has no separator'"
    path.write_text("=1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="no key"):
        BrokerConfig.from_file(path)


def test_overrides_must_be_key_value() -> None:
    assert parse_overrides(["a=1", " b = x=y "]) == {"a": "1", "b": "x=y"}
    with pytest.raises(ConfigError, match="an override must be KEY=VALUE"):
        parse_overrides(["novalue"])
    with pytest.raises(ConfigError, match="an override must be KEY=VALUE"):
        parse_overrides(["=1"])


def test_topic_local_retention_rules_match_the_broker_ones() -> None:
    with pytest.raises(ConfigError, match=r"^local.retention.ms: value 2000 is larger than the total "
                                          r"retention 1000 \(retention.ms\)"):
        LogConfig.from_props({"retention.ms": "1000", "local.retention.ms": "2000"})
    # a negative total retention is unbounded, whatever its exact value
    assert LogConfig.from_props({"retention.bytes": "-5", "local.retention.bytes": "100"}).local_retention_bytes == 100


def test_server_properties_takes_every_java_properties_form(tmp_path: Path) -> None:
    """Kafka's config files are read by Properties.load: ``key value`` and ``key:value`` are as
    valid as ``key=value``, and so are continuation lines and escapes."""
    path = tmp_path / "server.properties"
    path.write_text("  node.id 7\nlog.dirs:/a,\\\n    /b\n! comment\nlog.retention.ms = 6\\u0030000\n",
                    encoding="utf-8")
    cfg = BrokerConfig.from_file(path)
    assert cfg.node_id == 7
    assert [str(p) for p in cfg.log_dirs] == ["/a", "/b"]
    assert cfg.get_int("log.retention.ms") == 60000
