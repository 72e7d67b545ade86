"""The TLS handshake of an accepted socket, before the Kafka connection sees a byte.

Each accepted socket of an SSL or SASL_SSL listener starts with a :class:`TlsAcceptor`, which runs
the server side of the handshake (``loop.start_tls``) and then hands the TLS transport to a fresh
:class:`~tierlog.server.connection.KafkaConnection`. A handshake that fails -- a plaintext client on
the TLS port, an untrusted or expired client certificate, no common protocol version, nothing sent
within the timeout -- closes that socket only, and is logged once per peer and minute with the
peer's address (Kafka's "Failed authentication with /host (SSL handshake failed)"). A peer that closes
or resets its socket mid-handshake is a disconnect, logged at DEBUG, as in Kafka.

The principal of a client certificate (mutual TLS) is its subject DN through
``ssl.principal.mapping.rules``; without a certificate it is ``User:ANONYMOUS``, as in Kafka.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable

from tierlog.server.connection import KafkaConnection
from tierlog.server.security.peer_log import PeerLogLimiter
from tierlog.server.security.principal import (
    ANONYMOUS,
    NoMatchingRule,
    PrincipalMapper,
    certificate_dn,
    user_principal,
)
from tierlog.server.security.tls import TlsContextSource

log = logging.getLogger(__name__)

#: How long a client has to complete the TLS handshake.
HANDSHAKE_TIMEOUT_S = 10.0


#: The peer closing or resetting its socket before the handshake ends.
_PEER_LEFT = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError, ssl.SSLEOFError)

class _Buffer(asyncio.Protocol):
    """Holds what the TLS layer decrypts between the handshake's end and the connection taking over
    (a TLS 1.3 client sends its first request right behind its Finished message)."""

    def __init__(self) -> None:
        self.data: list[bytes] = []
        self.eof = False
        self.lost = False

    def data_received(self, data: bytes) -> None:
        self.data.append(data)

    def eof_received(self) -> bool | None:
        self.eof = True
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True


class TlsAcceptor(asyncio.Protocol):
    def __init__(self, connection_factory: Callable[[], KafkaConnection], contexts: TlsContextSource,
                 mapper: PrincipalMapper, refusals: PeerLogLimiter) -> None:
        self._connection_factory = connection_factory
        self._contexts = contexts
        self._mapper = mapper
        self._refusals = refusals
        self._task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        # Nothing is read until start_tls has put the TLS layer in place.
        transport.pause_reading()
        self._task = asyncio.get_running_loop().create_task(self._handshake(transport))

    def data_received(self, data: bytes) -> None:  # pragma: no cover - reading is paused until start_tls
        pass

    def connection_lost(self, exc: Exception | None) -> None:
        pass

    async def _handshake(self, transport: asyncio.Transport) -> None:
        peer = transport.get_extra_info("peername")
        host = str(peer[0]) if isinstance(peer, tuple) else "?"
        port = int(peer[1]) if isinstance(peer, tuple) else 0
        buffer = _Buffer()
        try:
            tls = await asyncio.get_running_loop().start_tls(
                transport, buffer, self._contexts.current(), server_side=True,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S)
        except _PEER_LEFT as e:
            # The client went away mid-handshake (librdkafka closes a bootstrap connection it no longer
            # needs, a producer is destroyed): a disconnect, as Kafka's SslTransportLayer treats an
            # EOF or reset during the handshake -- not a failed authentication.
            log.debug("connection from /%s:%d on listener %s closed during the TLS handshake (%s)", host, port,
                      self._contexts.settings.listener, _reason(e))
            transport.abort()
            return
        except (ssl.SSLError, OSError, ConnectionError, TimeoutError) as e:
            self._refusals.warning(host, "Failed authentication with /%s:%d on listener %s (SSL handshake failed: %s)",
                                   host, port, self._contexts.settings.listener, _reason(e))
            transport.abort()
            return
        if tls is None or buffer.lost:
            return
        principal = self._principal(tls, host, port)
        if principal is None:
            tls.abort()
            return
        connection = self._connection_factory()
        connection.client.principal = principal
        connection.connection_made(tls)
        tls.set_protocol(connection)
        for chunk in buffer.data:
            connection.data_received(chunk)
        if buffer.eof:
            connection.eof_received()

    def _principal(self, tls: asyncio.BaseTransport, host: str, port: int) -> str | None:
        ssl_object = tls.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if isinstance(ssl_object, ssl.SSLObject) else None
        if not der:
            return ANONYMOUS
        try:
            return user_principal(self._mapper.name(certificate_dn(der)))
        except (NoMatchingRule, ValueError) as e:
            self._refusals.warning(host, "Failed authentication with /%s:%d on listener %s (%s)", host, port,
                                   self._contexts.settings.listener, e)
            return None


def _reason(e: BaseException) -> str:
    if isinstance(e, TimeoutError | asyncio.TimeoutError):
        return "no handshake within the timeout"
    if isinstance(e, ssl.SSLError) and e.reason:
        return str(e.reason)
    return str(e) or type(e).__name__
