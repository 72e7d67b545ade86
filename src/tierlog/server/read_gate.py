"""When a connection reads from its socket: the pause/resume decisions of one Kafka connection as a
small sans-IO state machine. :class:`~tierlog.server.connection.KafkaConnection` tells it what
happened (frames queued or taken, waiting for memory or not) and applies what it answers
(``pause_reading``/``resume_reading``, starting or cancelling the receive timer); nothing here touches
a socket, a timer or the event loop, so every transition is unit-tested on its own.

The rules (Kafka's ``SocketServer`` mutes a channel the same way):

* The queue of received, unserved requests is *full* at ``max_frames`` requests or ``max_bytes``
  bytes, and stops being full only when it is below half of both, so a connection near the bound
  does not pause and resume on every request.
* Reading pauses while the queue is full, the connection waits for room in the request memory pool
  or for a request slot (``queued.max.requests``: behind it the client waits on the broker, so its
  receive clock stops as behind a full queue), or a client quota throttles the connection (Kafka
  mutes a throttled channel until its throttle time is up).
* The receive timer (``socket.request.receive.timeout.ms``) runs only while part of a request is in
  and the queue is not full: behind a full queue the client waits on the broker, so its clock stops;
  waiting for memory it does not, or partial requests holding the pool would wait on each other for ever.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Timer(enum.Enum):
    """What to do with the receive timer."""

    KEEP = "keep"
    START = "start"
    CANCEL = "cancel"


@dataclass(frozen=True, slots=True)
class ReadActions:
    """``pause``: True to pause reading, False to resume it, None to leave it as it is."""

    pause: bool | None
    timer: Timer


class ReadGate:
    def __init__(self, max_frames: int, max_bytes: int) -> None:
        self.max_frames = max_frames
        self.max_bytes = max_bytes
        self.queue_full = False
        self.waiting_for_memory = False
        self.waiting_for_slot = False
        self.throttled = False
        self.reading_paused = False
        self.timer_running = False

    def queued(self, frames: int, queued_bytes: int) -> None:
        """Frames were added; the queue now holds ``frames`` of ``queued_bytes`` bytes in all."""
        if frames >= self.max_frames or queued_bytes >= self.max_bytes:
            self.queue_full = True

    def taken(self, frames: int, queued_bytes: int) -> None:
        """A frame was taken off the queue, which now holds ``frames`` of ``queued_bytes`` bytes."""
        if self.queue_full and frames < self.max_frames // 2 and queued_bytes < self.max_bytes // 2:
            self.queue_full = False

    def decide(self, *, receiving: bool, timeout_set: bool) -> ReadActions:
        """The actions for now: ``receiving`` is whether part of a request is in, ``timeout_set``
        whether the connection has a receive timeout at all."""
        paused = self.queue_full or self.waiting_for_memory or self.waiting_for_slot or self.throttled
        pause: bool | None = None
        if paused != self.reading_paused:
            self.reading_paused = paused
            pause = paused
        timer = Timer.KEEP
        if self.queue_full or self.waiting_for_slot or not receiving:
            if self.timer_running:
                timer = Timer.CANCEL
            self.timer_running = False
        elif not self.timer_running and timeout_set:
            timer = Timer.START
            self.timer_running = True
        return ReadActions(pause, timer)

    def timer_cancelled(self) -> None:
        """The timer was cancelled or fired outside :meth:`decide` (a frame completed, it timed out)."""
        self.timer_running = False
