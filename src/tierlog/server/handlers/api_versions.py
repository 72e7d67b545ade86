"""ApiVersions: the table in :mod:`tierlog.protocol.apis` is the single source of what is advertised;
the features (v3+) come from the metadata image (:func:`tierlog.server.handlers.features.advertised_features`)."""

from __future__ import annotations

from tierlog.errors import ErrorCode
from tierlog.protocol import ApiKey, ParsedRequest, api_versions_request_is_valid, api_versions_response
from tierlog.server.connection import ClientInfo, Reply
from tierlog.server.context import BrokerContext
from tierlog.server.handlers.features import advertised_features


async def handle_api_versions(ctx: BrokerContext, request: ParsedRequest, client: ClientInfo) -> Reply:
    body = request.body
    if request.api_version >= 3:
        client.extra["software"] = (body.client_software_name, body.client_software_version)
    if not api_versions_request_is_valid(body):
        return api_versions_response(request.api_version, error_code=ErrorCode.INVALID_REQUEST)
    return api_versions_response(request.api_version, **advertised_features(ctx.image))


HANDLERS = {ApiKey.API_VERSIONS: handle_api_versions}
