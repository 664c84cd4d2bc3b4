"""What the log says of events lost while the collector is reachable: one WARNING at the first loss, then at most one
a minute while losses go on, each with how many since the last. Sans-I/O: the link gives it the counters and the time,
and logs what it returns.

Two losses a user can act on: events dropped on the client (a thread recording faster than the flusher and the
connection carry them, past ``max_buffered_events`` or ``max_queue_bytes``), and events the collector could not store
(REFUSED: a full store under ``--policy discard``, a capacity taken by tables, a process at its cap). While delivery is
out (``outage.py``), the outage's warnings count the drops instead.
"""

from __future__ import annotations

from typing import Final

__all__ = ["LossReport", "events_phrase", "undelivered_at_close"]

#: While losses go on, a warning at most this often.
REPEAT_S: Final = 60.0


def events_phrase(count: int, *, grouped: bool = False) -> str:
    """``count`` events, as a sentence says it ("1 event", "2 events"); ``grouped``: with thousands separators."""
    number = f"{count:,}" if grouped else str(count)
    return f"{number} event" if count == 1 else f"{number} events"


class LossReport:
    """The losses already reported, and when the next report may be."""

    __slots__ = ("_dropped", "_next_report", "_refused", "_warned", "repeat_s")

    def __init__(self, repeat_s: float = REPEAT_S) -> None:
        self.repeat_s = repeat_s
        self._dropped = 0
        self._refused = 0
        self._next_report = 0.0
        self._warned = False

    def report(self, now: float, dropped: int, refused: int, *, address: str, outage: bool) -> str | None:
        """A WARNING to log now, if losses grew since the last and one is due (``outage``: the outage's warnings say
        it; the drops are taken as reported)."""
        if outage:
            self._dropped = dropped
            return None
        new_dropped, new_refused = dropped - self._dropped, refused - self._refused
        if (new_dropped <= 0 and new_refused <= 0) or now < self._next_report:
            return None
        self._dropped, self._refused = dropped, refused
        self._next_report = now + self.repeat_s
        # Each loss says the counter that holds it: a refused event reached the collector, so it is the streamer's
        # refused_events, never the timeline's dropped_events (which sums what its listeners dropped).
        said = []
        if new_dropped > 0:
            said.append(
                f"{events_phrase(new_dropped, grouped=True)} dropped: recorded faster than they could be sent (a "
                "thread's buffer at max_buffered_events, or the send queue at max_queue_bytes); counted in the "
                "timeline's dropped_events"
            )
        if new_refused > 0:
            said.append(
                f"the collector at {address} could not store {events_phrase(new_refused, grouped=True)} (its store "
                "full under --policy discard, its capacity taken by connections' tables, or this process at its cap); "
                "counted in the streamer's refused_events (among the timeline's listeners), not in dropped_events"
            )
        since = "since the last warning, " if self._warned else ""
        self._warned = True
        return f"ringtrace: {since}{'; '.join(said)}; every snapshot counts them too"


def undelivered_at_close(
    address: str,
    *,
    queued: int,
    unreported: int,
    unanswered: int,
    timeout_s: float,
    connected: bool,
    failure: str = "",
    at_once: bool = False,
    stopped: str = "",
) -> str | None:
    """What the log says when a streamer closes with events that never reached the collector (None: there are none):
    ``queued`` still when closing gave up, ``unreported`` dropped before and never reported, ``unanswered`` sent on
    connections that broke before an acknowledgement (lost, unless the collector stored them before the break).
    ``failure``: why the collector cannot be reached, if no warning said it yet (at exit, the outage's are not logged);
    ``at_once``: closing gave up without waiting out ``timeout_s``, since nothing listens there. ``stopped``: the
    error that ended the streamer's thread before, if one did: then nothing was waited for either."""
    if not (queued or unreported or unanswered):
        return None
    broken = (
        f"; and {unanswered} sent on connections that broke before the collector acknowledged them, lost unless it "
        "stored them first"
        if unanswered
        else ""
    )
    return (
        f"ringtrace: {events_phrase(queued + unreported)} recorded by this process never reached the collector at "
        f"{address}: "
        f"{queued} still queued when closing gave up {'at once' if at_once or stopped else f'after {timeout_s:.1f}s'} "
        f"({f'its streamer had stopped: {stopped}' if stopped else 'connected' if connected else 'not connected'}), "
        f"{unreported} dropped before and not reported{broken}"
        f"{f'; {failure}' if failure and not connected else ''}"
    )
