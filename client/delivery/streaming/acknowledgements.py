"""The link's acknowledgements: which events the collector has said it stored, and the flush() calls waiting for it.
Sans-I/O: the link tells it what happened and when; it picks FLUSH tokens and says which requests are answered.

Theory of operation
-------------------
A FLUSH (token) asks the collector to answer FLUSH_ACK (token) once it has stored everything received before it;
each FLUSH sent records ``sent_events`` plus the events queued ahead of it as its *target*, so an ack moves
``through`` (events the collector has stored) to that target. A flush() call is a request: asked (not yet seen by
the link's timer), pending (waiting for a welcomed connection), then waiting for the ack of the FLUSH sent for it.
Its answer is True only if nothing was lost since the previous acknowledged flush: no event dropped or rejected
(``baseline``), none refused by the collector, and no connection broken with events unacknowledged (``uncertain``).
A connection that breaks asks again, with new tokens, for the requests whose FLUSH went down with it.
"""

from __future__ import annotations

import itertools
import math

__all__ = ["ACKNOWLEDGE_EVERY_S", "Acknowledgements", "FlushRequest"]

#: While events are sent, a FLUSH nobody waits for asks the collector to acknowledge them this often: what a connection
#: that breaks leaves unacknowledged (``unacknowledged_events``) is about this much sending, not all since the last
#: flush() call.
ACKNOWLEDGE_EVERY_S = 1.0


class FlushRequest:
    """One flush() call. ``request_id`` names it to the caller (its first token); ``baseline``: the loss count of the
    last acknowledged flush when it was asked for; ``uncertain``: a connection broke with unacknowledged events since
    then. Either makes its answer False."""

    __slots__ = ("baseline", "deadline", "request_id", "uncertain")

    def __init__(self, request_id: int, deadline: float, baseline: int, uncertain: bool) -> None:
        self.request_id = request_id
        self.deadline = deadline
        self.baseline = baseline
        self.uncertain = uncertain


class Acknowledgements:
    """FLUSH tokens, their targets, and the requests waiting for them."""

    __slots__ = (
        "_asked",
        "_targets",
        "_tokens",
        "_waiting",
        "asked_at",
        "dropped_at_flush",
        "lost_at_flush",
        "on_this_connection",
        "pending",
        "refused_since_flush",
        "through",
        "unacknowledged_at_flush",
        "uncertain",
    )

    def __init__(self) -> None:
        self._tokens = itertools.count(1)  # 0 is the heartbeat's
        self._asked: list[tuple[int, FlushRequest]] = []
        #: Requests waiting for a welcomed connection, with the token their FLUSH will carry.
        self.pending: list[tuple[int, FlushRequest]] = []
        #: Requests whose FLUSH is queued or sent, by token.
        self._waiting: dict[int, FlushRequest] = {}
        #: Per FLUSH token, ``sent_events`` up to which its ack says everything is stored.
        self._targets: dict[int, int] = {}
        #: ``sent_events`` up to which the collector acknowledged storing.
        self.through = 0
        self.asked_at = 0.0
        #: The collector acknowledged a flush on the current connection (it works: its break resets the backoff).
        self.on_this_connection = False
        #: A connection broke with unacknowledged events since the previous acknowledged flush.
        self.uncertain = False
        #: The collector refused events (REFUSED) since the previous acknowledged flush.
        self.refused_since_flush = False
        #: dropped_events, and those plus rejected typed events, when the previous flush was acknowledged: a flush is
        #: clean only if the second did not move.
        self.dropped_at_flush = 0
        self.lost_at_flush = 0
        #: unacknowledged_events when the previous flush was acknowledged (the STATS before it told the collector).
        self.unacknowledged_at_flush = 0

    def request(self, deadline: float) -> int:
        """A flush() call, answered by ``deadline`` at the latest; returns its request id."""
        token = next(self._tokens)
        self._asked.append((token, FlushRequest(token, deadline, self.lost_at_flush, self.uncertain)))
        return token

    def take_asked(self) -> bool:
        """Move the requests asked since the last call to pending; True if there were any."""
        asked, self._asked = self._asked, []
        self.pending += asked
        return bool(asked)

    def send_pending(self, target: int) -> list[int]:
        """The tokens of FLUSH frames to queue now for the pending requests; ``target``: events sent and queued."""
        tokens = []
        for token, request in self.pending:
            self._waiting[token] = request
            self._targets[token] = target
            tokens.append(token)
        self.pending = []
        return tokens

    def expire(self, now: float) -> list[int]:
        """Give up on the requests past their deadline (an ack that comes later is ignored); returns their ids."""
        expired = [request.request_id for _, request in self.pending if request.deadline <= now]
        self.pending = [(token, request) for token, request in self.pending if request.deadline > now]
        for token, request in list(self._waiting.items()):
            if request.deadline <= now:
                del self._waiting[token]
                expired.append(request.request_id)
        return expired

    def ask(self, now: float, target: int, now_or_never: bool = False) -> int | None:
        """Every ``ACKNOWLEDGE_EVERY_S`` (or now): the token of a FLUSH nobody waits for, if events up to ``target``
        are not yet covered by one; None when no FLUSH is needed."""
        if not now_or_never and now - self.asked_at < ACKNOWLEDGE_EVERY_S:
            return None
        token = None
        if target > max(self.through, *self._targets.values(), 0):
            token = next(self._tokens)
            self._targets[token] = target
        self.asked_at = now
        return token

    def acknowledged(self, token: int, lost: int, dropped: int, unacknowledged: int = 0) -> tuple[int, bool] | None:
        """FLUSH_ACK ``token`` came; ``lost``: events dropped or rejected so far, ``dropped``: of those, dropped;
        ``unacknowledged``: events sent on connections that broke first, so far. Returns the request it answers and
        its answer, if one waits for it."""
        self.on_this_connection = True
        self.through = max(self.through, self._targets.pop(token, 0))  # events sent before that FLUSH: all stored
        request = self._waiting.pop(token, None)
        if request is None:
            return None
        ok = lost == request.baseline and not request.uncertain and not self.refused_since_flush
        self.dropped_at_flush, self.lost_at_flush = dropped, lost
        self.unacknowledged_at_flush = unacknowledged
        self.uncertain = False
        self.refused_since_flush = False
        return request.request_id, ok

    def broken(self, sent_events: int) -> int:
        """The connection broke after ``sent_events`` were sent; returns those the collector never acknowledged.
        The requests whose FLUSH went down with it are asked again on the next connection."""
        unacknowledged = sent_events - self.through
        if unacknowledged:  # the collector may not have stored them: no flush may say "delivered"
            self.uncertain = True
            for request in [*self._waiting.values(), *(request for _, request in self.pending)]:
                request.uncertain = True
        self.through = sent_events
        self._targets.clear()
        for request in self._waiting.values():
            self.pending.append((next(self._tokens), request))
        self._waiting.clear()
        return unacknowledged

    def abandon(self) -> list[int]:
        """Give up every request not answered (the link stops); returns their ids."""
        self.take_asked()
        abandoned = [request.request_id for _, request in self.pending]
        self.pending = []
        return abandoned

    def next_deadline(self) -> float:
        """The earliest deadline of a pending request (``math.inf``: none)."""
        return min((request.deadline for _, request in self.pending), default=math.inf)
