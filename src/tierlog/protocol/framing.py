"""Size-prefixed framing of the Kafka protocol, sans-IO.

Every request and response is an int32 big-endian size followed by that many bytes. The decoder
checks the size as soon as its four bytes arrive, before buffering the body, so a client cannot make
the broker hold more than ``socket.request.max.bytes`` for one request (Kafka's ``NetworkReceive``
does the same and throws ``InvalidReceiveException``).
"""

from __future__ import annotations

import struct
import threading

from tierlog.protocol.errors import FrameError, FrameTooLargeError, InvalidFrameError

SIZE_PREFIX_BYTES = 4
MAX_FRAME_BYTES = 2**31 - 1  # the size prefix is a signed int32

_SIZE = struct.Struct(">i")


#: What one read from the socket may bring (asyncio's own reads are 256 KiB).
READ_BUFFER_BYTES = 256 << 10
#: A frame at least this large that is not complete after a read is collected apart from the
#: shared read buffer, and once enough of it is in, read straight into a buffer of its own: a 1 MiB
#: produce request then costs one copy (the kernel's) instead of three.
DIRECT_FRAME_BYTES = 16 << 10
#: ... enough: an eighth of its declared size. So a client that declares a large frame and sends a
#: little of it makes the broker hold at most eight times what it sent, never the declared size.
DIRECT_AFTER_FRACTION = 8

_read_buffers = threading.local()


def _read_buffer() -> bytearray:
    """The receive buffer of this thread's decoders. Shared: every read into it is cut into frames
    (and what is left of a partial frame copied out) before the next read, and an event loop does
    one read at a time; so memory does not grow with the number of connections."""
    buffer: bytearray | None = getattr(_read_buffers, "buffer", None)
    if buffer is None:
        buffer = _read_buffers.buffer = bytearray(READ_BUFFER_BYTES + DIRECT_FRAME_BYTES + SIZE_PREFIX_BYTES)
    return buffer


class FrameDecoder:
    """Splits a byte stream into frames.

    Two ways to feed it. ``get_buffer`` / ``buffer_updated`` (what an ``asyncio.BufferedProtocol``
    does): the reader writes into the buffer the decoder hands out and says how many bytes it
    wrote, which returns the frames they completed. ``feed(data)`` does the same for bytes already
    read. Frames come without their size prefix: small ones as ``bytes`` copied out of the receive
    buffer, large ones as the ``bytearray`` they were collected or read into (never reused, so a
    view of it may outlive the request).

    After a :class:`FrameError` the stream is out of sync for good: every later call raises the same
    error, and the connection must be closed.
    """

    __slots__ = ("_error", "_frame", "_frame_size", "_lent", "_partial", "_reading", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int) -> None:
        if not 0 <= max_frame_bytes <= MAX_FRAME_BYTES:
            raise ValueError(f"max_frame_bytes must be in [0, {MAX_FRAME_BYTES}], got {max_frame_bytes}")
        self.max_frame_bytes = max_frame_bytes
        #: What was received of a frame smaller than DIRECT_FRAME_BYTES, its size prefix included ...
        self._partial = b""
        #: ... or of a large frame, without its prefix: collected (``_frame`` is as long as what came)
        #: until an eighth of it is in, then a buffer of the frame's size filled up to ``_reading``.
        self._frame: bytearray | None = None
        self._reading = -1
        # Size of the frame being received, or -1 while its prefix is still incomplete.
        self._frame_size = -1
        #: Where the last get_buffer's room starts in the shared read buffer (after ``_partial``).
        self._lent = 0
        self._error: FrameError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Memory held for frames not yet returned: the bytes received of them, or the whole buffer
        of a large frame being read into its own. Non-zero at EOF means a torn frame."""
        if self._frame is not None:
            return len(self._frame)
        return self._partial_body_bytes

    @property
    def received_bytes(self) -> int:
        """Bytes received of the frame being read (of its size prefix too while that is incomplete)."""
        frame = self._frame
        if frame is not None:
            return self._reading if self._reading >= 0 else len(frame)
        return self._partial_body_bytes

    @property
    def _partial_body_bytes(self) -> int:
        return len(self._partial) - (SIZE_PREFIX_BYTES if self._frame_size >= 0 else 0)

    @property
    def pending_frame_bytes(self) -> int | None:
        """Declared size of the frame being received, once its prefix is in."""
        return None if self._frame_size < 0 else self._frame_size

    def get_buffer(self) -> memoryview:
        """Where the next bytes read go (never empty): the rest of a large frame being read into its
        own buffer; else the shared read buffer, after what was received of a small frame or, for a
        large one being collected, no longer than what is left of it."""
        if self._error is not None:
            raise self._error
        frame = self._frame
        if frame is not None:
            if self._reading >= 0:
                return memoryview(frame)[self._reading:]
            self._lent = 0
            return memoryview(_read_buffer())[:self._frame_size - len(frame)]
        buffer = _read_buffer()
        lent = self._lent = len(self._partial)
        if lent:
            buffer[:lent] = self._partial
        return memoryview(buffer)[lent:]

    def buffer_updated(self, nbytes: int) -> list[bytes | bytearray]:
        """``nbytes`` were written at the start of the last :meth:`get_buffer`; the frames completed."""
        if self._error is not None:
            raise self._error
        frame = self._frame
        if frame is None:
            return self._cut(self._lent + nbytes)
        if self._reading >= 0:
            self._reading += nbytes
            if self._reading < self._frame_size:
                return []
        else:
            with memoryview(_read_buffer()) as view:
                frame += view[:nbytes]
            if len(frame) < self._frame_size:
                self._collected(frame)
                return []
        self._frame, self._reading, self._frame_size = None, -1, -1
        return [frame]

    def _collected(self, frame: bytearray) -> None:
        """Once an eighth of a large frame is in, the rest is read straight into a buffer of its size."""
        size = self._frame_size
        if len(frame) < size and len(frame) * DIRECT_AFTER_FRACTION >= size:
            whole = self._frame = bytearray(size)
            whole[:len(frame)] = frame
            self._reading = len(frame)

    def _cut(self, end: int) -> list[bytes | bytearray]:
        buffer = _read_buffer()
        frames: list[bytes | bytearray] = []
        pos = 0
        try:
            # Frames are cut through a view: one copy into the frame's bytes, not a bytearray slice
            # copied again.
            with memoryview(buffer) as view:
                while True:
                    if end - pos < SIZE_PREFIX_BYTES:
                        break
                    size = _SIZE.unpack_from(buffer, pos)[0]
                    self._check_size(size)
                    self._frame_size = size
                    body = pos + SIZE_PREFIX_BYTES
                    if end - body >= size:
                        frames.append(bytes(view[body:body + size]))
                        pos = body + size
                        self._frame_size = -1
                        continue
                    if size >= DIRECT_FRAME_BYTES:
                        # Collected apart from the shared buffer from now on.
                        frame = self._frame = bytearray(view[body:end])
                        self._collected(frame)
                        pos = end
                    break
                self._partial = bytes(view[pos:end])
        except FrameError:
            # The stream is out of sync for good; nothing buffered is worth keeping.
            self._partial = b""
            raise
        return frames

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes | bytearray]:
        """The frames that ``data`` (bytes already read) completes."""
        frames: list[bytes | bytearray] = []
        with memoryview(data) as source:
            taken, total = 0, len(source)
            while True:
                with self.get_buffer() as target:
                    n = min(len(target), total - taken)
                    target[:n] = source[taken:taken + n]
                taken += n
                frames += self.buffer_updated(n)
                if taken >= total:
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
