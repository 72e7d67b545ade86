"""What each listener's security protocol adds to an accepted socket (the composition root calls this).

PLAINTEXT: nothing. SSL: the TLS handshake (and the certificate's principal). SASL_PLAINTEXT: SASL
authentication before any other request. SASL_SSL: both, TLS first.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping

from tierlog.clock import SYSTEM_CLOCK, Clock, system_monotonic_s
from tierlog.config import BrokerConfig
from tierlog.config.definition import Value
from tierlog.config.security_keys import CALLBACK_HANDLER_SUFFIX, LISTENER_PREFIX, SASL_MECHANISMS
from tierlog.errors import ConfigError
from tierlog.metadata import MetadataImage
from tierlog.server.auth.mechanisms import (
    SCRAM_MECHANISMS,
    MechanismServer,
    PlainServer,
    ScramCredential,
    ScramServer,
    parse_plain_jaas,
)
from tierlog.server.auth.oauthbearer import (
    MECHANISM as OAUTHBEARER,
)
from tierlog.server.auth.oauthbearer import (
    UNSECURED_VALIDATOR,
    JwksKeys,
    OAuthBearerServer,
    OAuthSettings,
)
from tierlog.server.auth.session import SaslSession
from tierlog.server.connection import KafkaConnection
from tierlog.server.security.acceptor import TlsAcceptor
from tierlog.server.security.peer_log import PeerLogLimiter
from tierlog.server.security.principal import PrincipalMapper
from tierlog.server.security.tls import TlsContextSource, TlsSettings, check_keystore_update

log = logging.getLogger("tierlog.security")

TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


class ListenerSecurity:
    """Per listener: its protocol and, for TLS ones, the context source (built at startup, so a bad
    certificate stops the broker before it listens)."""

    def __init__(self, config: BrokerConfig, now_s: Callable[[], float] = system_monotonic_s,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self._clock = clock
        self.protocols = config.security_protocol_map()
        self.refusals = PeerLogLimiter(log, now_s)
        self._now_s = now_s
        self.tls: dict[str, TlsContextSource] = {}
        self.mappers: dict[str, PrincipalMapper] = {}
        #: SASL listeners: the mechanisms served, PLAIN's users, the re-authentication interval.
        self.sasl_mechanisms: dict[str, tuple[str, ...]] = {}
        self.plain_users: dict[str, dict[str, str]] = {}
        self.reauth_ms: dict[str, int] = {}
        #: OAUTHBEARER listeners' settings, and the key sets they validate with (by URL).
        self.oauth: dict[str, OAuthSettings] = {}
        self.jwks: dict[str, JwksKeys] = {}
        #: The metadata image (SCRAM credentials), set by the broker once the controller is up.
        self.image: Callable[[], MetadataImage] | None = None
        # Salts of unknown SCRAM users are derived from it: stable per name, unguessable.
        self._unknown_user_secret = os.urandom(32)
        for name in config.listener_names():
            if self.protocols.get(name) in TLS_PROTOCOLS:
                self.tls[name] = TlsContextSource(TlsSettings.from_config(config, name), now_s)
                self.mappers[name] = PrincipalMapper(str(config.listener_value(name, "ssl.principal.mapping.rules")))
            if self.protocols.get(name) in SASL_PROTOCOLS:
                self._configure_sasl(name)

    def _configure_sasl(self, name: str) -> None:
        key = "sasl.enabled.mechanisms"
        configured = self.config.listener_value(name, key)
        mechanisms = tuple(m.upper() for m in (configured if isinstance(configured, tuple) else ())
                           if m.upper() in SASL_MECHANISMS)
        if not mechanisms:
            raise ConfigError(f"listener.name.{name.lower()}.{key}",
                              f"listener {name} uses SASL but enables none of {', '.join(SASL_MECHANISMS)}")
        if OAUTHBEARER in mechanisms:
            self._configure_oauthbearer(name)
        if "PLAIN" in mechanisms:
            jaas_key = f"listener.name.{name.lower()}.plain.sasl.jaas.config"
            text = self.config.jaas_configs.get((name, "PLAIN"))
            if text is None:
                raise ConfigError(jaas_key, f"listener {name} enables PLAIN and needs its users: "
                                            'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                            'user_<name>="<password>";')
            try:
                self.plain_users[name] = parse_plain_jaas(text)
            except ValueError as e:
                raise ConfigError(jaas_key, str(e)) from None
        self.sasl_mechanisms[name] = mechanisms
        reauth = self.config.listener_value(name, "connections.max.reauth.ms")
        self.reauth_ms[name] = int(reauth) if isinstance(reauth, int) else 0

    def _configure_oauthbearer(self, name: str) -> None:
        """A JWKS to validate signed tokens with or, named explicitly, Kafka's unsecured validator."""

        def value(key: str) -> Value:
            return self.config.listener_value(name, key)

        handler = self.config.callback_handlers.get((name, OAUTHBEARER))
        url = value("sasl.oauthbearer.jwks.endpoint.url")
        unsecured = handler == UNSECURED_VALIDATOR
        handler_key = f"listener.name.{name.lower()}.oauthbearer{CALLBACK_HANDLER_SUFFIX}"
        if handler is not None and not unsecured:
            raise ConfigError(handler_key, f"tierlog validates OAUTHBEARER tokens itself: leave it unset (with "
                                           f"sasl.oauthbearer.jwks.endpoint.url) or name {UNSECURED_VALIDATOR}")
        if not url and not unsecured:
            raise ConfigError(f"listener.name.{name.lower()}.sasl.oauthbearer.jwks.endpoint.url",
                              f"listener {name} enables OAUTHBEARER and needs the JWKS its tokens are signed with "
                              f"(or, for development only, {handler_key}={UNSECURED_VALIDATOR})")
        audience = value("sasl.oauthbearer.expected.audience")
        issuer = value("sasl.oauthbearer.expected.issuer")
        settings = OAuthSettings(
            jwks_url=str(url) if url and not unsecured else None,
            expected_audience=tuple(str(a) for a in audience) if isinstance(audience, tuple) else (),
            expected_issuer=str(issuer) if issuer else None,
            clock_skew_s=int(value("sasl.oauthbearer.clock.skew.seconds")),  # type: ignore[arg-type]
            sub_claim=str(value("sasl.oauthbearer.sub.claim.name")),
            jwks_refresh_ms=int(value("sasl.oauthbearer.jwks.endpoint.refresh.ms")),  # type: ignore[arg-type]
            unsecured=unsecured)
        self.oauth[name] = settings
        if settings.jwks_url is not None and settings.jwks_url not in self.jwks:
            # Fetched once the broker starts (start()): a config check builds this object too.
            self.jwks[settings.jwks_url] = JwksKeys(settings.jwks_url, settings.jwks_refresh_ms, self._clock)
        if unsecured:
            log.warning("listener %s accepts unsecured (unsigned) OAUTHBEARER tokens: for development only", name)

    # -- dynamic keystore updates (AlterConfigs on the broker) -------------------------------------------

    def _allowed(self, listener: str, key: str, dynamic: Mapping[str, str]) -> bool:
        prefixed = f"{LISTENER_PREFIX}{listener.lower()}.{key}"
        value = dynamic.get(prefixed, dynamic.get(key))
        return str(value).lower() == "true" if value is not None else bool(self.config.listener_value(listener, key))

    def check_dynamic(self, dynamic: Mapping[str, str]) -> None:
        """Would this broker's dynamic configs ``dynamic`` (after a change) give every TLS listener a
        keystore and truststore that load and a compatible certificate? ConfigError says which not."""
        for name, source in self.tls.items():
            new = TlsSettings.from_config(self.config, name, dynamic)
            if new != source.settings:
                check_keystore_update(source.settings, new,
                                      allow_dn_changes=self._allowed(name, "ssl.allow.dn.changes", dynamic),
                                      allow_san_changes=self._allowed(name, "ssl.allow.san.changes", dynamic))

    def apply_dynamic(self, dynamic: Mapping[str, str]) -> None:
        """Serve new connections of each TLS listener whose settings ``dynamic`` changes with them. A
        keystore that no longer loads (changed on disk since it was checked) keeps the old one, logged."""
        for name, source in self.tls.items():
            new = TlsSettings.from_config(self.config, name, dynamic)
            if new == source.settings:
                continue
            try:
                source.replace(new)
            except ConfigError as e:
                log.error("listener %s keeps its previous certificate: %s", name, e)

    def start(self) -> None:
        """Fetch each JWKS (a failure is logged and retried: tokens fail until it loads) and keep
        them fresh on threads of their own. Blocking: the broker calls it off the event loop."""
        for keys in self.jwks.values():
            keys.load()
            keys.start()

    def close(self) -> None:
        for keys in self.jwks.values():
            keys.close()

    def _mechanism_server(self, listener: str, mechanism: str) -> MechanismServer:
        if mechanism == "PLAIN":
            return PlainServer(self.plain_users.get(listener, {}))
        if mechanism == OAUTHBEARER:
            settings = self.oauth[listener]
            keys = self.jwks.get(settings.jwks_url or "")
            return OAuthBearerServer(settings, keys.keys if keys is not None else lambda: None,
                                     keys.refresh_soon if keys is not None else lambda: None,
                                     self._clock.wall_ms)
        scram = SCRAM_MECHANISMS[mechanism]

        def lookup(user: str) -> ScramCredential | None:
            record = self.image().scram_credentials.get((user, scram.id)) if self.image is not None else None
            if record is None:
                return None
            return ScramCredential(record.salt, record.stored_key, record.server_key, record.iterations)

        return ScramServer(scram, lookup, self._unknown_user_secret)

    def sasl_session(self, listener: str) -> SaslSession:
        return SaslSession(self.sasl_mechanisms[listener], lambda m: self._mechanism_server(listener, m),
                           self.reauth_ms[listener], lambda: int(self._now_s() * 1000))

    def protocol(self, listener: str) -> str:
        return self.protocols[listener.upper()]

    def factory(self, listener: str, make_connection: Callable[[str], KafkaConnection]
                ) -> Callable[[], asyncio.BaseProtocol]:
        """The protocol factory of ``listener``'s server socket."""
        name = listener.upper()
        protocol = self.protocol(name)

        def connection() -> KafkaConnection:
            conn = make_connection(name)
            conn.client.security_protocol = protocol
            if protocol in SASL_PROTOCOLS:
                conn.client.sasl = self.sasl_session(name)
                conn.client.extra["refusals"] = self.refusals
            return conn

        if protocol not in TLS_PROTOCOLS:
            return connection
        contexts, mapper, refusals = self.tls[name], self.mappers[name], self.refusals

        def acceptor() -> asyncio.BaseProtocol:
            return TlsAcceptor(connection, contexts, mapper, refusals)

        return acceptor
