"""What every connection together received and how connections ended (``Traffic``); which connections come in
(``refusal``, ``refuse``); how many of their lines are logged at INFO (``ConnectionLines``); how fast a connection may
send control frames (``ControlBudget``); and how fast the frame being received arrives (``FrameArrival``)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from ringtrace.collector.auth import is_loopback
from ringtrace.collector.log_repeats import Repeats
from ringtrace.wire.frames import Goodbye, encode, preamble

__all__ = [
    "CONNECTION_LINES_BURST",
    "CONNECTION_LINES_PER_S",
    "MAX_CONTROL_FRAMES_PER_S",
    "MIN_FRAME_BYTES_PER_S",
    "ConnectionLines",
    "ControlBudget",
    "FrameArrival",
    "Traffic",
    "counted_address",
    "refusal",
    "refuse",
]

log = logging.getLogger("ringtrace.collector.ingest")

#: Control frames (FLUSH, STATS) a connection may send a second, on average; a connection past it is read more slowly.
MAX_CONTROL_FRAMES_PER_S: Final = 1000.0
#: The least rate, on average since its first byte, at which a frame still incomplete after the idle timeout must have
#: arrived (a peer that sends a byte now and then is never idle): a frame over a steady 10 kbit/s link is never cut.
MIN_FRAME_BYTES_PER_S: Final = 1024
#: Connection lines (a HELLO accepted) logged at INFO: this many at once (a fleet reconnecting after a restart), then
#: CONNECTION_LINES_PER_S on average; the others go at DEBUG, counted in the next INFO one. A line cost a short
#: connection about a tenth of its collector CPU, and a crowd of short connections filled the log with them.
CONNECTION_LINES_BURST: Final = 50
CONNECTION_LINES_PER_S: Final = 5.0


class ConnectionLines:
    """Whether a connection's line is logged at INFO now (a token bucket), and how many went at DEBUG since the last
    one that was; ``clock``: monotonic seconds."""

    __slots__ = ("_clock", "_last_s", "_left", "_unlogged")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._left = float(CONNECTION_LINES_BURST)
        self._last_s = clock()
        self._unlogged = 0

    def take(self) -> int | None:
        """None: this connection's line goes at DEBUG (it is counted); else it goes at INFO, and this many lines went
        at DEBUG since the last one that did."""
        now = self._clock()
        self._left = min(float(CONNECTION_LINES_BURST), self._left + (now - self._last_s) * CONNECTION_LINES_PER_S)
        self._last_s = now
        if self._left < 1.0:
            self._unlogged += 1
            return None
        self._left -= 1.0
        unlogged, self._unlogged = self._unlogged, 0
        return unlogged

    @staticmethod
    def since(unlogged: int) -> str:
        """The words that end an INFO line after ``unlogged`` lines went at DEBUG."""
        return f"; {unlogged} more connections since, logged at DEBUG (a crowd of them)" if unlogged else ""


@dataclass(slots=True)
class Traffic:
    """What every connection together received and how connections ended, since the collector started."""

    bytes_received: int = 0
    connections_accepted: int = 0
    #: Refused at once: ``max_connections`` reached.
    connections_refused: int = 0
    #: Closed for breaking the protocol (a log line each says why).
    protocol_errors: int = 0
    #: Of those, closed for tables past the process's share or the capacity (``TABLE_LIMITS``).
    tables_refused: int = 0
    #: Times a connection's reading was paused for sending control frames faster than MAX_CONTROL_FRAMES_PER_S.
    throttled: int = 0
    #: Refused at HELLO: no token, or another one (``auth.py``).
    authentication_failures: int = 0
    #: Closed for a frame arriving too slowly (``IngestProtocol.close_if_idle``).
    too_slow: int = 0
    #: Refused connections logged, per kind of refusal (``refuse``).
    refusals_logged: Repeats = field(default_factory=Repeats)
    #: Connections closed for tables past ``--capacity`` logged, per process (its client retries, refused again).
    capacity_refusals_logged: Repeats = field(default_factory=Repeats)
    #: Connection lines logged at INFO.
    connection_lines: ConnectionLines = field(default_factory=ConnectionLines)


def counted_address(peer: object) -> str | None:
    """The host of ``peer`` (a transport's peername) when it counts against max_connections_per_address: not a
    loopback one (local processes all share one address)."""
    return peer[0] if isinstance(peer, tuple) and not is_loopback(peer[0]) else None


def refusal(
    peer: object, connections: int, max_connections: int, by_address: dict[str, int], per_address: int
) -> str | None:
    """Why a new connection from ``peer`` is refused now (``connections`` are open, ``by_address`` per counted
    host); None: it comes in."""
    if connections >= max_connections:
        return f"max_connections={max_connections} reached"
    address = counted_address(peer)
    if address is not None and by_address.get(address, 0) >= per_address:
        return f"max_connections_per_address={per_address} reached for {address}"
    return None


def refuse(traffic: Traffic, transport: asyncio.Transport, peer: str, reason: str) -> None:
    """No room for this connection: a GOODBYE says why (the client logs it and retries later), and so does a log
    line, repeated at most once a minute per kind of refusal (``log_repeats.py``)."""
    traffic.connections_refused += 1
    unlogged = traffic.refusals_logged.due(reason.partition("=")[0])
    if unlogged is not None:
        log.warning("refusing connection from %s: %s%s", peer, reason, Repeats.since(unlogged, "refused so"))
    transport.write(preamble() + encode(Goodbye(f"{reason}: try again later")))
    transport.close()


class FrameArrival:
    """When the frame being received began to arrive, to tell a slow frame (``too_slow``) from a peer that is only
    quiet between frames."""

    __slots__ = ("_begun_s", "_received", "_taken")

    def __init__(self) -> None:
        #: Bytes received, and of them those taken as frames when the frame being received began, and when that
        #: was (None: between frames).
        self._received = 0
        self._taken = 0
        self._begun_s: float | None = None

    def received(self, nbytes: int) -> None:
        self._received += nbytes

    def taken(self, unread: int, last_read_s: float) -> None:
        """Frames were taken, ``unread`` bytes are left: those, if any, begin a frame now (read at ``last_read_s``),
        unless it is the one that was being received already (nothing more was taken since it began)."""
        taken = self._received - unread
        if not unread:
            self._begun_s = None
        elif self._begun_s is None or taken != self._taken:
            self._begun_s, self._taken = last_read_s, taken

    def too_slow(self, now_s: float, idle_timeout_s: float, unread: int) -> float | None:
        """How long the frame being received (``unread`` bytes of it are in) has been arriving, if that is past
        ``idle_timeout_s`` at less than MIN_FRAME_BYTES_PER_S on average; None otherwise."""
        begun_s = self._begun_s
        if begun_s is None or now_s - begun_s < idle_timeout_s or unread >= MIN_FRAME_BYTES_PER_S * (now_s - begun_s):
            return None
        return now_s - begun_s


class ControlBudget:
    """Control frames a connection may still send now: a token bucket refilled at MAX_CONTROL_FRAMES_PER_S. Below
    zero, the connection reads nothing more until it is back at zero (``wait_s``): each control frame is answered or
    stored, so a flood of them would cost the collector without bound."""

    __slots__ = ("_refilled", "left")

    def __init__(self) -> None:
        self.left = MAX_CONTROL_FRAMES_PER_S
        self._refilled = 0.0

    def take(self, now: float) -> None:
        """A control frame arrived at ``now`` (the loop's clock)."""
        refill = (now - self._refilled) * MAX_CONTROL_FRAMES_PER_S
        self.left = min(MAX_CONTROL_FRAMES_PER_S, self.left + refill) - 1
        self._refilled = now

    @property
    def wait_s(self) -> float:
        """How long until the bucket is back at zero (0 or less: it is)."""
        return -self.left / MAX_CONTROL_FRAMES_PER_S
