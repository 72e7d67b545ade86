"""The Kafka wire protocol, sans-IO (in the style of h11): bytes in, typed requests out; typed
responses in, bytes out. No sockets, no event loop, no clock.

* :mod:`~tierlog.protocol.framing` -- int32 size-prefixed frames (``FrameDecoder``, ``encode_frame``);
* :mod:`~tierlog.protocol.codec` -- ``parse_request`` / ``encode_response``;
* :mod:`~tierlog.protocol.apis` -- the implemented APIs and version ranges, ApiVersions;
* :mod:`~tierlog.protocol.build` -- kio messages of any version from one plain description;
* :mod:`~tierlog.protocol.errors` -- ``ProtocolError`` and its subclasses, the only exceptions that
  leave this package.

Message bodies are kio dataclasses (the dependency that models every API version); record sets
inside them (Produce requests, Fetch responses) stay opaque ``bytes``.
"""

from tierlog.protocol.apis import (
    SUPPORTED_APIS,
    ApiKey,
    ApiSpec,
    RequestBody,
    ResponseBody,
    api_spec,
    api_versions_request_is_valid,
    api_versions_response,
    is_supported,
    request_header_version,
    request_type,
    response_header_version,
    response_type,
)
from tierlog.protocol.build import build, build_request, build_response, to_millis
from tierlog.protocol.codec import (
    ParsedRequest,
    encode_request,
    encode_response,
    parse_request,
    parse_response,
    unsupported_api_versions_response,
)
from tierlog.protocol.errors import (
    EntityBuildError,
    FrameError,
    FrameTooLargeError,
    InvalidFrameError,
    MalformedRequestError,
    MalformedResponseError,
    ProtocolError,
    RequestError,
    ResponseEncodeError,
    UnsupportedApiError,
    UnsupportedVersionError,
)
from tierlog.protocol.framing import FrameDecoder, encode_frame

__all__ = [
    "SUPPORTED_APIS",
    "ApiKey",
    "ApiSpec",
    "EntityBuildError",
    "FrameDecoder",
    "FrameError",
    "FrameTooLargeError",
    "InvalidFrameError",
    "MalformedRequestError",
    "MalformedResponseError",
    "ParsedRequest",
    "ProtocolError",
    "RequestBody",
    "RequestError",
    "ResponseBody",
    "ResponseEncodeError",
    "UnsupportedApiError",
    "UnsupportedVersionError",
    "api_spec",
    "api_versions_request_is_valid",
    "api_versions_response",
    "build",
    "build_request",
    "build_response",
    "encode_frame",
    "encode_request",
    "encode_response",
    "is_supported",
    "parse_request",
    "parse_response",
    "request_header_version",
    "request_type",
    "response_header_version",
    "response_type",
    "to_millis",
    "unsupported_api_versions_response",
]
