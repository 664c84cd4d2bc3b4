"""The link to a collector, sans-I/O: handshake, send queue, acknowledgements, backoff and heartbeat decisions.

Events in, actions out, as h11's connection: the driver (``Streamer``, which owns the socket and the thread) tells the
link what happened and when -- ``timer(now)``, ``connected(now, hello)``, ``connect_failed``, ``received(data, now)``,
``sent(n, now)``, ``connection_lost`` -- and the link answers with actions (``Connect``, ``Close``, ``FlushDone``,
``AnswerFlush``, ``Prioritize``, ``Log``) and the bytes to send (``data_to_send``). It never reads the clock, touches
a socket or takes a lock: the driver calls it under its own lock. Its parts are sans-I/O too: ``SendQueue``
(send_queue.py: the bounded queue and the frame going out), ``Acknowledgements`` (acknowledgements.py: FLUSH tokens
and flush() requests), ``Delivery`` (stream_delivery.py: what goes over a welcomed connection), ``Backoff`` (here) and
``Outage`` (outage.py: what the log says while events cannot reach the collector).

Theory of operation
-------------------
States (``LinkState``)::

    IDLE --timer: attempt due--> CONNECTING --connected--> HANDSHAKE --WELCOME--> WELCOMED
      ^                              |                         |                     |
      +------- connect_failed -------+---------- a break, EOF or a protocol error -----------------------+
    any --stop--> STOPPED

On ``connected`` the link sends the preamble and HELLO, and nothing else until the collector's WELCOME, which names
the protocol version and the collector's limits. The link adopts them (frames already queued are packed again if they
are too large or use string ids past the collector's ``max_strings``), then sends the whole stream prefix (SCHEMA,
every string, every track, STATS) ahead of whatever the queue holds. Control frames are queued only while welcomed:
after a reconnect the prefix carries everything again, so they are never needed twice.

Failures back off exponentially (with jitter) up to ``backoff_max_s``; a collector's refusal (a GOODBYE instead of
WELCOME: a token it does not take, no common version; or after it, for tables past the collector's ``--capacity``) or
a peer that breaks the protocol go straight to ``backoff_max_s``, since trying sooner would not change it. A refusal
starts the outage's warning at once, naming it; after a refusal for the tables, a WELCOME does not end the outage (the
next connection is refused as soon as the tables are sent again): the first acknowledged flush does. A connection
waits for its WELCOME as long as it stays open. A connection that worked (a flush acknowledged on it, or welcomed
``backoff_max_s`` ago, and not refused) resets the backoff when it breaks. A flush request does not wait for the
backoff.
With nothing sent for ``heartbeat_s``, a FLUSH nobody waits for (token 0) tells the collector the connection is alive.
A frame cut short by a broken connection is lost and counted.
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Callable
from typing import Any, Final

from ringtrace.client.delivery.streaming.backoff import Backoff, random_jitter
from ringtrace.client.delivery.streaming.exit_attempts import ExitAttempts
from ringtrace.client.delivery.streaming.link_actions import (
    Action,
    AnswerFlush,
    Close,
    Connect,
    FlushDone,
    Log,
    Prioritize,
)
from ringtrace.client.delivery.streaming.loss_report import LossReport
from ringtrace.client.delivery.streaming.outage import Outage
from ringtrace.client.delivery.streaming.send_queue import LinkCounters
from ringtrace.client.delivery.streaming.stream_delivery import Delivery
from ringtrace.client.options import StreamerOptions
from ringtrace.wire.errors import ProtocolError
from ringtrace.wire.frame_types import AUTHENTICATION_FAILED, TABLES_PAST_CAPACITY
from ringtrace.wire.frames import Flush, FlushAck, Goodbye, Refused, SetPriority, encode, preamble
from ringtrace.wire.handshake_frames import Hello, Welcome
from ringtrace.wire.model import TrackInfo
from ringtrace.wire.parsing import parse_addresses
from ringtrace.wire.reply_decoder import ReplyDecoder
from ringtrace.wire.stream_encoder import EncodedBatch, StreamEncoder

__all__ = ["Link", "LinkState"]

#: While connected, the driver calls ``timer`` at least this often (acknowledgements, loss counters).
_POLL_S: Final = 1.0


class LinkState(enum.Enum):
    IDLE = "idle"  # no connection; the next attempt is due at Backoff.next_attempt
    CONNECTING = "connecting"  # Connect asked for: the driver answers connected() or connect_failed()
    HANDSHAKE = "handshake"  # preamble and HELLO go out; waiting for WELCOME
    WELCOMED = "welcomed"  # streaming
    STOPPED = "stopped"


_TRANSITIONS: Final = {
    LinkState.IDLE: {LinkState.CONNECTING, LinkState.STOPPED},
    LinkState.CONNECTING: {LinkState.HANDSHAKE, LinkState.IDLE, LinkState.STOPPED},
    LinkState.HANDSHAKE: {LinkState.WELCOMED, LinkState.IDLE, LinkState.STOPPED},
    LinkState.WELCOMED: {LinkState.IDLE, LinkState.STOPPED},
    LinkState.STOPPED: set(),
}


class Link:
    """The sans-I/O link to one collector (see the module's theory of operation).

    Args:
        address: ``"HOST:PORT"``, for messages.
        options: queue, frame, backoff and heartbeat limits.
        encoder: the stream's encoder: the WELCOME's limits go into it, and the prefix comes from it.
        counters: where to count (a new ``LinkCounters`` if None).
        jitter: the backoff's random factor, in [0.5, 1.0].
    """

    def __init__(
        self,
        address: str,
        options: StreamerOptions,
        encoder: StreamEncoder,
        counters: LinkCounters | None = None,
        *,
        jitter: Callable[[], float] = random_jitter,
    ) -> None:
        self.address = address
        self.options = options
        self.counters = counters or LinkCounters()
        self.state = LinkState.IDLE
        self._delivery = Delivery(options, encoder, self.counters)
        self._queue, self._acks = self._delivery.queue, self._delivery.acks
        self._backoff = Backoff(options.backoff_initial_s, options.backoff_max_s, jitter)
        self.outage = Outage()  # what the log says while events cannot reach the collector, and why
        self._losses = LossReport()  # and what it says of events lost while it can
        self.exit = ExitAttempts(len(parse_addresses(address)), self.outage)  # at exit: no wait where nothing listens
        self._actions: list[Action] = []
        self._decoder: ReplyDecoder | None = None
        self._polled_at = 0.0
        self._welcomed_at = 0.0
        self._eof = False  # the collector closed: said once the frames before it are read
        self._answering: int | None = None  # the token of the collector's FLUSH being swept
        self._answered = False  # the collector sent something on this connection
        self._unanswered_logged = False
        self._goodbye_reason = ""  # the reason the collector's GOODBYE gave on this connection
        self._goodbye_logged = False
        self._refused = False  # the collector refused this connection: retrying soon will not mend it
        self._resume_on_ack = False  # refused for its tables: delivery resumes at an acknowledgement, not a WELCOME

    # -- what the driver reads -------------------------------------------------------------------------------------

    @property
    def welcomed(self) -> bool:
        return self.state is LinkState.WELCOMED

    @property
    def queued_events(self) -> int:
        """Events encoded and not yet sent (the frame going out included)."""
        return self._queue.unsent_events

    @property
    def dropped_at_flush(self) -> int:
        """``dropped_events`` when the collector last acknowledged a flush: drops after it were never reported."""
        return self._acks.dropped_at_flush

    @property
    def unacknowledged_at_flush(self) -> int:
        """``unacknowledged_events`` when the collector last acknowledged a flush: those after it were never
        reported."""
        return self._acks.unacknowledged_at_flush

    @property
    def queue_half_full(self) -> bool:
        """The queued frames take half of ``max_queue_bytes`` or more."""
        return self._queue.queued_bytes * 2 >= self._queue.max_bytes

    @property
    def wants_to_write(self) -> bool:
        return self._queue.sending or (self.welcomed and bool(self._queue))

    def next_deadline(self) -> float:
        """When ``timer`` has something to do next, at the latest (``-math.inf``: now)."""
        if self.state is LinkState.STOPPED:
            return math.inf
        if self._delivery.reset_reason and self._has_connection:
            return -math.inf
        deadline = self._polled_at + min(_POLL_S, self.options.heartbeat_s)
        if not self._has_connection:
            deadline = self._backoff.next_attempt
        return min(deadline, self._acks.next_deadline(), self.outage.next_report)

    # -- events from the listener's side ---------------------------------------------------------------------------

    def enqueue(self, batch: EncodedBatch, now: float) -> None:
        """Queue one run's frames: control frames (only while welcomed: the prefix carries them otherwise), then
        EVENTS frames, each dropped and counted if the queue has no room."""
        self._delivery.enqueue(batch, now, welcomed=self.welcomed)

    def discard(self, batch: EncodedBatch) -> None:
        """Count a run that nothing will send (the link is closing)."""
        self._queue.discard(batch)

    def retire(self, track: TrackInfo) -> None:
        """``track`` ended (its frames still queued are sent with it declared, even after a reconnect)."""
        self._queue.retire(track)

    def request_flush(self, deadline: float) -> int:
        """Ask for a FLUSH after everything queued; ``FlushDone`` answers by ``deadline``. Returns its id."""
        return self._acks.request(deadline)

    def drop_queue(self) -> int:
        """Throw the queue away (closing, or a collector that does not read), counting its events; returns them."""
        return self._queue.drop_all()

    def drop_unsent(self) -> int:
        """Count the events of the frame going out as dropped (its driver is gone); returns them."""
        return self._queue.drop_unsent()

    # -- events from the driver ------------------------------------------------------------------------------------

    def timer(self, now: float) -> list[Action]:
        """Time passed (or something was asked for): flushes, acknowledgements, heartbeat, warnings, connecting."""
        self._polled_at = now
        if self._acks.take_asked() and not self._has_connection:
            self._backoff.due_now(now)  # a new flush does not wait for the backoff
        if self._delivery.reset_reason and self._has_connection:
            self._drop_queue_and_reconnect(now)
        if now >= self.outage.next_report:
            counters = self.counters
            warning = self.outage.report(
                now, self._queue.event_count, counters.dropped_events, unacknowledged=counters.unacknowledged_events
            )
            if warning:
                self._log(logging.WARNING, warning)
        counters = self.counters
        lost = self._losses.report(
            now, counters.dropped_events, counters.refused_events, address=self.address, outage=self.outage.active
        )
        if lost:
            self._log(logging.WARNING, lost)
        if self.welcomed:
            self._delivery.start_flushes(now)
        self._actions += [FlushDone(request, False) for request in self._acks.expire(now)]
        if self.exit.gave_up:  # at exit, and no collector there: no flush waits for one
            self._actions += [FlushDone(request, False) for request in self._acks.abandon()]
        if self.welcomed:
            self._delivery.ask_acknowledgement(now)
            self._delivery.heartbeat(now)
        if self.state is LinkState.IDLE and now >= self._backoff.next_attempt and not self.exit.gave_up:
            self._move(LinkState.CONNECTING)
            self._actions.append(Connect())
        return self._take_actions()

    def connected(self, now: float, hello: Hello) -> list[Action]:
        """The connection is made: the preamble and ``hello`` go out first."""
        self._move(LinkState.HANDSHAKE)
        self._acks.on_this_connection = False
        self._decoder = ReplyDecoder(self.options.max_frame_bytes)
        self._answered, self._goodbye_reason, self._eof, self._answering = False, "", False, None
        self._refused = False
        self._queue.start(preamble() + encode(hello))
        self.counters.connects += 1
        self._polled_at = now
        return self._take_actions()

    def connect_failed(self, reason: str, now: float, *, at_once: bool = False, nobody: bool = False) -> list[Action]:
        """The connection could not be made; ``at_once``: a failure waiting will not mend (TLS), warned of now;
        ``nobody``: nothing listens there (refused, unreachable), which at exit ends the attempts."""
        self._move(LinkState.IDLE)
        self._polled_at = now
        self._schedule_reconnect(reason, now, at_once=at_once)
        if self.exit.failed(reason, nobody):
            self._actions += [FlushDone(request, False) for request in self._acks.abandon()]
        return self._take_actions()

    def data_to_send(self) -> memoryview | None:
        """The bytes to send next (the same until ``sent`` says they went), or None."""
        return self._queue.next_bytes(welcomed=self.welcomed)

    def buffers_to_send(self, max_bytes: int) -> list[memoryview]:
        """``data_to_send`` and the frames queued behind it, up to ``max_bytes`` in all, for one gathered send (an
        empty list: nothing to send)."""
        return self._queue.next_buffers(welcomed=self.welcomed, max_bytes=max_bytes)

    def sent(self, size: int, now: float) -> None:
        """``size`` bytes of ``data_to_send`` (or of ``buffers_to_send``) went out."""
        self._delivery.sent(size, now)

    def received(self, data: bytes, now: float) -> list[Action]:
        """Bytes from the collector; ``b""``: it closed the connection."""
        if self._decoder is None:
            return []
        self._decoder.receive_data(data)
        self._eof = not data
        self._read_frames(now)
        return self._take_actions()

    def swept(self, now: float) -> list[Action]:
        """The timelines were swept after ``AnswerFlush``: answer the collector's FLUSH, then read on."""
        token, self._answering = self._answering, None
        if token is None:
            return []
        self._delivery.answer_flush(token, now)
        self._read_frames(now)
        return self._take_actions()

    def connection_lost(self, reason: str, now: float) -> list[Action]:
        """Sending or receiving failed."""
        self._disconnect(reason, now)
        return self._take_actions()

    def stop(self, now: float) -> list[Action]:
        """Close for good: every flush request not answered is answered False."""
        self._disconnect("streamer stopped", now, retry=False)
        if self.state is not LinkState.STOPPED:
            self._move(LinkState.STOPPED)
        self._actions += [FlushDone(request, False) for request in self._acks.abandon()]
        return self._take_actions()

    # -- what the collector sends ----------------------------------------------------------------------------------

    def _read_frames(self, now: float) -> None:
        """Every complete frame buffered, up to a collector's FLUSH (``AnswerFlush``); then the end, if it came."""
        if self._decoder is None:
            return
        try:
            for frame in self._decoder:
                self._answered = True
                handler = _HANDLERS.get(type(frame))
                if handler is not None:
                    handler(self, frame, now)
                if self._answering is not None:
                    return
        except ProtocolError as exc:  # not a collector there, most likely: said once (the outage), retried slowly
            http = "b'HTTP'" in str(exc)  # an HTTP server's answer where the magic should be
            hint = " (is that the collector's HTTP port? clients connect to its ingest port, --tcp)" if http else ""
            self._backoff.slowest()
            self._disconnect(f"the peer at {self.address} broke the protocol: {exc}{hint}", now, at_once=True)
            return
        if self._eof:
            self._closed_by_peer(now)

    def _on_welcome(self, welcome: Welcome, now: float) -> None:
        self._delivery.welcome(welcome)  # (a version this client does not speak raises: a protocol error)
        self._move(LinkState.WELCOMED)
        # Not yet a reason to reset the backoff: a collector may welcome us and close at once (a broken limit).
        self._welcomed_at = now
        if not self._resume_on_ack:
            self._resume(now)

    def _resume(self, now: float) -> None:
        resumed = self.outage.resumed(now, self.counters.dropped_events)
        if resumed:
            self._log(logging.INFO, resumed)

    def _on_flush_ack(self, frame: FlushAck, now: float) -> None:
        if self._resume_on_ack:  # the tables were taken this time
            self._resume_on_ack = False
            self._resume(now)
        answer = self._delivery.flush_acknowledged(frame.token)
        if answer is not None:
            self._actions.append(FlushDone(*answer))

    def _on_flush(self, frame: Flush, now: float) -> None:
        self._answering = frame.token
        self._actions.append(AnswerFlush())

    def _on_set_priority(self, frame: SetPriority, now: float) -> None:
        self._actions.append(Prioritize(frame))

    def _on_refused(self, frame: Refused, now: float) -> None:
        self._delivery.refused(frame.events)

    def _on_goodbye(self, frame: Goodbye, now: float) -> None:
        hint = " (connect(..., token=...) or RINGTRACE_TOKEN)" if frame.reason == AUTHENTICATION_FAILED else ""
        self._goodbye_reason = frame.reason + hint
        # Refused (before WELCOME; or after it, for tables the collector's capacity cannot hold, which it refuses
        # again at every attempt): the next attempts are as far apart as the options allow, and the outage warning
        # says why (at once).
        if not self.welcomed or frame.reason.endswith(TABLES_PAST_CAPACITY):
            self._refused = True
            self._resume_on_ack = self.welcomed
            self._backoff.slowest()
        elif not self._goodbye_logged:
            self._goodbye_logged = True
            self._log(logging.WARNING, f"ringtrace: the collector at {self.address} is closing: {self._goodbye_reason}")

    def _closed_by_peer(self, now: float) -> None:
        if not self._answered and not self._unanswered_logged:  # no GOODBYE to say why: a plain client at a TLS
            self._unanswered_logged = True  # listener, or not a collector at all
            self._log(
                logging.WARNING,
                f"ringtrace: {self.address} closed the connection without answering HELLO: is it a ringtrace "
                "collector, and does it expect TLS (connect(..., tls=...))?",
            )
        goodbye = f": {self._goodbye_reason}" if self._goodbye_reason else ""
        closed = f"the collector at {self.address} closed the connection{goodbye}"
        self._disconnect(closed, now, at_once=self._refused)  # a refusal waiting will not mend: said now

    # -- the connection --------------------------------------------------------------------------------------------

    @property
    def _has_connection(self) -> bool:
        return self.state in (LinkState.HANDSHAKE, LinkState.WELCOMED)

    def _move(self, state: LinkState) -> None:
        if state not in _TRANSITIONS[self.state]:
            raise RuntimeError(f"link: no transition from {self.state.name} to {state.name}")
        self.state = state

    def _schedule_reconnect(self, reason: str, now: float, *, at_once: bool = False) -> None:
        delay = self._backoff.failed(now, hurry=bool(self._acks.pending))
        counters = self.counters
        self.outage.failed(
            reason, now, counters.dropped_events, unacknowledged=counters.unacknowledged_events, at_once=at_once
        )
        self._log(logging.DEBUG, f"ringtrace: {reason}; retrying in {delay:.2f}s")

    def _drop_queue_and_reconnect(self, now: float) -> None:
        reason, self._delivery.reset_reason = self._delivery.reset_reason, ""
        dropped = self.drop_queue()
        self._log(logging.WARNING, f"ringtrace: {reason}; dropped {dropped} queued events and reconnecting")
        self._disconnect(reason, now)

    def _disconnect(self, reason: str, now: float, retry: bool = True, *, at_once: bool = False) -> None:
        if not self._has_connection:
            return
        was_welcomed = self.welcomed
        self._move(LinkState.IDLE if retry else LinkState.STOPPED)
        self._actions.append(Close())
        self._decoder, self._eof, self._answering = None, False, None
        unacknowledged = self._delivery.broken()
        if unacknowledged:
            self._log(
                logging.DEBUG if self.outage.active else logging.WARNING,  # (the outage's warnings count them)
                f"ringtrace: {unacknowledged} events sent before the connection to {self.address} broke were not "
                "acknowledged: lost if the collector did not store them (counted as unacknowledged_events)",
            )
        if retry:
            proven = (
                was_welcomed
                and not self._refused
                and (self._acks.on_this_connection or now - self._welcomed_at >= self.options.backoff_max_s)
            )
            if proven:  # a connection that worked broke: the collector is probably restarting, try soon
                self._backoff.reset()
            self._schedule_reconnect(reason, now, at_once=at_once)

    def _log(self, level: int, text: str) -> None:
        self._actions.append(Log(level, text))

    def _take_actions(self) -> list[Action]:
        actions, self._actions = self._actions, []
        return actions


_HANDLERS: Final[dict[type, Callable[[Link, Any, float], None]]] = {
    Welcome: Link._on_welcome,
    FlushAck: Link._on_flush_ack,
    Flush: Link._on_flush,
    SetPriority: Link._on_set_priority,
    Refused: Link._on_refused,
    Goodbye: Link._on_goodbye,
}
