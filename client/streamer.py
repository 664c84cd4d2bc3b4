"""The collector streamer: a serialized listener that streams its frames to a collector over TCP.

Theory of operation
-------------------
``receive`` (on the flusher thread) encodes a run of events and appends the frames to the send queue, which is
bounded in bytes: an EVENTS frame that does not fit is dropped and its events counted. The thread
``ringtrace-streamer`` owns the socket: a select loop over a non-blocking socket and a wake-up socket pair.

Handshake: on connect it sends the preamble and HELLO, and nothing else until the collector's WELCOME, which names
the protocol version and the collector's limits. The streamer adopts them (frames already queued are packed again if
they are too large or use string ids past the collector's ``max_strings``), then sends the whole stream prefix
(SCHEMA, every string, every track, STATS) ahead of whatever the queue holds. Control frames are queued only while
welcomed: after a reconnect the prefix carries everything again, so they are never needed twice.

Connecting (and the TLS handshake, with ``tls``) blocks this thread for at most ``connect_timeout_s``; failures back
off exponentially (with jitter) up to ``backoff_max_s``, and a collector's refusal (a GOODBYE instead of WELCOME: a
token it does not take, no common version) straight to ``backoff_max_s``, since trying sooner would not change it.
``flush()`` does not wait for the backoff: it asks for a connection at once, then queues a FLUSH after everything
received so far and waits, within its timeout, for the collector's FLUSH_ACK, which the collector sends once it has
stored everything before it. A FLUSH from the collector is answered the same way: the flusher
sweeps every timeline, then FLUSH_ACK goes out behind what it queued. A frame cut short by a broken connection is
lost and counted. Nothing here raises into the host program, and nothing blocks it beyond the timeout it passed.
"""

from __future__ import annotations

import contextlib
import encodings.idna  # noqa: F401  # connecting by host name needs it; importing it from the thread can fail after fork
import itertools
import logging
import random
import selectors
import socket
import ssl
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from ringtrace.client.encoder import EncodedBatch
from ringtrace.client.listeners import SerializedListener
from ringtrace.client.options import StreamerOptions, parse_address
from ringtrace.client.outage import Outage, connect_failure
from ringtrace.client.threads import background_thread
from ringtrace.client.wire.decoder import ReplyDecoder
from ringtrace.client.wire.errors import ProtocolError, UnsupportedVersion
from ringtrace.client.wire.frames import (
    AUTHENTICATION_FAILED,
    EVENTS_HEADER,
    FRAME_HEADER,
    PROTOCOL_VERSIONS,
    Flush,
    FlushAck,
    FrameType,
    Goodbye,
    Refused,
    SetPriority,
    Stats,
    Track,
    Welcome,
    encode,
    preamble,
)
from ringtrace.client.wire.model import RECORD_FIELDS, TrackInfo

__all__ = ["Streamer"]

log = logging.getLogger("ringtrace.client")


#: While a flush waits, connection attempts are at most this far apart.
_FLUSH_RETRY_S = 0.25
#: Loss counters are sent at most this often (and with every flush).
_STATS_INTERVAL_S = 0.25
#: The heartbeat (``heartbeat_s``: nothing sent for that long) is a FLUSH nobody waits for.
_HEARTBEAT_TOKEN = 0
#: While events are sent, a FLUSH nobody waits for asks the collector to acknowledge them this often: what a connection
#: that breaks leaves unacknowledged (``unacknowledged_events``) is about this much sending, not all since the last
#: flush() call.
_ACKNOWLEDGE_EVERY_S = 1.0
#: A non-blocking socket that cannot go on now: wait for the selector. TLS says so with exceptions of its own.
_WOULD_BLOCK = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


class _Waiter:
    """One flush() call waiting. ``baseline``: the loss count of the last acknowledged flush when it was asked for;
    ``uncertain``: a connection broke with unacknowledged events since then. Either makes its answer False."""

    __slots__ = ("baseline", "deadline", "done", "ok", "uncertain")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.done = threading.Event()
        self.ok = False
        self.baseline = 0
        self.uncertain = False

    def finish(self, ok: bool) -> None:
        self.ok = ok
        self.done.set()


class Streamer(SerializedListener):
    """Streams the timelines it listens to, to one collector, from a background thread.

    Counters (read from any thread): ``sent_events``, ``dropped_events`` (queue full, a frame cut by a disconnect,
    an event too large for a frame), ``dropped_frames``, ``unacknowledged_events`` (sent on a connection that broke
    before the collector acknowledged them), ``connects``.

    Args:
        address: ``"HOST:PORT"`` of the collector's ingest listener.
        options: see ``StreamerOptions``.
        sweep_all: called when the collector asks for a flush: hands every timeline's events to the listeners.
    """

    def __init__(
        self, address: str, options: StreamerOptions | None = None, sweep_all: Callable[[], object] | None = None
    ) -> None:
        options = options or StreamerOptions()
        super().__init__(options.process_name, options.max_frame_bytes, options.max_strings)
        self.address = parse_address(address)
        self.address_text = address
        self.options = options
        self.encoder.max_events_per_frame = options.max_events_per_frame
        self._sweep_all = sweep_all
        self._tokens = itertools.count(1)  # 0 is the heartbeat's
        self._last_sent_s = 0.0

        # Shared with other threads: guarded by _state_lock.
        self._queue: deque[tuple[bytes, int]] = deque()  # (frame, event count); count 0: a control frame
        self._queued_bytes = 0
        self._flush_requests: list[tuple[int, _Waiter]] = []
        self._stopping = False
        self._started = False
        self._welcomed = False
        self._stats_sent: Stats | None = None
        #: Tracks that ended while EVENTS frames of theirs were queued, by id, until those are sent.
        self._retired: dict[int, TrackInfo] = {}
        self._stats_pending = False
        self._stats_queued_at = 0.0
        #: Set (with why) when the queue must be thrown away and the connection made again.
        self._reset_reason = ""
        #: Queued EVENTS frames per track id.
        self._queued_per_track: dict[int, int] = {}
        #: Events were handed to this streamer (so closing it waits for delivery).
        self._received = False
        self.sent_events = 0
        self.connects = 0

        # Owned by the streamer thread.
        self._sock: socket.socket | ssl.SSLSocket | None = None
        self._reader: ReplyDecoder | None = None
        self._out: memoryview | None = None
        self._out_events = 0
        self._waiters: dict[int, _Waiter] = {}
        self._pending: list[tuple[int, _Waiter]] = []
        #: dropped_events, and those plus rejected typed events (``_lost_events``), when the previous flush was
        #: acknowledged: a flush is clean only if the second did not move.
        self._dropped_at_flush = 0
        self._lost_at_flush = 0
        self._backoff_s = options.backoff_initial_s
        self._next_connect = 0.0
        #: When the current connection was welcomed, and whether the collector has acknowledged a flush on it:
        #: only a connection that worked resets the backoff when it breaks.
        self._welcomed_at = 0.0
        self._acknowledged = False
        #: ``sent_events`` up to which the collector acknowledged storing; per FLUSH token, what its ack covers.
        self._acknowledged_through = 0
        self._flush_targets: dict[int, int] = {}
        self._acknowledgement_asked_at = 0.0
        #: A connection broke with unacknowledged events since the previous acknowledged flush.
        self._uncertain = False
        #: Events the collector received and could not store (its REFUSED frames): a full store under its discard
        #: policy, or this process at its cap. The collector counts them too (discarded, capped).
        self.refused_events = 0
        self._refused_since_flush = False
        self._goodbye_logged = False
        #: The reason the collector's GOODBYE gave on this connection, if it sent one.
        self._goodbye_reason = ""
        #: What the log says while events cannot reach the collector.
        self._outage = Outage()
        #: The collector sent something on this connection; a close before that was logged (once).
        self._answered = False
        self._unanswered_logged = False
        #: With ``tls``: the context, made on the first connection.
        self._tls_context: ssl.SSLContext | None = None
        #: Timelines this streamer serves that take a collector's SET_PRIORITY (``subscribe_priority``).
        self._priority_timelines: weakref.WeakSet[Any] = weakref.WeakSet()

        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._thread = background_thread(self._run, "ringtrace-streamer")

    def __repr__(self) -> str:
        return f"<Streamer to {self.address_text}>"

    # -- any thread -----------------------------------------------------------------------------------------------

    def start(self) -> bool:
        """Start the streamer thread (once; later calls do nothing).

        Returns:
            False when the thread cannot be started (at interpreter shutdown, say) or the streamer was closed.
        """
        with self._state_lock:
            if self._started or self._stopping:
                return self._thread.ident is not None and not self._stopping
            self._started = True
        try:
            self._thread.start()
        except RuntimeError as exc:
            log.warning("ringtrace: cannot start the streamer thread (%s); nothing will reach the collector", exc)
            return False
        return True

    @property
    def connected(self) -> bool:
        """Connected and welcomed by the collector."""
        return self._welcomed

    @property
    def queued_events(self) -> int:
        """Events encoded and not yet sent."""
        with self._state_lock:
            return self._queued_event_count() + self._out_events

    def flush(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the collector to acknowledge everything received so far.

        Connects at once if not connected (no backoff wait).

        Returns:
            True when acknowledged, with no event dropped or rejected (a typed event whose values did not fit its
            types) since the previous acknowledged flush.
        """
        waiter = _Waiter(time.monotonic() + max(timeout_s, 0.0))
        if not self.start():
            return False
        with self._state_lock:
            if self._stopping or not self._thread.is_alive():
                return False
            waiter.baseline, waiter.uncertain = self._lost_at_flush, self._uncertain
            self._flush_requests.append((next(self._tokens), waiter))
        self._wake()
        waiter.done.wait(max(timeout_s, 0.0))
        return waiter.ok

    def close(self, timeout_s: float) -> bool:
        """Flush within ``timeout_s``, then stop the thread; a count of what was never delivered is logged."""
        deadline = time.monotonic() + max(timeout_s, 0.0)
        # Nothing ever handed over: nothing to deliver, so no reason to wait for a collector that may be down.
        delivered = self.flush(timeout_s) if self._received else self.dropped_events == 0
        with self._state_lock:
            self._stopping = True
        self._wake()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(max(deadline - time.monotonic(), 0.05))
        with self._state_lock:
            queued = self._drop_queue()
            if not self._thread.is_alive():  # else the thread still owns the frame it is sending, and counts it
                queued += self._out_events
                self.dropped_events += self._out_events
                self._out_events = 0
        unreported = self.dropped_events - queued - self._dropped_at_flush  # drops no collector has heard of
        if queued or unreported:
            log.warning(
                "ringtrace: %d events recorded by this process never reached the collector at %s: %d still queued "
                "when closing gave up after %.1fs (%s), %d dropped before and not reported",
                queued + unreported,
                self.address_text,
                queued,
                timeout_s,
                "connected" if self._welcomed else "not connected",
                unreported,
            )
        return delivered

    def subscribe_priority(self, timeline: Any) -> None:
        """``timeline.set_priority`` is called when the collector sends SET_PRIORITY for it (or for all)."""
        self._priority_timelines.add(timeline)

    def _set_priority(self, frame: SetPriority) -> None:
        for timeline in list(self._priority_timelines):
            if frame.timeline in ("", timeline.name) and self in timeline.listeners:
                try:
                    timeline.set_priority(frame.priority)
                except ValueError as exc:
                    log.warning("ringtrace: the collector at %s asked for a priority: %s", self.address_text, exc)
                    return

    def after_fork(self) -> Streamer:
        """A forked child streams as a new process, to the same collector; its thread starts on first use.

        The child's copies of this streamer's descriptors are closed: a socket kept open in a child would hide the
        parent's disconnect from the collector.
        """
        for resource in (self._sock, self._selector, self._wake_r, self._wake_w):
            if resource is not None:
                with contextlib.suppress(OSError):
                    resource.close()
        return Streamer(self.address_text, self.options, self._sweep_all)

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # the pair is full (a wake-up is pending anyway) or closed
            self._wake_w.send(b"\0")

    # -- flusher thread (under _state_lock) -----------------------------------------------------------------------

    def receive(self, track: TrackInfo, records: list[Any]) -> None:
        if not self._started and not self.start():
            with self._state_lock:
                self.dropped_events += len(records) // RECORD_FIELDS
            return
        self._received = True
        super().receive(track, records)

    def retire(self, track: TrackInfo) -> None:
        with self._state_lock:
            if self._queued_per_track.get(track.track_id):  # a reconnect would have to declare it again for those
                self._retired[track.track_id] = track
        super().retire(track)

    def write(self, batch: EncodedBatch) -> None:
        if self._stopping:  # closed: nothing will send these
            self.dropped_events += batch.event_count
            self.dropped_frames += len(batch.events)
            return
        welcomed = self._welcomed
        if welcomed:  # before WELCOME, the prefix sent on WELCOME carries the same tables
            for frame in batch.control:
                self._queue_control(frame)
        limit = self.options.max_queue_bytes
        for frame, count in batch.events:
            if self._queued_bytes + len(frame) > limit:
                self.dropped_events += count
                self.dropped_frames += 1
            else:
                self._queue_events(frame, count)
        if welcomed:
            self._queue_stats()
        self._wake()

    def _queue_stats(self, now_or_never: bool = False) -> None:
        """Queue the loss counters if they changed, at most one STATS frame waiting at a time (they are cumulative:
        the newest says everything), and no more often than ``_STATS_INTERVAL_S`` unless ``now_or_never``."""
        stats = self.stats()
        now = time.monotonic()
        due = now_or_never or (not self._stats_pending and now - self._stats_queued_at >= _STATS_INTERVAL_S)
        if stats != self._stats_sent and due:
            self._queue_control(encode(stats))
            self._stats_sent = stats
            self._stats_pending = True
            self._stats_queued_at = now

    def _lost_events(self) -> int:
        """Events recorded and never delivered: dropped, or typed events whose values did not fit their types."""
        return self.dropped_events + self.encoder.rejected_events

    def _queued_event_count(self) -> int:
        return sum(count for _, count in self._queue)

    def _drop_queue(self) -> int:
        """Throw the queue away (closing, or a collector that does not read), counting its events; returns them."""
        dropped = self._queued_event_count()
        self.dropped_events += dropped
        self.dropped_frames += sum(1 for _, count in self._queue if count)
        self._queue.clear()
        self._queued_bytes = 0
        self._queued_per_track.clear()
        self._retired.clear()
        return dropped

    def _queue_events(self, frame: bytes, count: int) -> None:
        self._queue.append((frame, count))
        self._queued_bytes += len(frame)
        track_id = EVENTS_HEADER.unpack_from(frame, FRAME_HEADER.size)[2]
        self._queued_per_track[track_id] = self._queued_per_track.get(track_id, 0) + 1

    def _unqueued(self, frame: bytes) -> None:
        """An EVENTS frame left the queue (sent or dropped)."""
        track_id = EVENTS_HEADER.unpack_from(frame, FRAME_HEADER.size)[2]
        left = self._queued_per_track.pop(track_id, 1) - 1
        if left:
            self._queued_per_track[track_id] = left
        else:
            self._retired.pop(track_id, None)

    def _queue_control(self, frame: bytes) -> None:
        """Control frames are never dropped one by one: the stream needs every one of them. If a collector that
        welcomed us stops reading and they pile up past twice ``max_queue_bytes`` (tracks of short-lived threads,
        say), the streamer throws the queue away, counting its events, and reconnects: the next connection's prefix
        carries the tables as they are then."""
        self._queue.append((frame, 0))
        self._queued_bytes += len(frame)
        if self._queued_bytes > 2 * self.options.max_queue_bytes:
            self._reset_reason = f"{self._queued_bytes} bytes queued for a collector that does not read"
            self._wake()

    # -- streamer thread ------------------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except Exception:
            log.exception("ringtrace streamer stopped by an unexpected error; nothing more reaches the collector")
        finally:
            self._disconnect("streamer stopped", retry=False)
            with self._state_lock:
                self._stopping = True
                requests = self._flush_requests + self._pending
                self._flush_requests, self._pending = [], []
            for _, waiter in requests:
                waiter.finish(False)
            self._selector.close()
            self._wake_r.close()
            self._wake_w.close()

    def _loop(self) -> None:
        while True:
            with self._state_lock:
                if self._stopping:
                    return
                new_requests, self._flush_requests = self._flush_requests, []
            self._pending += new_requests
            now = time.monotonic()
            if new_requests and self._sock is None:
                self._next_connect = min(self._next_connect, now)  # a new flush does not wait for the backoff
            if self._reset_reason and self._sock is not None:
                self._drop_queue_and_reconnect()
            if self._sock is None and now >= self._next_connect:
                self._connect()
            if now >= self._outage.next_report:
                with self._state_lock:
                    queued = self._queued_event_count()
                warning = self._outage.report(now, queued, self.dropped_events)
                if warning:
                    log.warning(warning)
            self._start_flushes(now)
            self._ask_acknowledgement(now)
            if self._sock is not None and self._welcomed and now - self._last_sent_s >= self.options.heartbeat_s:
                with self._state_lock:
                    self._queue_control(encode(Flush(_HEARTBEAT_TOKEN)))
                self._last_sent_s = now
            if self._sock is not None:
                self._write()
            timeout = min(1.0, self.options.heartbeat_s)
            if self._sock is None:
                timeout = self._next_connect - time.monotonic()
            if self._pending:
                timeout = min(timeout, min(w.deadline for _, w in self._pending) - time.monotonic())
            timeout = min(timeout, self._outage.next_report - time.monotonic())
            self._wait(max(timeout, 0.0))

    def _drop_queue_and_reconnect(self) -> None:
        with self._state_lock:
            reason, self._reset_reason = self._reset_reason, ""
            dropped = self._drop_queue()
        log.warning("ringtrace: %s; dropped %d queued events and reconnecting", reason, dropped)
        self._disconnect(reason)

    def _ask_acknowledgement(self, now: float, now_or_never: bool = False) -> None:
        """Every _ACKNOWLEDGE_EVERY_S while events go out (or now), a FLUSH that only moves
        ``_acknowledged_through``."""
        if self._sock is None or not self._welcomed:
            return
        if not now_or_never and now - self._acknowledgement_asked_at < _ACKNOWLEDGE_EVERY_S:
            return
        with self._state_lock:
            target = self.sent_events + self._queued_event_count() + self._out_events
            if target > max(self._acknowledged_through, *self._flush_targets.values(), 0):
                token = next(self._tokens)
                self._flush_targets[token] = target
                self._queue_control(encode(Flush(token)))
        self._acknowledgement_asked_at = now

    def _start_flushes(self, now: float) -> None:
        """Queue a FLUSH for each pending request once welcomed; give up on those past their deadline."""
        waiting = []
        for token, waiter in self._pending:
            if self._welcomed:
                self._waiters[token] = waiter
                with self._state_lock:
                    self._queue_stats(now_or_never=True)  # the acknowledgement then covers the latest counters
                    queued = self._queued_event_count() + self._out_events
                    self._flush_targets[token] = self.sent_events + queued
                    self._queue_control(encode(Flush(token)))
            elif waiter.deadline <= now:
                waiter.finish(False)
            else:
                waiting.append((token, waiter))
        self._pending = waiting
        for token, waiter in list(self._waiters.items()):
            if waiter.done.is_set() or waiter.deadline <= now:
                del self._waiters[token]  # answered, or its caller gave up: the ack, if it comes, is ignored

    def _wait(self, timeout_s: float) -> None:
        sock = self._sock
        if sock is not None:
            writable = self._out is not None or (self._welcomed and self._queue)
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if writable else 0)
            self._selector.modify(sock, events)
        for key, mask in self._selector.select(timeout_s):
            if key.fileobj is self._wake_r:
                with contextlib.suppress(BlockingIOError):
                    while self._wake_r.recv(4096):
                        pass
            elif mask & selectors.EVENT_READ:
                self._read()

    def _connect(self) -> None:
        host, port = self.address
        deadline = time.monotonic() + self.options.connect_timeout_s
        try:
            sock = socket.create_connection((host, port), timeout=self.options.connect_timeout_s)
        except Exception as exc:  # refused, unreachable, unresolvable: all mean "try again later"
            self._schedule_reconnect(connect_failure(self.address_text, exc, self.options.connect_timeout_s))
            return
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.options.tls:
            try:
                sock = self._handshake(sock, host, deadline)
            except Exception as exc:  # an untrusted certificate, a peer that does not speak TLS, a timeout
                sock.close()
                hint = "do both sides use TLS, and is the collector's certificate trusted?"
                self._schedule_reconnect(f"TLS with {self.address_text} failed: {exc} ({hint})", at_once=True)
                return
        sock.setblocking(False)
        self._sock = sock
        self._acknowledged = False
        self._reader = ReplyDecoder(self.options.max_frame_bytes)
        self._answered = False
        self._goodbye_reason = ""
        self._selector.register(sock, selectors.EVENT_READ)
        self._out = memoryview(preamble() + encode(self.identity.hello(self.options.token or "")))
        self._out_events = 0
        with self._state_lock:
            self.connects += 1
        log.debug("ringtrace connected to %s:%d", host, port)

    def _handshake(self, sock: socket.socket, host: str, deadline: float) -> ssl.SSLSocket:
        """``sock`` wrapped in TLS, the handshake done (blocking, until ``deadline``)."""
        context = self._tls_context
        if context is None:  # loading the system's CAs takes a while: here, not in connect()
            tls = self.options.tls
            context = self._tls_context = tls if isinstance(tls, ssl.SSLContext) else ssl.create_default_context()
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        return context.wrap_socket(sock, server_hostname=host)

    def _schedule_reconnect(self, reason: str, *, at_once: bool = False) -> None:
        delay = self._backoff_s * random.uniform(0.5, 1.0)
        self._backoff_s = min(self._backoff_s * 2, self.options.backoff_max_s)
        if self._pending:  # someone waits in flush(): a collector that comes up within its timeout is found soon
            delay = min(delay, _FLUSH_RETRY_S)
        now = time.monotonic()
        self._next_connect = now + delay
        self._outage.failed(reason, now, self.dropped_events, at_once=at_once)
        log.debug("ringtrace: %s; retrying in %.2fs", reason, delay)

    def _disconnect(self, reason: str, retry: bool = True, *, at_once: bool = False) -> None:
        sock = self._sock
        if sock is None:
            return
        was_welcomed = self._welcomed
        self._sock = None
        self._reader = None
        self._selector.unregister(sock)
        sock.close()
        with self._state_lock:
            self._welcomed = False
            if self._out_events:  # a frame cut short is lost
                self.dropped_events += self._out_events
                self.dropped_frames += 1
            self._out = None
            self._out_events = 0
            # Queued control frames are resent by the next prefix; keep only events.
            self._stats_pending = False
            self._queue = deque(item for item in self._queue if item[1])
            self._queued_bytes = sum(len(item[0]) for item in self._queue)
        unacknowledged = self.sent_events - self._acknowledged_through
        if unacknowledged:  # sent, and the collector may not have stored them: no flush may say "delivered"
            self._uncertain = True
            for _, waiter in [*self._waiters.items(), *self._pending]:
                waiter.uncertain = True
            with self._state_lock:
                self.unacknowledged_events += unacknowledged  # reported in STATS on the next connection
            log.warning(
                "ringtrace: %d events sent before the connection to %s broke were not acknowledged: lost if the "
                "collector did not store them (counted as unacknowledged_events)",
                unacknowledged,
                self.address_text,
            )
        self._acknowledged_through = self.sent_events
        self._flush_targets.clear()
        for waiter in self._waiters.values():  # their FLUSH went down with the connection: ask again
            if not waiter.done.is_set():
                self._pending.append((next(self._tokens), waiter))
        self._waiters.clear()
        if retry:
            proven = was_welcomed and (
                self._acknowledged or time.monotonic() - self._welcomed_at >= self.options.backoff_max_s
            )
            if proven:  # a connection that worked broke: the collector is probably restarting, try soon
                self._backoff_s = self.options.backoff_initial_s
            self._schedule_reconnect(reason, at_once=at_once)

    def _write(self) -> None:
        sock = self._sock
        assert sock is not None
        while True:
            if self._out is None:
                with self._state_lock:
                    if not self._queue or not self._welcomed:
                        return
                    frame, count = self._queue.popleft()
                    self._queued_bytes -= len(frame)
                    if count:
                        self._unqueued(frame)
                    elif frame[FRAME_HEADER.size - 1] == FrameType.STATS:
                        self._stats_pending = False
                    self._out = memoryview(frame)
                    self._out_events = count
            try:
                sent = sock.send(self._out)
            except _WOULD_BLOCK:  # TLS: the same bytes are sent again (Python lets OpenSSL take a moved buffer)
                return
            except OSError as exc:
                self._disconnect(f"send failed: {exc}")
                return
            if sent < len(self._out):
                self._out = self._out[sent:]
                continue
            with self._state_lock:
                self.sent_events += self._out_events
                self._out = None
                self._out_events = 0
            self._last_sent_s = time.monotonic()

    def _welcome(self, welcome: Welcome) -> None:
        """Adopt the collector's limits, pack again what was packed before we knew them, then send the prefix.

        Raises:
            UnsupportedVersion: the collector chose a version this client does not speak.
        """
        low, high = PROTOCOL_VERSIONS
        if not low <= welcome.protocol_version <= high:
            raise UnsupportedVersion(
                f"the collector chose protocol version {welcome.protocol_version}; this client speaks {low}..{high}"
            )
        with self._state_lock:
            encoder = self.encoder
            encoder.max_frame_bytes = min(self.options.max_frame_bytes, welcome.max_frame_bytes)
            strings_cut = encoder.strings.limit_to(welcome.max_strings, welcome.max_string_bytes)
            encoder.max_kinds = welcome.max_kinds  # the prefix below declares at most these
            encoder.max_schema_bytes = welcome.max_schema_bytes
            kept: deque[tuple[bytes, int]] = deque()
            for frame, count in self._queue:
                if not strings_cut and len(frame) <= encoder.max_frame_bytes:
                    kept.append((frame, count))
                    continue
                batch = encoder.repack(frame)
                self.dropped_events += batch.dropped_events
                kept.extend(batch.events)
            prefix = [(frame, 0) for frame in encoder.prefix()]
            self._stats_sent = self.stats()
            prefix.append((encode(self._stats_sent), 0))
            self._stats_pending = True
            self._queue = deque([*prefix, *self._with_retired_tracks(kept)])
            self._queued_bytes = sum(len(item[0]) for item in self._queue)
            self._queued_per_track = {}
            for frame, count in kept:  # repacking may have split frames
                if count:
                    track_id = EVENTS_HEADER.unpack_from(frame, FRAME_HEADER.size)[2]
                    self._queued_per_track[track_id] = self._queued_per_track.get(track_id, 0) + 1
            self._welcomed = True
        # Not yet a reason to reset the backoff: a collector may welcome us and close at once (a broken limit).
        self._welcomed_at = time.monotonic()
        resumed = self._outage.resumed(self._welcomed_at, self.dropped_events)
        if resumed:
            log.info(resumed)

    def _with_retired_tracks(self, kept: deque[tuple[bytes, int]]) -> list[tuple[bytes, int]]:
        """``kept`` with each track that ended while frames of it were queued declared right before its first frame
        and ended right after its last one, so that the collector never holds more of them than needed."""
        track_ids = [EVENTS_HEADER.unpack_from(frame, FRAME_HEADER.size)[2] if count else 0 for frame, count in kept]
        live = self.encoder.tracks  # declared by the prefix: an id reused by a new owner (a task lane) is live
        last = {
            track_id: i for i, track_id in enumerate(track_ids) if track_id in self._retired and track_id not in live
        }
        declared: set[int] = set()
        frames: list[tuple[bytes, int]] = []
        for i, (item, track_id) in enumerate(zip(kept, track_ids, strict=True)):
            track = self._retired.get(track_id) if track_id in last else None
            if track is not None and track_id not in declared:
                declared.add(track_id)
                frames.append((encode(Track(track.track_id, track.kind, track.name, track.thread_id, track.parent)), 0))
            frames.append(item)
            if track is not None and last[track_id] == i:
                ended = Track(track.track_id, track.kind, track.name, track.thread_id, track.parent, ended=True)
                frames.append((encode(ended), 0))
        return frames

    def _read(self) -> None:
        sock, reader = self._sock, self._reader
        assert sock is not None and reader is not None
        try:
            data = sock.recv(65536)
            while data and isinstance(sock, ssl.SSLSocket) and sock.pending():  # decrypted, which select cannot see
                data += sock.recv(65536)
        except _WOULD_BLOCK:
            return
        except OSError as exc:
            self._disconnect(f"receive failed: {exc}")
            return
        reader.receive_data(data)
        try:
            for frame in reader:
                self._answered = True
                if isinstance(frame, FlushAck):
                    waiter = self._waiters.pop(frame.token, None)
                    self._acknowledged = True
                    target = self._flush_targets.pop(frame.token, 0)  # events sent before that FLUSH: all stored
                    self._acknowledged_through = max(self._acknowledged_through, target)
                    if waiter is not None:
                        with self._state_lock:
                            dropped, lost = self.dropped_events, self._lost_events()
                            ok = lost == waiter.baseline and not waiter.uncertain and not self._refused_since_flush
                            self._dropped_at_flush, self._lost_at_flush = dropped, lost
                            self._uncertain = False
                            self._refused_since_flush = False
                        waiter.finish(ok)
                elif isinstance(frame, Flush):
                    if self._sweep_all is not None:
                        self._sweep_all()
                    # Acknowledged before it answers: a collector that asks before it stops leaves nothing in doubt.
                    self._ask_acknowledgement(time.monotonic(), now_or_never=True)
                    with self._state_lock:
                        self._queue_control(encode(FlushAck(frame.token)))
                elif isinstance(frame, Welcome):
                    self._welcome(frame)
                elif isinstance(frame, SetPriority):
                    self._set_priority(frame)
                elif isinstance(frame, Refused):
                    with self._state_lock:
                        self.refused_events += frame.events
                        self._refused_since_flush = True
                elif isinstance(frame, Goodbye):
                    hint = (
                        " (connect(..., token=...) or RINGTRACE_TOKEN)" if frame.reason == AUTHENTICATION_FAILED else ""
                    )
                    self._goodbye_reason = frame.reason + hint
                    if not self._welcomed:  # refused: the next attempts are as far apart as the options allow, and
                        self._backoff_s = self.options.backoff_max_s  # the outage warning says why (at once)
                    elif not self._goodbye_logged:
                        self._goodbye_logged = True
                        log.warning(
                            "ringtrace: the collector at %s is closing: %s", self.address_text, self._goodbye_reason
                        )
        except ProtocolError as exc:  # not a collector there, most likely: said once (the outage), retried slowly
            http = "b'HTTP'" in str(exc)  # an HTTP server's answer where the magic should be
            hint = " (is that the collector's HTTP port? clients connect to its ingest port, --tcp)" if http else ""
            self._backoff_s = self.options.backoff_max_s
            self._disconnect(f"the peer at {self.address_text} broke the protocol: {exc}{hint}", at_once=True)
            return
        if not data:
            if not self._answered and not self._unanswered_logged:  # no GOODBYE to say why: a plain client at a
                self._unanswered_logged = True  # TLS listener, or not a collector at all
                log.warning(
                    "ringtrace: %s closed the connection without answering HELLO: is it a ringtrace collector, and "
                    "does it expect TLS (connect(..., tls=...))?",
                    self.address_text,
                )
            goodbye = f": {self._goodbye_reason}" if self._goodbye_reason else ""
            refused = not self._welcomed and bool(self._goodbye_reason)  # a refusal waiting will not mend: said now
            self._disconnect(f"the collector at {self.address_text} closed the connection{goodbye}", at_once=refused)
