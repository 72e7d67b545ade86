"""Rejected requests and broken frames, said once per client address and reason per minute.

A client whose requests tierlog refuses (an old version, an API it does not implement, garbage) tends
to reconnect and send the same thing again, many times a second; a WARNING per attempt buried the
broker's log (one client's reconnect loop wrote 371 lines in 3 s). The first rejection of a kind from
an address is logged at once; repeats within ``interval_s`` are counted and the count is reported
with the next line of that kind. The decision is sans-IO: the caller passes the time.
"""

from __future__ import annotations

import struct

DEFAULT_INTERVAL_S = 60.0
#: Addresses and reasons remembered at most; the oldest are forgotten first (a flood of addresses
#: cannot grow the broker's memory).
MAX_KEYS = 10_000

_HEADER_PREFIX = struct.Struct(">hhih")


class RejectionLimiter:
    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S, max_keys: int = MAX_KEYS) -> None:
        self.interval_s = interval_s
        self.max_keys = max_keys
        # key -> (time the last line was logged, rejections since then not logged)
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}

    def admit(self, host: str, reason: str, now_s: float) -> int | None:
        """None: do not log this one. Otherwise log it, with the returned number of rejections of the
        same kind from the same address that were not logged since the last line."""
        key = (host, reason)
        seen = self._seen.get(key)
        if seen is not None and now_s - seen[0] < self.interval_s:
            self._seen[key] = (seen[0], seen[1] + 1)
            return None
        self._seen.pop(key, None)
        if len(self._seen) >= self.max_keys:
            del self._seen[next(iter(self._seen))]
        self._seen[key] = (now_s, 0)
        return 0 if seen is None else seen[1]


def client_id_of(frame: bytes | bytearray | memoryview) -> str | None:
    """The client id of a request header (v1 and v2 put it at the same place), read even when the rest
    of the request cannot be parsed; None when the frame is too short or the field is null."""
    view = memoryview(frame)
    if len(view) < _HEADER_PREFIX.size:
        return None
    size = _HEADER_PREFIX.unpack_from(view, 0)[3]
    if size < 0 or len(view) < _HEADER_PREFIX.size + size:
        return None
    return bytes(view[_HEADER_PREFIX.size:_HEADER_PREFIX.size + size]).decode("utf-8", "replace")
