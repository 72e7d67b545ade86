from __future__ import annotations

import pytest

from tierlog.errors import ConfigError
from tierlog.server.transport import ListenerSpec, parse_listener, parse_listeners


def test_parse_listener_forms() -> None:
    assert parse_listener("PLAINTEXT://127.0.0.1:9092") == ListenerSpec("PLAINTEXT", "127.0.0.1", 9092)
    assert parse_listener("plaintext://:0") == ListenerSpec("PLAINTEXT", "", 0)
    assert parse_listener("PLAINTEXT://[::1]:19092") == ListenerSpec("PLAINTEXT", "::1", 19092)


@pytest.mark.parametrize("bad", ["127.0.0.1:9092", "PLAINTEXT://host", "PLAINTEXT://h:99999"])
def test_parse_listener_rejects(bad: str) -> None:
    with pytest.raises(ConfigError):
        parse_listener(bad)


def test_listener_names_are_unique() -> None:
    with pytest.raises(ConfigError):
        parse_listeners(["PLAINTEXT://:1", "PLAINTEXT://:2"])


def test_every_advertised_api_has_a_handler() -> None:
    from tierlog.protocol import SUPPORTED_APIS
    from tierlog.protocol.apis import ANSWERED_APIS
    from tierlog.server.handlers import all_handlers

    handled = set(all_handlers())
    assert set(SUPPORTED_APIS) <= handled
    # Beyond those, only answered (unadvertised) APIs whose answer needs the client: the share-state
    # APIs check CLUSTER_ACTION before their per-partition answer (server/handlers/share_state.py).
    assert handled - set(SUPPORTED_APIS) == {83, 84, 85, 86, 87, 90} and handled - set(SUPPORTED_APIS) <= set(ANSWERED_APIS)
