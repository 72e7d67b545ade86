"""Real ``tierlog serve`` processes for the integration tests.

Each broker runs as ``python -m tierlog.cli.main serve`` on port 0; the test reads the port from the
``tierlog listening on HOST:PORT`` line. One broker is shared by the whole session (topics have
unique names per test); tests that restart a broker get their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.broker import BrokerProcess
from tests.helpers.fixtures import topic_name  # noqa: F401 - a fixture


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("broker") / "data").start()
    yield b
    code = b.stop()
    assert code == 0, b.stderr_tail()


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker of this test alone (for restarts)."""
    b = BrokerProcess(tmp_path / "data").start()
    yield b
    if b.alive():
        b.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
