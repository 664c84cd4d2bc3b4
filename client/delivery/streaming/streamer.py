"""The collector streamer: a serialized listener that streams its frames to a collector over TCP.

Theory of operation
-------------------
What to send and when -- the handshake, the send queue, acknowledgements, backoff and heartbeat -- is decided by the
sans-I/O ``Link`` (link.py, with its own theory of operation); this module is its driver. ``receive`` (on the flusher
thread) encodes a run of events and hands the frames to the link's bounded queue. The thread ``ringtrace-streamer``
owns the socket: a select loop over a non-blocking socket and a wake-up socket pair, which tells the link the time
and what the socket did, and carries out the actions it answers with. The link is shared with the other threads; it
changes only under ``_state_lock``; the socket is used only outside it.

The thread sends once the flusher ends its pass over a timeline's runs (``handed_over``), not run by run, or once the
queue is half full, and then every frame queued in one system call (``sendmsg``; TLS one frame a call); a ``flush()``
sends at once. A recording thread that never blocks gives the interpreter lock up only when another thread has waited
a switch interval (5 ms) for it, or when that thread lets it go: each send lets it go. Woken run by run and sending a
frame a call, this thread took turns away from the flusher and waited 5 ms a frame itself, and one thread recording
flat out outran both.

Connecting (and the TLS handshake, with ``tls``) blocks this thread for at most ``connect_timeout_s``. ``flush()``
does not wait for the backoff: it asks for a connection at once, then queues a FLUSH after everything received so far
and waits, within its timeout, for the collector's FLUSH_ACK, which the collector sends once it has stored everything
before it. A FLUSH from the collector is answered the same way: the flusher sweeps every timeline, then FLUSH_ACK goes
out behind what it queued. Nothing here raises into the host program, and nothing blocks it beyond the timeout it
passed.

A program may close our descriptors under us (a daemon's ``os.closerange`` as it starts): each is checked before this
thread uses it (``descriptors.py``); a lost connection is lost as after any break, and dialled again.

A pass of the thread that fails on an unexpected error (a bug, or a logging handler of the program's that raises on
its record) does not end it: what was in flight (the queue, the frame going out) is lost, counted as dropped and as
``internal_error_events`` (STATS: the snapshot's ``client_internal_error_events``), the connection is dropped, the
log says so at most once a minute, and the loop goes on after a wait that grows while passes keep failing
(``pass_failures.py``), then connects again as after any break. Only an error while recovering ends the thread; what
is recorded after that is counted as dropped (``write``), and the line at close names the error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import encodings.idna  # noqa: F401  # connecting by host name needs it; importing it from the thread can fail after fork
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, cast, overload

from ringtrace.client.delivery import unpatched
from ringtrace.client.delivery.listeners import SerializedListener
from ringtrace.client.delivery.pass_failures import PassFailures, describe
from ringtrace.client.delivery.streaming.descriptors import StreamerDescriptors
from ringtrace.client.delivery.streaming.dialer import ConnectFailed, Dialer
from ringtrace.client.delivery.streaming.hand_over_pass import HandOverPass
from ringtrace.client.delivery.streaming.link import Link, lose_in_flight, undelivered_at_close_of
from ringtrace.client.delivery.streaming.link_actions import (
    Action,
    AnswerFlush,
    Close,
    Connect,
    FlushDone,
    Log,
    Prioritize,
)
from ringtrace.client.delivery.streaming.priority_requests import PriorityRequests
from ringtrace.client.delivery.streaming.send_queue import LinkCounters
from ringtrace.client.delivery.threads import background_thread
from ringtrace.client.options import StreamerOptions
from ringtrace.wire.arg_values import display_text
from ringtrace.wire.call_records import CallRun, event_count
from ringtrace.wire.frames import Goodbye, encode
from ringtrace.wire.model import TrackInfo
from ringtrace.wire.parsing import parse_addresses

if TYPE_CHECKING:
    import socket
    import ssl

    from ringtrace.wire.stream_encoder import EncodedBatch

__all__ = ["Streamer", "rename_unstarted"]

#: What a client says as it closes for good.
_GOODBYE: Final = encode(Goodbye("closing"))

log = logging.getLogger("ringtrace.client")

#: Bytes one send hands the socket at most: many frames in one system call, since each call lets a recording thread
#: take the interpreter lock, which this thread may then wait a switch interval (5 ms) to get back.
_GATHERED_BYTES = 4 << 20

#: Why the connection was lost when the program closed its descriptor.
_CLOSED_UNDER_US = "the program closed the connection's descriptor (a daemon's os.closerange, say)"


class _Waiter:
    """One flush() call waiting for the link's answer."""

    __slots__ = ("done", "ok")

    def __init__(self) -> None:
        self.done = unpatched.Event()
        self.ok = False

    def finish(self, ok: bool) -> None:
        self.ok = ok
        self.done.set()


class _Counted:
    """A counter of the link's, read and written as an attribute of the streamer (the listener counts into it)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, streamer: None, owner: type) -> _Counted: ...
    @overload
    def __get__(self, streamer: Streamer, owner: type) -> int: ...
    def __get__(self, streamer: Streamer | None, owner: type) -> int | _Counted:
        return self if streamer is None else int(getattr(streamer._counters, self._name))

    def __set__(self, streamer: Streamer, value: int) -> None:
        setattr(streamer._counters, self._name, value)


class Streamer(SerializedListener):
    """Streams the timelines it listens to, to one collector, from a background thread.

    Counters (read from any thread): ``sent_events``, ``dropped_events`` (queue full, a frame cut by a disconnect, an
    event too large for a frame, in flight when a pass failed: ``internal_error_events``), ``dropped_frames``,
    ``unacknowledged_events`` (sent, then the connection broke unacknowledged), ``refused_events``, ``connects``.

    Args:
        address: ``"HOST:PORT"`` of the collector's ingest listener.
        options: see ``StreamerOptions``.
        sweep_all: called when the collector asks for a flush: hands every timeline's events to the listeners.
    """

    sent_events = _Counted()
    dropped_events = _Counted()
    dropped_frames = _Counted()
    unacknowledged_events = _Counted()
    refused_events = _Counted()
    connects = _Counted()
    internal_error_events = _Counted()

    def __init__(
        self, address: str, options: StreamerOptions | None = None, sweep_all: Callable[[], object] | None = None
    ) -> None:
        options = options or StreamerOptions()
        self._counters = LinkCounters()  # first: the listener's __init__ zeroes dropped_events through it
        super().__init__(options.process_name, options.max_frame_bytes, options.max_strings)
        #: The first collector of ``address`` (``"HOST:PORT"``, or several: ``"c1:7700,c2:7700"``).
        self.address = parse_addresses(address)[0]
        self.address_text = address
        self.options = options
        self.encoder.max_events_per_frame = options.max_events_per_frame
        self._sweep_all = sweep_all

        # Shared with other threads: guarded by _state_lock.
        self._link = Link(address, options, self.encoder, self._counters)
        self._waiters: dict[int, _Waiter] = {}  # flush() calls, by the link's request id
        self._stopping = False
        self._started = False
        #: Events were handed to this streamer (so closing it waits for delivery).
        self._received = False
        self._stopped_by = ""  # the unexpected error that ended the thread, if one did (the line at close says it)
        self._closing = unpatched.Event()  # (cuts short the wait after a failed pass)
        self._failures = PassFailures("streamer", "dropped_events and internal_error_events")

        # Owned by the streamer thread (but the wake-up).
        self._fds = StreamerDescriptors()
        self._dialer = Dialer(address, options)
        #: Timelines this streamer serves that take a collector's SET_PRIORITY (``subscribe_priority``).
        self._priority_requests = PriorityRequests()

        #: The flusher's pass over a timeline's runs (see ``receive``).
        self._pass = HandOverPass()
        self._thread = background_thread(self._run, "ringtrace-streamer")

    def __repr__(self) -> str:
        return f"<Streamer to {self.address_text}>"

    # -- any thread -----------------------------------------------------------------------------------------------

    def start(self) -> bool:
        """Start the streamer thread (once; later calls do nothing). False when the thread cannot be started (at
        interpreter shutdown, say) or the streamer was closed."""
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
        return self._link.welcomed

    @property
    def queued_events(self) -> int:
        """Events encoded and not yet sent."""
        with self._state_lock:
            return self._link.queued_events

    @property
    def batch_interval_s(self) -> float:
        """The flusher's pace while this streamer listens (``flusher.Paced``), from its options."""
        return self.options.batch_interval_s

    @property
    def exit_timeout_s(self) -> float:
        """How long the exit hook waits for this streamer's delivery (``flusher.Paced``), from its options."""
        return self.options.exit_timeout_s

    def flush(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the collector to acknowledge everything received so far.

        Connects at once if not connected (no backoff wait).

        Returns:
            True when acknowledged, with no event dropped or rejected (a typed event whose values did not fit its
            types) since the previous acknowledged flush.
        """
        waiter = _Waiter()
        deadline = time.monotonic() + max(timeout_s, 0.0)
        if not self.start():
            return False
        with self._state_lock:
            if self._stopping or not self._thread.is_alive():
                return False
            self._waiters[self._link.request_flush(deadline)] = waiter
        self._pass.ends()  # everything received goes now
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
            never_started = not self._started  # (and now never will: start() refuses once stopping)
        self._closing.set()
        if never_started:  # the thread that would close them at its end never ran
            self._fds.close()
        self._wake()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(max(deadline - time.monotonic(), 0.05))
        with self._state_lock:
            queued = self._link.drop_queue()
            if not self._thread.is_alive():  # else the thread still owns the frame it is sending, and counts it
                queued += self._link.drop_unsent()
        warning = undelivered_at_close_of(self._link, self.address_text, queued, timeout_s, self._stopped_by)
        if warning:
            log.warning("%s", warning)
        return delivered

    def exit_begins(self) -> None:
        """The exit delivery begins (the flusher says so): a collector found not there is not waited for."""
        with self._state_lock:
            self._link.exit.begin()

    def subscribe_priority(self, timeline: Any) -> None:
        """``timeline.set_priority`` is called when the collector sends SET_PRIORITY for it (or for all)."""
        self._priority_requests.subscribe(timeline)

    def after_fork(self) -> Streamer:
        """A forked child streams as a new process, to the same collector; its thread starts on first use.

        The child's copies of this streamer's descriptors are closed: a socket kept open in a child would hide the
        parent's disconnect from the collector.
        """
        self._fds.close()
        return Streamer(self.address_text, self.options, self._sweep_all)

    def _wake(self) -> None:
        self._fds.wake()

    # -- flusher thread (under _state_lock) -----------------------------------------------------------------------

    def receive(self, track: TrackInfo, records: list[Any] | CallRun) -> None:
        if not self._started and not self.start():
            with self._state_lock:
                self.dropped_events += event_count(records)
            return
        self._received = True
        # The flusher tells the end of its pass (handed_over): the streamer thread sends then, not run by run (see
        # the module docstring); waking it run by run was a send on the flusher's thread too.
        self._pass.begins()
        super().receive(track, records)

    def retire(self, track: TrackInfo) -> None:
        with self._state_lock:
            self._link.retire(track)  # a reconnect would have to declare it again for its queued frames
        super().retire(track)

    def write(self, batch: EncodedBatch) -> None:
        if self._stopping:  # closed: nothing will send these
            self._link.discard(batch)
            return
        self._link.enqueue(batch, time.monotonic())
        if self._may_send():
            self._pass.send_now()
            self._wake()

    def handed_over(self) -> None:
        """The flusher's pass ended: send what it queued, if any (each wake-up takes the GIL from a busy thread)."""
        if self._pass.ends():  # (anything else queued woke it then: ``write``)
            self._wake()

    def _may_send(self) -> bool:
        """Not while the flusher hands runs over, unless the queue is half full (many threads' runs in one pass)."""
        return self._pass.may_send(self._link.queue_half_full)

    # -- streamer thread ------------------------------------------------------------------------------------------

    def _state(self) -> contextlib.AbstractContextManager[None]:
        """``_state_lock``, as this thread takes it (``HandOverPass.locked``)."""
        return self._pass.locked(self._state_lock)

    def _run(self) -> None:
        try:
            self._failures.run(self._loop, self._recover, self._closing)
        except Exception as exc:  # recovering from a failed pass failed too
            self._stopped_by = describe(exc)
            log.exception("ringtrace streamer stopped by an unexpected error; what is recorded now is counted as lost")
        finally:
            with self._state():
                self._stopping = True
                goodbye = not self._stopped_by and self._link.welcomed and not self._link.wants_to_write
                actions = self._link.stop(time.monotonic())
            _say_goodbye(self._fds.sock if goodbye and self._fds.socket_is_ours() else None)
            self._perform(actions)
            self._fds.close()  # (with a socket the link never heard of: an error between dialling and HELLO)

    def _loop(self) -> None:
        while True:
            with self._state():
                if self._stopping:
                    return
                actions = self._link.timer(time.monotonic())
            self._perform(actions)
            if not self._fds.keep():
                self._lost(_CLOSED_UNDER_US)
            if self._fds.sock is not None:
                self._write()
            with self._state():
                deadline, writable = self._link.next_deadline(), self._link.wants_to_write and self._may_send()
            self._wait(max(deadline - time.monotonic(), 0.0), writable)

    def _recover(self, exc: Exception) -> int:
        """A pass failed (``PassFailures.run``): the connection goes; what was in flight is lost, counted, returned."""
        self._fds.close_socket()
        with self._state():
            lost, actions = lose_in_flight(self._link, f"the streamer's pass failed: {describe(exc)}", time.monotonic())
        with contextlib.suppress(Exception):  # (a logging handler that raises on the link's lines: what failed, maybe)
            self._perform(actions)
        return lost

    def _perform(self, actions: list[Action]) -> None:
        """Carry out the link's actions, and those they lead to, in order."""
        todo = deque(actions)
        while todo:
            match todo.popleft():
                case Log(level, text):
                    log.log(level, text)
                case Close():
                    self._fds.close_socket()
                case FlushDone(request, ok):
                    with self._state():
                        waiter = self._waiters.pop(request, None)
                    if waiter is not None:
                        waiter.finish(ok)
                case Connect():
                    todo.extend(self._connect())
                case AnswerFlush():
                    if self._sweep_all is not None:
                        self._sweep_all()  # not under the lock: the sweep hands events to this listener too
                    with self._state():
                        todo.extend(self._link.swept(time.monotonic()))
                case Prioritize(frame):
                    self._priority_requests.apply(frame, self, self.address_text)

    def _connect(self) -> list[Action]:
        try:
            sock = self._dialer.dial()
        except ConnectFailed as failure:
            with self._state():
                now = time.monotonic()
                return self._link.connect_failed(failure.reason, now, at_once=failure.at_once, nobody=failure.nobody)
        self._fds.attach(sock)
        hello = self.identity.hello(self.options.token or "", live=True)
        with self._state():
            self._link.address = self._dialer.address_text  # (what its messages name: the collector connected)
            actions = self._link.connected(time.monotonic(), hello)
        log.debug("ringtrace connected to %s", self._dialer.address_text)
        return actions

    def _lost(self, reason: str) -> None:
        with self._state():
            actions = self._link.connection_lost(reason, time.monotonic())
        self._perform(actions)

    def _write(self) -> None:
        sock = self._fds.sock
        assert sock is not None
        # Many frames a system call where the socket takes a list (not TLS, nor where there is no sendmsg: Windows).
        gathered = _GATHERED_BYTES if hasattr(sock, "sendmsg") and not self._dialer.tls else 0
        while self._may_send():
            with self._state():
                buffers = self._link.buffers_to_send(gathered)
            if not buffers:
                return
            try:
                sent = sock.send(buffers[0]) if len(buffers) == 1 else sock.sendmsg(buffers)
            except self._dialer.would_block:  # TLS: the same bytes are sent again (OpenSSL may take a moved buffer)
                return
            except OSError as exc:
                self._lost(f"send failed: {exc}")
                return
            with self._state():
                self._link.sent(sent, time.monotonic())

    def _wait(self, timeout_s: float, writable: bool) -> None:
        readable = self._fds.wait(timeout_s, writable)
        if readable is None:
            self._lost(_CLOSED_UNDER_US)
        elif readable:
            self._read()

    def _read(self) -> None:
        sock = self._fds.sock
        assert sock is not None
        try:
            data = sock.recv(65536)
            while data and self._dialer.tls and cast("ssl.SSLSocket", sock).pending():  # (decrypted: unseen by select)
                data += sock.recv(65536)
        except self._dialer.would_block:
            return
        except OSError as exc:
            self._lost(f"receive failed: {exc}")
            return
        with self._state():
            actions = self._link.received(data, time.monotonic())
        self._perform(actions)


def _say_goodbye(sock: socket.socket | None) -> None:
    """Tell the collector that this is a clean close, not a crash (its crash rules fire on a connection ended without
    a GOODBYE): said only with everything sent, never waiting (a full socket buffer leaves it unsaid)."""
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.send(_GOODBYE)


def rename_unstarted(streamer: Streamer, process_name: str) -> bool:
    """Name the process ``process_name`` in ``streamer``'s HELLO if it has not started, so has sent no HELLO yet (a
    forked child's, named at the fork); False if it has, and the name stays."""
    with streamer._state_lock:
        if streamer._started or streamer._stopping:
            return False
        streamer.options = dataclasses.replace(streamer.options, process_name=process_name)
        streamer.process_name = streamer.identity.process_name = display_text(process_name)
        return True
