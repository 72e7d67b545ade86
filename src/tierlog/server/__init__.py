"""The Kafka endpoint: the only package with sockets and an event loop.

* :mod:`~tierlog.server.transport` -- listeners and bound sockets;
* :mod:`~tierlog.server.connection` -- one client connection: framing, in-order responses, sendfile;
* :mod:`~tierlog.server.dispatcher` and :mod:`~tierlog.server.handlers` -- one handler per API;
* :mod:`~tierlog.server.partitions` -- appends, reads and fetch wake-ups over the log manager;
* :mod:`~tierlog.server.groups` -- the classic consumer-group coordinator and ``__consumer_offsets``;
* :mod:`~tierlog.server.broker` -- the composition root behind ``tierlog serve``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tierlog.server.broker import Broker, serve

__all__ = ["Broker", "serve"]


def __getattr__(name: str) -> Any:
    # Imported on first use: the broker brings in the protocol codec (kio), which the CLI commands
    # that only need the composition helpers (settings, the remote tier) should not load.
    if name in __all__:
        from tierlog.server import broker

        return getattr(broker, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
