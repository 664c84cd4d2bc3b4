"""How a connection that broke a rule ends (``Goodbyes``): logged and counted, then a GOODBYE the peer can read (our
side shut, what it still sends read and thrown away) or an abort."""

from __future__ import annotations

import asyncio
import logging

from ringtrace.collector.auth import AuthenticationFailed
from ringtrace.collector.ingest.handlers import FrameHandlers, FrameSink
from ringtrace.collector.log_repeats import Repeats
from ringtrace.collector.store.ring import TABLE_LIMITS
from ringtrace.wire.errors import LimitExceeded, ProtocolError, UnsupportedVersion
from ringtrace.wire.frame_types import AUTHENTICATION_FAILED, TABLES_PAST_CAPACITY
from ringtrace.wire.frames import Goodbye, encode, preamble

__all__ = ["GOODBYE_DRAIN_S", "Goodbyes"]

log = logging.getLogger("ringtrace.collector.ingest")

#: After a GOODBYE, how long what the peer still sends is read and thrown away before the connection is cut: closed
#: with unread bytes, the socket would be reset, and a peer with frames in flight would never read the GOODBYE.
GOODBYE_DRAIN_S = 2.0


class Goodbyes:
    """One connection's end when it breaks a rule, and whether it is draining after a GOODBYE.

    Args:
        sink: the collector (its token check and traffic counters).
        frames: the connection's frame handlers (its peer, process and stream).

    Like ``FrameHandlers``, nothing here refers back to the connection.
    """

    __slots__ = ("_drain_timer", "_frames", "_sink", "_traffic", "draining")

    def __init__(self, sink: FrameSink, frames: FrameHandlers) -> None:
        self._sink, self._frames, self._traffic = sink, frames, sink.traffic
        #: A GOODBYE went out and our side is shut: what still comes is read and thrown away (``say_goodbye``),
        #: until the peer closes or the timer cuts the connection.
        self.draining = False
        self._drain_timer: asyncio.TimerHandle | None = None

    def authentication_failed(self, transport: asyncio.Transport, exc: AuthenticationFailed) -> None:
        """The peer learns only that; the log says why."""
        self._traffic.authentication_failures += 1
        self._sink.auth.log_refusal("connection", self._frames.peer, exc.reason)
        self.say_goodbye(transport, preamble() + encode(Goodbye(AUTHENTICATION_FAILED)))

    def unsupported_version(self, transport: asyncio.Transport, exc: UnsupportedVersion) -> None:
        log.warning("closing connection from %s, %s: %s", self._frames.peer, self._frames.who(), exc)
        self.say_goodbye(transport, preamble() + encode(Goodbye(str(exc))))

    def protocol_error(self, transport: asyncio.Transport, exc: ProtocolError, handled: int) -> None:
        """``handled``: the offset in the reader's buffer past the frames handled, where the frame that broke a rule
        begins."""
        traffic, frames = self._traffic, self._frames
        past_capacity = isinstance(exc, LimitExceeded) and exc.limit_name in TABLE_LIMITS
        if past_capacity:
            traffic.tables_refused += 1
            self._log_past_capacity(exc)
        else:
            log.warning("closing connection from %s, %s: %s", frames.peer, frames.who(), exc)
        traffic.protocol_errors += 1
        writer = frames.writer
        if writer is not None:
            writer.cut(handled)  # the frame that broke a rule, read into the segment: it ends before it
            frames.end_batch()  # what came before it is stored: acknowledge its FLUSHes
        if past_capacity:  # within the WELCOME's limits: say so (the client retries as for a refusal)
            # Its tables are given back now, not once the peer has read the GOODBYE and closed: held while it drains,
            # they would refuse another process's tables (one that shares the room they took) for as long.
            frames.close_stream()
            self.say_goodbye(transport, encode(Goodbye(f"{exc}: {TABLES_PAST_CAPACITY}")))
        else:
            transport.abort()

    def say_goodbye(self, transport: asyncio.Transport, goodbye: bytes) -> None:
        """Send ``goodbye`` and end the connection so that the peer reads it: our side shut, what the peer still
        sends read and thrown away until it closes, for GOODBYE_DRAIN_S at most (TLS cannot shut one side: closed)."""
        transport.write(goodbye)
        # Nothing more may be written (after write_eof a write raises): a snapshot's or the stop's FLUSH, a
        # SET_PRIORITY, or a FLUSH_ACK a sync answers later finds no transport, as for a connection gone.
        self._frames.transport = None
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        self.draining = True
        transport.resume_reading()
        self._drain_timer = asyncio.get_running_loop().call_later(GOODBYE_DRAIN_S, transport.abort)

    def lost(self) -> None:
        """The connection is gone: the drain timer would keep it alive till then."""
        if self._drain_timer is not None:
            self._drain_timer.cancel()
            self._drain_timer = None

    def _log_past_capacity(self, exc: ProtocolError) -> None:
        """Tables past ``--capacity``: the client comes back and is refused again, until its tables fit or the
        capacity grows: logged at once, then once a minute per process with the count of those not logged."""
        frames = self._frames
        process = frames.process
        unlogged = self._traffic.capacity_refusals_logged.due(process.uid if process is not None else frames.peer)
        if unlogged is None:
            log.debug("closing connection from %s, %s: %s", frames.peer, frames.who(), exc)
            return
        log.warning(
            "closing connection from %s, %s: %s; it will be refused again until its tables fit: raise --capacity, "
            "or lower --max-strings, --max-string-bytes or --max-tracks (clients adopt them)%s",
            frames.peer, frames.who(), exc, Repeats.since(unlogged, "closed so"),
        )  # fmt: skip
