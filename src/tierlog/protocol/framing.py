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
#: A frame at least this large that is not complete after a read gets a buffer of its own once its
#: size prefix is in, and the rest of it is read straight into that buffer: a 1 MiB produce request
#: then costs one copy (the kernel's) instead of three.
DIRECT_FRAME_BYTES = 16 << 10

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
    buffer, large ones as the ``bytearray`` they were read into (never reused, so a view of it may
    outlive the request).

    After a :class:`FrameError` the stream is out of sync for good: every later call raises the same
    error, and the connection must be closed.
    """

    __slots__ = ("_error", "_filled", "_frame", "_frame_size", "_lent", "_partial", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int) -> None:
        if not 0 <= max_frame_bytes <= MAX_FRAME_BYTES:
            raise ValueError(f"max_frame_bytes must be in [0, {MAX_FRAME_BYTES}], got {max_frame_bytes}")
        self.max_frame_bytes = max_frame_bytes
        #: What was received of a frame smaller than DIRECT_FRAME_BYTES, its size prefix included ...
        self._partial = b""
        #: ... or the buffer of a large frame and how much of it is filled.
        self._frame: bytearray | None = None
        self._filled = 0
        # Size of the frame being received, or -1 while its prefix is still incomplete.
        self._frame_size = -1
        #: Where the last get_buffer's room starts in the shared read buffer (after ``_partial``).
        self._lent = 0
        self._error: FrameError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Memory held for frames not yet returned: the bytes received of them, or the whole buffer
        of a large frame being read into its own (allocated when its size arrived, as Kafka's
        ``NetworkReceive`` allocates a request's buffer). Non-zero at EOF means a torn frame."""
        if self._frame is not None:
            return len(self._frame)
        return self._partial_body_bytes

    @property
    def received_bytes(self) -> int:
        """Bytes received of the frame being read (of its size prefix too while that is incomplete)."""
        return self._filled if self._frame is not None else self._partial_body_bytes

    @property
    def _partial_body_bytes(self) -> int:
        return len(self._partial) - (SIZE_PREFIX_BYTES if self._frame_size >= 0 else 0)

    @property
    def pending_frame_bytes(self) -> int | None:
        """Declared size of the frame being received, once its prefix is in."""
        return None if self._frame_size < 0 else self._frame_size

    def get_buffer(self) -> memoryview:
        """Where the next bytes read go (never empty): the rest of a large frame, else the shared
        read buffer after what was received of a small one."""
        if self._error is not None:
            raise self._error
        frame = self._frame
        if frame is not None:
            return memoryview(frame)[self._filled:]
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
        if frame is not None:
            self._filled += nbytes
            if self._filled < len(frame):
                return []
            self._frame, self._filled, self._frame_size = None, 0, -1
            return [frame]
        return self._cut(self._lent + nbytes)

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
                        # The rest of this frame is read into a buffer of its own.
                        frame = self._frame = bytearray(size)
                        self._filled = end - body
                        frame[:self._filled] = view[body:end]
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
