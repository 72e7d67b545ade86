"""SaslHandshake and SaslAuthenticate (KIP-43, KIP-152, KIP-368), on the connection's SASL session.

A failure answers with Kafka's error and then closes the connection (the client reports the error
instead of a bare disconnect). On a listener without SASL both answer ILLEGAL_SASL_STATE.
"""

from __future__ import annotations

import logging

from tierlog.errors import ErrorCode as E
from tierlog.protocol import ApiKey, ParsedRequest, build_response
from tierlog.server.auth.mechanisms import AuthenticationFailed
from tierlog.server.auth.session import IllegalSaslState, SaslSession
from tierlog.server.connection import ClientInfo, Reply
from tierlog.server.context import BrokerContext
from tierlog.server.security.principal import user_principal

log = logging.getLogger("tierlog.security")


async def handle_sasl_handshake(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    session = client.sasl
    version = request.api_version
    mechanism = str(request.body.mechanism)
    enabled = list(session.mechanisms) if session is not None else []
    if session is None:
        client.close_after_response = "SaslHandshake on a listener without SASL"
        return build_response(ApiKey.SASL_HANDSHAKE, version, {"error_code": E.ILLEGAL_SASL_STATE, "mechanisms": []})
    try:
        ok = session.handshake(mechanism, version)
    except AuthenticationFailed as e:
        client.close_after_response = str(e)
        return build_response(ApiKey.SASL_HANDSHAKE, version, {"error_code": E.ILLEGAL_SASL_STATE,
                                                               "mechanisms": enabled})
    if not ok:
        _refused(client, f"unsupported SASL mechanism {mechanism!r}")
        client.close_after_response = f"unsupported SASL mechanism {mechanism!r}"
        return build_response(ApiKey.SASL_HANDSHAKE, version, {"error_code": E.UNSUPPORTED_SASL_MECHANISM,
                                                               "mechanisms": enabled})
    if version == 0:
        # Pre-KIP-152 flow: the tokens follow as bare size-prefixed frames.
        client.raw_frames = lambda token: _raw_token(client, session, token)
    return build_response(ApiKey.SASL_HANDSHAKE, version, {"error_code": 0, "mechanisms": enabled})


def _raw_token(client: ClientInfo, session: SaslSession, token: bytes) -> tuple[bytes | None, bool]:
    try:
        challenge, done = session.authenticate(token)
    except AuthenticationFailed as e:
        _refused(client, str(e))
        return None, True
    if done:
        client.raw_frames = None
        _authenticated(client, session)
    # PLAIN's empty final challenge is not sent in the raw flow (Kafka sends none either).
    return (challenge or None), False


async def handle_sasl_authenticate(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    session = client.sasl
    version = request.api_version

    def answer(code: int, message: str | None, token: bytes = b"", lifetime_ms: int = 0) -> Reply:
        values: dict[str, object] = {"error_code": code, "error_message": message, "auth_bytes": token}
        if version >= 1:
            values["session_lifetime"] = lifetime_ms
        return build_response(ApiKey.SASL_AUTHENTICATE, version, values)

    if session is None:
        client.close_after_response = "SaslAuthenticate on a listener without SASL"
        return answer(E.ILLEGAL_SASL_STATE, "SASL is not enabled on this listener")
    try:
        challenge, done = session.authenticate(bytes(request.body.auth_bytes))
    except IllegalSaslState as e:
        _refused(client, str(e))
        client.close_after_response = str(e)
        return answer(E.ILLEGAL_SASL_STATE, str(e))
    except AuthenticationFailed as e:
        _refused(client, str(e))
        client.close_after_response = "SASL authentication failed"
        return answer(E.SASL_AUTHENTICATION_FAILED, str(e))
    if done:
        _authenticated(client, session)
        return answer(0, None, challenge, session.session_lifetime_ms())
    return answer(0, None, challenge)


def _authenticated(client: ClientInfo, session: SaslSession) -> None:
    assert session.user is not None
    client.principal = user_principal(session.user)
    log.debug("connection %s from %s authenticated as %s with %s", client.connection_id, client.host,
              client.principal, session.mechanism)


def _refused(client: ClientInfo, reason: str) -> None:
    limiter = client.extra.get("refusals")
    message = "Failed authentication with /%s:%d (%s)"
    if limiter is not None:
        limiter.warning(client.host, message, client.host, client.port, reason)
    else:
        log.warning(message, client.host, client.port, reason)


HANDLERS = {ApiKey.SASL_HANDSHAKE: handle_sasl_handshake, ApiKey.SASL_AUTHENTICATE: handle_sasl_authenticate}
