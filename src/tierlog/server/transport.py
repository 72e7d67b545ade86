"""Listening sockets: parse ``listeners``, bind them, hand each accepted socket to a connection.

The network seam is asyncio's own ``Transport``/``Protocol`` pair: a :class:`KafkaConnection` only
needs ``write``, ``close``, ``pause_reading``/``resume_reading`` and ``get_extra_info`` from its
transport, so unit tests drive it with an in-memory fake and the broker with real sockets.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tierlog.errors import ConfigError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    """One ``NAME://host:port`` entry of ``listeners`` (port 0 asks the OS for a free port)."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class BoundListener:
    """A listener after binding: the port the OS gave it, and the address advertised to clients."""

    spec: ListenerSpec
    host: str
    port: int
    advertised_host: str
    advertised_port: int


def parse_listener(value: str) -> ListenerSpec:
    """``PLAINTEXT://127.0.0.1:9092``, ``PLAINTEXT://:9092`` (all interfaces), ``PLAINTEXT://[::1]:0``."""
    name, sep, rest = value.strip().partition("://")
    if not sep or not name:
        raise ConfigError("listeners", f"{value!r} is not of the form NAME://host:port")
    # Which security protocol the name stands for is listener.security.protocol.map's business.
    name = name.upper()
    host, colon, port_text = rest.rpartition(":")
    if not colon or not port_text.isdigit():
        raise ConfigError("listeners", f"{value!r} has no port")
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ConfigError("listeners", f"{value!r}: port {port} is out of range")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return ListenerSpec(name, host, port)


def parse_listeners(values: Iterable[str]) -> list[ListenerSpec]:
    specs = [parse_listener(v) for v in values if v.strip()]
    if not specs:
        raise ConfigError("listeners", "at least one listener is needed")
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ConfigError("listeners", "each listener needs its own name")
    return specs


def _advertisable(host: str) -> str:
    """A wildcard bind address means nothing to a client, so advertise this machine's name instead
    (as Kafka does for an empty host)."""
    if host in ("", "0.0.0.0", "::"):
        return socket.getfqdn()
    return host


class KafkaServer:
    """The bound listening sockets of one broker."""

    def __init__(self) -> None:
        self._servers: list[asyncio.Server] = []
        self.bound: list[BoundListener] = []

    async def start(
        self,
        specs: list[ListenerSpec],
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        advertised: dict[str, tuple[str, int]] | None = None,
        *,
        backlog: int = 512,
    ) -> list[BoundListener]:
        loop = asyncio.get_running_loop()
        advertised = advertised or {}
        for spec in specs:
            server = await loop.create_server(
                protocol_factory, host=spec.host or None, port=spec.port, backlog=backlog, reuse_address=True
            )
            self._servers.append(server)
            sockname = server.sockets[0].getsockname()
            port = int(sockname[1])
            adv_host, adv_port = advertised.get(spec.name, (_advertisable(spec.host), port))
            # An advertised port of 0 (copied from a port-0 listener) means "the port we got".
            bound = BoundListener(spec, str(sockname[0]), port, adv_host, adv_port or port)
            self.bound.append(bound)
            log.info("listening on %s (advertised as %s:%d)", spec, bound.advertised_host, bound.advertised_port)
        return list(self.bound)

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()


def parse_advertised_listeners(values: Iterable[str]) -> dict[str, tuple[str, int]]:
    return {spec.name: (spec.host, spec.port) for spec in (parse_listener(v) for v in values if v.strip())}
