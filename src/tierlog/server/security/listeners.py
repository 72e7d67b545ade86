"""What each listener's security protocol adds to an accepted socket (the composition root calls this).

PLAINTEXT: nothing. SSL: the TLS handshake (and the certificate's principal). SASL_PLAINTEXT: SASL
authentication before any other request. SASL_SSL: both, TLS first.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from tierlog.config import BrokerConfig
from tierlog.server.connection import KafkaConnection
from tierlog.server.security.acceptor import TlsAcceptor
from tierlog.server.security.peer_log import PeerLogLimiter
from tierlog.server.security.principal import PrincipalMapper
from tierlog.server.security.tls import TlsContextSource, TlsSettings

log = logging.getLogger("tierlog.security")

TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


class ListenerSecurity:
    """Per listener: its protocol and, for TLS ones, the context source (built at startup, so a bad
    certificate stops the broker before it listens)."""

    def __init__(self, config: BrokerConfig, now_s: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.protocols = config.security_protocol_map()
        self.refusals = PeerLogLimiter(log, now_s)
        self.tls: dict[str, TlsContextSource] = {}
        self.mappers: dict[str, PrincipalMapper] = {}
        for item in config.get_list("listeners"):
            name = item.partition("://")[0].upper()
            if self.protocols.get(name) in TLS_PROTOCOLS:
                self.tls[name] = TlsContextSource(TlsSettings.from_config(config, name), now_s)
                self.mappers[name] = PrincipalMapper(str(config.listener_value(name, "ssl.principal.mapping.rules")))

    def protocol(self, listener: str) -> str:
        return self.protocols[listener.upper()]

    def factory(self, listener: str, make_connection: Callable[[str], KafkaConnection]
                ) -> Callable[[], asyncio.Protocol]:
        """The protocol factory of ``listener``'s server socket."""
        name = listener.upper()
        protocol = self.protocol(name)

        def connection() -> KafkaConnection:
            conn = make_connection(name)
            conn.client.security_protocol = protocol
            return conn

        if protocol not in TLS_PROTOCOLS:
            return connection
        contexts, mapper, refusals = self.tls[name], self.mappers[name], self.refusals

        def acceptor() -> asyncio.Protocol:
            return TlsAcceptor(connection, contexts, mapper, refusals)

        return acceptor
