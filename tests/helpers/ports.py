"""Ports for brokers a test restarts on the same address."""

from __future__ import annotations

import random
import socket
from pathlib import Path


def free_port() -> int:
    """A free loopback port below the ephemeral range: while the broker is down no client's
    outgoing connection can be given its port, so the restarted broker can always bind it again."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    for _ in range(500):
        port = rng.randrange(12000, low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")
