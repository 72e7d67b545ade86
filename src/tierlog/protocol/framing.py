"""Size-prefixed framing of the Kafka protocol, sans-IO.

Every request and response is an int32 big-endian size followed by that many bytes. The decoder
checks the size as soon as its four bytes arrive, before buffering the body, so a client cannot make
the broker hold more than ``socket.request.max.bytes`` for one request (Kafka's ``NetworkReceive``
does the same and throws ``InvalidReceiveException``).
"""

from __future__ import annotations

import struct

from tierlog.protocol.errors import FrameError, FrameTooLargeError, InvalidFrameError

SIZE_PREFIX_BYTES = 4
MAX_FRAME_BYTES = 2**31 - 1  # the size prefix is a signed int32

_SIZE = struct.Struct(">i")


class FrameDecoder:
    """Splits a byte stream into frames.

    ``feed`` returns the complete frames (without their size prefix) that the new bytes finish.
    After a :class:`FrameError` the stream is out of sync for good: every later ``feed`` raises the
    same error, and the connection must be closed.
    """

    __slots__ = ("_buffer", "_error", "_frame_size", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int) -> None:
        if not 0 <= max_frame_bytes <= MAX_FRAME_BYTES:
            raise ValueError(f"max_frame_bytes must be in [0, {MAX_FRAME_BYTES}], got {max_frame_bytes}")
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        # Size of the frame being received, or -1 while its prefix is still incomplete.
        self._frame_size = -1
        self._error: FrameError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet returned as a frame (non-zero at EOF means a torn frame)."""
        return len(self._buffer)

    @property
    def pending_frame_bytes(self) -> int | None:
        """Declared size of the frame being received, once its prefix is in."""
        return None if self._frame_size < 0 else self._frame_size

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        if self._error is not None:
            raise self._error
        buffer = self._buffer
        buffer += data
        frames: list[bytes] = []
        pos = 0
        end = len(buffer)
        # Frames are cut through a view: one copy into the frame's bytes, not a bytearray slice
        # copied again. The view is released before the buffer shrinks (a bytearray cannot resize
        # while exported).
        try:
            with memoryview(buffer) as view:
                while True:
                    if self._frame_size < 0:
                        if end - pos < SIZE_PREFIX_BYTES:
                            break
                        size = _SIZE.unpack_from(buffer, pos)[0]
                        self._check_size(size)
                        self._frame_size = size
                        pos += SIZE_PREFIX_BYTES
                    if end - pos < self._frame_size:
                        break
                    frames.append(bytes(view[pos : pos + self._frame_size]))
                    pos += self._frame_size
                    self._frame_size = -1
        except FrameError:
            # The stream is out of sync for good; nothing buffered is worth keeping.
            buffer.clear()
            raise
        # One deletion per feed keeps the cost linear in the bytes fed, however many frames it held.
        if pos:
            del buffer[:pos]
        return frames

    def _check_size(self, size: int) -> None:
        if size < 0:
            self._error = InvalidFrameError(size)
        elif size > self.max_frame_bytes:
            self._error = FrameTooLargeError(size, self.max_frame_bytes)
        else:
            return
        raise self._error


def encode_frame(payload: bytes | bytearray | memoryview) -> bytes:
    size = len(payload)
    if size > MAX_FRAME_BYTES:
        raise FrameTooLargeError(size, MAX_FRAME_BYTES)
    return _SIZE.pack(size) + payload
