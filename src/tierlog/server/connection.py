"""One client connection: frames in, requests handled one at a time, responses out in order.

Kafka answers the requests of one connection strictly in the order they arrived (clients match
responses to requests by position as much as by correlation id, and idempotent producers rely on
it), so a connection runs one request at a time -- as Kafka's SocketServer does by muting the
channel until the response is sent -- while other connections go on. Bytes that arrive meanwhile are
framed and queued; when the queue is long, reading pauses so a fast client cannot fill memory.
Every byte of a request is also counted in the broker-wide :class:`RequestMemoryPool`
(``queued.max.request.bytes``) from its arrival until the request has been served.

What closes a connection (and only that one): a frame whose size prefix is negative or larger than
``socket.request.max.bytes``, a frame still incomplete ``socket.request.receive.timeout.ms`` after
its first byte (a stalled or one-byte-a-second client), a request that does not parse, an API or
version tierlog does not implement (except ApiVersions, which is answered so the client can retry),
a handler failure, and an acks=0 produce that failed (the client would never hear about it
otherwise). The broker closes idle ones (``connections.max.idle.ms``): a client that stopped
reading its responses is idle too, however many requests it left behind.

One exception to one-at-a-time: a durable produce (``log.durable.acks``) is answered only after its
group commit, and a connection that waited for that before reading its next request would give each
fsync round one request per connection. So its handler appends and returns :class:`Deferred`; the
connection goes on appending the next requests (in order) while up to ``MAX_DEFERRED_REPLIES`` wait,
and writes every response in request order.

Longer than most modules (about 780 lines) because KafkaConnection is one asyncio protocol whose
reading, memory accounting, deferred replies, throttling and writing share the state of one
connection; its pause/resume decisions already live in :mod:`tierlog.server.read_gate`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from tierlog.clock import SYSTEM_CLOCK, Clock
from tierlog.protocol import (
    ApiKey,
    FrameDecoder,
    FrameError,
    ParsedRequest,
    RequestError,
    ResponseBody,
    UnsupportedVersionError,
    encode_response,
    parse_request,
    unsupported_api_versions_response,
)
from tierlog.server.limits import RequestMemoryPool, RequestSlots, socket_fd
from tierlog.server.read_gate import ReadGate, Timer
from tierlog.server.rejections import RejectionLimiter, client_id_of

if TYPE_CHECKING:
    from tierlog.server.auth.session import SaslSession

log = logging.getLogger(__name__)

#: Shared by every connection of the process: a client reconnecting to be refused again is one client.
REJECTIONS = RejectionLimiter()

#: Pause reading when this many requests wait (librdkafka pipelines up to 1M in-flight requests,
#: Kafka clients to 5 per connection by default).
MAX_QUEUED_FRAMES = 64
#: ... or when they hold this many bytes (one frame larger than this is still read whole).
MAX_QUEUED_BYTES = 32 << 20
#: Deferred responses (durable produces waiting for their fsync) one connection may have before it
#: waits for the oldest: Kafka's clients keep at most 5 requests in flight per connection.
MAX_DEFERRED_REPLIES = 8
#: After closing, how long a client that does not read may keep its unsent responses before the
#: socket is aborted (a close waits for the write buffer to drain, which such a client never lets).
CLOSE_GRACE_S = 5.0
#: Under TLS a file slice is read and written in chunks of this size instead of sendfile.
COPY_CHUNK_BYTES = 1 << 20
#: Responses whose file slices hold at most this many bytes are written corked (_write_raw): a
#: loopback socket takes 1-2 MiB at once, and a larger response, sent partly by asyncio's sendfile,
#: cost more corked than not (4 MB fetches: 0.23-0.29 -> 0.29-0.34 core-s/GB).
CORK_MAX_FILE_BYTES = 2 << 20

_connection_ids = itertools.count(1)
#: Where a closed connection's last reads go (asyncio may read once more before the close lands).
_DISCARD = bytearray(1 << 16)


@dataclass(slots=True)
class FileSlice:
    """Bytes of a file to send with ``sendfile``: the connection owns ``fd`` (a duplicate of the
    segment's descriptor, so a segment closed or deleted meanwhile cannot pull it away) and closes it."""

    fd: int
    position: int
    size: int

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@dataclass(frozen=True, slots=True)
class RawResponse:
    """A response encoded by its handler: byte strings and file slices, written in order. The first
    part starts with the frame's size prefix."""

    parts: tuple[bytes | FileSlice, ...]
    #: Where in the first part the response's int32 throttle_time_ms is, for quotas to set it
    #: (-1: nowhere they may: a throttled fetch is answered anew, empty).
    throttle_at: int = -1

    def with_throttle_time(self, throttle_ms: int) -> RawResponse:
        first = self.parts[0]
        if self.throttle_at < 0 or not isinstance(first, bytes):
            return self
        at = self.throttle_at
        patched = first[:at] + throttle_ms.to_bytes(4, "big", signed=True) + first[at + 4:]
        return RawResponse((patched, *self.parts[1:]), at)

    @property
    def size(self) -> int:
        return sum(len(p) if isinstance(p, bytes) else p.size for p in self.parts)

    def close(self) -> None:
        for part in self.parts:
            if isinstance(part, FileSlice):
                part.close()


class CloseConnection:
    """Reply of a request that must not be answered and must end the connection."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Deferred:
    """Reply of a request whose response is ready later: a durable produce, appended and now waiting
    for its group commit. The connection goes on with its next requests meanwhile (their appends
    join the same fsync round) and still writes every response in request order."""

    reply: Awaitable[ResponseBody | RawResponse | CloseConnection | None]


#: What a handler returns: a kio response body of the request's version, a pre-encoded response,
#: None for no response at all (acks=0), CloseConnection, or Deferred.
Reply = ResponseBody | RawResponse | CloseConnection | Deferred | None


@dataclass(slots=True)
class ClientInfo:
    connection_id: str
    host: str
    port: int
    #: The client id of the latest request (the header carries it on every request).
    client_id: str = ""
    #: Name of the listener the connection came in on (its address is what Metadata advertises).
    listener: str = "PLAINTEXT"
    #: Who the client is (Kafka's principal, ``User:name``): from its certificate on a TLS listener
    #: with client authentication, from SASL on a SASL listener, else ``User:ANONYMOUS``.
    principal: str = "User:ANONYMOUS"
    #: The listener's security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL).
    security_protocol: str = "PLAINTEXT"
    #: The SASL session on a SASL listener (None elsewhere).
    sasl: SaslSession | None = None
    #: Set by a handler whose response must be the last one (a failed SASL authentication): the
    #: connection closes once it is written.
    close_after_response: str | None = None
    #: After SaslHandshake v0 the client sends raw SASL tokens, not requests: each frame goes here,
    #: which returns the token to send back (None: nothing) and whether to close afterwards.
    raw_frames: Callable[[bytes], tuple[bytes | None, bool]] | None = None
    #: Set while a request is served when a client quota throttles it (server/throttling.py): once
    #: the response is written the connection is not read, nor its next request served, for this long.
    throttle_ms: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class RequestRouter(Protocol):
    async def route(self, request: ParsedRequest, client: ClientInfo) -> Reply: ...


class RequestObserver(Protocol):
    def request_done(self, api_key: int, bytes_in: int, bytes_out: int, seconds: float) -> None:
        """One request served: its frame's bytes and the response's (size prefixes included; 0 for no
        response), and the seconds from taking it off the queue until the response was written."""
        ...


class ConnectionRegistry(Protocol):
    def opened(self, connection: KafkaConnection) -> bool:
        """False refuses the connection (max.connections, max.connections.per.ip, descriptors);
        ``closed`` is then never called for it."""
        ...

    def closed(self, connection: KafkaConnection) -> None: ...


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, router: RequestRouter, *, max_frame_bytes: int,
                 registry: ConnectionRegistry | None = None, listener: str = "PLAINTEXT",
                 observer: RequestObserver | None = None, receive_timeout_s: float | None = None,
                 memory_pool: RequestMemoryPool | None = None, clock: Clock = SYSTEM_CLOCK,
                 request_slots: RequestSlots | None = None) -> None:
        self._clock = clock
        self._router = router
        self._registry = registry
        self._observer = observer
        self._decoder = FrameDecoder(max_frame_bytes)
        self._max_frame_bytes = max_frame_bytes
        self._receive_timeout_s = receive_timeout_s
        self._receive_timer: asyncio.TimerHandle | None = None
        self._pool = memory_pool
        #: Bytes this connection has counted in the pool, and the size of the request being served.
        self._held_bytes = 0
        self._slots = request_slots
        #: Requests this connection has counted in the slots (queued, being served, deferred).
        self._held_requests = 0
        self._serving_bytes = 0
        self._gate = ReadGate(MAX_QUEUED_FRAMES, MAX_QUEUED_BYTES)
        self._frames: deque[bytes | bytearray] = deque()
        self._queued_bytes = 0
        self._worker: asyncio.Task[None] | None = None
        #: Deferred replies in request order: (the reply, its request, its start, its frame size).
        self._deferred: deque[tuple[asyncio.Future[ResponseBody | RawResponse | CloseConnection | None],
                                    ParsedRequest, int, int]] = deque()
        #: Completed when a frame arrives while the worker waits for the oldest deferred reply.
        self._frame_waiter: asyncio.Future[None] | None = None
        self._transport: asyncio.Transport | None = None
        #: The loop the connection runs on (set once connected): asyncio.get_running_loop() makes a
        #: getpid system call on Python 3.11, and the fetch path asked for the loop eight times.
        self._loop: asyncio.AbstractEventLoop | None = None
        #: The socket file slices are sent to with sendfile (None: none, or TLS, which copies them).
        self._sendfile_socket: Any = None
        #: The socket while a response with a file slice is written corked (_write_raw).
        self._corked: Any = None
        self._closed = False
        self._in_handler = False
        self._write_resumed: asyncio.Future[None] | None = None
        self._abort_timer: asyncio.TimerHandle | None = None
        self._sending_file = False
        self._close_after_sendfile = False
        #: Responses written but not yet handed to the transport (_write), and whether a flush is due.
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._admitted = False
        #: The socket's descriptor number (-1 unknown): the registry's measure of descriptors in use.
        self.fd = -1
        self.client = ClientInfo(f"conn-{next(_connection_ids)}", "", 0, listener=listener)
        #: Monotonic seconds of the last bytes received or response written (connections.max.idle.ms).
        self.last_active = 0.0
        self.requests_served = 0

    @property
    def _running_loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        return loop if loop is not None else asyncio.get_running_loop()

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._loop = loop = asyncio.get_running_loop()
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.client.host, self.client.port = str(peer[0]), int(peer[1])
        sock = transport.get_extra_info("socket")
        self.fd = socket_fd(sock)
        # TLS encrypts in user space, so the kernel cannot send a file to its socket (the TLS
        # transport still names the socket underneath).
        self._sendfile_socket = sock if transport.get_extra_info("ssl_object") is None else None
        self.last_active = loop.time()
        if self._registry is not None:
            if not self._registry.opened(self):
                # The registry logged why (rate-limited: a flood of refusals must not flood the log).
                self._closed = True
                transport.abort()
                return
            self._admitted = True

    def get_buffer(self, sizehint: int) -> memoryview:
        """asyncio.BufferedProtocol: where the socket's next bytes go (the frame decoder's buffer,
        or for a large request the request's own: it is read with no copy but the kernel's)."""
        if self._closed:
            return memoryview(_DISCARD)
        return self._decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        if self._closed:
            return
        self._received(self._decoder.buffer_updated, nbytes)

    def data_received(self, data: bytes) -> None:
        """Bytes read elsewhere (what the TLS acceptor kept from the handshake; tests)."""
        if self._closed:
            return
        self._received(self._decoder.feed, data)

    def _received(self, cut: Callable[[Any], list[bytes | bytearray]], arg: Any) -> None:
        loop = self._running_loop
        self.last_active = loop.time()
        if self.client.sasl is not None:
            # Before authentication a frame may only be as large as a SASL token may be.
            self._decoder.max_frame_bytes = self.client.sasl.max_frame_bytes(self._max_frame_bytes)
        try:
            frames = cut(arg)
        except FrameError as e:
            self._log_rejection(type(e).__name__, f"closing connection {self.client.connection_id} from "
                                f"{self.client.host}:{self.client.port}: {e}")
            self.close()
            return
        if frames:
            self._frames.extend(frames)
            self._queued_bytes += sum(len(f) for f in frames)
            if self._worker is None:
                self._worker = loop.create_task(self._serve())
            waiter, self._frame_waiter = self._frame_waiter, None
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
            self._gate.queued(len(self._frames), self._queued_bytes)
            # The frame that just completed had its own deadline; the next one starts afresh.
            self._cancel_receive_timer()
        self._account()
        self._update_reading()

    # -- memory pool -----------------------------------------------------------------------------

    def _account(self) -> None:
        """Tell the pool what this connection holds now; over capacity, stop reading if it holds
        part of a request or more than one. The same for the request slots (queued.max.requests)."""
        self._account_requests()
        pool = self._pool
        if pool is None:
            return
        held = 0 if self._closed else self._decoder.buffered_bytes + self._queued_bytes + self._serving_bytes
        delta, self._held_bytes = held - self._held_bytes, held
        if delta:
            pool.add(delta)
        if self._closed:
            return
        requests = len(self._frames) + (1 if self._serving_bytes else 0)
        wait = pool.full and (self._receiving or requests > 1)
        if wait and not self._gate.waiting_for_memory:
            self._gate.waiting_for_memory = True
            pool.wait(self, self._memory_available)
        elif not wait and self._gate.waiting_for_memory:
            # Served down to what anyone may hold over the bound: no reason to wait in line.
            self._gate.waiting_for_memory = False
            pool.cancel(self)

    def _account_requests(self) -> None:
        slots = self._slots
        if slots is None:
            return
        held = 0 if self._closed else len(self._frames) + (1 if self._serving_bytes else 0) + len(self._deferred)
        delta, self._held_requests = held - self._held_requests, held
        if delta:
            slots.add(delta)
        if self._closed:
            return
        wait = slots.full and held > 0
        if wait and not self._gate.waiting_for_slot:
            self._gate.waiting_for_slot = True
            slots.wait(self, self._slot_available)
        elif not wait and self._gate.waiting_for_slot:
            self._gate.waiting_for_slot = False
            slots.cancel(self)

    def _slot_available(self) -> None:
        self._gate.waiting_for_slot = False
        self._update_reading()

    def _memory_available(self) -> None:
        self._gate.waiting_for_memory = False
        self._update_reading()

    def _drop_queue(self) -> None:
        """Forget queued frames and what was received of the next, giving their bytes back to the pool."""
        self._frames.clear()
        self._queued_bytes = 0
        if self._slots is not None:
            self._slots.cancel(self)
            self._gate.waiting_for_slot = False
            self._account_requests()
        if self._pool is not None:
            self._pool.cancel(self)
            self._gate.waiting_for_memory = False
            self._account()

    # -- reading ---------------------------------------------------------------------------------

    def _update_reading(self) -> None:
        """Apply what the read gate (:mod:`tierlog.server.read_gate`) decides: pause or resume reading,
        start or cancel the receive timer."""
        transport = self._transport
        if transport is None or self._closed:
            return
        actions = self._gate.decide(receiving=self._receiving, timeout_set=self._receive_timeout_s is not None)
        if actions.pause is True:
            transport.pause_reading()
        elif actions.pause is False:
            transport.resume_reading()
        if actions.timer is Timer.CANCEL:
            self._cancel_receive_timer()
        elif actions.timer is Timer.START and self._receive_timeout_s is not None:
            self._receive_timer = self._running_loop.call_later(self._receive_timeout_s,
                                                                        self._receive_timed_out)

    @property
    def _receiving(self) -> bool:
        """Part of a request is in: bytes of it, or only its size prefix (which the decoder keeps
        as the size it waits for, not as buffered bytes)."""
        return self._decoder.buffered_bytes > 0 or self._decoder.pending_frame_bytes is not None

    def _cancel_receive_timer(self) -> None:
        self._gate.timer_cancelled()
        if self._receive_timer is not None:
            self._receive_timer.cancel()
            self._receive_timer = None

    def _receive_timed_out(self) -> None:
        self._receive_timer = None
        self._gate.timer_cancelled()
        if self._closed:
            return
        declared = self._decoder.pending_frame_bytes
        log.info("closing connection %s from %s:%d: a request still incomplete after %d ms (%d of %s bytes "
                 "received; socket.request.receive.timeout.ms)", self.client.connection_id, self.client.host,
                 self.client.port, int((self._receive_timeout_s or 0) * 1000), self._decoder.received_bytes,
                 declared if declared is not None else "?")
        self.close(abort=True)

    def eof_received(self) -> bool | None:
        # The client closed its side: like Kafka, close ours too (what it still had queued is dropped;
        # it cannot have been waiting for the answers).
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._out.clear()
        self._drop_queue()
        self._cancel_receive_timer()
        if self._abort_timer is not None:
            self._abort_timer.cancel()
            self._abort_timer = None
        self._wake_writer()
        if self._worker is not None:
            # Not at once: asyncio completes a sendfile's "buffer empty" waiter with an error right
            # after this returns, and cancelling the worker now would cancel that waiter first (an
            # InvalidStateError in the loop). The error ends the worker; the cancel is a backstop.
            self._running_loop.call_soon(self._worker.cancel)
        if self._registry is not None and self._admitted:
            self._admitted = False
            self._registry.closed(self)

    def pause_writing(self) -> None:
        if self._write_resumed is None:
            self._write_resumed = self._running_loop.create_future()

    def resume_writing(self) -> None:
        # The client is reading again: that is activity, whatever its requests are doing.
        self.last_active = self._running_loop.time()
        self._wake_writer()

    # -- serving ---------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def busy(self) -> bool:
        """Requests are queued or being served, or a response is being written."""
        return self._worker is not None or bool(self._out)

    @property
    def in_handler(self) -> bool:
        """A request is in its handler (a long-polling fetch or a join waiting is not idleness; a
        response that cannot be written because the client does not read is)."""
        return self._in_handler

    @property
    def reading_paused(self) -> bool:
        return self._gate.reading_paused

    def close(self, *, abort: bool = False) -> None:
        """Close the connection. Responses already written still go out, unless ``abort`` or the
        client has not taken them within :data:`CLOSE_GRACE_S`."""
        if self._closed:
            return
        if not abort:
            self._flush_out()  # responses written before the close still go out
        self._closed = True
        self._drop_queue()
        self._cancel_receive_timer()
        transport = self._transport
        if transport is None:
            return
        if self._sending_file and self._worker is not None:
            # asyncio's sendfile has the socket registered with the selector outside the transport:
            # closing the socket now would leave that registration behind, and the next connection
            # given the same descriptor number would never be read. Stop the sendfile first; the
            # transport is closed once it has unwound (in _sendfile).
            self._close_after_sendfile = True
            self._worker.cancel()
            return
        self._close_transport(transport, abort)

    def _close_transport(self, transport: asyncio.Transport, abort: bool) -> None:
        if abort or transport.get_write_buffer_size() == 0:
            if abort:
                transport.abort()
            else:
                transport.close()
            return
        transport.close()
        self._abort_timer = self._running_loop.call_later(CLOSE_GRACE_S, transport.abort)

    def _wake_writer(self) -> None:
        waiter, self._write_resumed = self._write_resumed, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _serve(self) -> None:
        loop = self._running_loop
        try:
            while (self._frames or self._deferred) and not self._closed:
                if not self._frames:
                    # Only deferred replies left: write the oldest once ready, unless a request comes
                    # first (its append may join the fsync round the deferred ones wait for).
                    self._frame_waiter = waiter = loop.create_future()
                    await asyncio.wait((self._deferred[0][0], waiter), return_when=asyncio.FIRST_COMPLETED)
                    self._frame_waiter = None
                    if self._deferred and self._deferred[0][0].done():
                        await self._write_deferred()
                        self._account()
                        self._update_reading()
                    continue
                frame = self._frames.popleft()
                self._queued_bytes -= len(frame)
                if self._gate.queue_full:
                    self._gate.taken(len(self._frames), self._queued_bytes)
                    if not self._gate.queue_full:
                        self._update_reading()
                self.last_active = loop.time()
                self._serving_bytes = len(frame)
                try:
                    await self._handle_frame(frame)
                finally:
                    self._serving_bytes = 0
                    self._account()
                    self._update_reading()
                self.requests_served += 1
                if self.client.throttle_ms > 0:
                    # Kafka mutes the channel after the response is sent: deferred ones go out first.
                    while self._deferred:
                        await self._write_deferred()
                    await self._throttle()
        except asyncio.CancelledError:
            pass
        except (ConnectionError, OSError) as e:
            # The client went away while a response (typically a sendfile) was being written.
            log.info("connection %s from %s:%d lost while writing: %s", self.client.connection_id,
                     self.client.host, self.client.port, e)
            self.close()
        except Exception:
            log.exception("connection %s from %s:%d failed; closing it", self.client.connection_id,
                          self.client.host, self.client.port)
            self.close()
        finally:
            self._worker = None
            for reply, *_ in self._deferred:
                reply.cancel()
            self._deferred.clear()
            self._account_requests()

    async def _throttle(self) -> None:
        """Kafka mutes a throttled channel after sending its response (KIP-219): no reads and no
        requests served until the throttle time has passed."""
        delay_s, self.client.throttle_ms = self.client.throttle_ms / 1000.0, 0
        self._gate.throttled = True
        self._update_reading()
        try:
            await asyncio.sleep(delay_s)
        finally:
            self._gate.throttled = False
            self._update_reading()

    async def _handle_frame(self, frame: bytes | bytearray) -> None:
        if self.client.raw_frames is not None:
            await self._raw_frame(self.client.raw_frames, bytes(frame))
            return
        started_ns = self._clock.monotonic_ns()
        try:
            request = parse_request(frame)
        except UnsupportedVersionError as e:
            if e.api_key == ApiKey.API_VERSIONS and e.correlation_id is not None:
                # KIP-511: tell the client which ApiVersions versions exist instead of hanging up.
                await self._write(unsupported_api_versions_response(e.correlation_id))
                return
            self._reject(e, frame)
            return
        except RequestError as e:
            self._reject(e, frame)
            return
        if request.client_id is not None:
            self.client.client_id = request.client_id
        observer = self._observer
        if observer is None:
            await self._answer(request, started_ns, len(frame))
            return
        sent: int | None = 0
        try:
            sent = await self._answer(request, started_ns, len(frame))
        finally:
            if sent is not None:  # a deferred reply is observed once written
                observer.request_done(request.api_key, len(frame) + 4, sent,
                                      (self._clock.monotonic_ns() - started_ns) / 1e9)

    async def _write_deferred(self) -> None:
        """Write the oldest deferred reply (waiting for it to be ready)."""
        future, request, started_ns, frame_bytes = self._deferred[0]
        reply = await future
        self._deferred.popleft()
        sent = await self._write_reply(request, reply)
        if self._observer is not None:
            self._observer.request_done(request.api_key, frame_bytes + 4, sent,
                                        (self._clock.monotonic_ns() - started_ns) / 1e9)

    async def _answer(self, request: ParsedRequest, started_ns: int, frame_bytes: int) -> int | None:
        """Route the request and write its response; the response's bytes (None: deferred)."""
        self._in_handler = True
        try:
            reply = await self._router.route(request, self.client)
        finally:
            self._in_handler = False
        if isinstance(reply, Deferred):
            self._deferred.append((asyncio.ensure_future(reply.reply), request, started_ns, frame_bytes))
            while len(self._deferred) > MAX_DEFERRED_REPLIES:
                await self._write_deferred()
            return None
        while self._deferred:  # responses go out in request order
            await self._write_deferred()
        return await self._write_reply(request, reply)

    async def _write_reply(self, request: ParsedRequest, reply: Reply) -> int:
        assert not isinstance(reply, Deferred)
        if reply is None:
            return 0
        if isinstance(reply, CloseConnection):
            log.info("closing connection %s from %s:%d: %s", self.client.connection_id, self.client.host,
                     self.client.port, reply.reason)
            self.close()
            return 0
        if isinstance(reply, RawResponse):
            size = reply.size
            await self._write_raw(reply)
            return size
        data = encode_response(request.api_key, request.api_version, request.correlation_id, reply)
        await self._write(data)
        reason = self.client.close_after_response
        if reason is not None:
            log.info("closing connection %s from %s:%d after its response: %s", self.client.connection_id,
                     self.client.host, self.client.port, reason)
            self.close()
        return len(data)

    async def _raw_frame(self, handler: Callable[[bytes], tuple[bytes | None, bool]], frame: bytes) -> None:
        token, close = handler(frame)
        if token is not None:
            await self._write(len(token).to_bytes(4, "big") + token)
        if close:
            log.info("closing connection %s from %s:%d: SASL authentication failed", self.client.connection_id,
                     self.client.host, self.client.port)
            self.close()

    def _reject(self, error: RequestError, frame: bytes | bytearray) -> None:
        client_id = client_id_of(frame)
        if client_id is None:
            client_id = self.client.client_id
        reason = f"{type(error).__name__}:{getattr(error, 'api_key', '')}:{getattr(error, 'api_version', '')}"
        self._log_rejection(reason, f"closing connection {self.client.connection_id} from {self.client.host}:"
                                    f"{self.client.port} (client {client_id!r}): {error}")
        self.close()

    def _log_rejection(self, reason: str, line: str) -> None:
        """Once per client address and reason per minute (server/rejections.py)."""
        unlogged = REJECTIONS.admit(self.client.host, reason, self._running_loop.time())
        if unlogged is None:
            return
        if unlogged:
            line += f" ({unlogged} more like it from this address since the last such line)"
        log.warning("%s", line)

    async def _write(self, data: bytes) -> None:
        """Queue a response's bytes; they are sent when this task next lets the loop run. Requests
        already received are served without the loop running in between (an append on the loop
        does not wait), so their responses leave in one send: a send on loopback also runs the
        kernel's receive path for the client, ~a quarter of the broker's CPU per small produce."""
        if self._write_resumed is not None:
            self._flush_out()
            await self._write_resumed
        if self._closed or self._transport is None:
            return
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._running_loop.call_soon(self._flush_out)
        self.last_active = self._running_loop.time()

    def _flush_out(self) -> None:
        """Send the queued responses (before a file slice, a close, or when the loop runs)."""
        self._flush_scheduled = False
        out = self._out
        if not out:
            return
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(out[0] if len(out) == 1 else b"".join(out))
        out.clear()

    async def _write_raw(self, reply: RawResponse) -> None:
        """The parts in order. Bytes before a file slice are queued without a flush of their own
        (the slice's flushes them first); bytes after the last slice (a flexible Fetch's tagged
        fields) are sent at once when no request is queued whose response could share their send:
        each scheduled flush is one more turn of the loop, with its poll, per fetch.

        A response with slices of up to :data:`CORK_MAX_FILE_BYTES` is written with the socket
        corked (TCP_CORK) and uncorked once its parts are written (or once the socket has not taken
        a slice whole), so the header, the file's bytes and the tagged fields after them leave as
        full segments instead of a small segment before and after the file: the header alone woke
        the client, which then waited for the rest. Measured with 1 MiB fetches: the broker's CPU
        per GB ~40 % lower, the client's too (docs/performance.md, Fetch)."""
        try:
            parts = reply.parts
            last_slice = -1
            file_bytes = 0
            for i, part in enumerate(parts):
                if not isinstance(part, bytes):
                    last_slice = i
                    file_bytes += part.size
            if 0 < file_bytes <= CORK_MAX_FILE_BYTES and self._sendfile_socket is not None and not self._closed:
                self._corked = _cork(self._sendfile_socket, True)
            for i, part in enumerate(parts):
                if not isinstance(part, bytes):
                    await self._sendfile(part)
                elif self._write_resumed is None and (i < last_slice or (last_slice >= 0 and not self._frames)):
                    if self._closed or self._transport is None:
                        return
                    self._out.append(part)
                    if i > last_slice:
                        self._flush_out()
                else:
                    await self._write(part)
        finally:
            self._uncork()
            reply.close()

    def _uncork(self) -> None:
        corked, self._corked = self._corked, None
        if corked is not None and not self._closed:
            _cork(corked, False)

    async def _copy_file(self, part: FileSlice) -> None:
        """Send a file slice by reading it in chunks (pread off the event loop) and writing them;
        each write waits while the client is not keeping up (pause_writing)."""
        loop = self._running_loop
        position, left = part.position, part.size
        while left > 0:
            chunk = await loop.run_in_executor(None, os.pread, part.fd, min(left, COPY_CHUNK_BYTES), position)
            if not chunk:
                raise OSError(f"file slice ended {left} bytes early")
            await self._write(chunk)
            if self._closed:
                return
            position += len(chunk)
            left -= len(chunk)

    async def _sendfile(self, part: FileSlice) -> None:
        self._flush_out()  # what was written before the slice goes before it
        if self._write_resumed is not None:
            await self._write_resumed
        if self._closed or self._transport is None or self._transport.is_closing() or part.size == 0:
            return
        sock = self._sendfile_socket
        if sock is None and self._transport.get_extra_info("ssl_object") is not None:
            # TLS encrypts in user space, so the kernel cannot send the file: copy it through.
            await self._copy_file(part)
            return
        sent_now = _send_file_now(self._transport, sock, part)
        self.last_active = self._running_loop.time()
        if sent_now == part.size:
            return
        # What the socket did not take at once goes by asyncio's sendfile, uncorked (held corked,
        # the wait for the socket cost more than the segments saved: measured with 4 MB fetches).
        self._uncork()
        if sent_now:
            # The rest waits for the socket to take it (the slice's owner still closes the descriptor).
            part = FileSlice(part.fd, part.position + sent_now, part.size - sent_now)
        # loop.sendfile wants a file object; the slice keeps ownership of the descriptor.
        self._sending_file = True
        try:
            with open(part.fd, "rb", buffering=0, closefd=False) as f:
                sent = await self._running_loop.sendfile(self._transport, f, part.position, part.size)
        finally:
            self._sending_file = False
            if self._close_after_sendfile:
                self._close_after_sendfile = False
                self._close_transport(self._transport, abort=True)
        self.last_active = self._running_loop.time()
        if sent != part.size:
            raise OSError(f"sendfile sent {sent} of {part.size} bytes")


def _cork(sock: Any, on: bool) -> Any:
    """Set TCP_CORK on the socket (the transport's TransportSocket allows setsockopt); the socket,
    or None if it refused (a closed socket: nothing is sent any more anyway)."""
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1 if on else 0)
    except OSError:
        return None
    return sock


def _send_file_now(transport: asyncio.Transport, sock: Any, part: FileSlice) -> int:
    """How much of ``part`` the socket took at once: one non-blocking ``sendfile``, when nothing of
    the transport's is still buffered (what it holds goes first). A fetch's record set usually fits
    the socket's send buffer whole, and then no part of asyncio's sendfile runs: its wait for the
    buffer to drain, reading paused and resumed, the writer registered and removed, a file object
    and its fstat -- together more CPU than the kernel's copy of a 1 MiB fetch."""
    if sock is None or transport.get_write_buffer_size():
        return 0
    try:
        return os.sendfile(sock.fileno(), part.fd, part.position, part.size)
    except (BlockingIOError, InterruptedError):
        return 0
