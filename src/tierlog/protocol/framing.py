"""Size-prefixed framing of the Kafka protocol, sans-IO.

Every request and response is an int32 big-endian size followed by that many bytes. The decoder
checks the size as soon as its four bytes arrive, before buffering the body, so a client cannot make
the broker hold more than ``socket.request.max.bytes`` for one request (Kafka's ``NetworkReceive``
does the same and throws ``InvalidReceiveException``).
"""

from __future__ import annotations

import struct
import threading

from tierlog._util.buffers import unzeroed_bytearray
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
#: After a frame of SPECULATE_MIN_BYTES to SPECULATE_MAX_BYTES, the next read at a frame boundary
#: goes into a buffer of that frame's size (a client sends its produce requests of about one size
#: back to back), which becomes the next frame's own buffer if it is as large or up to this
#: fraction larger and an eighth of it came: then not even the first read of a 1 MiB request is
#: copied. Not for smaller frames: one read into the shared buffer brings several of them, and a
#: read costs more than copying them (16 KiB produce requests cost ~40 % more CPU each when read one
#: per read); nor for larger ones, whose first read's copy is a small part of them.
SPECULATE_HEADROOM_FRACTION = 8
SPECULATE_MIN_BYTES = READ_BUFFER_BYTES
SPECULATE_MAX_BYTES = 16 << 20

_read_buffers = threading.local()


def _read_buffer() -> bytearray:
    """The receive buffer of this thread's decoders. Shared: every read into it is cut into frames
    (and what is left of a partial frame copied out) before the next read, and an event loop does
    one read at a time; so memory does not grow with the number of connections."""
    buffer: bytearray | None = getattr(_read_buffers, "buffer", None)
    if buffer is None:
        buffer = _read_buffers.buffer = bytearray(READ_BUFFER_BYTES + DIRECT_FRAME_BYTES + SIZE_PREFIX_BYTES)
    return buffer


def _expected_after(size: int) -> int:
    """The size the next frame is guessed to have after one of ``size`` bytes (0: no guess)."""
    return size if SPECULATE_MIN_BYTES <= size <= SPECULATE_MAX_BYTES else 0


class FrameDecoder:
    """Splits a byte stream into frames.

    Two ways to feed it. ``get_buffer`` / ``buffer_updated`` (what an ``asyncio.BufferedProtocol``
    does): the reader writes into the buffer the decoder hands out and says how many bytes it
    wrote, which returns the frames they completed. ``feed(data)`` does the same for bytes already
    read. Frames come without their size prefix: small ones as ``bytes`` copied out of the receive
    buffer, large ones as the ``bytearray`` they were collected or read into (never reused, so a
    view of it may outlive the request). After a large frame, the next read at a frame boundary
    goes into a new buffer of about that size, which becomes the next frame's own when it starts a
    large frame that fits (its size prefix dropped in place); so pipelined produce requests of one
    size are read with no copy but the kernel's. A reader must not keep the buffer it was lent
    after ``buffer_updated`` (asyncio's transports do not); if it does, that frame is copied.

    After a :class:`FrameError` the stream is out of sync for good: every later call raises the same
    error, and the connection must be closed.
    """

    __slots__ = ("_error", "_expect", "_frame", "_frame_size", "_lent", "_lent_view", "_partial", "_reading", "_spec",
                 "_spec_at", "_spec_tried", "max_frame_bytes")

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
        #: Size of the last frame when it was large (the guess for the next), else 0.
        self._expect = 0
        #: A buffer lent by get_buffer in the hope that it becomes the frame's own (see
        #: SPECULATE_HEADROOM_FRACTION): the whole frame's size for a frame being collected, its bytes
        #: from ``_spec_at`` lent; or, at a frame boundary (``_spec_at`` -1), ``_expect`` bytes plus
        #: the size prefix and some room, ``_lent_view`` the view lent.
        self._spec: bytearray | None = None
        self._spec_at = -1
        self._lent_view: memoryview | None = None
        #: Whether the frame being collected already had its lent buffer (once per frame: a client
        #: trickling bytes must not make every read copy what was collected).
        self._spec_tried = False

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
        spec = self._spec
        if spec is not None:
            # Lent before and not written to (a read that found nothing after all): lent again.
            if self._spec_at >= 0:
                return memoryview(spec)[self._spec_at:]
            if self._lent_view is not None:
                self._lent_view.release()
            view = self._lent_view = memoryview(spec)[:SIZE_PREFIX_BYTES + self._expect]
            return view
        frame = self._frame
        if frame is not None:
            if self._reading >= 0:
                return memoryview(frame)[self._reading:]
            if not self._spec_tried:
                # Collected from the end of a read that brought what came before it: the rest is
                # likely waiting in the socket, so read it into the frame's own buffer; kept as
                # such only if an eighth is in after this read (buffer_updated).
                self._spec_tried = True
                got = self._spec_at = len(frame)
                spec = self._spec = unzeroed_bytearray(self._frame_size)
                spec[:got] = frame
                return memoryview(spec)[got:]
            self._lent = 0
            return memoryview(_read_buffer())[:self._frame_size - len(frame)]
        if self._expect and not self._partial:
            # At a frame boundary after a large frame: read into a buffer that may become the next one.
            expect = self._expect
            spec = self._spec = unzeroed_bytearray(SIZE_PREFIX_BYTES + expect + expect // SPECULATE_HEADROOM_FRACTION)
            self._spec_at = -1
            view = self._lent_view = memoryview(spec)[:SIZE_PREFIX_BYTES + expect]
            return view
        buffer = _read_buffer()
        lent = self._lent = len(self._partial)
        if lent:
            buffer[:lent] = self._partial
        return memoryview(buffer)[lent:]

    def buffer_updated(self, nbytes: int) -> list[bytes | bytearray]:
        """``nbytes`` were written at the start of the last :meth:`get_buffer`; the frames completed."""
        if self._error is not None:
            raise self._error
        spec = self._spec
        if spec is not None:
            self._spec = None
            if self._spec_at < 0:
                return self._boundary_read(spec, nbytes)
            return self._spec_read(spec, nbytes)
        frame = self._frame
        if frame is None:
            return self._cut(_read_buffer(), self._lent + nbytes)
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
        return [self._completed(frame)]

    def _completed(self, frame: bytearray) -> bytearray:
        """The large frame being received is complete."""
        self._frame, self._reading, self._frame_size, self._spec_tried = None, -1, -1, False
        self._expect = _expected_after(len(frame))
        return frame

    def _spec_read(self, spec: bytearray, nbytes: int) -> list[bytes | bytearray]:
        """A read into the whole-frame buffer lent for a frame being collected."""
        got = self._spec_at + nbytes
        if got >= self._frame_size:
            return [self._completed(spec)]
        if got * DIRECT_AFTER_FRACTION >= self._frame_size:
            self._frame, self._reading = spec, got
            return []
        # Still under an eighth: only what came is kept, as before.
        assert self._frame is not None
        with memoryview(spec) as view:
            self._frame += view[self._spec_at:got]
        return []

    def _boundary_read(self, spec: bytearray, nbytes: int) -> list[bytes | bytearray]:
        """A read at a frame boundary into a buffer of the last large frame's size (and some room):
        the frame's own buffer if it starts a large frame that fits and an eighth of it came, else
        cut as the shared buffer is (what came copied out)."""
        lent, self._lent_view = self._lent_view, None
        if nbytes >= SIZE_PREFIX_BYTES:
            size = _SIZE.unpack_from(spec, 0)[0]
            self._check_size(size)
            end = SIZE_PREFIX_BYTES + size
            got = nbytes - SIZE_PREFIX_BYTES
            if size >= DIRECT_FRAME_BYTES and end <= len(spec) and got * DIRECT_AFTER_FRACTION >= size:
                if got >= size:
                    self._frame_size = -1
                    self._expect = _expected_after(size)
                    # The frames after it (a smaller one than the last) are cut first, as they set
                    # the state for the next read; then its room is cut off.
                    after = self._cut(spec, nbytes, start=end) if nbytes > end else []
                    return [self._own(spec, lent, end, end), *after]
                frame = self._own(spec, lent, end, nbytes)
                self._frame, self._reading, self._frame_size, self._spec_tried = frame, got, size, True
                return []
        try:
            return self._cut(spec, nbytes)
        finally:
            if lent is not None:
                lent.release()

    @staticmethod
    def _own(spec: bytearray, lent: memoryview | None, end: int, filled: int) -> bytearray:
        """``spec[SIZE_PREFIX_BYTES:end]`` as a bytearray of its own: ``spec`` itself, its prefix and
        spare room cut off in place (dropping a bytearray's head moves its start, no copy), or a copy
        if a view of it is still held elsewhere (a reader that kept the lent view)."""
        if lent is not None:
            lent.release()
        try:
            del spec[end:]
            del spec[:SIZE_PREFIX_BYTES]
            return spec
        except BufferError:
            own = unzeroed_bytearray(end - SIZE_PREFIX_BYTES)
            with memoryview(spec) as view:
                own[:filled - SIZE_PREFIX_BYTES] = view[SIZE_PREFIX_BYTES:filled]
            return own

    def _collected(self, frame: bytearray) -> None:
        """Once an eighth of a large frame is in, the rest is read straight into a buffer of its size."""
        size = self._frame_size
        if len(frame) < size and len(frame) * DIRECT_AFTER_FRACTION >= size:
            whole = self._frame = unzeroed_bytearray(size)
            whole[:len(frame)] = frame
            self._reading = len(frame)

    def _cut(self, buffer: bytearray, end: int, start: int = 0) -> list[bytes | bytearray]:
        """The frames in ``buffer[start:end]`` (the shared read buffer, ``_partial`` at its start, or
        one lent at a frame boundary); what is left of the last one kept as ``_partial`` or, large,
        as the frame being collected or read."""
        frames: list[bytes | bytearray] = []
        pos = start
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
                        self._expect = _expected_after(size)
                        continue
                    if size >= DIRECT_FRAME_BYTES:
                        got = end - body
                        if got * DIRECT_AFTER_FRACTION >= size:
                            # An eighth is in already: straight into a buffer of its size, one copy.
                            frame = self._frame = unzeroed_bytearray(size)
                            frame[:got] = view[body:end]
                            self._reading = got
                            self._spec_tried = True
                        else:
                            # Collected apart from the shared buffer from now on.
                            self._frame = bytearray(view[body:end])
                            self._spec_tried = False
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
