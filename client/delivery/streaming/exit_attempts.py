"""At exit, whether to go on trying to reach the collector. Sans-I/O: the link tells it what happened.

With the collector down, every process that records (all of them, under the fleet switch) would wait its whole
``exit_timeout_s`` at exit for a collector that is not there: pip, build tools and every short script would take that
much longer. Once the exit delivery has begun (``begin``), a connection attempt that finds nothing listening (refused,
or the host unreachable) is the last: one to each collector of the address, then the link gives up, and what is still
queued is counted and said in the streamer's one line at close. A collector that is there but slow (a connection that
times out, a WELCOME or an acknowledgement late) keeps the whole ``exit_timeout_s``.
"""

from __future__ import annotations

import errno

from ringtrace.client.delivery.streaming.outage import Outage

__all__ = ["ExitAttempts", "nothing_listens"]

#: What ``connect()`` fails with when no collector is there to answer: nothing listens on the port, or no route goes to
#: the host. Retrying within the exit timeout would not mend it.
_NOTHING_LISTENS = frozenset({errno.ECONNREFUSED, errno.ENETUNREACH, errno.EHOSTUNREACH})


def nothing_listens(exc: BaseException) -> bool:
    """Whether a failed connection attempt found no collector there (refused, or the host unreachable)."""
    return isinstance(exc, OSError) and exc.errno in _NOTHING_LISTENS


class ExitAttempts:
    """The connection attempts since the exit delivery began, and whether the link gave up.

    Args:
        collectors: how many collectors the address names (each gets its one attempt).
        outage: the link's, quiet from the exit on (the streamer's line at close says what it would have).
    """

    __slots__ = ("_collectors", "_found_nothing", "_outage", "begun", "gave_up")

    def __init__(self, collectors: int, outage: Outage) -> None:
        self._collectors = max(collectors, 1)
        self._outage = outage
        self._found_nothing = 0
        #: The exit delivery has begun.
        self.begun = False
        #: Why the link gave up at exit ("": it did not).
        self.gave_up = ""

    def begin(self) -> None:
        """The exit delivery begins: from now on an attempt that finds nothing listening is the last, and the outage
        warns no more."""
        self.begun = True
        self._outage.quiet = True

    def failed(self, reason: str, found_nothing: bool) -> bool:
        """A connection attempt failed for ``reason``; ``found_nothing``: nothing listens there. Returns whether the
        link gives up now (it did, or does)."""
        if self.begun and found_nothing and not self.gave_up:
            self._found_nothing += 1
            if self._found_nothing >= self._collectors:
                self.gave_up = reason
        return bool(self.gave_up)
