"""What the log says while events cannot reach the collector: one WARNING soon after delivery stops, one a minute while
it lasts, one INFO when it resumes. Sans-I/O: the link tells it what happened and when, and logs what it returns.

Theory of operation: the first failure (a refused or timed-out connection, an unknown host, TLS, a GOODBYE) starts an
outage; a WELCOME ends it. A collector that comes back within ``grace_s`` (a restart, a client started a moment before
its collector) costs no warning. Past it, the warning names the address and the latest reason, and the next ones say
how many events wait in the queue, how many were dropped since the outage began, and how many were sent on connections
that broke before an acknowledgement (a collector that welcomes the client, then refuses its tables).
"""

from __future__ import annotations

import math
import socket
from typing import Final

from ringtrace.client.delivery.streaming.loss_report import events_phrase

__all__ = ["Outage", "connect_failure"]

#: A collector back within this long after the first failure is not warned of.
GRACE_S: Final = 2.0
#: While an outage lasts, a warning at most this often.
REPEAT_S: Final = 60.0


def connect_failure(address: str, exc: BaseException, timeout_s: float) -> str:
    """Why a connection to ``address`` could not be made (before any TLS), in words a user acts on."""
    if isinstance(exc, ConnectionRefusedError):
        return f"connection to {address} refused (is the collector running, on that port?)"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the host of {address} ({exc.strerror or exc})"
    if isinstance(exc, TimeoutError):
        return f"connecting to {address} timed out after {timeout_s:g}s"
    return f"cannot connect to {address}: {exc}"


class Outage:
    """The state of delivery to one collector, as far as the log is concerned."""

    __slots__ = (
        "_dropped_at_start",
        "_next_report",
        "_reason",
        "_started",
        "_unacknowledged_at_start",
        "_warned",
        "grace_s",
        "quiet",
        "repeat_s",
    )

    def __init__(self, grace_s: float = GRACE_S, repeat_s: float = REPEAT_S) -> None:
        self.grace_s = grace_s
        self.repeat_s = repeat_s
        self._started: float | None = None
        self._reason = ""
        self._warned = False
        self._next_report = math.inf
        self._dropped_at_start = 0
        self._unacknowledged_at_start = 0
        #: No more warnings (at exit: the streamer's line at close says what they would have, the reason if unsaid).
        self.quiet = False

    @property
    def active(self) -> bool:
        """Whether an outage is under way (its warnings say what is lost meanwhile)."""
        return self._started is not None

    @property
    def unsaid(self) -> str:
        """The latest reason of the outage under way, if no warning said it yet ("": none is, or one did)."""
        return self._reason if self._started is not None and not self._warned else ""

    @property
    def next_report(self) -> float:
        """When ``report`` has something to say next (``math.inf``: not before something else happens)."""
        return self._next_report

    def failed(self, reason: str, now: float, dropped: int, *, unacknowledged: int = 0, at_once: bool = False) -> None:
        """Delivery failed for ``reason``; ``dropped`` and ``unacknowledged`` are the streamer's counts so far.
        ``at_once``: a failure that waiting will not mend (TLS, a refusal: most likely the configuration), warned of
        without a grace."""
        self._reason = reason
        if self._started is None:
            self._started = now
            self._dropped_at_start = dropped
            self._unacknowledged_at_start = unacknowledged
            self._next_report = now + self.grace_s
        if at_once and not self._warned:
            self._next_report = now

    def report(self, now: float, queued: int, dropped: int, *, unacknowledged: int = 0) -> str | None:
        """A WARNING to log now, if one is due (never once ``quiet``)."""
        if self._started is None or now < self._next_report:
            return None
        if self.quiet:
            self._next_report = math.inf
            return None
        self._next_report = now + self.repeat_s
        lost = dropped - self._dropped_at_start
        sent = unacknowledged - self._unacknowledged_at_start
        unanswered = f", {sent} sent on connections that broke before an acknowledgement" if sent else ""
        if not self._warned:
            self._warned = True
            return (
                f"ringtrace: events cannot reach the collector: {self._reason}; retrying, {events_phrase(queued)} "
                f"queued (dropped past max_queue_bytes: {lost})"
            )
        return (
            f"ringtrace: events still cannot reach the collector after {now - self._started:.0f}s: {self._reason}; "
            f"{events_phrase(queued)} queued, {lost} dropped since{unanswered}"
        )

    def resumed(self, now: float, dropped: int) -> str | None:
        """Delivery works again: an INFO to log, if the outage was warned of."""
        started, warned = self._started, self._warned
        self._started, self._warned, self._next_report = None, False, math.inf
        if started is None or not warned:
            return None
        return (
            f"ringtrace: events reach the collector again, after {now - started:.1f}s "
            f"({dropped - self._dropped_at_start} dropped meanwhile)"
        )
