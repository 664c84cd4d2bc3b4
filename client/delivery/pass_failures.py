"""What a background thread of the client (the streamer, the flusher, the sampler) does when one of its passes fails on
an unexpected error, a bug: the thread goes on, the log says so at most once a minute, and the passes that follow wait,
longer after each failure in a row, so that a bug that fails every pass neither spins a core nor floods the log.

``failed`` is sans-I/O but for the log line: the caller gives the time, the error and what the pass lost (counted
where it was lost, by the caller), and gets the wait before the next pass. ``run`` is the loop around a thread's
passes that uses it, waiting on what the thread's stop or close cuts short.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Callable
from typing import Final

from ringtrace.client.delivery import unpatched
from ringtrace.client.delivery.streaming.loss_report import events_phrase

__all__ = ["PassFailures", "describe"]

log = logging.getLogger("ringtrace.client")

#: The wait after a first failure; it doubles with each failure in a row, up to ``MAX_DELAY_S``.
FIRST_DELAY_S: Final = 0.05
MAX_DELAY_S: Final = 5.0
#: A failure this long after the previous one begins a new run of failures (the wait starts again from the first).
QUIET_S: Final = 60.0
#: While failures go on, a line at most this often.
REPEAT_S: Final = 60.0


def describe(exc: BaseException) -> str:
    """The error as a line names it: its type and its text."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class PassFailures:
    """The failures of one thread's passes: when the next pass may run, and what the log has said.

    Args:
        thread: the thread, as the log names it ("streamer").
        lost_as: what the events a pass lost are counted as, for the log ("dropped_events and ...").
        what: what failed, as the log names it (default: a pass of the thread).
        waits: the caller waits the delay ``failed`` returns (the log says when it goes on).
    """

    __slots__ = (
        "_delay_s",
        "_failed_at",
        "_last_said",
        "_lost_unsaid",
        "_next_line",
        "_unsaid",
        "failures",
        "lost_as",
        "lost_events",
        "thread",
        "waits",
        "what",
    )

    def __init__(self, thread: str, lost_as: str = "dropped_events", *, what: str = "", waits: bool = True) -> None:
        self.thread, self.lost_as = thread, lost_as
        self.what, self.waits = what or f"a pass of the {thread}'s thread", waits
        #: Failed passes, and the events they lost, since the thread started.
        self.failures = 0
        self.lost_events = 0
        self._delay_s = FIRST_DELAY_S
        self._failed_at = -QUIET_S
        self._next_line = 0.0
        self._unsaid = 0  # failures since the last line
        self._lost_unsaid = 0
        self._last_said = ""  # the error the last line named (its traceback is not given again)

    def run(self, passes: Callable[[], object], recover: Callable[[Exception], int], stop: unpatched.Event) -> None:
        """Run ``passes`` (the thread's loop) until it returns; each time it raises, ``recover`` (which returns the
        events the failure lost, counted where they were lost) and wait the delay before the next attempt. Returns
        once ``stop`` is set during a wait, or the interpreter is shutting down (what is recorded from then on is
        counted as lost by the listeners); raises what ``recover`` raises."""
        while True:
            try:
                passes()
                return
            except Exception as exc:
                delay_s = self.failed(exc, time.monotonic(), recover(exc))
            if stop.wait(delay_s) or sys.is_finalizing():
                return

    def failed(self, exc: BaseException, now: float, lost_events: int = 0) -> float:
        """A pass ended on ``exc`` at ``now`` (a ``time.monotonic()`` value), losing ``lost_events`` (counted by the
        caller); said in the log unless a line was written less than ``REPEAT_S`` ago. Returns the wait before the
        next pass."""
        if now - self._failed_at >= QUIET_S:
            self._delay_s = FIRST_DELAY_S
        self._failed_at = now
        delay_s, self._delay_s = self._delay_s, min(self._delay_s * 2, MAX_DELAY_S)
        self.failures += 1
        self.lost_events += lost_events
        self._unsaid += 1
        self._lost_unsaid += lost_events
        if now >= self._next_line:
            self._say(exc, delay_s)
            self._next_line = now + REPEAT_S
        return delay_s

    def _say(self, exc: BaseException, delay_s: float) -> None:
        error = describe(exc)
        times = f", {self._unsaid} times since the last line" if self._unsaid > 1 else ""
        lost = (
            f"; {events_phrase(self._lost_unsaid, grouped=True)} lost (counted as {self.lost_as})"
            if self._lost_unsaid
            else ""
        )
        goes_on = f"; it goes on in {delay_s:.2f}s" if self.waits else ""
        # (A handler of the program's that raises, which may be what failed: the thread goes on all the same.)
        with contextlib.suppress(Exception):
            log.error(
                "ringtrace: %s failed on an unexpected error (%s)%s%s%s",
                self.what,
                error,
                times,
                lost,
                goes_on,
                exc_info=(type(exc), exc, exc.__traceback__) if error != self._last_said else None,
            )
        self._last_said = error
        self._unsaid = self._lost_unsaid = 0
