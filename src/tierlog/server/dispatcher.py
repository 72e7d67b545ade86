"""Routes each parsed request to its handler, with the broker context bound."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from tierlog.protocol import ParsedRequest, api_spec
from tierlog.protocol.apis import ANSWERED_APIS
from tierlog.protocol.error_answers import error_answer
from tierlog.server.connection import ClientInfo, CloseConnection, Reply
from tierlog.server.context import BrokerContext, Handler
from tierlog.server.throttling import apply_quotas

log = logging.getLogger(__name__)

#: How many (client, API, version) combinations are remembered for the debug log.
MAX_VERSIONS_SEEN = 4096


class Dispatcher:
    def __init__(self, ctx: BrokerContext, handlers: Mapping[int, Handler]) -> None:
        self.ctx = ctx
        self._handlers = dict(handlers)
        #: (client software, API key, version) combinations seen, logged once each: which versions
        #: real clients negotiate is worth knowing and costs one set lookup per request. Bounded: a
        #: client that sends a new client id with every request must not grow it for ever.
        self.versions_seen: set[tuple[str, int, int]] = set()

    async def route(self, request: ParsedRequest, client: ClientInfo) -> Reply:
        handler = self._handlers.get(request.api_key)
        if handler is None and request.api_key not in ANSWERED_APIS:
            # Advertised but unhandled would be a bug; the codec already refused unknown APIs.
            return CloseConnection(f"no handler for API {request.api_key} v{request.api_version}")
        if client.sasl is not None:
            # Kafka's SaslServerAuthenticator: nothing but ApiVersions and SASL before authentication.
            refusal = client.sasl.refusal(request.api_key)
            if refusal is not None:
                return CloseConnection(refusal)
        software = client.extra.get("software")
        key = (f"{software[0]}/{software[1]}" if software else client.client_id, request.api_key, request.api_version)
        if key not in self.versions_seen and len(self.versions_seen) < MAX_VERSIONS_SEEN:
            self.versions_seen.add(key)
            spec = api_spec(request.api_key)
            log.debug("client %s uses %s v%d", key[0], spec.name if spec else request.api_key, request.api_version)
        if handler is None:
            # An API of Kafka's broker that tierlog does not implement: Kafka's error answer.
            return error_answer(request)
        quotas = getattr(self.ctx, "quotas", None)  # a bare test dispatcher may have no context
        if quotas is None:
            return await handler(self.ctx, request, client)
        clock = self.ctx.clock
        started_ns = clock.monotonic_ns()
        reply = await handler(self.ctx, request, client)
        ended_ns = clock.monotonic_ns()
        # Monotonic: a wall clock stepped back must not look like a burst.
        return apply_quotas(quotas, request, client, reply, ended_ns - started_ns, ended_ns // 1_000_000)
