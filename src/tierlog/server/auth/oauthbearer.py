"""SASL/OAUTHBEARER (RFC 7628, Kafka's KIP-255/KIP-768): a signed JWT checked against a JSON Web Key Set.

The client's one message is RFC 7628's initial response, ``n,[a=authzid],`` then ``auth=Bearer
<token>`` and optional ``key=value`` extensions, each ended by 0x01, the whole ended by another 0x01.
The token must be a JWS signed by a key of the JWKS (``sasl.oauthbearer.jwks.endpoint.url``), with
``exp`` in the future, ``nbf``/``iat`` not in the future (both within
``sasl.oauthbearer.clock.skew.seconds``), the expected audience and issuer when configured, and the
principal's name in ``sasl.oauthbearer.sub.claim.name``. Kafka's unsecured (unsigned) tokens are not
accepted: there is no mode that trusts a token without a signature.

Every failure is the same one-line authentication error to the client (the debug log says which check
failed).
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from joserfc import jwt
from joserfc.errors import InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet

from tierlog.server.auth.mechanisms import AuthenticationFailed, MechanismServer

log = logging.getLogger(__name__)

#: What the client hears on any failure (Kafka answers invalid_token without details).
FAILED = "Authentication failed: invalid_token"
#: The longest a JWKS fetch may take; it runs when a listener is configured and when a token names
#: a key id the set does not have (at most once per refresh interval).
FETCH_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class TokenRules:
    expected_audience: tuple[str, ...] = ()
    expected_issuer: str | None = None
    clock_skew_s: int = 30
    sub_claim_name: str = "sub"


def check_claims(claims: dict[str, Any], rules: TokenRules, now_s: float) -> str:
    """The principal's name from a signature-checked token's claims, or :class:`AuthenticationFailed`
    naming the check that failed (for the log)."""
    skew = rules.clock_skew_s
    exp = claims.get("exp")
    if not isinstance(exp, int | float):
        raise AuthenticationFailed("the token has no exp claim")
    if exp + skew <= now_s:
        raise AuthenticationFailed(f"the token expired at {exp}")
    for name in ("nbf", "iat"):
        value = claims.get(name)
        if value is not None and (not isinstance(value, int | float) or value - skew > now_s):
            raise AuthenticationFailed(f"the token's {name} {value} is in the future")
    if rules.expected_audience:
        aud = claims.get("aud")
        audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
        if not set(rules.expected_audience) & set(audiences):
            raise AuthenticationFailed(f"the token's audience {aud!r} is not one of {list(rules.expected_audience)}")
    if rules.expected_issuer is not None and claims.get("iss") != rules.expected_issuer:
        raise AuthenticationFailed(f"the token's issuer {claims.get('iss')!r} is not {rules.expected_issuer!r}")
    sub = claims.get(rules.sub_claim_name)
    if not isinstance(sub, str) or not sub:
        raise AuthenticationFailed(f"the token has no {rules.sub_claim_name} claim")
    return sub


def parse_initial_response(token: bytes) -> str:
    """The bearer token of RFC 7628's client initial response."""
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationFailed("the OAUTHBEARER message is not UTF-8") from None
    header, sep, rest = text.partition("\x01")
    # Each key=value ends with 0x01 and the list with one more: the message ends 0x01 0x01.
    if not sep or not header.startswith("n,") or not rest.endswith("\x01\x01"):
        raise AuthenticationFailed("the OAUTHBEARER message is not an RFC 7628 initial response")
    auth = None
    for pair in rest[:-2].split("\x01"):
        if not pair:
            continue
        key, eq, value = pair.partition("=")
        if not eq:
            raise AuthenticationFailed("an OAUTHBEARER key=value pair has no '='")
        if key == "auth":
            auth = value
    if auth is None or not auth.startswith("Bearer ") or not auth[len("Bearer "):].strip():
        raise AuthenticationFailed("the OAUTHBEARER message has no auth=Bearer token")
    return auth[len("Bearer "):].strip()


class JwksSource:
    """The signing keys: fetched once when the listener is configured (a failure there is a config
    error), again after ``refresh_ms``, and at once when a token names an unknown key id (no more
    often than once a refresh interval, so a client cannot make the broker fetch on every attempt)."""

    def __init__(self, url: str, refresh_ms: int, now_s: Callable[[], float]) -> None:
        self.url = url
        self._refresh_s = refresh_ms / 1000.0
        self._now_s = now_s
        self._lock = threading.Lock()
        self._keys = self._fetch()
        self._fetched_at = now_s()

    def _fetch(self) -> KeySet:
        with urllib.request.urlopen(self.url, timeout=FETCH_TIMEOUT_S) as response:
            data = json.loads(response.read())
        return KeySet.import_key_set(data)

    def keys(self, *, unknown_kid: bool = False) -> KeySet:
        with self._lock:
            due = self._now_s() - self._fetched_at >= self._refresh_s
            if due or (unknown_kid and self._now_s() - self._fetched_at >= min(self._refresh_s, 60.0)):
                try:
                    self._keys = self._fetch()
                except (OSError, ValueError, JoseError) as e:
                    log.warning("could not fetch the JWKS from %s (keeping the keys we have): %s", self.url, e)
                self._fetched_at = self._now_s()
            return self._keys


class OAuthBearerServer(MechanismServer):
    mechanism = "OAUTHBEARER"

    def __init__(self, jwks: JwksSource, rules: TokenRules, now_s: Callable[[], float]) -> None:
        self._jwks = jwks
        self._rules = rules
        self._now_s = now_s

    def evaluate(self, token: bytes) -> bytes:
        try:
            bearer = parse_initial_response(token)
            try:
                decoded = jwt.decode(bearer, self._jwks.keys())
            except InvalidKeyIdError:
                decoded = jwt.decode(bearer, self._jwks.keys(unknown_kid=True))
            now_s = self._now_s()
            claims = dict(decoded.claims)
            self.user = check_claims(claims, self._rules, now_s)
            self.lifetime_ms = int((float(claims["exp"]) - now_s) * 1000)
        except AuthenticationFailed as e:
            # DEBUG: a client retrying a bad token reconnects many times a second; the SASL handler
            # logs the failure once per peer (rate-limited).
            log.debug("OAUTHBEARER refused: %s", e)
            raise AuthenticationFailed(FAILED) from None
        except (JoseError, ValueError) as e:
            log.debug("OAUTHBEARER refused: the token does not verify: %s", e)
            raise AuthenticationFailed(FAILED) from None
        self.complete = True
        return b""


__all__ = ["JwksSource", "OAuthBearerServer", "TokenRules", "check_claims", "parse_initial_response"]
