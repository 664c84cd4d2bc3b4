"""How late the event loop runs what is due: the measure of everything that holds it up (a long callback, the GIL
held by another thread, a core taken by other work), as ingest and every HTTP request feel it.

A task sleeps ``INTERVAL_S`` at a time and measures how much later than asked it wakes. A stall of S seconds shows
as a lag between S - ``INTERVAL_S`` and S (it may begin anywhere in a sleep). Each lag goes to ``/metrics`` (a
histogram) and the longest of the last minute or so to ``/healthz``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Final

__all__ = ["INTERVAL_S", "LoopLag"]

#: How often the loop is looked at: 200 times a second costs well under 1% of a core.
INTERVAL_S: Final = 0.005
#: The longest lag is kept per window of this many seconds; ``longest_s`` covers the current and the previous one.
_WINDOW_S: Final = 30.0


class LoopLag:
    """Measures the running loop's lag until cancelled (``run``)."""

    def __init__(self, observe: Callable[[float], None]) -> None:
        self._observe = observe
        self._window = 0
        self._longest = [0.0, 0.0]  # this window's, the previous one's

    @property
    def longest_s(self) -> float:
        """The longest lag over the last 30 to 60 seconds."""
        self._roll(time.monotonic())
        return max(self._longest)

    async def run(self) -> None:
        while True:
            started = time.perf_counter()
            await asyncio.sleep(INTERVAL_S)
            lag = max(time.perf_counter() - started - INTERVAL_S, 0.0)
            self._observe(lag)
            self._roll(time.monotonic())
            if lag > self._longest[0]:
                self._longest[0] = lag

    def _roll(self, now: float) -> None:
        window = int(now // _WINDOW_S)
        if window != self._window:
            self._longest = [0.0, self._longest[0] if window == self._window + 1 else 0.0]
            self._window = window
