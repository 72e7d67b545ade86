"""An in-memory asyncio transport for unit tests of one :class:`~tierlog.server.connection.KafkaConnection`:
what the connection writes is kept (and split into frames), and a stalled peer -- a client that
reads nothing -- can be played to exercise back-pressure. No sockets."""

from __future__ import annotations

import asyncio
import struct
from typing import Any


class FakeTransport(asyncio.Transport):
    """In memory. With ``stalled`` set, the client reads nothing: written bytes stay buffered and
    the protocol is told to pause writing, as asyncio does past its high-water mark."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False
        self.aborted = False
        self.reading = True
        self.pauses = 0
        self.stalled = False
        self.buffered = 0
        self.protocol: asyncio.Protocol | None = None

    def write(self, data: Any) -> None:
        if self.stalled:
            self.buffered += len(data)
            if self.protocol is not None:
                self.protocol.pause_writing()
            return
        self.written += data

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = self.aborted = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.reading = False
        self.pauses += 1

    def resume_reading(self) -> None:
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("10.0.0.7", 40000) if name == "peername" else default

    def frames(self) -> list[bytes]:
        out, pos = [], 0
        while pos + 4 <= len(self.written):
            (size,) = struct.unpack_from(">i", self.written, pos)
            out.append(bytes(self.written[pos + 4:pos + 4 + size]))
            pos += 4 + size
        return out
