"""The Kafka endpoint: the only package with sockets and an event loop.

* :mod:`~tierlog.server.transport` -- listeners and bound sockets;
* :mod:`~tierlog.server.connection` -- one client connection: framing, in-order responses, sendfile;
* :mod:`~tierlog.server.dispatcher` and :mod:`~tierlog.server.handlers` -- one handler per API;
* :mod:`~tierlog.server.partitions` -- appends, reads and fetch wake-ups over the log manager;
* :mod:`~tierlog.server.groups` -- the classic consumer-group coordinator and ``__consumer_offsets``;
* :mod:`~tierlog.server.broker` -- the composition root behind ``tierlog serve``.
"""

from tierlog.server.broker import Broker, serve

__all__ = ["Broker", "serve"]
