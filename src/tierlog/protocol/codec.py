"""Requests in, responses out: the sans-IO codec between frames and kio messages.

The server feeds each frame from :class:`~tierlog.protocol.framing.FrameDecoder` to
:func:`parse_request`, hands the typed body to a handler, and writes what :func:`encode_response`
returns (a complete frame, size prefix included) to the socket. Nothing here touches a socket, a
clock or a thread.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from typing import Any

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_writer
from kio.serial.errors import SerialError

from tierlog.protocol._decoder import DecodeError, decode
from tierlog.protocol.apis import (
    ApiKey,
    RequestBody,
    ResponseBody,
    parsed_api,
    request_header_version,
    request_type,
    response_header_version,
    response_type,
    unsupported_api_versions_body,
)
from tierlog.protocol.errors import (
    MalformedRequestError,
    MalformedResponseError,
    ProtocolError,
    ResponseEncodeError,
    UnsupportedApiError,
    UnsupportedVersionError,
)
from tierlog.protocol.framing import MAX_FRAME_BYTES, SIZE_PREFIX_BYTES
from tierlog.protocol.produce_request import MAX_VERSION as PRODUCE_MAX_VERSION
from tierlog.protocol.produce_request import MIN_VERSION as PRODUCE_MIN_VERSION
from tierlog.protocol.produce_request import decode_produce_request, decode_request_header

# api_key int16, api_version int16, correlation_id int32: identical in every request header version.
_HEADER_PREFIX = struct.Struct(">hhi")
_SIZE = struct.Struct(">i")
# Typed loosely: kio types the header fields as range-checked int subclasses (i16, i32) that plain
# ints satisfy at run time but not under mypy.
_RESPONSE_HEADERS: dict[int, type[Any]] = {0: ResponseHeaderV0, 1: ResponseHeaderV1}
_REQUEST_HEADERS: dict[int, type[Any]] = {1: RequestHeaderV1, 2: RequestHeaderV2}
# What kio's writers raise for values that do not fit the schema.
_ENCODE_ERRORS = (SerialError, struct.error, TypeError, ValueError, AttributeError, OverflowError)


@dataclass(slots=True)
class ParsedRequest:
    """One request as parsed. Not frozen (nothing changes it): a frozen dataclass's ``__init__``
    costs ~0.6 µs more, on every request."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    #: 1 (non-flexible) or 2 (flexible: the header ends with tagged fields).
    header_version: int
    #: The kio request dataclass of this API version (``request_type(api_key, api_version)``);
    #: record sets in it are opaque memoryviews of the frame (not to be written to). Typed ``Any``
    #: because handlers read it by field name across versions (``getattr(body, "topic_id", None)``),
    #: which no single kio class describes.
    body: Any

    @property
    def api(self) -> ApiKey:
        return ApiKey(self.api_key)

    @property
    def response_header_version(self) -> int:
        return response_header_version(self.api_key, self.api_version)


def parse_request(frame: bytes | bytearray | memoryview) -> ParsedRequest:
    """Parse one request frame (without its size prefix).

    Raises :class:`UnsupportedApiError`, :class:`UnsupportedVersionError` (for ApiVersions answer
    it with :func:`unsupported_api_versions_response`) or :class:`MalformedRequestError`; never
    anything else for any input.
    """
    view = memoryview(frame)
    if len(view) < _HEADER_PREFIX.size:
        raise MalformedRequestError(f"request of {len(view)} bytes has no header", correlation_id=None)
    api_key, api_version, correlation_id = _HEADER_PREFIX.unpack_from(view, 0)
    spec = parsed_api(api_key)
    if spec is None:
        raise UnsupportedApiError(api_key, api_version, correlation_id)
    if not spec.supports(api_version):
        # Kafka does not parse the rest of an ApiVersions request it cannot read; neither do we.
        raise UnsupportedVersionError(api_key, api_version, correlation_id)
    header_version = request_header_version(api_key, api_version)
    try:
        client_id, pos = decode_request_header(view, header_version)
        if api_key == ApiKey.PRODUCE and PRODUCE_MIN_VERSION <= api_version <= PRODUCE_MAX_VERSION:
            # By hand: every produce request pays for its parsing (produce_request.py).
            body, _ = decode_produce_request(api_version, view, pos)
        else:
            # Record sets stay views of the frame: the log writes them from there.
            body, _ = decode(request_type(api_key, api_version), view, pos, record_views=True)
    except DecodeError as e:
        raise MalformedRequestError(
            f"malformed {spec.name} v{api_version} request: {e}",
            correlation_id=correlation_id,
            api_key=api_key,
            api_version=api_version,
        ) from e
    # Bytes after the body are ignored, as Kafka's parser does.
    return ParsedRequest(api_key, api_version, correlation_id, client_id, header_version, body)


def encode_response(api_key: int, api_version: int, correlation_id: int, response_body: ResponseBody) -> bytes:
    """Encode a response as a complete frame: size prefix, response header, body.

    ``response_body`` must be the kio response class of exactly this API version (see
    :func:`tierlog.protocol.build.build_response`), so a handler cannot answer in a version the
    client did not ask for.
    """
    body_type = type(response_body)
    expected = response_type(api_key, api_version)
    if body_type is not expected:
        raise ResponseEncodeError(
            f"response for API {api_key} v{api_version} must be {expected.__module__}.{expected.__qualname__}, "
            f"got {body_type.__module__}.{body_type.__qualname__}"
        )
    header_type = _RESPONSE_HEADERS[response_header_version(api_key, api_version)]
    return _encode_frame(header_type, header_type(correlation_id=correlation_id), response_body)


def unsupported_api_versions_response(correlation_id: int) -> bytes:
    """The frame answering an ApiVersions request whose version tierlog does not support: a v0
    response (header v0) with UNSUPPORTED_VERSION (35), from which the client learns which
    ApiVersions versions to retry with."""
    header_type = _RESPONSE_HEADERS[0]
    return _encode_frame(header_type, header_type(correlation_id=correlation_id), unsupported_api_versions_body())


def encode_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, request_body: RequestBody
) -> bytes:
    """Encode a request as a complete frame (for tierlog's own tools and tests)."""
    expected = request_type(api_key, api_version)
    if type(request_body) is not expected:
        raise ResponseEncodeError(f"request for API {api_key} v{api_version} must be {expected.__qualname__}")
    header_version = request_header_version(api_key, api_version)
    header_type = _REQUEST_HEADERS[header_version]
    header = header_type(
        request_api_key=api_key,
        request_api_version=api_version,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    return _encode_frame(header_type, header, request_body)


def parse_response(api_key: int, api_version: int, frame: bytes | bytearray | memoryview) -> tuple[int, ResponseBody]:
    """Parse a response frame (without its size prefix) to the request ``api_key``/``api_version``;
    return its correlation id and body. For tierlog's own tools and tests."""
    header_type = _RESPONSE_HEADERS[response_header_version(api_key, api_version)]
    try:
        header, pos = decode(header_type, frame)
        body, _ = decode(response_type(api_key, api_version), frame, pos)
    except DecodeError as e:
        raise MalformedResponseError(f"malformed response to API {api_key} v{api_version}: {e}") from e
    return header.correlation_id, body


def _encode_frame(header_type: type[Any], header: Any, body: Any) -> bytes:
    out = io.BytesIO()
    out.write(bytes(SIZE_PREFIX_BYTES))  # patched below, once the size is known
    try:
        entity_writer(header_type)(out, header)
        entity_writer(type(body))(out, body)
    except _ENCODE_ERRORS as e:
        raise ResponseEncodeError(f"cannot encode {type(body).__qualname__}: {e}") from e
    size = out.tell() - SIZE_PREFIX_BYTES
    if size > MAX_FRAME_BYTES:
        raise ResponseEncodeError(f"encoded message of {size} bytes exceeds the int32 frame size")
    buffer = out.getbuffer()
    _SIZE.pack_into(buffer, 0, size)
    del buffer  # a live export would make getvalue() fail
    return out.getvalue()


__all__ = [
    "ParsedRequest",
    "ProtocolError",
    "encode_request",
    "encode_response",
    "parse_request",
    "parse_response",
    "unsupported_api_versions_response",
]
