"""Logging refusals once per peer: a client retrying a bad handshake in a loop must not flood the log."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable

#: Peers remembered (oldest forgotten first), so a scan from many addresses stays bounded.
MAX_PEERS = 4096


class PeerLogLimiter:
    """At most one line per peer host and ``interval_s``; the next line counts what was left out."""

    def __init__(self, logger: logging.Logger, now_s: Callable[[], float], interval_s: float = 60.0) -> None:
        self._log = logger
        self._now_s = now_s
        self._interval_s = interval_s
        self._last: OrderedDict[str, tuple[float, int]] = OrderedDict()

    def warning(self, host: str, message: str, *args: object) -> bool:
        """Log ``message`` for ``host`` unless it was logged within the interval; whether it was."""
        now = self._now_s()
        last = self._last.get(host)
        if last is not None and now - last[0] < self._interval_s:
            self._last[host] = (last[0], last[1] + 1)
            return False
        suppressed = last[1] if last is not None else 0
        self._last[host] = (now, 0)
        self._last.move_to_end(host)
        while len(self._last) > MAX_PEERS:
            self._last.popitem(last=False)
        suffix = f" ({suppressed} more from this host not logged)" if suppressed else ""
        self._log.warning(message + suffix, *args)
        return True
