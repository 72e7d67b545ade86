"""Routes each parsed request to its handler, with the broker context bound."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from tierlog.protocol import ParsedRequest
from tierlog.server.connection import ClientInfo, CloseConnection, Reply
from tierlog.server.context import BrokerContext, Handler

log = logging.getLogger(__name__)


class Dispatcher:
    def __init__(self, ctx: BrokerContext, handlers: Mapping[int, Handler]) -> None:
        self.ctx = ctx
        self._handlers = dict(handlers)

    async def route(self, request: ParsedRequest, client: ClientInfo) -> Reply:
        handler = self._handlers.get(request.api_key)
        if handler is None:
            # Advertised but unhandled would be a bug; the codec already refused unknown APIs.
            return CloseConnection(f"no handler for API {request.api_key} v{request.api_version}")
        return await handler(self.ctx, request, client)
