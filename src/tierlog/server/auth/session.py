"""The SASL state of one connection on a SASL_PLAINTEXT or SASL_SSL listener (Kafka's
SaslServerAuthenticator, as a plain object the handlers drive).

Before authentication only ApiVersions, SaslHandshake and SaslAuthenticate are served; any other
request closes the connection. After SaslHandshake v0 the client sends raw SASL tokens (no Kafka
request header), as pre-KIP-152 clients and librdkafka with ``broker.version.fallback`` < 1.0 do.
With ``connections.max.reauth.ms`` the session ends that long after authentication (KIP-368): the
client re-authenticates on the same connection with SaslHandshake v1+ and SaslAuthenticate, as the
same principal; a request on an expired session closes the connection.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from tierlog.server.auth.mechanisms import AuthenticationFailed, MechanismServer

#: API keys served before authentication: ApiVersions, SaslHandshake, SaslAuthenticate.
PRE_AUTH_API_KEYS = frozenset({18, 17, 36})
#: The largest frame before authentication (Kafka's sasl.server.max.receive.size default, 512 KiB).
MAX_RECEIVE_BYTES = 524288


class IllegalSaslState(AuthenticationFailed):
    """A SASL request out of order (SaslAuthenticate before SaslHandshake, a second SaslHandshake):
    answered with ILLEGAL_SASL_STATE, as Kafka's IllegalSaslStateException is."""


class SaslState(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


class SaslSession:
    def __init__(self, mechanisms: tuple[str, ...], make_server: Callable[[str], MechanismServer],
                 reauth_ms: int, now_ms: Callable[[], int]) -> None:
        self.mechanisms = mechanisms
        self._make_server = make_server
        self.reauth_ms = reauth_ms
        self._now_ms = now_ms
        self.state = SaslState.HANDSHAKE
        self.server: MechanismServer | None = None
        self.handshake_version = 1
        self.user: str | None = None
        self.mechanism: str | None = None
        #: When the session ends (0: never).
        self.expires_at_ms = 0

    @property
    def authenticated(self) -> bool:
        return self.state is SaslState.AUTHENTICATED and not self.expired

    @property
    def expired(self) -> bool:
        return self.expires_at_ms > 0 and self._now_ms() >= self.expires_at_ms

    def max_frame_bytes(self, authenticated_max: int) -> int:
        if self.state is SaslState.AUTHENTICATED:
            return authenticated_max
        return min(authenticated_max, MAX_RECEIVE_BYTES)

    def refusal(self, api_key: int) -> str | None:
        """Why a request with ``api_key`` may not be served now (None: it may)."""
        if api_key in PRE_AUTH_API_KEYS:
            return None
        if self.state is not SaslState.AUTHENTICATED:
            return f"request (API {api_key}) before SASL authentication completed"
        if self.expired:
            return "SASL session expired (connections.max.reauth.ms) without re-authentication"
        return None

    def handshake(self, mechanism: str, version: int) -> bool:
        """Start an exchange with ``mechanism``; False if it is not enabled. Raises
        AuthenticationFailed for a handshake in the wrong state."""
        reauthenticating = self.state is SaslState.AUTHENTICATED and version >= 1
        if self.state is not SaslState.HANDSHAKE and not reauthenticating:
            raise IllegalSaslState(f"Unexpected SaslHandshake in state {self.state.value}")
        if mechanism not in self.mechanisms:
            self.state = SaslState.FAILED
            return False
        if reauthenticating and mechanism != self.mechanism:
            self.state = SaslState.FAILED
            raise AuthenticationFailed("Re-authentication must use the mechanism of the first authentication")
        self.server = self._make_server(mechanism)
        self.handshake_version = version
        self.mechanism = mechanism
        self.state = SaslState.AUTHENTICATE
        return True

    def authenticate(self, token: bytes) -> tuple[bytes, bool]:
        """Feed a client token: (the challenge to send, whether authentication is complete)."""
        if self.state is not SaslState.AUTHENTICATE or self.server is None:
            self.state = SaslState.FAILED
            raise IllegalSaslState("Unexpected SaslAuthenticate request with illegal SASL state")
        try:
            challenge = self.server.evaluate(token)
        except AuthenticationFailed:
            self.state = SaslState.FAILED
            raise
        if not self.server.complete:
            return challenge, False
        user = self.server.user
        if self.user is not None and user != self.user:
            self.state = SaslState.FAILED
            raise AuthenticationFailed("Re-authentication must be as the same principal")
        self.user = user
        self.state = SaslState.AUTHENTICATED
        self.expires_at_ms = 0
        if self.reauth_ms > 0:
            # KIP-368: a credential that expires sooner (an OAUTHBEARER token) ends the session sooner.
            self.expires_at_ms = self._now_ms() + self.reauth_ms
            if self.server.credential_expires_at_ms is not None:
                self.expires_at_ms = min(self.expires_at_ms, self.server.credential_expires_at_ms)
        return challenge, True

    def session_lifetime_ms(self) -> int:
        return max(0, self.expires_at_ms - self._now_ms()) if self.expires_at_ms else 0
