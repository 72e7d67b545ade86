"""Errors of the wire protocol layer.

Every failure to frame, parse or encode a message surfaces as a :class:`ProtocolError`, so the
server needs one ``except`` clause per connection and no kio (or struct) exception type ever leaves
this package. What the server does with each one follows Kafka's ``SocketServer``: a frame error or
a malformed request closes the connection; an unsupported ApiVersions version is answered (see
:func:`tierlog.protocol.codec.unsupported_api_versions_response`); any other unsupported API or
version closes the connection too, because the client cannot parse a response it did not ask for.
"""

from __future__ import annotations

# ProtocolError, RequestError and UnsupportedVersionError live in tierlog.errors (the metadata layer
# raises UnsupportedVersionError too, and must not load the protocol codec for it); re-exported here.
from tierlog.errors import ErrorCode
from tierlog.errors import ProtocolError as ProtocolError
from tierlog.errors import RequestError as RequestError
from tierlog.errors import UnsupportedVersionError as UnsupportedVersionError


class FrameError(ProtocolError):
    """The size prefix of a frame cannot be honoured; the connection must be closed."""


class InvalidFrameError(FrameError):
    """A negative frame size (Kafka's ``InvalidReceiveException``)."""

    def __init__(self, size: int) -> None:
        super().__init__(f"invalid frame size {size}")
        self.size = size


class FrameTooLargeError(FrameError):
    """A frame larger than ``socket.request.max.bytes``."""

    def __init__(self, size: int, max_frame_bytes: int) -> None:
        super().__init__(f"frame of {size} bytes is larger than the maximum of {max_frame_bytes}")
        self.size = size
        self.max_frame_bytes = max_frame_bytes


class UnsupportedApiError(RequestError):
    """An API key tierlog does not implement."""

    error_code = ErrorCode.UNSUPPORTED_VERSION

    def __init__(self, api_key: int, api_version: int, correlation_id: int | None) -> None:
        super().__init__(
            f"unsupported API key {api_key} (version {api_version})",
            correlation_id=correlation_id,
            api_key=api_key,
            api_version=api_version,
        )


class MalformedRequestError(RequestError):
    """A request whose header or body does not match its schema."""


class MalformedResponseError(ProtocolError):
    """A response that does not match its schema (only tierlog's own clients and tests parse them)."""


class EntityBuildError(ProtocolError):
    """Values that do not fit the message being built (a handler bug, not a client error)."""

    error_code = ErrorCode.UNKNOWN_SERVER_ERROR


class ResponseEncodeError(ProtocolError):
    """A response body that cannot be encoded: the wrong type for the API/version, or a value out
    of range. Always a broker bug, never the client's fault."""

    error_code = ErrorCode.UNKNOWN_SERVER_ERROR
