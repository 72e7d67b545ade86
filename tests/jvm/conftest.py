"""Fixtures for the tests that hold tierlog against Apache Kafka itself (marker ``jvm``).

Every test here is marked ``jvm`` and ``integration``; ``pytest -m 'not jvm'`` skips them. A test that
needs Java or Kafka's jars skips naming what is missing (scripts/_env.sh fetches the jars).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.broker import BrokerProcess
from tests.jvm.kafka import KafkaBroker, java_missing


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.jvm)
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="module")
def kafka_jars() -> None:
    reason = java_missing()
    if reason is not None:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def kafka(kafka_jars: None, tmp_path_factory: pytest.TempPathFactory,
          request: pytest.FixtureRequest) -> Iterator[KafkaBroker]:
    """One Apache Kafka broker per test module."""
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"))
    broker.start()
    yield broker
    if broker.alive():
        broker.stop()


@pytest.fixture(scope="module")
def tierlog_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One ``tierlog serve`` per test module."""
    # The metrics listener shows which APIs the Java clients used (tierlog_requests_total by API).
    b = BrokerProcess(tmp_path_factory.mktemp("tierlog") / "data", {"metrics.listener": "http://127.0.0.1:0"}).start()
    yield b
    if b.alive():
        code = b.stop()
        assert code == 0, b.stderr_tail()
