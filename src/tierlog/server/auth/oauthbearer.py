"""SASL/OAUTHBEARER (RFC 7628, Kafka's KIP-255 and KIP-768): a signed JWT validated against a JWKS.

The client's first message is ``n,[a=<authzid>],`` then ``\\x01``-separated ``key=value`` pairs, one of
them ``auth=Bearer <token>``, and a closing ``\\x01\\x01``. The token is a JWS-signed JWT whose
signature must verify with a key of the JSON Web Key Set at ``sasl.oauthbearer.jwks.endpoint.url``
(fetched off the event loop, again every ``sasl.oauthbearer.jwks.endpoint.refresh.ms``, and at once
when a token names a key id the set lacks); ``exp`` and the principal's claim
(``sasl.oauthbearer.sub.claim.name``) are required; ``nbf``/``iat``/``exp`` are checked with
``sasl.oauthbearer.clock.skew.seconds`` of leeway; ``aud`` must name one of
``sasl.oauthbearer.expected.audience`` and ``iss`` be ``sasl.oauthbearer.expected.issuer`` when
those are set. As Kafka's OAuthBearerSaslServer does, a token that fails is answered with the challenge
``{"status":"invalid_token"}``; the client acknowledges with ``\\x01`` and authentication then fails.

Kafka's unsecured mode (``alg: none`` tokens, for development) is served only when the listener
names Kafka's unsecured validator as its OAUTHBEARER server callback handler.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from joserfc import jwt
from joserfc.errors import InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet

from tierlog.clock import Clock
from tierlog.server.auth.mechanisms import AuthenticationFailed, MechanismServer

log = logging.getLogger("tierlog.security")

MECHANISM = "OAUTHBEARER"
#: Kafka's validator of unsigned tokens; naming it is how a listener opts into unsecured mode.
UNSECURED_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.internals.unsecured." \
                      "OAuthBearerUnsecuredValidatorCallbackHandler"
#: RFC 7628's error challenge (Kafka sends the same).
INVALID_TOKEN_CHALLENGE = b'{"status":"invalid_token"}'
#: The JWS algorithms a signed token may use (never "none" outside unsecured mode).
SIGNED_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
_KVSEP = b"\x01"


@dataclass(frozen=True)
class OAuthSettings:
    jwks_url: str | None
    expected_audience: tuple[str, ...]
    expected_issuer: str | None
    clock_skew_s: int
    sub_claim: str
    jwks_refresh_ms: int
    #: Accept Kafka's unsecured (unsigned) tokens: only when explicitly configured.
    unsecured: bool = False


class JwksKeys:
    """The JSON Web Key Set, fetched by a thread of its own so the event loop never waits for it."""

    #: The least time between two fetches asked for by unknown key ids (a flood of forged tokens
    #: must not become a flood of requests to the identity provider).
    MIN_ON_DEMAND_INTERVAL_S = 10.0

    def __init__(self, url: str, refresh_ms: int, clock: Clock) -> None:
        self.url = url
        self._refresh_s = refresh_ms / 1000.0
        self._clock = clock
        self._keys: KeySet | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._last_on_demand_ns = 0
        self._thread: threading.Thread | None = None

    def load(self) -> None:
        """Fetch the set once now (at startup); a failure is logged and retried by the thread."""
        try:
            self._fetch()
        except (OSError, ValueError, JoseError) as e:
            log.error("cannot fetch the OAUTHBEARER JWKS from %s (retrying): %s", self.url, e)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="oauthbearer-jwks", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()

    def keys(self) -> KeySet | None:
        with self._lock:
            return self._keys

    def refresh_soon(self) -> None:
        """A token named a key id the set lacks: fetch again now, at most every few seconds."""
        now = self._clock.monotonic_ns()
        if now - self._last_on_demand_ns >= self.MIN_ON_DEMAND_INTERVAL_S * 1e9:
            self._last_on_demand_ns = now
            self._wake.set()

    def _fetch(self) -> None:
        parsed = urllib.parse.urlparse(self.url)
        if parsed.scheme == "file":
            raw = Path(urllib.request.url2pathname(parsed.path)).read_bytes()
        elif parsed.scheme in ("http", "https"):
            with urllib.request.urlopen(self.url, timeout=10) as response:
                raw = response.read()
        else:
            raise ValueError(f"unsupported JWKS URL scheme {parsed.scheme!r} (http, https or file)")
        keys = KeySet.import_key_set(json.loads(raw))
        with self._lock:
            self._keys = keys
        log.info("OAUTHBEARER JWKS loaded from %s: %d keys", self.url, len(keys.keys))

    def _run(self) -> None:
        while not self._stop.is_set():
            retry = self._keys is None
            self._wake.wait(min(self._refresh_s, 5.0) if retry else self._refresh_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self._fetch()
            except (OSError, ValueError, JoseError) as e:
                log.error("cannot fetch the OAUTHBEARER JWKS from %s (retrying): %s", self.url, e)


def parse_initial_response(message: bytes) -> tuple[str | None, str, dict[str, str]]:
    """(authzid, token, extensions) of RFC 7628's client initial response; AuthenticationFailed if
    it is not one."""
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationFailed("Invalid OAUTHBEARER client first message encoding") from None
    gs2, sep, rest = text.partition("\x01")
    if not sep or not rest.endswith("\x01\x01") or not gs2.startswith(("n,", "y,")) or not gs2.endswith(","):
        raise AuthenticationFailed("Invalid OAUTHBEARER client first message")
    authzid_part = gs2[2:-1]
    authzid = None
    if authzid_part:
        if not authzid_part.startswith("a="):
            raise AuthenticationFailed("Invalid OAUTHBEARER client first message")
        authzid = authzid_part[2:]
    pairs: dict[str, str] = {}
    for item in rest[:-2].split("\x01"):
        key, eq, value = item.partition("=")
        if not eq or not key or key in pairs:
            raise AuthenticationFailed("Invalid OAUTHBEARER client first message")
        pairs[key] = value
    auth = pairs.pop("auth", "")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthenticationFailed("Invalid OAUTHBEARER client first message: no auth=Bearer token")
    return authzid, token.strip(), pairs


class OAuthBearerServer(MechanismServer):
    """One OAUTHBEARER exchange: the client's token, then (only after a failure) its ``\\x01``."""

    mechanism = MECHANISM

    def __init__(self, settings: OAuthSettings, keys: Callable[[], KeySet | None],
                 refresh_keys: Callable[[], None], now_ms: Callable[[], int]) -> None:
        self._settings = settings
        self._keys = keys
        self._refresh_keys = refresh_keys
        self._now_ms = now_ms
        self._failure: str | None = None
        #: When the validated token expires (ms): the session ends then if re-authentication is on.
        self.credential_expires_at_ms: int | None = None

    def evaluate(self, token: bytes) -> bytes:
        if self._failure is not None:
            # The client's acknowledgement of the error challenge (RFC 7628 section 3.2.3).
            raise AuthenticationFailed(f"Authentication failed: {self._failure}")
        if token == _KVSEP:
            raise AuthenticationFailed("Unexpected OAUTHBEARER message")
        authzid, value, _extensions = parse_initial_response(token)
        try:
            principal, expires_ms = self._validate(value)
        except AuthenticationFailed as e:
            self._failure = str(e)
            log.debug("OAUTHBEARER token refused: %s", e)
            return INVALID_TOKEN_CHALLENGE
        if authzid and authzid != principal:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id that is "
                                       "different from the token's principal")
        self.user, self.complete = principal, True
        self.credential_expires_at_ms = expires_ms
        return b""

    def _validate(self, value: str) -> tuple[str, int]:
        s = self._settings
        now_s = self._now_ms() // 1000
        if s.unsecured:
            claims = _unsecured_claims(value)
        else:
            keys = self._keys()
            if keys is None:
                raise AuthenticationFailed("invalid_token: the JWKS is not loaded yet")
            try:
                decoded = jwt.decode(value, keys, algorithms=list(SIGNED_ALGORITHMS))
            except InvalidKeyIdError as e:
                self._refresh_keys()  # the provider may have rotated its keys: the next try may pass
                raise AuthenticationFailed(f"invalid_token: {e}") from None
            except (JoseError, ValueError) as e:
                raise AuthenticationFailed(f"invalid_token: {e}") from None
            claims = dict(decoded.claims)
        options: dict[str, dict[str, object]] = {"exp": {"essential": True}, s.sub_claim: {"essential": True}}
        if s.expected_audience:
            options["aud"] = {"essential": True, "values": list(s.expected_audience)}
        if s.expected_issuer:
            options["iss"] = {"essential": True, "value": s.expected_issuer}
        try:
            jwt.JWTClaimsRegistry(now=now_s, leeway=s.clock_skew_s, **options).validate(claims)  # type: ignore[arg-type]
        except (JoseError, ValueError) as e:
            raise AuthenticationFailed(f"invalid_token: {e}") from None
        principal, exp = claims.get(s.sub_claim), claims.get("exp")
        if not isinstance(principal, str) or not principal or not isinstance(exp, int | float):
            raise AuthenticationFailed(f"invalid_token: no {s.sub_claim} or exp claim")
        return principal, int(exp * 1000)


def _unsecured_claims(value: str) -> dict[str, object]:
    """The claims of Kafka's unsecured JWS (``alg: none``, an empty signature)."""
    import base64

    parts = value.split(".")
    if len(parts) != 3 or parts[2]:
        raise AuthenticationFailed("invalid_token: an unsecured token is header.claims. with no signature")

    def part(text: str) -> dict[str, object]:
        try:
            decoded = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        except ValueError:
            raise AuthenticationFailed("invalid_token: not base64url JSON") from None
        if not isinstance(decoded, dict):
            raise AuthenticationFailed("invalid_token: not a JSON object")
        return decoded

    if part(parts[0]).get("alg") != "none":
        raise AuthenticationFailed("invalid_token: an unsecured token must say alg none")
    return part(parts[1])
